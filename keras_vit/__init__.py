"""keras_vit: the Vision Transformer of Dosovitskiy et al. (ICLR 2021) for Keras 3."""

import gc as _gc
import importlib as _importlib
import sys as _sys
import types as _types
import typing as _typing

__version__ = "0.1.0"

# The public names: the modules `keras_vit.kernels` and `keras_vit.layers`,
# and each name of `_NAMES` from its module. They import Keras and its
# backend, so the package imports them when they are first used
# (`_import_lazily`: each module by itself, the other names all together), not
# with itself: modules that need no Keras (`keras_vit.cli`'s parser, for
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
    "presets": "keras_vit.presets",
    "pretrained": "keras_vit.weights.pretrained",
    "zero_shot_classifier": "keras_vit.zero_shot",
}

__all__ = ["ImageTextModel", "TextTokenizer", "TextTransformer", "ViT", "ViTConfig", "kernels",
           "layers", "presets", "pretrained", "zero_shot_classifier", "__version__"]

if _typing.TYPE_CHECKING:  # the same names, for readers of the source (Griffe, type checkers)
    from keras_vit import kernels
    from keras_vit import layers
    from keras_vit.config import ViTConfig
    from keras_vit.image_text import ImageTextModel
    from keras_vit.image_text import TextTransformer
    from keras_vit.model import ViT
    from keras_vit.presets import presets
    from keras_vit.text_tokenizer import TextTokenizer
    from keras_vit.weights.pretrained import pretrained
    from keras_vit.zero_shot import zero_shot_classifier


def _import_lazily(package, names, modules=()):
    """Has the package named `package` import its public names when one is
    first used (PEP 562's module `__getattr__`), not with itself: each
    submodule of `modules` by itself, and the names of `names` (name -> the
    module that defines it) all together. Its `__dir__` lists them before
    they are imported (its `__all__`), and a submodule whose name is also a
    public name (`keras_vit.presets`, the module, and the function) is not
    bound over that name when it is imported, as the import system binds
    each submodule on its package. `keras_vit` and `keras_vit.training` call
    it last."""
    module = _sys.modules[package]
    namespace = vars(module)

    def load():
        # Importing Keras and its backend makes 250,000-500,000 objects and
        # no garbage, so the collector's full passes over them while they
        # are made free nothing and only add to the import's time (most on
        # PyTorch and TensorFlow, whose imports make the most objects). It is
        # off meanwhile, and on again once the names are in.
        collecting = _gc.isenabled()
        _gc.disable()
        try:
            loaded = {name: getattr(_importlib.import_module(source), name)
                      for name, source in names.items()}
        finally:
            if collecting:
                _gc.enable()
        namespace.update(loaded)

    def __getattr__(name):
        if name in modules:  # the import binds it on the package
            return _importlib.import_module(f"{package}.{name}")
        if name in names:
            load()
            return namespace[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted({*namespace, *namespace["__all__"]})

    class Package(_types.ModuleType):
        def __setattr__(self, name, value):
            if name in names and isinstance(value, _types.ModuleType):
                return
            super().__setattr__(name, value)

    namespace.update(__getattr__=__getattr__, __dir__=__dir__)
    module.__class__ = Package


_import_lazily(__name__, _NAMES, _MODULES)
