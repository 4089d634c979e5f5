"""What every checkpoint reader returns, and how a model is made from it."""

import dataclasses
import math


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
        grid_size: (rows, cols) of the stored position embeddings, or None.
    """

    config: dict
    state: dict
    source: str
    grid_size: tuple = None


def square_grid(num_patches, source):
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise CheckpointError(
            f"{source}: the position embeddings hold {num_patches} patches, not a "
            "square grid, so the image size cannot be read from them. Pass "
            "`image_size=(height, width)`."
        )
    return side, side


def build_model(cls, checkpoint, image_size=None, num_classes=None,
                resample_method="bilinear", **overrides):
    """The ViT described by ``checkpoint``, with its weights loaded."""
    config = {**checkpoint.config, **overrides}
    state = dict(checkpoint.state)
    keep_initial = ()
    if image_size is not None:
        config["image_size"] = image_size
    if num_classes is not None and num_classes != config.get("num_classes", 0):
        config["num_classes"] = num_classes  # a new, zero-initialised head
        state = {k: v for k, v in state.items() if not k.startswith("head/")}
        keep_initial = ("head",)
    model = cls(**config)
    posemb = model.get_layer("position_embedding")
    key = "position_embedding/embeddings"
    if key in state and checkpoint.grid_size and tuple(posemb.grid_size) != tuple(checkpoint.grid_size):
        state[key] = resample_position_embeddings(
            state[key], checkpoint.grid_size, posemb.grid_size,
            posemb.num_prefix_tokens, resample_method,
        )
    assign_weights(model, state, checkpoint.source, keep_initial)
    return model
