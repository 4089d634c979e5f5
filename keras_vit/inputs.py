"""The images a `keras_vit.ViT` is given, checked before Keras sees them:
every error names what was given, what the model takes and what to do."""

import keras


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
