"""The artifact a deployer serves: images in, classes out (``ViT.export(...,
preprocessing=True)``).

`serving_model` wraps a ViT in a functional model whose one input,
``images``, is uint8 ``(batch, height, width, 3)`` at any height and width
(one size per batch). In the graph the images are resized to the model's
image size as `keras_vit.data.read_images` resizes them (TensorFlow's
bilinear resize: half-pixel centres, no antialias) and scaled by the
model's ``pixel_scale`` and ``pixel_offset``; the outputs are ``logits``
and ``probabilities`` (their softmax). The resize is TensorFlow's kernel
written in `keras.ops` gathers (`ServingPreprocessing`), which every
exporter traces with a free height and width, reads no shape as a number,
and costs O(output) whatever the photo's size.
"""

import pathlib
import tempfile

import keras
import numpy as np
from keras import ops

from keras_vit.config import pair
from keras_vit.export import metadata
from keras_vit.export import pytorch
from keras_vit.extras import require

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


def check_request(model, preprocessing, dynamic_image_size, input_signature):
    """Refuses, naming the fix, an export with `preprocessing` that
    `model` cannot serve, and `dynamic_image_size` (not built yet)."""
    for name, value in (("preprocessing", preprocessing), ("dynamic_image_size", dynamic_image_size)):
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be True or False, got {value!r}.")
    if dynamic_image_size:
        raise ValueError(
            "dynamic_image_size=True is not available yet: the artifact takes the model's one "
            "image size. Export `model.with_image_size((height, width))` for another size, or "
            "export with preprocessing=True, which takes images of any size and resizes them "
            "to the model's.")
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


def input_signature():
    """The artifact's one input: uint8 ``images`` ``(batch, H, W, 3)``, all free."""
    return [keras.InputSpec(shape=(None, None, None, 3), dtype="uint8", name="images")]


def serving_model(model, as_list=False):
    """`model` (a `keras_vit.ViT` with a head) behind `ServingPreprocessing`:
    a functional model ``images -> {"logits", "probabilities"}`` (a list in
    that order with `as_list`, for exporters that take no dict), float32
    outputs whatever the model's dtype policy."""
    c = model.config
    images = keras.Input((None, None, 3), dtype="uint8", name="images")
    x = ServingPreprocessing(c.image_size, c.pixel_scale, c.pixel_offset, c.data_format,
                             name="preprocessing")(images)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(model(x))
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    outputs = [logits, probabilities] if as_list else dict(zip(OUTPUTS, (logits, probabilities)))
    return keras.Model(images, outputs, name=f"{model.name}_serving")


def export(model, filepath, format, verbose=None, **kwargs):
    """Writes `model`'s serving artifact (`serving_model`) to `filepath` in
    `format`, traced by the backend's exporter with a free batch, height and
    width; on PyTorch with PyTorch's own exporters (`keras_vit.export.pytorch`),
    OpenVINO through its ONNX; a SavedModel with a second signature for
    encoded images (`saved_model`). Call it within
    `keras_vit.kernels.keras_layers_only`."""
    served = serving_model(model)
    if format == "tf_saved_model" and keras.backend.backend() in ("tensorflow", "jax"):
        return saved_model(served, filepath, model.config.num_classes, verbose, **kwargs)
    if keras.backend.backend() != "torch" or format == "litert":
        return keras.Model.export(served, filepath, format=format, verbose=verbose,
                                  input_signature=input_signature(), **kwargs)
    if format == "torch":
        return pytorch.torch_program(served, filepath, input_signature(),
                                     extra_files=metadata.torch_extra_files(model, True))
    if format == "onnx":
        return pytorch.torch_onnx(served, filepath, input_signature(), output_names=list(OUTPUTS),
                                  verbose=bool(verbose), **kwargs)
    # OpenVINO through PyTorch's ONNX: Keras's own route (torch.jit's trace, converted by OpenVINO)
    # fails on this model ("a Tensor without names").
    for module in ("onnx", "onnxscript"):
        require(module, "An export to openvino from torch with preprocessing", extra="export")
    openvino = require("openvino", "An export to openvino", extra="export")
    with tempfile.TemporaryDirectory(prefix="keras_vit_serving_") as work:
        source = pathlib.Path(work) / "served.onnx"
        pytorch.torch_onnx(served, source, input_signature(), output_names=list(OUTPUTS),
                           verbose=bool(verbose), **kwargs)
        openvino.save_model(openvino.convert_model(str(source)), str(filepath), compress_to_fp16=False)


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
