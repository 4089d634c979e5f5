"""The images a `keras_vit.ViT` is given, checked before Keras sees them:
every error names what was given, what the model takes and what to do."""

import keras
import numpy as np


def check_data(model, x):
    """The images of an array or a ``tf.data.Dataset`` given to ``fit``,
    ``evaluate`` or ``predict``, checked before Keras's loop starts (on JAX an
    error inside the first step would come after the trainer took the
    weights over)."""
    spec = getattr(x, "element_spec", x)
    check_images(model, spec[0] if isinstance(spec, tuple) else spec)
    shape = getattr(x, "shape", None)  # an array: a dataset's size is not known here
    if shape is not None and len(shape) and shape[0] == 0:
        raise ValueError(
            f"{model.name} got an empty batch of images (shape {tuple(shape)}): there is nothing "
            "to run it on. Pass at least one image."
        )


def check_images(model, images):
    """Raises a ValueError unless `images` (anything with ``shape`` and
    ``dtype``: an array, a tensor, a ``TensorSpec``) is a float batch of the
    model's size, channels and data format. Without a shape, or with an
    unknown rank, nothing is checked."""
    if images is None:
        raise TypeError(
            f"{model.name} takes a batch of images, an array of shape (batch, "
            f"{', '.join(map(str, model.config.input_shape))}), got None. Read image files with "
            "`keras_vit.data.read_images`.")
    if model.config.naflex:
        return check_naflex(model, images)
    if isinstance(images, dict):
        keys = ", ".join(map(repr, images))
        raise ValueError(
            f"{model.name} takes a batch of images of shape (batch, "
            f"{', '.join(map(str, model.config.input_shape))}), got a dict ({keys}). For NaFlex's "
            "patches of images of any size, make a NaFlex model with "
            "`model.with_naflex(max_num_patches)` and give it `keras_vit.naflex_inputs(images, "
            f"{model.config.patch_size[0]}, max_num_patches)`.")
    shape = getattr(images, "shape", None)
    if shape is None or getattr(shape, "rank", 0) is None:
        return
    config, name = model.config, model.name
    dtype = keras.backend.standardize_dtype(getattr(images, "dtype", "float32"))
    if not dtype.startswith(("float", "bfloat")):
        raise ValueError(
            f"{name} expects float images scaled to [-1, 1], got {dtype} "
            f"images (shape {tuple(shape)}). Scale 0-255 pixels with "
            "`images / 127.5 - 1` (as the original code), or read files with "
            "`keras_vit.data.read_images`, which does it."
        )
    shape = tuple(shape)
    expected = config.input_shape
    if len(shape) != 4:
        raise ValueError(
            f"{name} expects a batch of images of shape (batch, "
            f"{', '.join(map(str, expected))}) ({config.data_format}), got "
            f"shape {shape} (rank {len(shape)}). Add a batch axis for one image."
        )
    channel_axis = 3 if config.data_format == "channels_last" else 1
    if shape[channel_axis] is not None and shape[channel_axis] != config.num_channels:
        raise ValueError(
            f"{name} expects {config.num_channels} channels on axis "
            f"{channel_axis} ({config.data_format}), got shape {shape}. "
            "Convert the images (e.g. grayscale to RGB) or set "
            "`data_format` to match them."
        )
    spatial = shape[1:3] if config.data_format == "channels_last" else shape[2:4]
    if None not in spatial and tuple(spatial) != config.image_size:
        raise ValueError(
            f"{name} was built for {config.image_size[0]}x"
            f"{config.image_size[1]} images, got {spatial[0]}x{spatial[1]} "
            f"(shape {shape}). Resize the images, or make a model for this "
            f"size with `model.with_image_size({tuple(spatial)})`."
        )


def check_naflex(model, inputs):
    """Raises a ValueError unless `inputs` is NaFlex's dict for `model`
    (`keras_vit.naflex_inputs`): the three keys, float ``"patches"``
    ``(batch, L, P_h * P_w * C)``, ``"patch_mask"`` ``(batch, L)`` (a
    sequence length L up to ``max_num_patches``) and integer
    ``"spatial_shapes"`` ``(batch, 2)`` of one batch size. Arrays (not tensors) are also checked for their values:
    each image's ``h * w`` patches fit and the mask counts them."""
    config, name = model.config, model.name
    expected = config.naflex_input_shapes
    how = (f"Make it with `keras_vit.naflex_inputs(images, patch_size={config.patch_size[0]}, "
           f"max_num_patches={config.max_num_patches})`.")
    if not isinstance(inputs, dict):
        shape = getattr(inputs, "shape", None)
        raise ValueError(
            f"{name} is a NaFlex model: it takes a dict of 'patches', 'patch_mask' and "
            f"'spatial_shapes' (images of any size as patch sequences), got "
            f"{type(inputs).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")
            + f". {how} For fixed-size images, use the fixed-size model: "
            "`model.with_config(naflex=False, max_num_patches=None)`.")
    if set(inputs) != set(expected):
        missing = sorted(set(expected) - set(inputs))
        unknown = sorted(set(inputs) - set(expected))
        raise ValueError(
            f"{name} takes a dict with keys {list(expected)}; got {sorted(inputs)}"
            + (f" (missing {missing}" if missing else " (")
            + (f"{', ' if missing else ''}unknown {unknown}" if unknown else "") + f"). {how}")
    shapes = {key: _naflex_shape(model, key, example, inputs[key], how)
              for key, example in expected.items()}
    shapes = {key: shape for key, shape in shapes.items() if shape is not None}
    # sizes known as ints (a tracer's symbolic batch is left to it)
    batches = {key: shape[0] for key, shape in shapes.items() if isinstance(shape[0], int)}
    if len(set(batches.values())) > 1:
        raise ValueError(f"{name}'s NaFlex inputs disagree on the batch size: "
                         f"{batches}. Give each the same images. {how}")
    lengths = {key: shapes[key][1] for key in ("patches", "patch_mask")
               if key in shapes and isinstance(shapes[key][1], int)}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{name}'s 'patches' and 'patch_mask' disagree on the sequence length: "
                         f"{lengths}. Give both the same sequences. {how}")
    if all(isinstance(inputs[key], np.ndarray) for key in expected):
        grids = inputs["spatial_shapes"].astype(np.int64)
        counts = grids.prod(axis=1)
        if (grids < 1).any() or (counts > inputs["patch_mask"].shape[1]).any() or (
                np.asarray(inputs["patch_mask"]).astype(bool).sum(axis=1) != counts).any():
            raise ValueError(
                f"{name}'s 'spatial_shapes' and 'patch_mask' disagree: each image's grid (rows, "
                f"columns) must be at least 1x1 with rows x columns <= the sequence length "
                f"(at most {config.max_num_patches}), "
                f"and its mask must have that many ones, first. {how}")


def _naflex_shape(model, key, example, value, how):
    """The shape of NaFlex input `key` (`value`), checked against `example`
    (its shape without the batch) and its dtype; None when unknown."""
    config, name = model.config, model.name
    shape = getattr(value, "shape", None)
    if shape is None or getattr(shape, "rank", 0) is None:
        return None
    shape = tuple(shape)
    dtype = keras.backend.standardize_dtype(getattr(value, "dtype", "float32"))
    if len(shape) != 1 + len(example) or any(  # a sequence may be shorter than the budget
            got is not None and (got > want if i == 0 and key != "spatial_shapes" else got != want)
            for i, (got, want) in enumerate(zip(shape[1:], example))):
        if key == "patches" and len(shape) == 3 and (shape[1] or 0) <= example[0] and shape[2] and (
                shape[2] % (config.patch_size[0] * config.patch_size[1]) == 0):
            channels = shape[2] // (config.patch_size[0] * config.patch_size[1])
            raise ValueError(
                f"{name} takes {config.num_channels}-channel images, got patches of "
                f"{channels} channels (shape {shape}; {config.patch_size[0]}x"
                f"{config.patch_size[1]} patches). Convert the images (e.g. grayscale to "
                "RGB) before `keras_vit.naflex_inputs`.")
        raise ValueError(
            f"{name}'s '{key}' must have shape (batch, {', '.join(map(str, example))}), got "
            f"{shape}. "
            + (f"The model was made for max_num_patches={config.max_num_patches}: make the "
               f"inputs with that budget, or the model for theirs with "
               f"`model.with_naflex(n)`. " if key != "spatial_shapes" else "")
            + how)
    if key == "patches" and not dtype.startswith(("float", "bfloat")):
        raise ValueError(
            f"{name}'s 'patches' must be float pixels scaled as the model takes them, got "
            f"{dtype}. {how}")
    if key == "spatial_shapes" and not dtype.startswith(("int", "uint")):
        raise ValueError(f"{name}'s 'spatial_shapes' must be integer patch grids, got "
                         f"{dtype}. {how}")
    return shape


def symbolic(inputs):
    """`inputs` (a structure of arrays, tensors or ``KerasTensor``s) with
    every array and tensor replaced by a ``keras.KerasTensor`` of its shape
    and dtype. Keras's ``compute_output_spec`` reads the shapes of backend
    tensors and ``KerasTensor``s only: given a NumPy array, it hands a
    layer's ``compute_output_shape`` None. A model's ``compute_output_spec``
    passes its inputs through this first, so it takes either."""
    def spec(x):
        if isinstance(x, keras.KerasTensor) or not hasattr(x, "shape"):
            return x
        return keras.KerasTensor(tuple(x.shape), dtype=keras.backend.standardize_dtype(x.dtype))

    return keras.tree.map_structure(spec, inputs)
