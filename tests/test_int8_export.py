"""Int8 exports for a CPU (`ViT.export(..., quantize="int8")`,
`keras_vit.export.int8`): onnxruntime's dynamic and static
quantization and OpenVINO's int8 model keep the float32 model's classes on
every backend, bad requests are refused before anything is written, a failed
quantization leaves the path as it was, and `keras-vit export --quantize
int8 --calibration` calibrates on a dataset."""

import os
import re

import keras
import numpy as np
import onnx
import pytest
from conftest import digits
from helpers import TINY
from helpers import to_numpy

from keras_vit import ViT
from keras_vit.export import int8

BACKEND = keras.backend.backend()
CALIBRATION = 256  # training digits the static exports are calibrated on


def run_onnx(path, images, output=None):
    """The ONNX file's first output on `images`, or the one named `output`."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None if output is None else [output], {session.get_inputs()[0].name: images})[0]


def run_openvino(path, images, output=None):
    """The OpenVINO model's first output on `images`, or the one named `output`."""
    import openvino

    # float32 for the parts that stay float, as Keras computes (docs/deploy.md)
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(images)[0 if output is None else compiled.output(output)]


def op_counts(path):
    counts = {}
    for node in onnx.load(path).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


@pytest.mark.slow
def test_int8_exports_keep_the_float_models_classes(trained_digits, tmp_path):
    """The demo's trained model exported from this backend: onnxruntime's
    dynamic and static (calibrated on 256 training digits) int8 ONNX and
    OpenVINO's int8 model give the float32 model's class on at least 99% of
    the 360 held-out digits, and lose at most 0.5 points of its accuracy.
    Each of the 24 projections (6 in each of 4 blocks) is int8; the head,
    the attention's products of two activations and the rest stay float."""
    model, (x, _), (x_test, y_test) = trained_digits
    full = to_numpy(model.predict(x_test, batch_size=len(x_test), verbose=0)).argmax(-1)
    float_accuracy = (full == y_test).mean()
    calibration = x[:CALIBRATION]
    routes = {"onnx dynamic": ("vit.onnx", "onnx", None, run_onnx),
              "onnx static": ("vit_static.onnx", "onnx", calibration, run_onnx),
              "openvino static": ("vit.xml", "openvino", calibration, run_openvino)}
    for route, (name, fmt, images, run) in routes.items():
        path = str(tmp_path / name)
        model.export(path, format=fmt, quantize="int8", calibration_images=images)
        classes = np.asarray(run(path, x_test)).argmax(-1)
        agreement, accuracy = (classes == full).mean(), (classes == y_test).mean()
        print(f"{BACKEND} {route}: top-1 agreement {agreement:.2%}, accuracy {accuracy:.2%} "
              f"(float32 {float_accuracy:.2%})")
        assert agreement >= 0.99, f"{route} agrees with float32 on {agreement:.1%} of the held-out digits"
        assert float_accuracy - accuracy <= 0.005, f"{route}: accuracy {accuracy:.3f}, float32 {float_accuracy:.3f}"
        if fmt == "onnx":
            counts = op_counts(path)
            quantized = counts.get("MatMulInteger", 0) if images is None else counts.get("QuantizeLinear", 0)
            assert (quantized, counts.get("DequantizeLinear", 0)) == (
                (24, 0) if images is None else (4 * 4 + 1, 4 * 4 + 1 + 24)), counts
    assert os.path.exists(tmp_path / "vit.bin") and sorted(os.listdir(tmp_path)) == [
        "vit.bin", "vit.onnx", "vit.xml", "vit_static.onnx"]  # no temporary file left


@pytest.mark.slow
def test_int8_with_preprocessing_takes_the_raw_digits(trained_digits, tmp_path):
    """``quantize="int8", preprocessing=True``: the artifact takes the held-out
    digits as they are stored (uint8, 32 px), resizes them to the model's
    16 px in the graph, and gives the float32 model's class (on
    `read_images`' preprocessing of the same pixels) on at least 99% of
    them: onnxruntime's dynamically quantized model, and OpenVINO's
    calibrated on the raw training digits."""
    import tensorflow as tf

    from keras_vit.data.sources import load_source
    from keras_vit.export import class_names

    model, _, (x_test, _) = trained_digits
    full = to_numpy(model.predict(x_test, batch_size=len(x_test), verbose=0)).argmax(-1)
    raw = next(iter(load_source("digits", "test").dataset.batch(2000)))["image"]
    assert raw.dtype == tf.uint8 and tuple(raw.shape[1:]) == (32, 32, 3)
    train = next(iter(load_source("digits", "train").dataset.batch(CALIBRATION)))["image"].numpy()
    for route, fmt, calibration, run in (("onnx dynamic", "onnx", None, run_onnx),
                                         ("openvino static", "openvino", train, run_openvino)):
        path = str(tmp_path / f"vit_int8.{'xml' if fmt == 'openvino' else fmt}")
        model.export(path, format=fmt, quantize="int8", preprocessing=True, calibration_images=calibration)
        probabilities = np.asarray(run(path, raw.numpy(), "probabilities"))
        agreement = (probabilities.argmax(-1) == full).mean()
        print(f"{BACKEND} int8 with preprocessing, {route}: top-1 agreement {agreement:.2%} on {len(full)} digits")
        assert agreement >= 0.99, (route, agreement)
        assert class_names(path) is None  # the digits model has none


@pytest.mark.skipif(BACKEND == "jax", reason="dynamic_image_size is not exported to ONNX from JAX "
                    "(jax2onnx cannot trace a sequence of free length; refused, tests/test_keras_features.py)")
@pytest.mark.slow
def test_int8_with_dynamic_image_size_keeps_with_image_sizes_classes(trained_digits, tmp_path):
    """``quantize="int8", dynamic_image_size=True``: one int8 ONNX file gives
    the float32 model's class on at least 99% of the held-out digits at its
    16 px, and ``with_image_size(24)``'s on at least 98% at 24 px."""
    model, _, (x_test, _) = trained_digits
    path = str(tmp_path / "vit_int8.onnx")
    model.export(path, format="onnx", quantize="int8", dynamic_image_size=True)
    for size, images, reference in ((16, x_test, model), (24, digits("test", 24)[0], model.with_image_size(24))):
        want = to_numpy(reference.predict(images, batch_size=len(images), verbose=0)).argmax(-1)
        agreement = (np.asarray(run_onnx(path, images)).argmax(-1) == want).mean()
        print(f"{BACKEND} int8 with dynamic_image_size at {size} px: top-1 agreement {agreement:.2%}")
        # at 24 px the float model is less sure of itself (resampled, not trained there): 99.17% on
        # PyTorch (3 of 360 digits) on an AVX-512 Zen 4/5 EPYC, so the bound leaves room for other CPUs
        assert agreement >= (0.99 if size == 16 else 0.98), (size, agreement)


def channels_first_model():
    return ViT(**TINY, data_format="channels_first")


# (arguments of export, images or a builder of them, the error, what its message names)
BAD = {
    "an unknown mode": (dict(format="onnx", quantize="int3"), None, ValueError,
                        "quantize='int3' is not offered: choose 'int8'"),
    "a mode that is not a string": (dict(format="onnx", quantize=True), None, TypeError,
                                    "quantize takes 'int8' or None, got True"),
    "a SavedModel": (dict(format="tf_saved_model", quantize="int8"), None, ValueError,
                     "format='tf_saved_model' has no int8 route: .* format='onnx'"),
    "LiteRT": (dict(format="litert", quantize="int8"), None, ValueError, "format='litert' has no int8 route"),
    "a torch program": (dict(format="torch", quantize="int8"), None, ValueError, "format='torch' has no int8 route"),
    "calibration without a mode": (dict(format="onnx"), "images", ValueError,
                                   "calibration_images calibrate an int8 export: pass quantize='int8'"),
    "OpenVINO without calibration": (dict(format="openvino", quantize="int8"), None, ValueError,
                                     "needs calibration_images: .* or export format='onnx'"),
    "images of another size": (dict(format="onnx", quantize="int8"), np.zeros((4, 16, 16, 3), "float32"),
                               ValueError, "was built for 32x32 images, got 16x16"),
    "images of one channel": (dict(format="onnx", quantize="int8"), np.zeros((4, 32, 32, 1), "float32"),
                              ValueError, "expects 3 channels"),
    "channels last for a channels_first model": (dict(format="onnx", quantize="int8"), "images", ValueError,
                                                 "expects 3 channels on axis 1"),
    "one image without a batch axis": (dict(format="onnx", quantize="int8"), np.zeros((32, 32, 3), "float32"),
                                       ValueError, "Add a batch axis"),
    "uint8 pixels": (dict(format="onnx", quantize="int8"), np.zeros((4, 32, 32, 3), "uint8"), ValueError,
                     "expects float images .*images / 127.5 - 1"),
    "float pixels in 0..255": (dict(format="onnx", quantize="int8"),
                               np.full((4, 32, 32, 3), 200.0, "float32"), ValueError,
                               r"span \[200, 200\], but .* takes images scaled to \[-1, 1\] .*read_images"),
    "no images": (dict(format="onnx", quantize="int8"), np.zeros((0, 32, 32, 3), "float32"), ValueError,
                  "calibration_images is empty"),
    "NaN": (dict(format="onnx", quantize="int8"), np.full((2, 32, 32, 3), np.nan, "float32"), ValueError,
            "NaN or infinite"),
    "file names": (dict(format="onnx", quantize="int8"), ["cat.png"], TypeError,
                   r"must be an array of images \(N, 32, 32, 3\), got a list.*read_images"),
}


@pytest.mark.backend_independent  # refused before anything is exported
@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_request_names_the_fix_and_writes_nothing(case, tmp_path):
    arguments, images, error, message = BAD[case]
    model = channels_first_model() if case.startswith("channels last") else ViT(**TINY)
    if isinstance(images, str):
        images = np.zeros((4, 32, 32, 3), "float32")
    path = tmp_path / ("vit.xml" if arguments["format"] == "openvino" else "vit.onnx")
    with pytest.raises(error, match=message):
        model.export(str(path), calibration_images=images, **arguments)
    assert os.listdir(tmp_path) == []


def matmul_onnx(path):
    """A float32 ONNX model of one product with a weight, ``(N, 4) -> (N, 3)``."""
    from onnx import TensorProto
    from onnx import helper
    from onnx import numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 3)).astype("float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["images", "w"], ["h"], name="fc"), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["logits"], name="head")], "g",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 2])],
        [weight, numpy_helper.from_array(np.ones((3, 2), "float32"), "w2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.backend_independent  # an ONNX file made here
def test_a_failed_quantization_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """The int8 file is written when whole: a failure while quantizing, or
    while converting for OpenVINO, leaves the old file (and its .bin) as it
    was and no temporary file; a whole run quantizes the product with a
    weight and leaves the head's float."""
    source = str(tmp_path / "float.onnx")
    matmul_onnx(source)
    assert int8.weight_products(source) == ["fc"]
    (tmp_path / "out").mkdir()
    old = {name: f"the old {name}".encode() for name in ("vit.onnx", "vit.xml", "vit.bin")}
    for name, content in old.items():
        (tmp_path / "out" / name).write_bytes(content)

    def fail(source, target, calibration_images=None):
        with open(target, "wb") as file:
            file.write(b"half a model")
        raise RuntimeError("quantization failed")

    with monkeypatch.context() as patch:
        patch.setattr(int8, "quantize_onnx", fail)
        for path, fmt in (("vit.onnx", "onnx"), ("vit.xml", "openvino")):
            with pytest.raises(RuntimeError, match="quantization failed"):
                int8.write_int8(source, tmp_path / "out" / path, fmt)
    assert {name: (tmp_path / "out" / name).read_bytes() for name in os.listdir(tmp_path / "out")} == old
    int8.write_int8(source, tmp_path / "out" / "vit.onnx", "onnx")
    counts = op_counts(str(tmp_path / "out" / "vit.onnx"))
    assert (counts.get("MatMulInteger"), counts.get("MatMul")) == (1, 1), counts
    images = np.random.default_rng(1).normal(size=(5, 4)).astype("float32")
    want = np.maximum(images @ np.random.default_rng(0).normal(size=(4, 3)), 0) @ np.ones((3, 2))
    np.testing.assert_allclose(run_onnx(str(tmp_path / "out" / "vit.onnx"), images), want, atol=0.1)
    assert sorted(os.listdir(tmp_path / "out")) == ["vit.bin", "vit.onnx", "vit.xml"]


@pytest.mark.backend_independent  # the command's flags and data: the exports are checked on every backend above
@pytest.mark.slow
def test_the_export_command_calibrates_on_a_dataset(trained_digits, tmp_path, capsys):
    from keras_vit.cli import main

    model, _, (x_test, _) = trained_digits
    model.save(tmp_path / "m.keras")
    full = to_numpy(model.predict(x_test, batch_size=len(x_test), verbose=0)).argmax(-1)
    out = tmp_path / "m.onnx"
    assert main(["export", str(tmp_path / "m.keras"), str(out), "--format", "onnx", "--quantize", "int8",
                 "--calibration", "digits", "--calibration-count", "128"]) == 0
    assert f"wrote {out}: onnx from {BACKEND}, int8 calibrated on 128 images" in capsys.readouterr().out
    assert op_counts(str(out))["QuantizeLinear"] == 4 * 4 + 1  # static: the inputs' scales fixed
    agreement = (run_onnx(str(out), x_test).argmax(-1) == full).mean()
    assert agreement >= 0.99, agreement
    np.save(tmp_path / "pixels.npy", np.full((8, 16, 16, 3), 255.0, "float32"))
    for flags, message in (
            (["--calibration", "digits"], "calibration_images calibrate an int8 export: pass quantize='int8'"),
            (["--quantize", "int8", "--calibration", str(tmp_path / "pixels.npy")],
             r"calibration_images span \[255, 255\], but"),
            (["--quantize", "int8", "--calibration", str(tmp_path / "none.npy")], "none.npy: no such file")):
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(tmp_path / "m.keras"), str(tmp_path / "x.onnx"), "--format", "onnx", *flags])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err
        assert error.startswith("keras-vit export: error: ") and re.search(message, error), error
    assert not (tmp_path / "x.onnx").exists()
