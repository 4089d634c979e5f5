"""Checkpoint readers (one module per format), resampling and by-name loading."""

from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.assign import assign_weights
from keras_vit.weights.assign import transfer_weights
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import build_model
from keras_vit.weights.formats import read_checkpoint


def load_checkpoint(cls, path, image_size=None, num_classes=None,
                    resample_method="bilinear", **overrides):
    """``ViT.from_checkpoint``: read the file, build the model, load it."""
    checkpoint = read_checkpoint(path, num_heads=overrides.get("num_heads"))
    return build_model(cls, checkpoint, image_size, num_classes, resample_method, **overrides)


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "assign_weights",
    "build_model",
    "load_checkpoint",
    "read_checkpoint",
    "transfer_weights",
]
