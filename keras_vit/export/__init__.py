"""`ViT.export`'s routes beyond Keras's own: PyTorch's ONNX and ``.pt2``
exporters (`pytorch`), and int8 ONNX and OpenVINO models quantized with
onnxruntime's tools (`int8`)."""

from keras_vit.extras import require

# The file each export format writes: its path must end so (`ViT.export`, `keras-vit export`).
EXPORT_SUFFIXES = {"onnx": (".onnx",), "openvino": (".xml",), "litert": (".tflite",), "torch": (".pt2",)}

# What each export route needs beyond Keras and its backend, by format; ONNX by backend too,
# each backend having its own exporter. An int8 export is an ONNX export quantized with
# onnxruntime's tools (`keras_vit.export.int8`).
ROUTE_NEEDS = {
    "onnx": {"tensorflow": ("onnx", "tf2onnx"), "jax": ("onnx", "jax2onnx"), "torch": ("onnx", "onnxscript")},
    "openvino": ("openvino",),
    "tf_saved_model": ("tensorflow",),
    "litert": ("tensorflow",),
}
INT8_NEEDS = ("onnxruntime",)


def require_route(format, backend, quantize=None):
    """Checks that what an export to `format` from `backend` (quantized as
    `quantize`, or float32 for None) needs is installed, before anything
    is exported.

    Raises:
        keras_vit.extras.MissingDependency: naming the first module missing
            and its extra (``export``; ``tensorflow`` for TensorFlow).
    """
    def needs(route):
        found = ROUTE_NEEDS.get(route, ())
        return found.get(backend, ()) if isinstance(found, dict) else found

    modules = needs(format) if quantize is None else (*needs("onnx"), *INT8_NEEDS, *needs(format))
    for module in dict.fromkeys(modules):
        require(module, f"An export to {format} from {backend}",
                extra="tensorflow" if module == "tensorflow" else None)


def class_names(path):
    """The class names an artifact that `keras_vit.ViT.export` wrote carries
    (a list of str, or None where the model had none), read with the
    format's own library: an ``.onnx``, ``.xml`` (OpenVINO) or ``.pt2`` file,
    or a SavedModel folder (`keras_vit.export.metadata`)."""
    from keras_vit.export import metadata

    return metadata.artifact_info(path)["class_names"]


def artifact_info(path):
    """The whole record an exported artifact carries: ``{"class_names":
    ..., "keras_vit": {image size, pixel scaling, preprocessing, inputs,
    outputs}}`` (`keras_vit.export.metadata.artifact_info`)."""
    from keras_vit.export import metadata

    return metadata.artifact_info(path)
