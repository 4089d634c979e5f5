"""Packages whose public names import when first used (PEP 562), so that
importing the package imports no Keras: `keras-vit --help` starts at once."""

import gc
import importlib
import sys
import types


def import_lazily(package, names, modules=()):
    """Has the package named `package` import its public names when one is
    first used (PEP 562's module `__getattr__`), not with itself: each
    submodule of `modules` by itself, and the names of `names` (name -> the
    module that defines it) all together. Its `__dir__` lists them before
    they are imported (its `__all__`), and a submodule whose name is also a
    public name (`keras_vit.presets`, the module, and the function) is not
    bound over that name when it is imported, as the import system binds
    each submodule on its package. `keras_vit` and `keras_vit.training` call
    it last."""
    module = sys.modules[package]
    namespace = vars(module)

    def load():
        # Importing Keras and its backend makes 250,000-500,000 objects and
        # no garbage, so the collector's full passes over them while they
        # are made free nothing and only add to the import's time (most on
        # PyTorch and TensorFlow, whose imports make the most objects). It is
        # off meanwhile, and on again once the names are in.
        collecting = gc.isenabled()
        gc.disable()
        try:
            loaded = {name: getattr(importlib.import_module(source), name)
                      for name, source in names.items()}
        finally:
            if collecting:
                gc.enable()
        namespace.update(loaded)

    def __getattr__(name):
        if name in modules:  # the import binds it on the package
            return importlib.import_module(f"{package}.{name}")
        if name in names:
            load()
            return namespace[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted({*namespace, *namespace["__all__"]})

    class Package(types.ModuleType):
        def __setattr__(self, name, value):
            if name in names and isinstance(value, types.ModuleType):
                return
            super().__setattr__(name, value)

    namespace.update(__getattr__=__getattr__, __dir__=__dir__)
    module.__class__ = Package
