"""Distillation (Touvron et al., "Training data-efficient image transformers
& distillation through attention", ICML 2021: DeiT): a student ViT learns
from a teacher's predictions.

`deit_loss` is DeiT's ``DistillationLoss`` (facebookresearch/deit
``losses.py``): the [class] token's head learns from the labels and the
distillation token's head from the teacher, by its argmax (``"hard"``, the
paper's best) or its softened probabilities (``"soft"``). `Distiller`
trains such a student with `fit`, or any student from a teacher's logits
(``"logits"``).
"""

from keras_vit.distillation.losses import KINDS
from keras_vit.distillation.losses import check_distillation
from keras_vit.distillation.losses import deit_loss
from keras_vit.distillation.distiller import DISTILLATIONS
from keras_vit.distillation.distiller import Distiller

__all__ = ["DISTILLATIONS", "KINDS", "Distiller", "check_distillation", "deit_loss"]
