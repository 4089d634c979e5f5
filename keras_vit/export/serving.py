"""The artifact a deployer serves: images in, classes out (``ViT.export(...,
preprocessing=True)``).

`serving_model` wraps a ViT in a functional model whose one input,
``images``, is uint8 ``(batch, height, width, 3)`` at any height and width
(one size per batch). In the graph the images are resized to the model's
image size as `keras_vit.data.read_images` resizes them (TensorFlow's
bilinear resize: half-pixel centres, no antialias) and scaled by the
model's ``pixel_scale`` and ``pixel_offset``; the outputs are ``logits``
and ``probabilities`` (their softmax, or the sigmoid of a model whose
``head_activation`` is ``"sigmoid"``). The resize is TensorFlow's kernel
written in `keras.ops` (`ServingPreprocessing`), which every exporter
traces with a free height and width and which reads no shape as a number.

`dynamic_model` (``ViT.export(..., dynamic_image_size=True)`` without
preprocessing) takes the model's float images at any height and width,
multiples of the patch size: the position embeddings are resampled in the
graph to each batch's patch grid (`AnyImageSize`), as
``model.with_image_size((height, width))`` resamples them.
"""


import keras
import numpy as np
from keras import ops

from keras_vit.config import pair
from keras_vit.export.routes import FEATURES
from keras_vit.layers.position_embedding import RESAMPLE_METHODS

OUTPUTS = ("logits", "probabilities")  # the artifact's outputs, in the order exporters flatten them


def _interpolation(x, axis, size):
    """TensorFlow's half-pixel bilinear resize along `axis` (1: rows, 2:
    columns) of `x` (batch, H, W, C) to `size`, as a matrix float32
    ``(size, H)`` (or ``(size, W)``): each output row holds the weights of
    its lower and upper source pixel (TF's ``HalfPixelScaler``: source
    ``(o + 0.5) * in / out - 0.5``, indices clamped to the image). The
    input's length and positions are counted from its values (sums of
    ones), never read from its shape, so exporters keep it free; summed
    over the batch, so an empty batch has them too."""
    probe = x[:, :, 0, 0] if axis == 1 else x[:, 0, :, 0]
    ones = ops.sum(ops.zeros_like(probe), axis=0) + 1.0
    positions = ops.cumsum(ones) - 1.0
    length = ops.sum(ones)
    centres = ops.convert_to_tensor(np.arange(size, dtype="float32") + 0.5)
    source = centres * (length / size) - 0.5
    lower = ops.maximum(ops.floor(source), 0.0)
    upper = ops.minimum(ops.maximum(ops.ceil(source), 0.0), length - 1.0)
    weight = (source - ops.floor(source))[:, None]
    at = lambda index: ops.cast(ops.equal(positions[None, :], index[:, None]), "float32")  # noqa: E731
    return at(lower) * (1.0 - weight) + at(upper) * weight


class ServingPreprocessing(keras.layers.Layer):
    """uint8 pixels ``(batch, H, W, 3)`` of any H and W -> the model's float
    input at `image_size`: `keras_vit.data.read_images`' resize (bilinear,
    half-pixel centres, no antialias, the width interpolated first, as
    TensorFlow's kernel does) and scaling (``pixels * pixel_scale +
    pixel_offset``; ``pixels / 127.5 - 1`` for the paper's [-1, 1], to the
    bit), channels first where `data_format` says so.

    Output shape: ``(batch, height, width, 3)`` float32, or ``(batch, 3,
    height, width)``.
    """

    def __init__(self, image_size, pixel_scale=1 / 127.5, pixel_offset=-1.0,
                 data_format="channels_last", **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self.image_size = pair(image_size, "image_size")
        self.pixel_scale, self.pixel_offset = pixel_scale, pixel_offset
        self.data_format = data_format

    def call(self, images):
        x = ops.cast(images, "float32")
        height, width = self.image_size
        x = ops.einsum("ih,bhwc->biwc", _interpolation(x, 1, height), x)
        x = ops.einsum("jw,biwc->bijc", _interpolation(x, 2, width), x)
        if self.pixel_scale == 1 / 127.5 and self.pixel_offset == -1.0:
            x = x / 127.5 - 1.0
        else:
            scale, offset = (ops.convert_to_tensor(np.asarray(value, "float32"))  # tensors first:
                             for value in (self.pixel_scale, self.pixel_offset))  # ndarray * torch misbehaves
            x = x * scale + offset
        return ops.transpose(x, (0, 3, 1, 2)) if self.data_format == "channels_first" else x

    def compute_output_shape(self, input_shape):
        height, width = self.image_size
        if self.data_format == "channels_first":
            return (input_shape[0], input_shape[-1], height, width)
        return (input_shape[0], height, width, input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "image_size": self.image_size, "pixel_scale": self.pixel_scale,
                "pixel_offset": self.pixel_offset, "data_format": self.data_format}


class AnyImageSize(keras.layers.Layer):
    """A `keras_vit.ViT` on float images of any height and width, multiples
    of its patch size (one size per batch): its position embeddings
    resampled in the graph to the batch's patch grid by `resample_method`,
    or rotary ones turned on it (``ViT.call``'s ``resample_method``), so
    that it gives what
    ``model.with_image_size((height, width), method=resample_method)``
    gives. Made for an export (`dynamic_model`), not for saving.

    Input shape: ``(batch, H, W, C)`` (or ``(batch, C, H, W)``).
    Output shape: the model's, for the batch's patch grid.
    """

    def __init__(self, model, resample_method="bilinear", **kwargs):
        super().__init__(dtype=model.dtype_policy, **kwargs)
        self.model = model
        self.resample_method = resample_method

    def call(self, images):
        return self.model.call(images, resample_method=self.resample_method)

    def compute_output_shape(self, input_shape):
        shape = self.model.output.shape
        tokens = (None,) if self.model.config.pooling == "none" else ()  # the sequence's length varies
        return (input_shape[0], *tokens, *shape[1 + len(tokens):])


def check_request(model, preprocessing, dynamic_image_size, input_signature, resample_method="bilinear"):
    """Refuses, naming the fix, an export with `preprocessing` or
    `dynamic_image_size` that `model` cannot serve, whatever its format
    (what a format or its exporter cannot take is its record's:
    `keras_vit.export.routes.check`)."""
    for name, value in (("preprocessing", preprocessing), ("dynamic_image_size", dynamic_image_size)):
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be True or False, got {value!r}.")
    if resample_method not in RESAMPLE_METHODS:
        raise ValueError(f"resample_method={resample_method!r} is not one of {RESAMPLE_METHODS} "
                         "(how `with_image_size` resamples the position embeddings).")
    if resample_method != "bilinear" and not (dynamic_image_size and not preprocessing):
        raise ValueError(
            f"resample_method={resample_method!r} is used by dynamic_image_size=True without "
            "preprocessing, where the position embeddings are resampled in the graph; this export "
            "takes the model's own size. Leave resample_method out.")
    if dynamic_image_size and not preprocessing:
        _check_dynamic(model, input_signature)
    if not preprocessing:
        return
    c = model.config
    if c.naflex:
        raise ValueError(
            f"{model.name} is a NaFlex model: it takes patch sequences, not resized images, so "
            "preprocessing=True has nothing to resize to. Export it without preprocessing "
            "(its dict of inputs), or export the fixed-size model with preprocessing: "
            "`model.with_config(naflex=False, max_num_patches=None)`.")
    if not c.num_classes or c.pooling == "none":
        raise ValueError(
            f"{model.name} has no classification head (num_classes={c.num_classes}, "
            f"pooling={c.pooling!r}): preprocessing=True exports classes and probabilities. "
            "Export it without preprocessing, or give it a head first.")
    if c.num_channels != 3:
        raise ValueError(f"{model.name} takes {c.num_channels} channels: preprocessing=True takes "
                         "RGB images (3 channels). Export it without preprocessing.")
    if input_signature is not None:
        raise ValueError("preprocessing=True fixes the artifact's input (uint8 images, any size): "
                         "leave input_signature out.")


def _check_dynamic(model, input_signature):
    """Refuses, naming the fix, ``dynamic_image_size=True`` without
    preprocessing for a model whose grid cannot vary in the graph."""
    c = model.config
    fixed = FEATURES["dynamic_image_size"].otherwise
    if c.naflex:
        raise ValueError(
            f"{model.name} is a NaFlex model: it takes images of any size already, as NaFlex "
            "sequences (its dict of inputs). Export it without dynamic_image_size.")
    if c.resnet_block_units is not None:
        raise ValueError(
            f"{model.name} is a hybrid (ResNet + ViT): dynamic_image_size=True resamples the "
            f"position embeddings of a patch grid cut from pixels. {fixed}")
    if c.merges_tokens:
        raise ValueError(
            f"{model.name} merges tokens (token_merging={c.token_merging!r}), and how many each "
            "block merges away is fixed by the sequence's length, which dynamic_image_size=True "
            f"leaves free. {fixed}")
    if input_signature is not None:
        raise ValueError("dynamic_image_size=True fixes the artifact's input (float images, any "
                         "height and width): leave input_signature out.")


def input_signature(model=None):
    """The artifact's one input, ``images``: uint8 ``(batch, H, W, 3)``, all
    free (preprocessing inside); with `model`, its float images of a free
    height and width (`dynamic_model`)."""
    if model is None:
        return [keras.InputSpec(shape=(None, None, None, 3), dtype="uint8", name="images")]
    channels = model.config.num_channels
    shape = (None, channels, None, None) if model.config.data_format == "channels_first" else (
        None, None, None, channels)
    return [keras.InputSpec(shape=shape, dtype="float32", name="images")]


def spatial_axes(model):
    """The image input's (height, width) axes."""
    return (2, 3) if model.config.data_format == "channels_first" else (1, 2)


def dynamic_model(model, resample_method="bilinear"):
    """`model` (a `keras_vit.ViT`) as a functional model that takes its
    float images at any height and width, multiples of its patch size
    (`AnyImageSize`): its outputs, those of ``model.with_image_size((H,
    W), method=resample_method)``."""
    c = model.config
    shape = input_signature(model)[0].shape[1:]
    images = keras.Input(shape, name="images")
    outputs = AnyImageSize(model, resample_method, name=model.name)(images)
    return keras.Model(images, outputs, name=f"{model.name}_any_size")


def serving_model(model, as_list=False):
    """`model` (a `keras_vit.ViT` with a head) behind `ServingPreprocessing`:
    a functional model ``images -> {"logits", "probabilities"}`` (the
    softmax or sigmoid of the logits, by its ``head_activation``; a list in
    that order with `as_list`, for exporters that take no dict), float32
    outputs whatever the model's dtype policy."""
    c = model.config
    images = keras.Input((None, None, 3), dtype="uint8", name="images")
    x = ServingPreprocessing(c.image_size, c.pixel_scale, c.pixel_offset, c.data_format,
                             name="preprocessing")(images)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(model(x))
    probabilities = keras.layers.Activation(c.head_activation, dtype="float32",
                                            name="probabilities")(logits)
    outputs = [logits, probabilities] if as_list else dict(zip(OUTPUTS, (logits, probabilities)))
    return keras.Model(images, outputs, name=f"{model.name}_serving")


def saved_model(served, filepath, num_classes, verbose=None, **kwargs):
    """Writes `served` (`serving_model`) as a SavedModel with two signatures,
    through Keras's ``ExportArchive`` (on JAX through jax2tf, `kwargs` its
    ``is_static`` and ``jax2tf_kwargs``):

    - ``serve`` (also ``serving_default``): uint8 ``images`` ``(batch, H, W,
      3)``, as every format takes them;
    - ``serving_encoded``: ``images``, a batch of encoded JPEG, PNG, GIF or
      BMP files (tf.string ``(batch,)``, TF Serving's ``{"b64": ...}``),
      each decoded to RGB as `keras_vit.data.read_images` decodes a file
      (`keras_vit.data.preprocessing.decode_image`) and run through
      ``serve`` alone, so the images of a batch may differ in size.

    Both return ``{"logits", "probabilities"}``, float32 ``(batch,
    num_classes)``."""
    import tensorflow as tf

    from keras_vit.data.preprocessing import decode_image

    archive = keras.export.ExportArchive()
    serve = archive.track_and_add_endpoint("serve", served, input_signature(), **kwargs)
    spec = {name: tf.TensorSpec((num_classes,), tf.float32) for name in OUTPUTS}

    def one(contents):
        outputs = serve(decode_image(contents)[None])
        return {name: outputs[name][0] for name in OUTPUTS}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")], autograph=False)
    def serving_encoded(images):
        return tf.map_fn(one, images, fn_output_signature=spec)

    serving_encoded.get_concrete_function()  # traced once: add_endpoint takes a traced tf.function
    archive.add_endpoint("serving_encoded", serving_encoded)
    archive.write_out(filepath, verbose=True if verbose is None else verbose)
