"""Per-image preprocessing of the paper's code (vit_jax `input_pipeline.py`).

Pixels go to [-1, 1] as ``image / 127.5 - 1``. Training crops a random box
(``tf.image.stateless_sample_distorted_bounding_box``: aspect ratio in
(3/4, 4/3), area in (0.08, 1) for the Inception crop of pre-training, (0.05, 1)
for vit_jax's fine-tuning crop), resizes it (bilinear) and flips it at random;
evaluation resizes the whole image (bilinear). Every random op is stateless
and takes its key as an argument, so a given key always gives the same image.
"""

import os
import re

import numpy as np
import tensorflow as tf

from keras_vit.config import pair

PREPROCESSING = ("inception", "finetune", "resize")
AREA_RANGES = {"inception": (0.08, 1.0), "finetune": (0.05, 1.0)}
ASPECT_RATIO_RANGE = (3 / 4, 4 / 3)

# What iterating a pipeline raises for an image it cannot decode.
DecodeError = tf.errors.InvalidArgumentError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")


# What a whole file of each format ends with; a file cut short (an
# interrupted copy or download) lacks it. Trailing bytes after it are allowed.
_END_MARKERS = {b"\xff\xd8\xff": b"\xff\xd9", b"\x89PNG\r\n\x1a\n": b"IEND\xaeB`\x82", b"GIF8": b";"}
_TAIL = 4096


def check_image_file(path):
    """Raises an error naming `path` unless it is a file that starts as a
    JPEG, PNG, GIF or BMP file does and is whole.

    Whole: its format's end marker (a JPEG's FF D9, a PNG's IEND chunk, a
    GIF's trailer) is in its last 4 KiB, or a BMP is as long as its header
    says. A file without it (a truncated copy, or a JPEG followed by other
    data, as motion photos are) is decoded to decide. Reading two small
    pieces of each file keeps this cheap enough to run on a whole folder
    before training, so a broken file is refused before any work, not found
    hours into a run.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: it is not a readable image of these formats.
    """
    try:
        with open(path, "rb") as file:
            head = file.read(8)
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - _TAIL))
            tail = file.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"Image file {path} does not exist.") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder, not an image file.") from None
    except OSError as err:
        raise ValueError(f"Cannot read image file {path}: {err}") from err
    if not head.startswith(_SIGNATURES):
        raise ValueError(
            f"{path} is not a JPEG, PNG, GIF or BMP image (it starts with {head!r}). "
            "Convert it to one of these formats or remove it."
        )
    if head.startswith(b"BM"):
        whole = len(head) >= 6 and size >= int.from_bytes(head[2:6], "little")
    else:
        end = next(marker for start, marker in _END_MARKERS.items() if head.startswith(start))
        whole = end in tail
    why = None if whole else decode_failure(path)
    if why is not None:
        raise ValueError(
            f"Cannot decode image file {path}: it is cut short or damaged ({why}). "
            "Replace it with a whole copy, or remove it."
        )


def decode_failure(path):
    """Why TensorFlow cannot decode the image file `path` (`op_message`),
    or None when it can: the whole file is decoded."""
    try:
        decode_image(tf.io.read_file(path))
    except tf.errors.OpError as err:
        return op_message(err)
    return None


def op_message(error):
    """A TensorFlow op error's own words, without the graph node and op
    names around them."""
    message = re.sub(r"\{\{.*?\}\}\s*", "", error.message)
    return re.sub(r"\s*\[(Op|\[).*$", "", message, flags=re.S).strip().splitlines()[0]


def decode_image(contents):
    """Encoded JPEG/PNG/GIF/BMP bytes -> uint8 (H, W, 3): grayscale is
    repeated to RGB, alpha dropped, a GIF's first frame kept."""
    image = tf.io.decode_image(contents, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def to_rgb(image):
    """uint8 (H, W, C) with C = 1, 3 or 4 (static) -> (H, W, 3)."""
    channels = image.shape[-1]
    if channels == 1:
        return tf.image.grayscale_to_rgb(image)
    if channels == 4:
        return image[..., :3]
    if channels != 3:
        raise ValueError(
            f"Images must have 1, 3 or 4 channels (a static last dimension), got shape {image.shape}."
        )
    return image


def resize(image, size):
    """The evaluation preprocessing: uint8 or float (H, W, 3) -> float32
    `size` + (3,), bilinear, values still in [0, 255]."""
    return tf.image.resize(image, size, method="bilinear")


def crop_window(shape, key, area_range):
    """The random box of the training crops for an image of `shape` (H, W,
    C): area in `area_range` of the image's, aspect ratio in (3/4, 4/3)
    (`tf.image.stateless_sample_distorted_bounding_box`, as vit_jax).

    Returns int32 (offset_y, offset_x) and (height, width), each shape (2,).
    """
    begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.zeros([0, 0, 4], tf.float32),
        seed=tf.random.experimental.stateless_fold_in(key, 0),
        min_object_covered=0.0,
        aspect_ratio_range=ASPECT_RATIO_RANGE,
        area_range=area_range,
        use_image_if_no_bounding_boxes=True,
    )
    return begin[:2], crop_size[:2]


def random_crop(image, key, size, area_range, flip):
    """A random box of `area_range` of the image's area and aspect ratio in
    (3/4, 4/3) (`crop_window`), resized to `size` (bilinear), flipped
    left-right with probability 1/2 when `flip`. `key` is a stateless seed,
    shape (2,).

    Returns float32 `size` + (3,) in [0, 255].
    """
    begin, crop_size = crop_window(tf.shape(image), key, area_range)
    crop = tf.slice(image, tf.concat([begin, [0]], 0), tf.concat([crop_size, [-1]], 0))
    return _resize_and_flip(crop, key, size, flip)


def random_crop_encoded(contents, key, size, area_range, flip):
    """`random_crop` of an encoded image (a scalar string of JPEG, PNG, GIF
    or BMP bytes) that decodes only what it keeps when it can: a JPEG's crop
    window alone (`tf.io.decode_and_crop_jpeg`, its size read from the
    header); other formats are decoded whole, then cropped.

    The window is the one `random_crop` takes from the decoded image with
    the same key. The pixels are too, except that a JPEG with subsampled
    colour may differ by a few levels along the crop's edges (its colour is
    upsampled without the pixels outside).
    """

    def jpeg():
        begin, crop_size = crop_window(tf.io.extract_jpeg_shape(contents), key, area_range)
        crop = tf.io.decode_and_crop_jpeg(contents, tf.concat([begin, crop_size], 0), channels=3)
        return _resize_and_flip(crop, key, size, flip)

    def whole():
        return random_crop(decode_image(contents), key, size, area_range, flip)

    return tf.cond(tf.io.is_jpeg(contents), jpeg, whole)


def _resize_and_flip(crop, key, size, flip):
    crop.set_shape([None, None, 3])
    crop = resize(crop, size)
    if flip:
        crop = tf.image.stateless_random_flip_left_right(
            crop, seed=tf.random.experimental.stateless_fold_in(key, 1)
        )
    return crop


def normalize(images, scale=None, offset=None):
    """Pixels in [0, 255] as a model's input: ``images * scale + offset``
    (per channel where they are sequences); by default [-1, 1] as vit_jax
    does (a model's own: its ``pixel_scale`` and ``pixel_offset``)."""
    scale = 1 / 127.5 if scale is None else scale
    offset = -1.0 if offset is None else offset
    if scale == 1 / 127.5 and offset == -1.0:
        return images / 127.5 - 1.0  # vit_jax's arithmetic, to the bit
    return images * tf.constant(scale, tf.float32) + tf.constant(offset, tf.float32)


def read_images(paths, image_size=None, model=None):
    """Image files decoded and resized as evaluation does; for a NaFlex
    model, decoded at their own sizes and cut into its NaFlex sequences.

    Args:
        paths: a list of paths (or one path) to JPEG, PNG, BMP or GIF files
            of any size; grayscale and RGBA images are converted to RGB.
        image_size: int or (int, int). Output height and width; defaults
            to `model`'s.
        model: a `keras_vit.ViT` or None. Its recorded pixel scaling
            (``pixel_scale``, ``pixel_offset``: a keras-hub preset's image
            converter) is applied; None: the paper's [-1, 1].

    Returns:
        np.ndarray, float32 (n, height, width, 3): in [-1, 1], or scaled as
        `model` records. For a NaFlex `model` (``naflex=True``) and no
        `image_size`: `keras_vit.naflex_inputs` of the images at their own
        sizes and aspect ratios, at most ``model.max_num_patches`` patches each.

    A missing or undecodable file raises an error naming it.

    Examples:
        ```python
        import os

        import numpy as np
        import tensorflow as tf
        from keras_vit.data import read_images

        for name in ("cat", "dog"):                       # two small PNG files each
            os.makedirs(f"pets/{name}", exist_ok=True)
            for i in range(2):
                pixels = np.random.default_rng(i).integers(0, 256, (40, 48, 3), dtype=np.uint8)
                tf.io.write_file(f"pets/{name}/{i}.png", tf.io.encode_png(pixels))

        images = read_images(["pets/cat/0.png", "pets/dog/1.png"], image_size=32)
        print(tuple(images.shape), images.dtype)            # -> (2, 32, 32, 3) float32
        print(tuple(read_images("pets/cat/0.png", (24, 32)).shape))  # -> (1, 24, 32, 3)
        ```
    """
    if image_size is None and model is None:
        raise ValueError("read_images() needs an image_size, or a model to take it from.")
    scaling = (getattr(model, "pixel_scale", None), getattr(model, "pixel_offset", None))
    images = read_pixels(paths, "read_images()")
    if image_size is None and getattr(model, "naflex", False):
        from keras_vit.naflex import naflex_inputs

        return naflex_inputs(images, model.patch_size, model.max_num_patches, *scaling)
    size = pair(model.image_size if image_size is None else image_size, "image_size")
    return np.stack([normalize(resize(image, size), *scaling).numpy() for image in images])


def read_pixels(paths, caller="read_pixels()"):
    """Image files decoded as `read_images` decodes them, at their own sizes:
    a list of uint8 arrays ``(height, width, 3)`` (what an artifact exported
    with ``preprocessing=True`` takes). A missing or undecodable file raises
    an error naming it."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(path) for path in paths]
    if not paths:
        raise ValueError(f"{caller} got no paths; pass a list of image files.")
    images = []
    for path in paths:
        check_image_file(path)
        try:
            images.append(decode_image(tf.io.read_file(path)).numpy())
        except tf.errors.OpError as err:
            raise ValueError(f"Cannot decode image file {path}: {op_message(err)}") from err
    return images
