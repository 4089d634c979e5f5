"""Checkpoint readers (one module per format), resampling and by-name loading."""

import os
import pathlib

from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.assign import assign_weights
from keras_vit.weights.assign import transfer_weights
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import build_model
from keras_vit.weights.download import fetch
from keras_vit.weights.download import is_url
from keras_vit.weights.formats import read_checkpoint
from keras_vit.weights.pretrained import get_pretrained
from keras_vit.weights.pretrained import imagenet1k_class_names


def locate(location):
    """The local path of a checkpoint given as a path, a URL or a released name.

    Args:
        location: a local file or folder; a URL (``hf://``, ``https://``,
            ``gs://``, ... see :func:`keras_vit.weights.download.fetch`); or
            the name of a released checkpoint (:func:`keras_vit.pretrained`).

    Returns:
        ``(path, entry)``: the local ``pathlib.Path`` (downloaded and cached
        if need be) and the :class:`~keras_vit.weights.pretrained.PretrainedWeights`
        entry for a released name, else None.

    Raises:
        CheckpointError: no such file, URL or name (the closest names are
            suggested), or the download failed.
    """
    location = str(location)
    if is_url(location):
        return fetch(location), None
    path = pathlib.Path(location).expanduser()
    if path.exists():
        return path, None
    if "/" in location or os.sep in location or path.suffix in (".npz", ".safetensors", ".keras"):
        raise CheckpointError(f"No checkpoint file or folder at {location}.")
    try:
        entry = get_pretrained(location)
    except ValueError as error:
        raise CheckpointError(f"No checkpoint file or folder at {location}. {error}") from None
    return fetch(entry.url, sha256=entry.sha256, size=entry.size), entry


def load_checkpoint(cls, location, image_size=None, num_classes=None,
                    resample_method="bilinear", **overrides):
    """``ViT.from_checkpoint``: find or download the file, read it, build the
    model and load it."""
    path, entry = locate(location)
    checkpoint = read_checkpoint(path, num_heads=overrides.get("num_heads"))
    if entry is not None and entry.class_names == "imagenet1k" and "class_names" not in checkpoint.config:
        checkpoint.config["class_names"] = imagenet1k_class_names()
    return build_model(cls, checkpoint, image_size, num_classes, resample_method, **overrides)


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "assign_weights",
    "build_model",
    "fetch",
    "load_checkpoint",
    "locate",
    "read_checkpoint",
    "transfer_weights",
]
