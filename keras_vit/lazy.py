"""Packages whose public names import when first used (PEP 562), so that
importing the package imports no Keras: `keras-vit --help` starts at once;
and modules imported as soon as Keras is (`when_imported`), so that Keras's
own `load_model` finds the package's classes after ``import keras_vit``
(`import_when_ready`)."""

import gc
import importlib
import importlib.abc
import sys
import types


def import_lazily(package, names, modules=(), by_module=False):
    """Has the package named `package` import its public names when one is
    first used (PEP 562's module `__getattr__`), not with itself: each
    submodule of `modules` by itself, and the names of `names` (name -> the
    module that defines it) all together; or, with `by_module`, the names of
    the used name's module (`keras_vit.evaluation`: its scores need neither
    Keras nor TensorFlow, its VTAB tasks TensorFlow). Its `__dir__` lists them before
    they are imported (its `__all__` and `modules`), and a submodule whose name is also a
    public name (`keras_vit.presets`, the module, and the function) is not
    bound over that name when it is imported, as the import system binds
    each submodule on its package. `keras_vit` and `keras_vit.training` call
    it last."""
    module = sys.modules[package]
    namespace = vars(module)

    def load(wanted):
        # Importing Keras and its backend makes 250,000-500,000 objects and
        # no garbage, so the collector's full passes over them while they
        # are made free nothing and only add to the import's time (most on
        # PyTorch and TensorFlow, whose imports make the most objects). It is
        # off meanwhile, and on again once the names are in.
        collecting = gc.isenabled()
        gc.disable()
        try:
            loaded = {name: getattr(importlib.import_module(source), name)
                      for name, source in names.items() if not by_module or source == names[wanted]}
        finally:
            if collecting:
                gc.enable()
        namespace.update(loaded)

    def __getattr__(name):
        if name in modules:  # the import binds it on the package
            return importlib.import_module(f"{package}.{name}")
        if name in names:
            load(name)
            return namespace[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted({*namespace, *namespace["__all__"], *modules})

    class Package(types.ModuleType):
        def __setattr__(self, name, value):
            if name in names and isinstance(value, types.ModuleType):
                return
            super().__setattr__(name, value)

    namespace.update(__getattr__=__getattr__, __dir__=__dir__)
    module.__class__ = Package


def import_when_ready(package, trigger, modules):
    """Imports `modules` once the module `trigger` (Keras) has been
    imported, at a moment when no module of `package` is partway through
    its own import: at once if that holds now, else right after the import
    that makes it hold (of `trigger` itself, or of the outermost module of
    `package` that was being imported when `trigger` was). From inside a
    module of the package that imports Keras, the modules would find it,
    and the modules importing it, partly run. `keras_vit` registers its
    saved classes with Keras this way, without importing Keras itself."""
    hook = _ImportWhenReady(package, trigger, tuple(modules))
    hook.attempt()
    if not hook.done:
        sys.meta_path.insert(0, hook)


def _other_spec(finder, name, path, target):
    """The spec that the finders of `sys.meta_path` but `finder` give `name`."""
    for other in sys.meta_path:
        find = getattr(other, "find_spec", None)
        if other is not finder and find is not None:
            spec = find(name, path, target)
            if spec is not None:
                return spec
    return None


class _ImportWhenReady(importlib.abc.MetaPathFinder):
    """`import_when_ready`'s hook: it counts the modules of `package` being
    imported one inside another (`depth`), and after each import of one of
    them or of `trigger` imports `modules` if the time has come; then it
    leaves `sys.meta_path`."""

    def __init__(self, package, trigger, modules):
        self.package, self.trigger, self.modules = package, trigger, modules
        self.depth, self.done = 0, False

    def attempt(self):
        """Imports `modules` if `trigger` is imported and no module of
        `package` is being imported; once."""
        if self.done or self.depth or self.trigger not in sys.modules:
            return
        self.done = True
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for module in self.modules:
            importlib.import_module(module)

    def find_spec(self, name, path=None, target=None):
        """The spec the other finders give `trigger` or a module of
        `package`, its loader counted (`_CountedLoader`); None for every
        other module."""
        if self.done or (name != self.trigger and not name.startswith(self.package + ".")):
            return None
        spec = _other_spec(self, name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _CountedLoader(spec.loader, self, counted=name != self.trigger)
        return spec


class _CountedLoader(importlib.abc.Loader):
    """`loader`, its module's execution counted in `hook.depth` when
    `counted`, and `hook.attempt()` called after it; the module keeps
    `loader` as its own."""

    def __init__(self, loader, hook, counted):
        self.loader, self.hook, self.counted = loader, hook, counted

    def __getattr__(self, name):  # the rest of the loader's protocol (runpy's get_code, ...)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        self.hook.depth += self.counted
        try:
            self.loader.exec_module(module)
        finally:
            self.hook.depth -= self.counted
        self.hook.attempt()


class ImportHook(importlib.abc.MetaPathFinder):
    """Finds the module `name` as the other finders do and has it executed
    within `around()` (a context manager), the first time it is imported;
    the module keeps its own loader. A search that imports nothing
    (`importlib.util.find_spec`, as torch._dynamo makes for tensorflow
    while it is imported) leaves the hook in place for the import that
    follows; the import, or a search that finds nothing, takes it out of
    `sys.meta_path`."""

    def __init__(self, name, around):
        self.name, self.around = name, around

    def find_spec(self, name, path=None, target=None):
        """The spec the other finders give `name`, its loader wrapped; None
        for every other module."""
        if name != self.name:
            return None
        spec = _other_spec(self, name, path, target)
        if spec is None or spec.loader is None:
            self.leave()
            return spec
        spec.loader = _HookedLoader(spec.loader, self)
        return spec

    def leave(self):
        """Takes the hook out of `sys.meta_path`, if it is there."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class _HookedLoader(importlib.abc.Loader):
    """`loader`, executing its module within `hook.around()`; the hook
    leaves `sys.meta_path` first, as the module is being imported."""

    def __init__(self, loader, hook):
        self.loader, self.hook = loader, hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        self.hook.leave()
        with self.hook.around():
            self.loader.exec_module(module)
