"""Training ViT the paper's way with `model.fit`: the learning-rate schedule,
optimizers and losses of the released code, masked patch prediction, the
few-shot linear evaluation, and the paper's recipes as named configs."""

from keras_vit.training.configs import CONFIGS
from keras_vit.training.configs import RunConfig
from keras_vit.training.configs import get_config
from keras_vit.training.configs import resolve_config
from keras_vit.training.evaluation import accuracy
from keras_vit.training.evaluation import few_shot_accuracy
from keras_vit.training.evaluation import linear_few_shot_accuracy
from keras_vit.training.losses import CLIPLoss
from keras_vit.training.losses import SigLIPLoss
from keras_vit.training.losses import SigmoidCrossEntropy
from keras_vit.training.losses import SoftmaxCrossEntropy
from keras_vit.training.losses import sigmoid_cross_entropy
from keras_vit.training.losses import softmax_cross_entropy
from keras_vit.training.masked_patch import MaskedPatchPredictor
from keras_vit.training.masked_patch import masked_patch_dataset
from keras_vit.training.masked_patch import masked_patch_loss
from keras_vit.training.masked_patch import masked_patch_targets
from keras_vit.training.masked_patch import masked_patch_to_vit
from keras_vit.training.optimizers import AdamWeightDecay
from keras_vit.training.optimizers import MomentumSGD
from keras_vit.training.optimizers import finetune_optimizer
from keras_vit.training.optimizers import pretrain_optimizer
from keras_vit.training.run import DivergenceError
from keras_vit.training.run import RunError
from keras_vit.training.run import train
from keras_vit.training.schedules import learning_rate_schedule

__all__ = [
    "AdamWeightDecay",
    "CLIPLoss",
    "CONFIGS",
    "DivergenceError",
    "MaskedPatchPredictor",
    "MomentumSGD",
    "RunConfig",
    "RunError",
    "SigLIPLoss",
    "SigmoidCrossEntropy",
    "SoftmaxCrossEntropy",
    "accuracy",
    "few_shot_accuracy",
    "finetune_optimizer",
    "get_config",
    "learning_rate_schedule",
    "linear_few_shot_accuracy",
    "masked_patch_dataset",
    "masked_patch_loss",
    "masked_patch_targets",
    "masked_patch_to_vit",
    "pretrain_optimizer",
    "resolve_config",
    "sigmoid_cross_entropy",
    "softmax_cross_entropy",
    "train",
]
