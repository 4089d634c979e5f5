"""What every checkpoint reader returns, and the helpers the readers and writers share."""

import copy
import dataclasses
import functools
import json
import math
import pathlib

import numpy as np

from keras_vit.io import files
from keras_vit.io.files import CheckpointError
from keras_vit.io.tensors import safetensors_bytes


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint translated to keras_vit's names and layouts.

    Attributes:
        config: ViT arguments read from the file (architecture and numerics).
        state: variable path -> float32 NumPy array, in Keras layout.
        source: a description of the file, for messages.
        grid_size: (rows, cols) of the stored position embeddings, when the
            file tells; None for a non-square grid that it does not describe.
        num_patches: rows of the stored position embeddings that belong to
            patches; None when there are none (sin-cos embeddings).
        resample_method: how its source resamples the position embeddings
            to another resolution: ``"bilinear"`` (vit_jax) unless the
            family has its own (DINOv2: ``"dinov2"``).
    """

    config: dict
    state: dict
    source: str
    grid_size: tuple = None
    num_patches: int = None
    resample_method: str = "bilinear"


def read_config_json(path, required=()):
    """The JSON object in a checkpoint's `path` (`keras_vit.io.files.read_json`),
    with the keys `required` (`require`): a copy of its one parse while the
    file stays as it is (`_parsed`), so that a load that asks for a file in
    several places (the format's choice, the reader, a two-tower model's
    towers) parses it once.

    Raises:
        CheckpointError: the file is not a JSON object or lacks a key of
            `required`; the message names the file.
    """
    path = pathlib.Path(path)
    try:
        state = path.stat()
        key = (str(path.resolve()), state.st_mtime_ns, state.st_size)
    except OSError:  # no such file: read_json names it
        key = None
    config = copy.deepcopy(_parsed(path, key) if key else _parse(path))
    return require(config, required, path)


def _parse(path):
    return files.read_json(path, fix="The file may be truncated or edited by hand: download or "
                           "save it again.", error=CheckpointError)


@functools.lru_cache(maxsize=16)
def _parsed(path, key):
    """`path`'s parse, kept by `key` (its resolved path, modification time and size)."""
    return _parse(path)


def require(config, keys, where):
    """`config`, when it has every one of `keys`.

    Raises:
        CheckpointError: naming the keys it lacks and `where` it came from.
    """
    missing = [key for key in keys if key not in config]
    if missing:
        raise CheckpointError(
            f"{where} lacks {', '.join(map(repr, missing))}, which the model needs. The file may "
            "be from another version of its library or edited by hand: save or download it again.")
    return config


def config_view(config):
    """A reader's `config` (`ViT` arguments) as a `ViTConfig`, for the
    predicates of its format's rows; an image size the file does not give
    is one patch (it decides no row)."""
    from keras_vit.config import ViTConfig
    from keras_vit.config import resnet_stride

    if "image_size" in config:
        return ViTConfig.from_dict(config)
    units = config.get("resnet_block_units")
    stride = 1 if units is None else resnet_stride(units)
    patch = np.broadcast_to(config.get("patch_size", 16), (2,))
    return ViTConfig.from_dict({**config, "image_size": tuple(int(p) * stride for p in patch)})


def square_grid(num_patches):
    """(side, side) when `num_patches` is a square, else None."""
    side = math.isqrt(num_patches)
    return (side, side) if side * side == num_patches else None


def write_files(folder, tensors, config, others=None):
    """``config.json`` and ``model.safetensors`` in `folder` (and `others`,
    file name -> JSON)."""
    (folder / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    for name, content in {"config.json": config, **(others or {})}.items():
        (folder / name).write_text(json.dumps(content, indent=2) + "\n")


def stored_heads(checkpoint, num_heads):
    """Refuses a head count `num_heads` (None: none given) other than the one
    a format's files store: the same weights split into other heads load
    without complaint and compute something else."""
    stored = checkpoint.config["num_heads"]
    if num_heads is not None and int(num_heads) != stored:
        raise CheckpointError(
            f"{checkpoint.source} stores num_heads={stored}; num_heads={num_heads} would split the "
            "same weights into other heads and compute something else. Leave num_heads out.")
