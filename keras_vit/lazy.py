"""Packages whose public names import when first used (PEP 562), so that
importing the package imports no Keras: `keras-vit --help` starts at once;
and modules imported as soon as Keras is (`when_imported`), so that Keras's
own `load_model` finds the package's classes after ``import keras_vit``."""

import contextlib
import gc
import importlib
import importlib.abc
import importlib.util
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


def when_imported(name, callback):
    """Calls `callback()` once the module `name` has been imported: at once
    if it has been, else right after its first import has run (a post-import
    hook on `sys.meta_path`, `ImportHook`). `keras_vit` registers its saved
    classes with Keras this way, without importing Keras itself."""
    if name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, ImportHook(name, after=callback))


class ImportHook(importlib.abc.MetaPathFinder):
    """Finds the module `name` as the other finders do, the first time it is
    imported, and has it executed within `around()` (a context manager) and
    then `after()` called; the module keeps its own loader. Once used (or
    not found), the hook leaves `sys.meta_path`."""

    def __init__(self, name, around=contextlib.nullcontext, after=None):
        self.name, self.around, self.after = name, around, after

    def find_spec(self, name, path=None, target=None):
        """The spec the other finders give `name`, its loader wrapped; None
        for every other module."""
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the search below is the others'
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _HookedLoader(spec.loader, self.around, self.after)
        return spec


class _HookedLoader(importlib.abc.Loader):
    """`loader`, executing its module within `around()`, then calling `after()`."""

    def __init__(self, loader, around, after):
        self.loader, self.around, self.after = loader, around, after

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        with self.around():
            self.loader.exec_module(module)
        if self.after is not None:
            self.after()
