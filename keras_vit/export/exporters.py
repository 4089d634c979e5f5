"""`ViT.export` (`export`): the request checked against its route's record
(`keras_vit.export.routes`), the model traced by the exporter the record
names for the backend (the functions below, each taking one `Job`), and
the record the artifact carries written by the route's metadata writer.

An int8 export is its route's float32 ONNX export quantized
(`keras_vit.export.int8`); a route whose exporter goes ``through`` another
is that route's file converted (`openvino_from_onnx`).
"""

import dataclasses
import pathlib
import tempfile

import keras

from keras_vit import kernels
from keras_vit.export import int8
from keras_vit.export import metadata
from keras_vit.export import pytorch
from keras_vit.export import routes
from keras_vit.export import serving
from keras_vit.extras import require
from keras_vit.io import files


@dataclasses.dataclass(frozen=True)
class Job:
    """One float32 export, as its exporter takes it.

    Attributes:
        model: the `keras_vit.ViT` exported.
        format: the route's name (Keras's ``format``).
        path: where the artifact goes.
        served: the Keras model traced: `model`, or
            `keras_vit.export.serving.serving_model` /
            `keras_vit.export.serving.dynamic_model` of it.
        signature: its ``input_signature``.
        verbose: ``ViT.export``'s.
        kwargs: the exporter's own arguments (`keras_vit.export.routes.Route.arguments`).
        preprocessing: whether the preprocessing is inside.
        dynamic: whether the image size is free without preprocessing.
        output_names: the outputs' names where the exporter takes them, or None.
        multiples: None, or {axis: int}: free axes that are multiples of it.
    """

    model: object
    format: str
    path: object
    served: object
    signature: list
    verbose: object
    kwargs: dict
    preprocessing: bool = False
    dynamic: bool = False
    output_names: list | None = None
    multiples: dict | None = None


def export(model, filepath, format=None, verbose=None, input_signature=None, quantize=None,
           calibration_images=None, *, preprocessing=False, dynamic_image_size=False, resample_method="bilinear",
           **kwargs):
    """`keras_vit.ViT.export`: checks the request (the route's arguments,
    the model, int8's mode and images, the route's refusals, what it needs
    installed), then writes the artifact, in int8 or float32, and
    its record. `format` None is Keras's default (`keras_vit.export.routes.DEFAULT_FORMAT`)."""
    format = routes.DEFAULT_FORMAT if format is None else format
    backend = keras.backend.backend()
    routes.check_arguments(format, backend, quantize, kwargs)
    serving.check_request(model, preprocessing, dynamic_image_size, input_signature, resample_method)
    dynamic = dynamic_image_size and not preprocessing  # with preprocessing: resized to the model's
    images = int8.check_request(model, format, quantize, calibration_images, preprocessing)
    request = routes.Request(model.config, preprocessing, dynamic, quantize, calibration_images is not None)
    routes.check(format, backend, request, model.name)
    routes.require_route(format, backend, quantize)  # imported once the request is known to have a route
    if quantize is not None:
        int8.export_int8(model, filepath, format, images, verbose=bool(verbose), input_signature=input_signature,
                         preprocessing=preprocessing, dynamic_image_size=dynamic, resample_method=resample_method,
                         **kwargs)
    else:
        chosen = routes.route(format)
        if chosen.suffix:  # a file of that format, in a folder that exists
            files.output_file(filepath, "export path", (chosen.suffix,))
        with kernels.keras_layers_only():
            write(_job(model, filepath, format, verbose, input_signature, preprocessing, dynamic, resample_method,
                       kwargs))
    metadata.write(filepath, format, model, preprocessing, outputs=serving.OUTPUTS if preprocessing else None,
                   dynamic_image_size=dynamic)


def _job(model, path, format, verbose, input_signature, preprocessing, dynamic, resample_method, kwargs):
    """The `Job` of a float32 export: with `preprocessing` the serving model
    (uint8 images of any size in, logits and probabilities out), with
    `dynamic` the model on float images of free height and width (multiples
    of the patch size), else the model on `input_signature` (its own by
    default, `keras_vit.ViT.export_signature`)."""
    signature = model.export_signature() if input_signature is None else input_signature
    job = Job(model, format, path, model, signature, verbose, dict(kwargs))
    if preprocessing:
        return dataclasses.replace(job, served=serving.serving_model(model), signature=serving.input_signature(),
                                   preprocessing=True, output_names=list(serving.OUTPUTS))
    if dynamic:
        return dataclasses.replace(job, served=serving.dynamic_model(model, resample_method),
                                   signature=serving.input_signature(model), dynamic=True,
                                   multiples=dict(zip(serving.spatial_axes(model), model.config.patch_size)))
    return job


def write(job):
    """Writes `job`'s artifact with its route's exporter on this backend,
    or, for an exporter that goes through another route, that route's file
    converted (`keras_vit.export.routes.Route.convert`)."""
    chosen = routes.route(job.format)
    exporter = chosen.exporter(keras.backend.backend())
    if exporter.through is None:
        return globals()[exporter.function](job)  # a function of this module (`Exporter.function`)
    source_route = routes.route(exporter.through)
    with tempfile.TemporaryDirectory(prefix="keras_vit_export_") as work:
        source = pathlib.Path(work) / f"through{source_route.suffix}"
        write(dataclasses.replace(job, format=source_route.name, path=source))
        chosen.convert(source, job.path)


def keras_export(job):
    """Keras's own ``model.export``. On JAX, which traces through jax2tf, a
    free image size is declared as multiples of the patch size
    (`_symbolic_shape`) unless ``jax2tf_kwargs`` say otherwise."""
    kwargs = dict(job.kwargs)
    if job.dynamic and keras.backend.backend() == "jax":
        jax2tf = dict(kwargs.pop("jax2tf_kwargs", None) or {})
        jax2tf.setdefault("polymorphic_shapes", ["(" + ", ".join(_symbolic_shape(job.model)) + ")"])
        kwargs["jax2tf_kwargs"] = jax2tf
    return keras.Model.export(job.served, job.path, format=job.format, verbose=job.verbose,
                              input_signature=job.signature, **kwargs)


def _symbolic_shape(model):
    """The image input's shape for jax2tf: ``["batch", "8*h", "8*w", "3"]``
    for patches of 8, each side a multiple of the patch size."""
    c = model.config
    shape = ["batch", f"{c.patch_size[0]}*h", f"{c.patch_size[1]}*w"]
    return ([*shape[:1], str(c.num_channels), *shape[1:]] if c.data_format == "channels_first"
            else [*shape, str(c.num_channels)])


def saved_model(job):
    """A SavedModel: with the preprocessing inside, two signatures
    (`keras_vit.export.serving.saved_model`: uint8 images and encoded
    files); else Keras's own (`keras_export`)."""
    if job.preprocessing:
        return serving.saved_model(job.served, job.path, job.model.config.num_classes, job.verbose, **job.kwargs)
    return keras_export(job)


def torch_program(job):
    """A ``torch.export`` program with a symbolic batch (`keras_vit.export.pytorch.torch_program`),
    its record in its extra files."""
    return pytorch.torch_program(
        job.served, job.path, job.signature, multiples=job.multiples,
        extra_files=metadata.torch_extra_files(job.model, job.preprocessing, job.dynamic))


def torch_onnx(job):
    """ONNX by PyTorch's dynamo exporter with a symbolic batch (`keras_vit.export.pytorch.torch_onnx`)."""
    return pytorch.torch_onnx(job.served, job.path, job.signature, output_names=job.output_names,
                              verbose=bool(job.verbose), multiples=job.multiples, **job.kwargs)


def openvino_from_onnx(source, path):
    """The ONNX file `source` converted by OpenVINO and written at `path`
    (the ``.xml``, and the ``.bin`` beside it), its constants float32."""
    openvino = require("openvino", "An export to OpenVINO", extra="export")
    openvino.save_model(openvino.convert_model(str(source)), str(path), compress_to_fp16=False)
