"""An embedded semantic-segmentation toy set: several of scikit-learn's digits
on a canvas, every pixel labelled with its digit or the background, for the
linear segmentation probe (`keras_vit.segmentation_probe`) with no download.
"""

import numpy as np

from keras_vit.config import is_int

# The classes of every pixel: 0 the background, d + 1 the digit d.
SEGMENTATION_CLASSES = ("background", *(str(d) for d in range(10)))


def digit_segmentation(split="train", num_canvases=1000, canvas_size=32, digits_per_canvas=3,
                       digit_size=None, ink_threshold=96, pixel_scale=None, pixel_offset=None,
                       seed=0):
    """Canvases of digits and their per-pixel labels.

    Each canvas is black, with `digits_per_canvas` digits of `split` drawn
    at random (with `seed`): the canvas is cut into a grid of cells of at
    least `digit_size` pixels, each digit goes into a cell of its own (the
    cells drawn at random) at a random offset within it, so that no two
    digits overlap. A pixel's label is its digit's class where the digit's
    ink is at least `ink_threshold` (of 255), the background's elsewhere
    (see `SEGMENTATION_CLASSES`).

    The digits come from the splits of `keras_vit.data.load_source`
    (``"digits"``): canvases of ``"test"`` hold only the 360 held-out
    digits that the demo's models never train on, canvases of
    ``"train"`` only the 1437 others.

    Args:
        split: the digits' split in TFDS syntax (``"train"``, ``"test"``,
            ``"train[:80%]"``).
        num_canvases: int. How many canvases.
        canvas_size: int. Their height and width in pixels; a model's
            ``image_size``.
        digits_per_canvas: int. Digits on each canvas.
        digit_size: int or None. The digits' height and width in pixels
            (the 32-pixel digits are resized); by default the largest that
            gives `digits_per_canvas` cells.
        ink_threshold: int in [1, 255]. How bright a digit's pixel must be
            to be labelled as the digit.
        pixel_scale: float, a sequence of one per channel, or None. The
            images are ``pixels * pixel_scale + pixel_offset``; by default
            [-1, 1], as the paper's models (a model's own: its
            ``pixel_scale`` and ``pixel_offset``).
        pixel_offset: float, a sequence, or None. See `pixel_scale`.
        seed: int. The same seed gives the same canvases.

    Returns:
        ``(images, masks)``: float32 ``(num_canvases, canvas_size,
        canvas_size, 3)`` and int32 ``(num_canvases, canvas_size,
        canvas_size)``, the masks' values in ``[0, 11)``.

    Examples:
        ```python
        import numpy as np
        from keras_vit.data import digit_segmentation

        images, masks = digit_segmentation("test", num_canvases=4, canvas_size=32)
        print(images.shape, masks.shape, images.min())  # -> (4, 32, 32, 3) (4, 32, 32) -1.0
        print(np.unique(masks[0]).tolist())             # -> [0, 2, 7, 8]  # the background, a 1, a 6, a 7
        ```
    """
    from keras_vit.data.sources import load_source

    for name, value, least in (("num_canvases", num_canvases, 1), ("canvas_size", canvas_size, 1),
                               ("digits_per_canvas", digits_per_canvas, 1), ("seed", seed, 0)):
        if not is_int(value, least):
            raise ValueError(f"`{name}` must be an int >= {least}, got {value!r}.")
    if not (is_int(ink_threshold, 1) and ink_threshold <= 255):
        raise ValueError(f"`ink_threshold` must be an int in [1, 255] (a pixel's brightness), "
                         f"got {ink_threshold!r}.")
    cells = int(np.ceil(np.sqrt(digits_per_canvas)))  # per side
    cell_size = canvas_size // cells
    digit_size = cell_size if digit_size is None else digit_size
    if not (is_int(digit_size, 1) and digit_size <= cell_size):
        raise ValueError(
            f"{digits_per_canvas} digits on a {canvas_size}-pixel canvas take a grid of "
            f"{cells}x{cells} cells of {cell_size} pixels, so a digit's `digit_size` must be an "
            f"int in [1, {cell_size}], got {digit_size!r}. Give fewer digits, a smaller digit_size "
            "or a larger canvas.")
    digits = _resized_digits(load_source("digits", split).table, digit_size)
    pixels, labels = digits
    rng = np.random.default_rng(seed)
    canvases = np.zeros((num_canvases, canvas_size, canvas_size, 3), np.uint8)
    masks = np.zeros((num_canvases, canvas_size, canvas_size), np.int32)
    chosen = rng.integers(0, len(labels), (num_canvases, digits_per_canvas))
    slack = cell_size - digit_size
    for i in range(num_canvases):
        places = rng.permutation(cells * cells)[:digits_per_canvas]
        offsets = rng.integers(0, slack + 1, (digits_per_canvas, 2))
        for index, place, (dy, dx) in zip(chosen[i], places, offsets):
            top = place // cells * cell_size + dy
            left = place % cells * cell_size + dx
            window = np.s_[i, top:top + digit_size, left:left + digit_size]
            canvases[window] = pixels[index]
            masks[window] = np.where(pixels[index][..., 0] >= ink_threshold, labels[index] + 1, 0)
    return _scaled(canvases, pixel_scale, pixel_offset), masks


def _resized_digits(table, size):
    """The 32-pixel digits of a source's `table` at `size` pixels (uint8, area
    averaging when smaller), and their labels."""
    import tensorflow as tf

    images = table["image"]
    if images.shape[1:3] != (size, size):
        images = tf.image.resize(tf.cast(images, tf.float32), (size, size), method="area",
                                 antialias=True).numpy()
        images = np.clip(np.round(images), 0, 255).astype(np.uint8)
    return images, np.asarray(table["label"], np.int64)


def _scaled(pixels, scale, offset):
    """Pixels in [0, 255] as `keras_vit.data.preprocessing.normalize` makes a
    model's input."""
    if scale is None and offset is None:
        return (pixels / 127.5 - 1.0).astype(np.float32)  # vit_jax's arithmetic
    scale = 1 / 127.5 if scale is None else np.asarray(scale, np.float32)
    offset = -1.0 if offset is None else np.asarray(offset, np.float32)
    return (pixels * scale + offset).astype(np.float32)
