"""`ViT.export`'s routes beyond Keras's own: PyTorch's ONNX and ``.pt2``
exporters (`pytorch`), and int8 ONNX and OpenVINO models quantized with
onnxruntime's tools (`int8`)."""

# The file each export format writes: its path must end so (`ViT.export`, `keras-vit export`).
EXPORT_SUFFIXES = {"onnx": (".onnx",), "openvino": (".xml",), "litert": (".tflite",), "torch": (".pt2",)}
