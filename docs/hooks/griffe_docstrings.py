"""Griffe extension of the docs build (mkdocs.yml, mkdocstrings' python handler).

Two jobs, both on the package mkdocstrings loads (``keras_vit``):

1. Every public function, class, method and property must have a docstring.
   Each one without is logged as a warning naming the file and line, so
   ``mkdocs build --strict`` fails. "Public" is Griffe's rule: in ``__all__``
   when the module has one, else no leading underscore; modules whose name
   starts with an underscore are skipped, and so are imported names (they are
   checked where they are defined). Methods that implement a Keras hook
   (``call``, ``build``, ``get_config``, callbacks' ``on_*``, ...) are exempt:
   Keras documents them, and the API pages leave them out.

2. Sphinx roles in docstrings (``:func:`keras_vit.presets```,
   ``:class:`~keras_vit.weights.Checkpoint```, ``:meth:`from_checkpoint```)
   become mkdocstrings cross-references, which autorefs checks: a role whose
   target is not on any API page fails the strict build too. A name without
   dots is looked up from the object outward (its members, then its parents').
"""

import re

import griffe

logger = griffe.get_logger("griffe_docstrings")

# Methods Keras defines and calls (layers, models, losses, optimizers,
# schedules, callbacks, metrics): their meaning is Keras's.
KERAS_HOOKS = frozenset({
    "build", "call", "compute_output_shape", "compute_output_spec", "get_config",
    "from_config", "get_build_config", "build_from_config", "get_compile_config",
    "compile_from_config", "convolution_op", "train_step", "test_step", "predict_step",
    "compute_loss", "compute_metrics", "update_step", "result", "update_state",
    "reset_state", "set_model", "set_params",
})

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc):`(~?)([\w.]+)`")


def _exempt(obj):
    return obj.parent is not None and obj.parent.is_class and (
        obj.name in KERAS_HOOKS or obj.name.startswith("on_")
    )


def _where(obj):
    try:
        path = obj.relative_filepath
    except ValueError:
        path = obj.filepath
    return f"{path}:{obj.lineno}"


def _canonical(obj):
    if obj.is_alias:
        try:
            return obj.final_target.path
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return obj.target_path
    return obj.path


def _resolve(obj, name):
    """The full path of `name` as written in `obj`'s docstring."""
    if "." in name:
        return name
    scope = obj
    while scope is not None:
        if name in scope.members:
            return _canonical(scope.members[name])
        scope = scope.parent
    return name  # autorefs reports it as a broken reference


def _link_roles(obj):
    def link(match):
        short, name = match.groups()
        target = _resolve(obj, name)
        label = target.rsplit(".", 1)[-1] if short else name
        return f"[`{label}`][{target}]"

    obj.docstring.value = ROLE.sub(link, obj.docstring.value)


class DocstringChecks(griffe.Extension):
    """Warns about public objects without docstrings; links Sphinx roles."""

    def on_package(self, *, pkg, **kwargs):
        self._walk(pkg)

    def _walk(self, obj):
        for name, member in obj.members.items():
            if member.is_alias or name.startswith("_") and not member.is_module:
                continue
            if member.is_module:
                if not name.startswith("_"):
                    self._walk(member)
                continue
            if member.docstring is not None:
                _link_roles(member)
            if not (member.is_function or member.is_class or "property" in member.labels):
                continue
            if not member.is_public or _exempt(member):
                continue
            if member.docstring is None or not member.docstring.value.strip():
                logger.warning(
                    f"{_where(member)}: {member.path} is public "
                    f"but has no docstring. Document it, or make it private (_{name})."
                )
            if member.is_class:
                self._walk(member)
        if obj.is_module and obj.docstring is not None:
            _link_roles(obj)
