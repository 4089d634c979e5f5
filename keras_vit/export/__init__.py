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

# The keyword arguments each export route uses beyond `ViT.export`'s own, by (format, backend),
# as Keras 3.15 passes them on; None: any (LiteRT's converter checks its own). An int8 export
# passes them to its float32 ONNX export. Every other argument would be dropped without a
# word, so `check_arguments` refuses it by name.
ROUTE_ARGUMENTS = {
    ("tf_saved_model", "jax"): ("is_static", "jax2tf_kwargs"),
    ("openvino", "jax"): ("is_static", "jax2tf_kwargs"),
    ("onnx", "tensorflow"): ("opset_version",),
    ("onnx", "jax"): ("opset_version",),
    ("onnx", "torch"): ("opset_version",),
    ("litert", "tensorflow"): None,
    ("litert", "torch"): None,
}


def check_arguments(format, backend, quantize, kwargs):
    """Raises a TypeError naming each of `kwargs` that the export route of
    `format` from `backend` (its float32 ONNX export for an int8 one) does
    not use (`ROUTE_ARGUMENTS`), and the ones it does."""
    route = ("onnx", backend) if quantize is not None else (format, backend)
    takes = ROUTE_ARGUMENTS.get(route, ())
    unused = [] if takes is None else sorted(set(kwargs) - set(takes))
    if unused:
        others = f"it takes {', '.join(takes)} besides ViT.export's own" if takes else "it takes no other"
        raise TypeError(f"An export to {format} from {backend} does not use {', '.join(unused)}: {others} "
                        "argument. Nothing was exported.")


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
    format's own library: an ``.onnx``, ``.xml`` (OpenVINO), ``.pt2`` or
    ``.tflite`` file, or a SavedModel folder (`keras_vit.export.metadata`)."""
    from keras_vit.export import metadata

    return metadata.artifact_info(path)["class_names"]


def artifact_info(path):
    """The whole record an exported artifact carries: ``{"class_names":
    ..., "keras_vit": {image size, pixel scaling, preprocessing, inputs,
    outputs}}`` (`keras_vit.export.metadata.artifact_info`)."""
    from keras_vit.export import metadata

    return metadata.artifact_info(path)
