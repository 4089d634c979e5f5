"""The optional dependencies, each with the extra of ``pyproject.toml`` that
installs it: a missing one raises `MissingDependency`, one error that names
what needs it and the ``pip install`` that brings it.

A backend extra alone (``[jax]``, ``[torch]``, ``[tensorflow]``) builds,
runs, saves and loads models, reads and writes the NumPy and safetensors
checkpoint formats and makes NaFlex inputs; everything else comes with an
extra of its own (docs/getting_started.md#install).
"""

import importlib

DISTRIBUTION = "keras-vision-transformer"

# Top-level module -> (the project's name, the extra that installs it).
EXTRAS = {
    "tensorflow": ("TensorFlow", "data"),
    "tensorflow_datasets": ("TensorFlow Datasets", "data"),
    "tensorboard": ("TensorBoard", "data"),
    "importlib_resources": ("importlib_resources", "data"),
    "sklearn": ("scikit-learn", "data"),
    "tokenizers": ("tokenizers", "text"),
    "sentencepiece": ("sentencepiece", "text"),
    "onnx": ("onnx", "export"),
    "onnxruntime": ("onnxruntime", "export"),
    "onnxscript": ("onnxscript", "export"),
    "tf2onnx": ("tf2onnx", "export"),
    "jax2onnx": ("jax2onnx", "export"),
    "openvino": ("OpenVINO", "export"),
    "matplotlib": ("matplotlib", "plots"),
    "huggingface_hub": ("huggingface_hub", "hub"),
    "fsspec": ("fsspec", "gcs"),
    "gcsfs": ("gcsfs", "gcs"),
    "keras_hub": ("keras-hub", "keras-hub"),
    "jax": ("JAX", "jax"),
    "torch": ("PyTorch", "torch"),
}


class MissingDependency(ModuleNotFoundError):
    """An optional dependency is not installed. Its message names what needs
    it and the extra to install, e.g. ``pip install
    "keras-vision-transformer[data]"``; ``name`` is the missing module's."""


def install_command(extra):
    """``pip install "keras-vision-transformer[extra]"``."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def missing(error, purpose=None, extra=None):
    """`error`, a `ModuleNotFoundError`, as a `MissingDependency` when the
    missing module is an optional dependency's (`EXTRAS`); else None.

    Args:
        error: a `ModuleNotFoundError`.
        purpose: str or None. What needs the module, e.g. ``"The tf.data
            input pipelines (keras_vit.data)"``.
        extra: str or None. The extra to name instead of the module's own
            (``"tensorflow"`` for a SavedModel, which needs no data extra).
    """
    if isinstance(error, MissingDependency):
        return error
    root = (error.name or "").partition(".")[0]
    if root not in EXTRAS:
        return None
    project, default_extra = EXTRAS[root]
    return MissingDependency(
        f"{purpose or 'This'} needs {project}, which is not installed: "
        f"{install_command(extra or default_extra)}", name=error.name)


def require(module, purpose, extra=None):
    """The module named `module`, imported.

    Args:
        module: str. A module of an optional dependency, e.g. ``"onnx"``.
        purpose: str. What needs it, the subject of the message.
        extra: str or None. As for `missing`.

    Raises:
        MissingDependency: it, or a module it needs, is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        found = missing(error, purpose, extra)
        if found is None:
            raise
        raise found from None
