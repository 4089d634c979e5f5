"""Distillation (Touvron et al., "Training data-efficient image transformers
& distillation through attention", ICML 2021: DeiT): a student ViT learns
from a teacher's predictions.

`deit_loss` is DeiT's ``DistillationLoss`` (facebookresearch/deit
``losses.py``): the [class] token's head learns from the labels and the
distillation token's head from the teacher, by its argmax (``"hard"``, the
paper's best) or its softened probabilities (``"soft"``). `Distiller`
trains such a student with `fit`, any student from a teacher's logits
(``"logits"``), or a student ViT's tokens or pooled features from a
teacher's through a learned projection (``"features"``, `feature_loss`).
"""

from keras_vit.distillation.losses import KINDS
from keras_vit.distillation.losses import check_distillation
from keras_vit.distillation.losses import deit_loss
from keras_vit.distillation.losses import feature_loss
from keras_vit.arguments import DISTILLATIONS
from keras_vit.distillation.distiller import FEATURES
from keras_vit.distillation.distiller import Distiller
from keras_vit.distillation.distiller import load_teacher

__all__ = ["DISTILLATIONS", "FEATURES", "KINDS", "Distiller", "check_distillation", "deit_loss", "feature_loss",
           "load_teacher"]
