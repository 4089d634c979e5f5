"""Checkpoint readers (one module per format), resampling and by-name loading."""

import os
import pathlib

from keras_vit.arguments import WRITE_FORMATS
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
from keras_vit.weights.writers import check_output
from keras_vit.weights.writers import save_checkpoint


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
                    resample_method=None, **overrides):
    """``ViT.from_checkpoint``: find or download the file, read it, build the
    model and load it.

    Examples:
        A small vit_jax ``.npz`` file, written from a fresh model, then
        loaded:

        ```python
        import keras
        import numpy as np
        from keras_vit import ViT

        source = ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16,
                     mlp_dim=32, num_classes=5)
        w = {v.path: keras.ops.convert_to_numpy(v) for v in source.weights}
        blk = "Transformer/encoderblock_0/"
        arrays = {
            "embedding/kernel": w["patch_embedding/projection/kernel"],
            "embedding/bias": w["patch_embedding/projection/bias"],
            "cls": w["class_token/tokens"],
            "Transformer/posembed_input/pos_embedding": w["position_embedding/embeddings"],
            "Transformer/encoder_norm/scale": w["encoder_norm/gamma"],
            "Transformer/encoder_norm/bias": w["encoder_norm/beta"],
            "head/kernel": w["head/kernel"], "head/bias": w["head/bias"],
            blk + "LayerNorm_0/scale": w["encoder_block_0/norm1/gamma"],
            blk + "LayerNorm_0/bias": w["encoder_block_0/norm1/beta"],
            blk + "LayerNorm_2/scale": w["encoder_block_0/norm2/gamma"],
            blk + "LayerNorm_2/bias": w["encoder_block_0/norm2/beta"],
        }
        for name in ("query", "key", "value", "out"):
            for leaf in ("kernel", "bias"):
                arrays[f"{blk}MultiHeadDotProductAttention_1/{name}/{leaf}"] = w[f"encoder_block_0/attention/{name}/{leaf}"]
        for ours, theirs in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
            for leaf in ("kernel", "bias"):
                arrays[f"{blk}MlpBlock_3/{theirs}/{leaf}"] = w[f"encoder_block_0/mlp/{ours}/{leaf}"]
        np.savez("tiny_vit.npz", **arrays)

        from keras_vit.weights import load_checkpoint

        model = load_checkpoint(ViT, "tiny_vit.npz")

        # The same in two steps: read the file, then build the model.
        from keras_vit.weights import read_checkpoint

        checkpoint = read_checkpoint("tiny_vit.npz")
        print(checkpoint.source)       # -> vit_jax checkpoint tiny_vit.npz
        print(checkpoint.grid_size)    # -> (4, 4)
        print({k: checkpoint.config[k] for k in ("image_size", "patch_size", "num_heads", "pooling")})
        # -> {'image_size': (32, 32), 'patch_size': (8, 8), 'num_heads': 2, 'pooling': 'token'}

        from keras_vit import ViT
        from keras_vit.weights import build_model, read_checkpoint

        checkpoint = read_checkpoint("tiny_vit.npz")
        model = build_model(ViT, checkpoint, image_size=48, num_classes=3, drop_path_rate=0.1)
        print(model.grid_size, model.num_classes)   # -> (6, 6) 3
        ```
    """
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
    "save_checkpoint",
    "transfer_weights",
]
