"""What ``import keras_vit`` gives Keras (every saved class registered), and
the one error a missing optional dependency raises (`keras_vit.extras`).
tests/test_install.py takes the same paths in fresh environments made from
the wheel, one extra installed."""

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

from keras_vit import extras
from keras_vit.export import require_route

PACKAGE = pathlib.Path(__file__).parent.parent / "keras_vit"


def _registered_in_source():
    """``keras_vit>Name`` of every class the package decorates with
    ``keras.saving.register_keras_serializable(package="keras_vit")``."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    "register_keras_serializable" in ast.unparse(d) for d in node.decorator_list):
                names.add(f"keras_vit>{node.name}")
    return names


@pytest.mark.backend_independent
@pytest.mark.parametrize("imports", [
    "import keras, keras_vit", "import keras_vit; import keras",
    # A module of the package that imports Keras, imported first: the classes are imported
    # once it has run, not while it and the modules importing it are partly run.
    "from keras_vit.model import ViT; import keras", "from keras_vit.layers import PatchEmbedding; import keras",
    "from keras_vit.weights import save_checkpoint; import keras"])
@pytest.mark.slow
def test_import_keras_vit_registers_every_saved_class_before_load_model(imports):
    """After nothing but the imports, in any order, Keras's registry holds
    every class a saved model may name (so `keras.saving.load_model` finds
    them), and keras_vit's own import, and the listing of its names,
    imported no Keras and none of its subpackages (`keras_vit.lazy` aside)."""
    code = ("import sys; import keras_vit; listed = dir(keras_vit); "
            "before = sorted(m for m in sys.modules if m == 'keras' or m.startswith('keras_vit.')); "
            f"{imports}; import json; print(json.dumps([before, sorted(k for k in "
            "keras.saving.get_custom_objects() if k.startswith('keras_vit>'))]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "KERAS_BACKEND": "jax"})
    assert result.returncode == 0, result.stderr
    before, registered = json.loads(result.stdout.strip().splitlines()[-1])
    expected = _registered_in_source()
    assert len(expected) >= 30, expected  # the scan found the decorators
    assert before == ["keras_vit.lazy"]
    assert set(registered) == expected, set(registered) ^ expected


INTERNAL = ("compat",)  # where keras_vit meets Keras's private names: no API


@pytest.mark.backend_independent
def test_every_public_subpackage_is_an_attribute_of_keras_vit(monkeypatch):
    """``import keras_vit`` is all that ``keras_vit.explain.attention_rollout(...)``
    and the like need: each subpackage but `INTERNAL` is listed by
    `dir(keras_vit)` and imported when first used as its attribute, before
    any other import has bound it there (as the test removes it)."""
    import importlib

    import keras_vit

    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.name not in INTERNAL)
    assert {"data", "evaluation", "explain", "export", "io", "training", "weights"} <= set(subpackages)
    for name in subpackages:
        monkeypatch.delattr(keras_vit, name, raising=False)  # unbound, as before its first use
        assert name in dir(keras_vit)
        assert getattr(keras_vit, name) is importlib.import_module(f"keras_vit.{name}")


@pytest.mark.backend_independent
def test_a_missing_optional_dependency_names_its_extra(monkeypatch):
    """`extras.require` and each export route raise one MissingDependency (a
    ModuleNotFoundError) naming what needs the module and the extra; a
    module that is no optional dependency's keeps Python's own error."""
    from keras_vit.explain.plots import pyplot

    for module in ("onnx", "jax2onnx", "tensorflow", "matplotlib", "sentencepiece"):
        monkeypatch.setitem(sys.modules, module, None)  # what an uninstalled module raises
    with pytest.raises(extras.MissingDependency, match=r'^Writing X needs onnx, which is not installed: '
                       r'pip install "keras-vision-transformer\[export\]"$'):
        extras.require("onnx", "Writing X")
    with pytest.raises(extras.MissingDependency, match=r'^An export to onnx from jax needs onnx, .*\[export\]"$'):
        require_route("onnx", "jax")
    with pytest.raises(extras.MissingDependency, match=r'from jax needs TensorFlow, .*\[tensorflow\]"$'):
        require_route("tf_saved_model", "jax")
    with pytest.raises(extras.MissingDependency, match=r'^Drawing keras_vit\'s figures .* needs matplotlib, '
                       r'.*\[plots\]"$'):
        pyplot()
    with pytest.raises(extras.MissingDependency, match=r"SentencePiece tokenizer .*\[text\]"):
        extras.require("sentencepiece", "SigLIP's SentencePiece tokenizer")
    monkeypatch.setitem(sys.modules, "no_such_helper", None)
    with pytest.raises(ModuleNotFoundError) as plain:
        extras.require("no_such_helper", "Nothing")
    assert not isinstance(plain.value, extras.MissingDependency)
    assert extras.missing(plain.value) is None
    require_route("torch", "torch")  # nothing beyond the backend: nothing to check
