"""A ViT written back to the formats keras_vit reads (`save_checkpoint`): each
format's writer, beside its reader, runs the reader's rows the other way, so
the reader gives back the same model. A model the format cannot express is
refused (`capabilities`) before anything is written; an existing file is never
overwritten.
"""

from keras_vit.deprecation import renamed_keyword
from keras_vit.io import files
from keras_vit.weights.capabilities import COLUMNS
from keras_vit.weights.capabilities import refusal
from keras_vit.weights.formats import FORMATS


def save_checkpoint(model, path, checkpoint_format=None, *, format=None):
    """Writes `model` (a `keras_vit.ViT`) to `path` in `checkpoint_format`.

    Args:
        model: a `keras_vit.ViT`.
        path: a new ``.npz`` file (``"npz"``), or a new or empty folder:
            ``config.json`` and ``model.safetensors`` (``"huggingface"``, with
            its ``preprocessor_config.json``; ``"timm"``, its hub layout, or a
            ``.safetensors`` file alone), a keras-hub preset (``"keras_hub"``).
        checkpoint_format: ``"npz"`` (default; vit_jax, big_vision's layout
            for MAP pooling), ``"huggingface"`` (a ViT; a ``DINOv3ViTModel``
            for rotary position embeddings, a ``Siglip2VisionModel`` for
            NaFlex), ``"timm"`` or ``"keras_hub"`` (through keras-hub).
        format: deprecated: `checkpoint_format`.

    Returns:
        The path written, a `pathlib.Path`.

    Raises:
        ValueError: an unknown format, a path that exists, or a model the
            format cannot express, naming the option (`capabilities.TABLE`).
    """
    chosen = renamed_keyword("save_checkpoint", "checkpoint_format", "format", checkpoint_format, format, "npz")
    path = check_output(path, chosen)
    writer = FORMATS[chosen]
    refuse(model, writer.written_as(model.config))
    if writer.writes_folder(path):
        files.write_folder(path, lambda folder: writer.write(model, folder))
    else:
        writer.write(model, path)
    return path


def check_output(path, format):
    """`path` as a place `save_checkpoint` may write `format` to: a known
    format, a new path in a folder that exists (or, for a folder format,
    an empty folder; `keras_vit.io.files.output_file`), a ``.npz`` name for
    ``"npz"``. Creates nothing.

    Returns:
        `path` as a `pathlib.Path`.

    Raises:
        ValueError, FileNotFoundError: naming the problem and the fix.
    """
    if format not in FORMATS:
        raise ValueError(f"Unknown checkpoint format {format!r}; use one of {', '.join(FORMATS)}.")
    path = files.output_file(path, "", new="folder" if FORMATS[format].writes_folder(path) else "file")
    if format == "npz" and path.suffix != ".npz":
        raise ValueError(f"{path} does not end in .npz, the format written there; nothing was "
                         "written. Name a .npz file.")
    return path


def refuse(model, column):
    """Raises a ValueError naming what `column` (a
    `keras_vit.weights.capabilities.COLUMNS` key) cannot hold of `model`."""
    found = refusal(model.config, column)
    if found:
        why, instead = found
        raise ValueError(f"{model.name} cannot be written as {COLUMNS[column].writes}: {why}. "
                         f"Nothing was written. {instead}")
