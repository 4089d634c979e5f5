"""Distillation (Touvron et al., "Training data-efficient image transformers
& distillation through attention", ICML 2021: DeiT): a student ViT learns
from a teacher's predictions.

`deit_loss` is DeiT's ``DistillationLoss`` (facebookresearch/deit
``losses.py``): the [class] token's head learns from the labels and the
distillation token's head from the teacher, by its argmax (``"hard"``, the
paper's best) or its softened probabilities (``"soft"``).
"""

from keras_vit.distillation.losses import KINDS
from keras_vit.distillation.losses import check_distillation
from keras_vit.distillation.losses import deit_loss

__all__ = ["KINDS", "check_distillation", "deit_loss"]
