"""``keras-vit predict ARTIFACT IMAGE...``: an exported artifact run in its
own runtime (`keras_vit.export.runtime`) prints what the model prints."""

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
