"""Weights into a model by variable path, strictly: from a state
(`assign_weights`), a checkpoint the readers of `keras_vit.weights` give
(`build_model`) or another model (`transfer_weights`); and out of one
(`model_state`)."""

import math

import keras
import numpy as np

from keras_vit.io.files import CheckpointError
from keras_vit.layers.position_embedding import resample_position_embeddings


def model_state(model):
    """path -> float32 NumPy array, every variable of `model`."""
    return {v.path: np.asarray(keras.ops.convert_to_numpy(v), np.float32) for v in model.weights}


def model_variables(model):
    """path -> variable, e.g. ``"encoder_block_0/attention/query/kernel"``."""
    return {variable.path: variable for variable in model.weights}


def _listing(items, limit=12):
    items = list(items)
    text = "\n".join(f"    {item}" for item in items[:limit])
    if len(items) > limit:
        text += f"\n    ... and {len(items) - limit} more"
    return text


def assign_weights(model, state, source, keep_initial=()):
    """Assigns ``state`` (path -> array) to ``model``'s variables.

    Every variable must get exactly one array of exactly its shape, except
    those under a layer named in ``keep_initial``, which keep their initial
    values; anything missing, left over or mis-shaped is reported by name,
    with shapes, in a :class:`CheckpointError`, and nothing is assigned.

    Examples:
        ```python
        import keras
        from keras_vit import ViT
        from keras_vit.weights import CheckpointError, assign_weights

        model = ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16,
                    mlp_dim=32, num_classes=5)
        state = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}
        assign_weights(model, state, "a copy of itself")

        del state["head/bias"]
        try:
            assign_weights(model, state, "an incomplete state")
        except CheckpointError as error:
            print(error)
        # -> The weights of an incomplete state do not fit the model:
        # ->   missing from the checkpoint:
        # ->     head/bias
        # -> Check that the checkpoint and the model have the same architecture ...
        assign_weights(model, {k: v for k, v in state.items() if not k.startswith("head/")},
                       "a headless state", keep_initial=("head",))
        ```
    """
    variables = model_variables(model)
    kept = {p for p in variables if p.split("/")[0] in keep_initial and p not in state}
    variables = {p: v for p, v in variables.items() if p not in kept}
    missing = sorted(set(variables) - set(state))
    extra = sorted(set(state) - set(variables))
    mismatched = [
        f"{path}: checkpoint {tuple(np.shape(state[path]))}, model {tuple(variables[path].shape)}"
        for path in sorted(set(state) & set(variables))
        if tuple(np.shape(state[path])) != tuple(variables[path].shape)
    ]
    problems = []
    if missing:
        problems.append(f"  missing from the checkpoint:\n{_listing(missing)}")
    if extra:
        problems.append(f"  in the checkpoint but not in the model:\n{_listing(extra)}")
    if mismatched:
        problems.append(f"  shapes that differ:\n{_listing(mismatched)}")
    if problems:
        raise CheckpointError(
            f"The weights of {source} do not fit the model:\n" + "\n".join(problems)
            + "\nCheck that the checkpoint and the model have the same architecture "
            "(ViT.from_checkpoint reads it from the file)."
        )
    for path, variable in variables.items():
        variable.assign(np.asarray(state[path], dtype=variable.dtype))


def transfer_weights(source, target, method="bilinear", skip=()):
    """Copies ``source``'s weights into ``target`` by name.

    Learned position embeddings are 2-D interpolated when the two models'
    patch grids differ (Sec. 3.2 of the paper); everything else must match,
    except the layers named in ``skip`` (e.g. ``("head", "pre_logits")`` for
    fine-tuning), which are not copied and keep the target's initial values.

    Examples:
        ```python
        from keras_vit import ViT
        from keras_vit.weights import transfer_weights

        args = dict(patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=5)
        small, large = ViT(image_size=32, **args), ViT(image_size=64, **args)
        transfer_weights(small, large, method="bicubic")
        print(tuple(large.parts.position_embedding.embeddings.shape))  # -> (1, 65, 16)
        ```
    """
    state = {
        path: keras.ops.convert_to_numpy(variable)
        for path, variable in model_variables(source).items()
        if path.split("/")[0] not in skip
    }
    source_posemb = source.parts.position_embedding
    target_grid = target.parts.position_embedding.grid_size
    if source_posemb.kind == "learned" and source_posemb.grid_size != target_grid:
        state[source_posemb.embeddings.path] = source_posemb.resampled(target_grid, method)
    assign_weights(target, state, f"model '{source.name}'", keep_initial=skip)


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
