"""``keras-vit predict ARTIFACT IMAGE...``: an exported artifact run in its
own runtime (`keras_vit.export.runtime`) prints what the model prints; and
an artifact file that its format's library cannot read is named, with the
fix (`keras_vit.export.artifact_info`)."""

import re

import numpy as np
import pytest
from conftest import BACKEND

from keras_vit import ViT
from keras_vit.cli import main
from keras_vit.data import read_images

# Per backend, the formats it exports whose runtimes are in the dev set: ONNX everywhere,
# and the backend's own.
FORMATS = {"tensorflow": ("onnx", "tf_saved_model"), "jax": ("onnx", "tf_saved_model"),
           "torch": ("onnx", "torch")}
ARTIFACT = {"onnx": "vit.onnx", "tf_saved_model": "saved", "torch": "vit.pt2"}


def _top(out):
    """{image: [(class name, percent), ...]} of predict's lines."""
    return {line.split(": ")[0]: [(name, float(p)) for name, p in re.findall(r"(\w+) \(([\d.]+)%\)", line)]
            for line in out.strip().splitlines()}


@pytest.mark.slow
def test_predict_on_an_artifact_prints_the_models_top_five(tmp_path, capsys):
    """Exported with and without preprocessing, each artifact gives the
    model's top 5 with its class names, in the same order, the
    probabilities (the head's sigmoid) within 0.1 points (the printed
    rounding), for images of three sizes; the flags an artifact cannot take
    are refused."""
    import tensorflow as tf

    model = ViT(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=7, class_names=[f"c{i}" for i in range(7)], head_activation="sigmoid")
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    model.save(tmp_path / "m.keras")
    rng = np.random.default_rng(0)
    images = []
    for size in [(32, 32), (57, 41), (19, 24)]:
        images.append(str(tmp_path / f"{size[0]}x{size[1]}.png"))
        tf.io.write_file(images[-1], tf.io.encode_png(rng.integers(0, 256, (*size, 3), dtype=np.uint8)))
    assert main(["predict", str(tmp_path / "m.keras"), *images]) == 0
    want = _top(capsys.readouterr().out)
    assert all(len(top) == 5 for top in want.values()), want
    # the head's sigmoid, each class on its own (head_activation), not a softmax over them
    logits = np.asarray(model.predict(read_images(images, model=model), verbose=0))
    for image, row in zip(images, 100 / (1 + np.exp(-logits))):
        np.testing.assert_allclose([p for _, p in want[image]], np.sort(row)[::-1][:5], atol=0.051)
    for fmt in FORMATS[BACKEND]:
        for preprocessing in (False, True):
            path = tmp_path / f"{int(preprocessing)}_{ARTIFACT[fmt]}"
            model.export(str(path), format=fmt, verbose=False, preprocessing=preprocessing)
            assert main(["predict", str(path), *images]) == 0
            got = _top(capsys.readouterr().out)
            assert got.keys() == want.keys()
            for image, top in got.items():
                assert [name for name, _ in top] == [name for name, _ in want[image]], (fmt, preprocessing, image)
                np.testing.assert_allclose([p for _, p in top], [p for _, p in want[image]], atol=0.11)
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", str(path), images[0], "--max-num-patches", "16"])
    assert exit_info.value.code == 2
    assert "--max-num-patches does not apply to" in capsys.readouterr().err


def _onnx_bytes():
    """A valid ONNX model (one Identity node) carrying a keras_vit record."""
    import onnx
    from onnx import helper

    value = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [value],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    proto = helper.make_model(graph)
    helper.set_model_props(proto, {"class_names": '["a"]', "keras_vit": "{}"})
    return proto.SerializeToString()


GARBAGE = b"garbage\x00\xff\xfe, not a model"
FIX = r"\. It is damaged, cut short or a file of another kind; export the model again\.$"
# (id, file name, its bytes, the message after "<path> is not a readable ")
UNREADABLE = [
    ("corrupt-onnx", "m.onnx", lambda: GARBAGE,
     r"ONNX model: protobuf cannot parse it \(.*Wire format was corrupt\)"),
    ("truncated-onnx", "m.onnx", lambda: _onnx_bytes()[:-20], r"ONNX model: protobuf cannot parse it \(.*\)"),
    ("empty-onnx", "m.onnx", lambda: b"", r"ONNX model: it holds no graph"),
    ("corrupt-openvino", "m.xml", lambda: GARBAGE,
     r"OpenVINO model: OpenVINO cannot read it \(Unable to read .*\)"),
    ("truncated-openvino", "m.xml", lambda: b'<?xml version="1.0"?>\n<net name="m" version="11">\n<layers>',
     r"OpenVINO model: OpenVINO cannot read it \(.*\)"),
    ("corrupt-pt2", "m.pt2", lambda: GARBAGE, r"torch.export program \(\.pt2\): it is not a zip archive"),
    ("corrupt-tflite", "m.tflite", lambda: GARBAGE,
     r"LiteRT model: it does not start as a LiteRT flatbuffer \(identifier TFL3\)"),
    ("truncated-tflite", "m.tflite", lambda: (1000).to_bytes(4, "little") + b"TFL3",
     r"LiteRT model: its flatbuffer points past the file's end \(.*\)"),
]


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", UNREADABLE, ids=[case[0] for case in UNREADABLE])
def test_an_unreadable_artifact_is_named_with_what_to_do(tmp_path, case):
    """A damaged, cut short or foreign file of an artifact's suffix raises
    one ValueError naming the file, what its format's library found and the
    fix, from `artifact_info` and `class_names` alike, not the library's
    own error (protobuf's DecodeError, struct.error, ...)."""
    from keras_vit.export import artifact_info
    from keras_vit.export import class_names

    _, name, content, problem = case
    path = tmp_path / name
    path.write_bytes(content())
    for read in (artifact_info, class_names):
        with pytest.raises(ValueError, match=f"^{re.escape(str(path))} is not a readable {problem}{FIX}"):
            read(path)
    if name == "m.onnx":  # the ONNX file the cases cut short, whole, is read
        path.write_bytes(_onnx_bytes())
        assert class_names(path) == ["a"]
