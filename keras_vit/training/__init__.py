"""Training ViT the paper's way with `model.fit`: the learning-rate schedule,
optimizers and losses of the released code, masked patch prediction, the
few-shot linear evaluation, and the paper's recipes as named configs."""

import typing

from keras_vit.lazy import import_lazily

# The public names, each from its module. All but `keras_vit.training.configs`
# import Keras, so the package imports them when one of them is first used
# (`keras_vit.lazy.import_lazily`), not with itself: the recipes' flags
# (`keras_vit.training.configs.FLAGS`, for ``keras-vit pretrain --help``)
# import no Keras.
_NAMES = {
    "CONFIGS": "keras_vit.training.configs",
    "RunConfig": "keras_vit.training.configs",
    "get_config": "keras_vit.training.configs",
    "resolve_config": "keras_vit.training.configs",
    "accuracy": "keras_vit.training.scoring",
    "few_shot_accuracy": "keras_vit.training.scoring",
    "linear_few_shot_accuracy": "keras_vit.training.scoring",
    "CLIPLoss": "keras_vit.training.losses",
    "SigLIPLoss": "keras_vit.training.losses",
    "SigmoidCrossEntropy": "keras_vit.training.losses",
    "SoftmaxCrossEntropy": "keras_vit.training.losses",
    "sigmoid_cross_entropy": "keras_vit.training.losses",
    "softmax_cross_entropy": "keras_vit.training.losses",
    "MaskedPatchPredictor": "keras_vit.training.masked_patch",
    "masked_patch_dataset": "keras_vit.training.masked_patch",
    "masked_patch_loss": "keras_vit.training.masked_patch",
    "masked_patch_targets": "keras_vit.training.masked_patch",
    "masked_patch_to_vit": "keras_vit.training.masked_patch",
    "AdamWeightDecay": "keras_vit.training.optimizers",
    "MomentumSGD": "keras_vit.training.optimizers",
    "finetune_optimizer": "keras_vit.training.optimizers",
    "pretrain_optimizer": "keras_vit.training.optimizers",
    "DivergenceError": "keras_vit.training.run",
    "RunError": "keras_vit.training.run",
    "train": "keras_vit.training.run",
    "learning_rate_schedule": "keras_vit.training.schedules",
}

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

if typing.TYPE_CHECKING:  # the same names, for readers of the source (Griffe, type checkers)
    from keras_vit.training.configs import CONFIGS
    from keras_vit.training.configs import RunConfig
    from keras_vit.training.configs import get_config
    from keras_vit.training.configs import resolve_config
    from keras_vit.training.scoring import accuracy
    from keras_vit.training.scoring import few_shot_accuracy
    from keras_vit.training.scoring import linear_few_shot_accuracy
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

import_lazily(__name__, _NAMES)
