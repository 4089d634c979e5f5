"""keras_vit: the Vision Transformer of Dosovitskiy et al. (ICLR 2021) for Keras 3."""

import typing as _typing

from keras_vit.lazy import import_lazily as _import_lazily

__version__ = "0.1.0"

# The public names: the modules `keras_vit.kernels` and `keras_vit.layers`,
# and each name of `_NAMES` from its module. They import Keras and its
# backend, so the package imports them when they are first used
# (`keras_vit.lazy.import_lazily`: each module by itself, the other names
# all together), not with itself: modules that need no Keras (`keras_vit.cli`'s parser, for
# ``keras-vit --help``) import none. Keras's `load_model` finds the package's
# classes once one of these names, or the module that defines the class, has
# been imported.
_MODULES = ("kernels", "layers")
_NAMES = {
    "ImageTextModel": "keras_vit.image_text",
    "TextTokenizer": "keras_vit.text_tokenizer",
    "TextTransformer": "keras_vit.image_text",
    "ViT": "keras_vit.model",
    "ViTConfig": "keras_vit.config",
    "load_model": "keras_vit.loading",
    "naflex_inputs": "keras_vit.naflex",
    "presets": "keras_vit.presets",
    "pretrained": "keras_vit.released",
    "segmentation_probe": "keras_vit.dense",
    "zero_shot_classifier": "keras_vit.zero_shot",
}

__all__ = ["ImageTextModel", "TextTokenizer", "TextTransformer", "ViT", "ViTConfig", "kernels",
           "layers", "load_model", "naflex_inputs", "presets", "pretrained", "segmentation_probe", "zero_shot_classifier",
           "__version__"]

if _typing.TYPE_CHECKING:  # the same names, for readers of the source (Griffe, type checkers)
    from keras_vit import kernels
    from keras_vit import layers
    from keras_vit.config import ViTConfig
    from keras_vit.dense import segmentation_probe
    from keras_vit.image_text import ImageTextModel
    from keras_vit.image_text import TextTransformer
    from keras_vit.loading import load_model
    from keras_vit.model import ViT
    from keras_vit.naflex import naflex_inputs
    from keras_vit.presets import presets
    from keras_vit.text_tokenizer import TextTokenizer
    from keras_vit.released import pretrained
    from keras_vit.zero_shot import zero_shot_classifier


_import_lazily(__name__, _NAMES, _MODULES)
