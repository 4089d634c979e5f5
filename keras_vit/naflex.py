"""NaFlex inputs: images of any size and aspect ratio as sequences of patches.

NaFlex (SigLIP 2, Tschannen et al., 2025; after NaViT, Dehghani et al.,
2023) resizes each image to the largest size that keeps its aspect ratio,
has both sides multiples of the patch size and has at most
``max_num_patches`` patches, cuts it into patches and pads the sequence to
``max_num_patches``. A `keras_vit.ViT` made with ``naflex=True`` (or
``model.with_naflex(max_num_patches)``) takes the dict these functions make:

- ``"patches"``: float32 ``(batch, max_num_patches, P_h * P_w * C)``, each
  image's patches in row-major order over its grid, each patch flattened in
  (row, column, channel) order, then zeros;
- ``"patch_mask"``: int32 ``(batch, max_num_patches)``, 1 for an image's
  patches and 0 for the padding (the dtype of Hugging Face's
  ``pixel_attention_mask``);
- ``"spatial_shapes"``: int32 ``(batch, 2)``, each image's grid (rows,
  columns).

These are the arrays of Hugging Face's ``Siglip2ImageProcessor``
(``pixel_values``, ``pixel_attention_mask``, ``spatial_shapes``) and of
big_vision's ``resize_to_sequence``. The resize is bilinear with
antialiasing: the triangle filter widened by the scale when shrinking
(`antialiased_resize_matrix`), which is PyTorch's ``F.interpolate(...,
mode="bilinear", antialias=True)`` and TensorFlow's ``tf.image.resize(...,
antialias=True)``, computed in float64 here as one matrix per axis, so that
`naflex_inputs` (NumPy) and `naflex_example` (TensorFlow, for ``tf.data``)
give the same arrays.
"""

import math

import numpy as np

from keras_vit.config import is_int
from keras_vit.config import is_number
from keras_vit.config import pair
from keras_vit.extras import require

KEYS = ("patches", "patch_mask", "spatial_shapes")


def image_size_for_max_num_patches(height, width, patch_size, max_num_patches, eps=1e-5):
    """The size ``(height, width)`` an image is resized to: the largest
    that keeps its aspect ratio, has both sides multiples of the patch size,
    at least one patch per side and at most `max_num_patches` patches.

    The binary search over the scale of big_vision's ``resize_to_sequence``
    and Hugging Face's ``get_image_size_for_max_num_patches``, step for step
    (the scale in ``[eps / 10, 100]``, each side ``ceil(side * scale / P) *
    P``, at least ``P``), so the sizes are theirs.

    Args:
        height: int. The image's height in pixels (> 0).
        width: int. Its width.
        patch_size: int or (int, int).
        max_num_patches: int >= 1.
        eps: float. The search stops when the scale interval is narrower.

    Returns:
        ``(height, width)``, ints, multiples of the patch size.

    Example:
        >>> image_size_for_max_num_patches(256, 64, 16, 12)
        (96, 32)
        >>> image_size_for_max_num_patches(112, 109, 7, 225)
        (105, 105)
    """
    patch_h, patch_w = pair(patch_size, "patch_size")
    _check_budget(max_num_patches)

    def scaled(scale, size, patch):
        return int(max(patch, math.ceil(size * scale / patch) * patch))

    low, high = eps / 10, 100.0
    while (high - low) >= eps:
        scale = (low + high) / 2
        patches = (scaled(scale, height, patch_h) / patch_h) * (scaled(scale, width, patch_w) / patch_w)
        if patches <= max_num_patches:
            low = scale
        else:
            high = scale
    return scaled(low, height, patch_h), scaled(low, width, patch_w)


def antialiased_resize_matrix(in_size, out_size):
    """``(out_size, in_size)`` float64 weights of 1-D bilinear resizing with
    antialiasing (half-pixel centres).

    Output pixel ``i`` has its centre at ``c = (i + 0.5) * s`` input pixels,
    ``s = in_size / out_size``; input pixel ``j`` weighs ``max(0, 1 - |j +
    0.5 - c| / max(s, 1))``, the weights of a row normalised to sum to 1: the
    triangle filter widened by the scale when shrinking. This is PyTorch's
    ``F.interpolate(mode="bilinear", align_corners=False, antialias=True)``
    (Hugging Face's Siglip2 processor and position embeddings) and
    TensorFlow's ``tf.image.resize(method="bilinear", antialias=True)``; to
    the same size it is the identity.
    """
    scale = in_size / out_size
    support = max(scale, 1.0)
    centre = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    source = np.arange(in_size, dtype=np.float64) + 0.5
    weights = np.maximum(0.0, 1.0 - np.abs(source - centre[:, None]) / support)
    return weights / np.sum(weights, axis=-1, keepdims=True)


def _check_budget(max_num_patches):
    if not is_int(max_num_patches, 1):
        raise ValueError(
            f"`max_num_patches` must be an int >= 1 (the patches each image may have), got "
            f"{max_num_patches!r}: a budget below one patch leaves no room for any image. "
            "Give at least 1, e.g. 256 as SigLIP 2's NaFlex models.")


def _check_scaling(pixel_scale, pixel_offset, channels):
    for name, value in (("pixel_scale", pixel_scale), ("pixel_offset", pixel_offset)):
        values = np.asarray(value, np.float64)
        if values.ndim > 1 or (values.ndim == 1 and len(values) not in (1, channels)) or not all(
                is_number(float(v)) for v in values.reshape(-1)):
            raise ValueError(f"`{name}` must be a number or one per channel ({channels}), got "
                             f"{value!r}.")
    return np.asarray(pixel_scale, np.float64), np.asarray(pixel_offset, np.float64)


def _image_shape(shape, index):
    shape = tuple(shape)
    if len(shape) != 3:
        raise ValueError(
            f"Image {index} has shape {shape}; NaFlex takes images of shape (height, width, "
            "channels), channels last. Add a channel axis to a grayscale image "
            "(`image[..., None]`), or pass each image of a batch separately.")
    if min(shape) < 1:
        raise ValueError(
            f"Image {index} has shape {shape}: a side of 0 pixels (or no channels), nothing to "
            "cut into patches. Drop it from the list, or check how it was decoded or cropped.")
    return shape


def naflex_inputs(images, patch_size, max_num_patches, pixel_scale=1 / 127.5, pixel_offset=-1.0):
    """Images of any sizes as the NaFlex inputs of a `keras_vit.ViT` made with
    ``naflex=True``.

    Each image is resized (bilinear, antialiased: `antialiased_resize_matrix`)
    to `image_size_for_max_num_patches`, scaled as ``pixels * pixel_scale +
    pixel_offset`` (the model's ``pixel_scale`` and ``pixel_offset``; the
    defaults give [-1, 1] from [0, 255]), cut into patches in row-major order,
    each flattened in (row, column, channel) order, and padded with zeros to
    `max_num_patches`: the arrays of Hugging Face's ``Siglip2ImageProcessor``
    and big_vision's ``resize_to_sequence`` (module docstring).

    Args:
        images: a list of arrays ``(height, width, channels)`` of any sizes,
            uint8 or float pixels (or one such array).
        patch_size: int or (int, int). The model's patch size.
        max_num_patches: int >= 1. The model's ``max_num_patches``.
        pixel_scale: a number, or one per channel: multiplies the pixels.
        pixel_offset: a number, or one per channel: added after.

    Returns:
        A dict of NumPy arrays: ``"patches"`` float32 ``(batch,
        max_num_patches, P_h * P_w * C)``, ``"patch_mask"`` int32 ``(batch,
        max_num_patches)`` (1: a patch, 0: padding), ``"spatial_shapes"``
        int32 ``(batch, 2)`` (each image's grid: rows, columns).

    Example:
        ```python
        import numpy as np
        import keras_vit

        rng = np.random.default_rng(0)
        images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((40, 90), (64, 64))]
        x = keras_vit.naflex_inputs(images, patch_size=8, max_num_patches=24)
        print({k: v.shape for k, v in x.items()})
        # -> {'patches': (2, 24, 192), 'patch_mask': (2, 24), 'spatial_shapes': (2, 2)}
        print(x["spatial_shapes"].tolist(), x["patch_mask"].sum(axis=1).tolist())
        # -> [[3, 7], [4, 4]] [21, 16]
        ```
    """
    if isinstance(images, np.ndarray) and images.ndim == 3:
        images = [images]
    images = list(images)
    if not images:
        raise ValueError("`images` is empty: give a list of at least one (height, width, "
                         "channels) array.")
    patch_h, patch_w = pair(patch_size, "patch_size")
    _check_budget(max_num_patches)
    shapes = [_image_shape(np.shape(image), i) for i, image in enumerate(images)]
    channels = {shape[-1] for shape in shapes}
    if len(channels) > 1:
        raise ValueError(f"The images have different numbers of channels {sorted(channels)}; "
                         "convert them all to the model's (e.g. RGB, 3).")
    channels = channels.pop()
    scale, offset = _check_scaling(pixel_scale, pixel_offset, channels)
    length = patch_h * patch_w * channels
    patches = np.zeros((len(images), max_num_patches, length), np.float32)
    mask = np.zeros((len(images), max_num_patches), np.int32)
    grids = np.zeros((len(images), 2), np.int32)
    for i, (image, (height, width, _)) in enumerate(zip(images, shapes)):
        new_h, new_w = image_size_for_max_num_patches(height, width, (patch_h, patch_w),
                                                      max_num_patches)
        pixels = np.asarray(image, np.float64)
        pixels = np.einsum("hH,HWc->hWc", antialiased_resize_matrix(height, new_h), pixels)
        pixels = np.einsum("wW,hWc->hwc", antialiased_resize_matrix(width, new_w), pixels)
        pixels = pixels * scale + offset
        grid_h, grid_w = new_h // patch_h, new_w // patch_w
        flat = pixels.reshape(grid_h, patch_h, grid_w, patch_w, channels).transpose(0, 2, 1, 3, 4)
        patches[i, :grid_h * grid_w] = flat.reshape(grid_h * grid_w, length)
        mask[i, :grid_h * grid_w] = 1
        grids[i] = grid_h, grid_w
    return {"patches": patches, "patch_mask": mask, "spatial_shapes": grids}


def naflex_example(image, patch_size, max_num_patches, pixel_scale=1 / 127.5, pixel_offset=-1.0):
    """`naflex_inputs` of one image in TensorFlow, for ``tf.data``.

    ``dataset.map(lambda image, label: (naflex_example(image, 16, 256), label))``
    then ``.batch(n)``: every example is already padded to `max_num_patches`,
    so plain batching stacks them. The numbers are `naflex_inputs`'s (the
    same size search, in float64 with the same steps, and the same resize
    matrices).

    Args:
        image: a tensor ``(height, width, channels)`` of any size, uint8 or
            float pixels; the channels must be known statically.
        patch_size: as `naflex_inputs`.
        max_num_patches: as `naflex_inputs`.
        pixel_scale: as `naflex_inputs`.
        pixel_offset: as `naflex_inputs`.

    Returns:
        A dict of tensors: ``"patches"`` float32 ``(max_num_patches, P_h *
        P_w * C)``, ``"patch_mask"`` int32 ``(max_num_patches,)``,
        ``"spatial_shapes"`` int32 ``(2,)``.
    """
    tf = require("tensorflow", "naflex_example (a tf.data step)")

    patch_h, patch_w = pair(patch_size, "patch_size")
    _check_budget(max_num_patches)
    image = tf.convert_to_tensor(image)
    if image.shape.rank is not None:
        _image_shape([1 if d is None else d for d in image.shape], "given to naflex_example")
    channels = image.shape[-1]
    if channels is None:
        raise ValueError("naflex_example needs the number of channels statically: set it with "
                         "`tf.ensure_shape(image, (None, None, 3))` (or `image.set_shape`).")
    scale, offset = _check_scaling(pixel_scale, pixel_offset, channels)
    shape = tf.shape(image)
    with tf.control_dependencies([tf.debugging.assert_positive(
            shape[:2], message="NaFlex got an image with a side of 0 pixels: drop it from the "
                               "dataset (e.g. `dataset.filter`), or check how it was decoded.")]):
        height, width = tf.cast(shape[0], tf.float64), tf.cast(shape[1], tf.float64)

    def scaled(scale_, size, patch):
        return tf.maximum(tf.math.ceil(size * scale_ / patch) * patch, float(patch))

    def step(low, high):
        mid = (low + high) / 2
        patches = (scaled(mid, height, patch_h) / patch_h) * (scaled(mid, width, patch_w) / patch_w)
        fits = patches <= float(max_num_patches)
        return tf.where(fits, mid, low), tf.where(fits, high, mid)

    eps = 1e-5
    low, _ = tf.while_loop(lambda low, high: (high - low) >= eps, step,
                           (tf.constant(eps / 10, tf.float64), tf.constant(100.0, tf.float64)))
    new_h = tf.cast(scaled(low, height, patch_h), tf.int32)
    new_w = tf.cast(scaled(low, width, patch_w), tf.int32)

    def matrix(in_size, out_size):
        index = tf.range(out_size, dtype=tf.float64)
        scale_ = tf.cast(in_size, tf.float64) / tf.cast(out_size, tf.float64)
        support = tf.maximum(scale_, 1.0)
        source = tf.range(in_size, dtype=tf.float64) + 0.5
        weights = tf.maximum(1.0 - tf.abs(source - ((index + 0.5) * scale_)[:, None]) / support, 0.0)
        return weights / tf.reduce_sum(weights, axis=-1, keepdims=True)

    pixels = tf.cast(image, tf.float64)
    pixels = tf.einsum("hH,HWc->hWc", matrix(shape[0], new_h), pixels)
    pixels = tf.einsum("wW,hWc->hwc", matrix(shape[1], new_w), pixels)
    pixels = pixels * scale + offset
    grid_h, grid_w = new_h // patch_h, new_w // patch_w
    count = grid_h * grid_w
    flat = tf.reshape(pixels, (grid_h, patch_h, grid_w, patch_w, channels))
    flat = tf.reshape(tf.transpose(flat, (0, 2, 1, 3, 4)), (count, patch_h * patch_w * channels))
    patches = tf.pad(tf.cast(flat, tf.float32), [[0, max_num_patches - count], [0, 0]])
    mask = tf.pad(tf.ones((count,), tf.int32), [[0, max_num_patches - count]])
    return {
        "patches": tf.ensure_shape(patches, (max_num_patches, patch_h * patch_w * channels)),
        "patch_mask": tf.ensure_shape(mask, (max_num_patches,)),
        "spatial_shapes": tf.stack([grid_h, grid_w]),
    }


def train_seq_lens(max_num_patches):
    """The sequence lengths NaFlex training draws per batch for a budget of
    `max_num_patches`: a quarter, a half and all of it (as timm's
    ``train_seq_lens``, a short list, so XLA compiles one program per
    length). A batch of length L holds ``budget // L`` images
    (`keras_vit.data.input_pipeline`), so the tokens per batch stay level.

    Example:
        ```python
        from keras_vit.naflex import train_seq_lens

        print(train_seq_lens(256), train_seq_lens(2))   # -> (64, 128, 256) (1, 2)
        ```
    """
    if not is_int(max_num_patches, 1):
        raise ValueError(f"`max_num_patches` must be an int >= 1, got {max_num_patches!r}.")
    return tuple(sorted({max(1, max_num_patches // 4), max(1, max_num_patches // 2), max_num_patches}))
