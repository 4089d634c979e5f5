"""`ViT.export`'s routes, one record per format (`routes`), and the work
beyond Keras's own exporters: PyTorch's ONNX and ``.pt2`` exporters
(`pytorch`), the artifact with its preprocessing inside or of any image
size (`serving`), int8 ONNX and OpenVINO models quantized with
onnxruntime's tools (`int8`), the record every artifact carries
(`metadata`) and each artifact run in its own runtime (`runtime`)."""

from keras_vit.export.routes import require_route  # what a route needs, checked before it runs


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
