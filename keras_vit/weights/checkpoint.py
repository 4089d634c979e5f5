"""What every checkpoint reader returns, and how a model is made from it."""

import dataclasses
import math

import numpy as np

from keras_vit.io import files
from keras_vit.layers.position_embedding import resample_position_embeddings
from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.assign import assign_weights


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
    with the keys `required` (`require`).

    Raises:
        CheckpointError: the file is not a JSON object or lacks a key of
            `required`; the message names the file.
    """
    config = files.read_json(path, fix="The file may be truncated or edited by hand: download or "
                             "save it again.", error=CheckpointError)
    return require(config, required, path)


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


def _checkpoint_grid(checkpoint, model):
    """The stored grid: the file's, or the model's when only that fits."""
    if checkpoint.grid_size or checkpoint.num_patches is None:
        return checkpoint.grid_size
    if math.prod(model.grid_size) == checkpoint.num_patches:
        return model.grid_size
    raise CheckpointError(
        f"{checkpoint.source}: the position embeddings hold {checkpoint.num_patches} "
        f"patches, which a {model.grid_size[0]}x{model.grid_size[1]} grid does not "
        "fit. Pass the checkpoint's own `image_size=(height, width)`, then use "
        "`model.with_image_size(...)` for another resolution."
    )


def build_model(cls, checkpoint, image_size=None, num_classes=None,
                resample_method=None, **overrides):
    """The ViT described by ``checkpoint``, with its weights loaded."""
    config = {**checkpoint.config, **overrides}
    state = dict(checkpoint.state)
    keep_initial = ()
    if image_size is not None:
        config["image_size"] = image_size
    if "image_size" not in config:
        why = ("it has no learned position embeddings" if checkpoint.num_patches is None
               else f"its position embeddings hold {checkpoint.num_patches} patches, not a square grid")
        raise CheckpointError(
            f"{checkpoint.source}: the image size cannot be read from the file ({why}). "
            "Pass `image_size=(height, width)`."
        )
    if not config.get("representation_size"):  # fine-tuning drops pre-logits
        state = {k: v for k, v in state.items() if not k.startswith("pre_logits/")}
    if num_classes is not None and num_classes != config.get("num_classes", 0):
        config["num_classes"] = num_classes  # a new, zero-initialised head
        config.pop("class_names", None)
        heads = ("head", "head_dist")  # DeiT's distillation head goes with the head
        state = {k: v for k, v in state.items() if k.split("/")[0] not in heads}
        keep_initial = heads
    model = cls(**config)
    posemb = model.parts.position_embedding
    key = "position_embedding/embeddings"
    grid = _checkpoint_grid(checkpoint, model)
    if key in state and tuple(posemb.grid_size) != tuple(grid):
        state[key] = resample_position_embeddings(
            state[key], grid, posemb.grid_size,
            posemb.num_prefix_tokens, resample_method or checkpoint.resample_method,
        )
    assign_weights(model, state, checkpoint.source, keep_initial)
    return model
