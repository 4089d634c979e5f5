"""keras_vit: the Vision Transformer of Dosovitskiy et al. (ICLR 2021) for Keras 3."""

import typing as _typing

from keras_vit.lazy import import_lazily as _import_lazily
from keras_vit.lazy import import_when_ready as _import_when_ready

__version__ = "0.1.0"

# The public names: the subpackages (`keras_vit.kernels`, `keras_vit.layers`,
# `keras_vit.export`, ...), and each name of `_NAMES` from its module. They
# import Keras and its backend, so the package imports them when they are
# first used (`keras_vit.lazy.import_lazily`: each subpackage by itself, the
# other names all together), not with itself: modules that need no Keras
# (`keras_vit.cli`'s parser, for ``keras-vit --help``) import none. So
# ``import keras_vit`` is all that ``keras_vit.explain.attention_rollout(...)``
# needs. Of the subpackages, `__all__` names the two that need nothing but a
# backend, as ``from keras_vit import *`` imports each name of it (and
# `keras_vit.data` needs TensorFlow); `dir(keras_vit)` lists them all.
_MODULES = ("adapters", "data", "distillation", "evaluation", "explain", "export", "io", "kernels", "layers", "training", "weights")
_NAMES = {
    "ImageTextModel": "keras_vit.image_text",
    "TextTokenizer": "keras_vit.text_tokenizer",
    "TextTransformer": "keras_vit.image_text",
    "ViT": "keras_vit.model",
    "ViTConfig": "keras_vit.config",
    "load_adapters": "keras_vit.adapters",
    "load_model": "keras_vit.loading",
    "naflex_inputs": "keras_vit.naflex",
    "presets": "keras_vit.presets",
    "pretrained": "keras_vit.released",
    "segmentation_probe": "keras_vit.dense",
    "zero_shot_classifier": "keras_vit.zero_shot",
}

__all__ = ["ImageTextModel", "TextTokenizer", "TextTransformer", "ViT", "ViTConfig", "kernels",
           "layers", "load_adapters", "load_model", "naflex_inputs", "presets", "pretrained", "segmentation_probe", "zero_shot_classifier",
           "__version__"]

if _typing.TYPE_CHECKING:  # the same names, for readers of the source (Griffe, type checkers)
    from keras_vit import adapters
    from keras_vit import data
    from keras_vit import evaluation
    from keras_vit import explain
    from keras_vit import export
    from keras_vit import io
    from keras_vit import kernels
    from keras_vit import layers
    from keras_vit import training
    from keras_vit import weights
    from keras_vit.config import ViTConfig
    from keras_vit.dense import segmentation_probe
    from keras_vit.image_text import ImageTextModel
    from keras_vit.image_text import TextTransformer
    from keras_vit.adapters import load_adapters
    from keras_vit.loading import load_model
    from keras_vit.model import ViT
    from keras_vit.naflex import naflex_inputs
    from keras_vit.presets import presets
    from keras_vit.text_tokenizer import TextTokenizer
    from keras_vit.released import pretrained
    from keras_vit.zero_shot import zero_shot_classifier

# The modules that define every class a saved model may name (`ViT`,
# `TextTransformer`, `ImageTextModel`, the layers, and the losses, metric,
# optimizers and schedule that training saves; tests/test_extras.py checks
# the list against every `register_keras_serializable` in the package).
# Keras's `load_model` finds a class only once its module has registered it,
# so they are imported as soon as Keras is: at once if it has been imported,
# else right after its import, or after the package's module that imported
# it (`keras_vit.lazy.import_when_ready`). So ``import keras_vit`` is all
# that `keras.saving.load_model` needs, and the package's own import still
# imports no Keras.
_SAVED = ("keras_vit.layers", "keras_vit.model", "keras_vit.image_text", "keras_vit.dense",
          "keras_vit.training.losses", "keras_vit.training.masked_patch",
          "keras_vit.training.optimizers", "keras_vit.training.schedules")


_import_lazily(__name__, _NAMES, _MODULES)
_import_when_ready(__name__, "keras", _SAVED)
