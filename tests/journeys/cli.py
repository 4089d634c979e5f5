"""Journeys: the keras-vit command line, one command each.

    python cli.py convert|pretrain|predict|export|evaluate

Each writes what the command reads (a checkpoint, a .keras model, a PNG),
runs ``keras-vit COMMAND ...`` as a user does, and checks what it wrote or
printed:

- convert: ``keras-vit convert tiny.npz tiny.keras``; the .keras file gives
  the checkpoint's logits.
- pretrain: ``keras-vit pretrain --config digits`` shrunk to 2 updates of a
  one-block ViT; the run records 2 steps and the accuracy it printed, and
  its model.keras is that ViT.
- predict: ``keras-vit predict tiny.keras tiny.png``; the classes and
  probabilities printed are the model's on the PNG's pixels.
- export: ``keras-vit export tiny.keras tiny.onnx --format onnx``; the file
  is written (and, where onnxruntime is installed, gives the logits).
- evaluate: ``keras-vit evaluate constant.keras --dataset digits`` of a
  model that always answers 3; the accuracy printed is the share of 3s in
  the test split. Then ``--benchmark knn,linear --out benchmarks``: its
  results.json and table.

A command that fails ends the journey with its own output and exit status
(`_journey.keras_vit_command`).
"""

import json
import os
import pathlib
import re
import sys

import keras_vit
import numpy as np

import _journey

PRETRAIN = ["--config", "digits", "--steps", "2", "--warmup-steps", "1", "--batch-size", "16",
            "--checkpoint-every", "2", "--image-size", "16", "--few-shot", "",
            "--model-args", "patch_size=8,num_layers=1,num_heads=2,hidden_dim=8,mlp_dim=16"]


def convert():
    model = _journey.tiny_vit()
    model.save_checkpoint("tiny.npz", checkpoint_format="npz")
    out = _journey.keras_vit_command("convert", "tiny.npz", "tiny.keras")
    assert "wrote tiny.keras" in out, out
    x = _journey.images()
    difference = _journey.assert_same(_journey.logits(keras_vit.load_model("tiny.keras"), x),
                                      _journey.logits(model, x), "the converted model")
    _journey.ok(f"tiny.npz -> tiny.keras, the same logits ({difference:.0e})")


def pretrain():
    out = _journey.keras_vit_command("pretrain", "--workdir", "run", *PRETRAIN)
    printed = re.search(r"^test accuracy: (\S+)$", out, re.MULTILINE)
    assert printed, f"no test accuracy printed:\n{out}"
    with open(os.path.join("run", "results.json")) as file:
        results = json.load(file)
    assert results["steps"] == 2, results
    assert f"{results['test_accuracy']:.3f}" == printed.group(1), (results, printed.group(0))
    model = keras_vit.load_model(os.path.join("run", "model.keras"))
    assert isinstance(model, keras_vit.ViT), type(model)
    size = (model.num_layers, model.hidden_dim, tuple(model.patch_size), tuple(model.image_size))
    assert size == (1, 8, (8, 8), (16, 16)), model.get_config()
    _journey.ok(f"2 steps, test accuracy {printed.group(1)} as results.json records, model.keras a "
                f"{model.count_params()}-parameter ViT")


def predict():
    model = _journey.tiny_vit()
    model.save("tiny.keras")
    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    _journey.write_png("tiny.png", pixels)
    logits = _journey.logits(model, pixels[None].astype("float32") / 127.5 - 1)[0].astype("float64")
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    out = _journey.keras_vit_command("predict", "tiny.keras", "tiny.png", "--top-k", "3")
    line = next(line for line in out.splitlines() if line.startswith("tiny.png: "))
    printed = [(int(c), float(p)) for c, p in re.findall(r"(\d+) \(([\d.]+)%\)", line)]
    assert sorted(c for c, _ in printed) == [0, 1, 2], line
    for c, percent in printed:
        assert abs(percent - 100 * expected[c]) <= 0.051, (line, expected)
    assert [p for _, p in printed] == sorted((p for _, p in printed), reverse=True), line
    _journey.ok(f"the model's probabilities on the PNG's pixels: {line}")


def export():
    model = _journey.tiny_vit()
    model.save("tiny.keras")
    _journey.keras_vit_command("export", "tiny.keras", "tiny.onnx", "--format", "onnx")
    assert os.path.getsize("tiny.onnx") > 0
    try:
        import onnxruntime
    except ImportError:
        _journey.ok("tiny.onnx written (no onnxruntime here to run it)")
        return
    session = onnxruntime.InferenceSession("tiny.onnx")
    x = _journey.images()
    actual = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(actual, _journey.logits(model, x), rtol=1e-4, atol=1e-4)
    _journey.ok("tiny.onnx gives the model's logits in onnxruntime")


def evaluate():
    model = _journey.tiny_vit(num_classes=10)
    head = model.get_layer("head")
    head.kernel.assign(np.zeros(head.kernel.shape, "float32"))
    head.bias.assign(np.eye(10, dtype="float32")[3] * 10)  # every image: class 3
    model.save("constant.keras")
    out = _journey.keras_vit_command("evaluate", "constant.keras", "--dataset", "digits")
    printed = re.search(r"^test accuracy: (\S+)$", out, re.MULTILINE)
    assert printed, f"no test accuracy printed:\n{out}"
    from keras_vit.data.sources import load_source

    labels = np.array([int(example["label"]) for example in load_source("digits", "test").dataset])
    share = f"{np.mean(labels == 3):.3f}"
    assert printed.group(1) == share, (printed.group(0), f"{len(labels)} test digits, {share} of them 3s")
    # the paper's benchmarks by name: k-NN and the linear probe of its features, results.json beside
    out = _journey.keras_vit_command("evaluate", "constant.keras", "--benchmark", "knn,linear",
                                     "--dataset", "digits", "--out", "benchmarks")
    scores = json.loads(pathlib.Path("benchmarks", "results.json").read_text())["benchmarks"]
    assert sorted(scores) == ["knn", "linear"] and "| k-NN (digits) | top-1 |" in out, out
    _journey.ok(f"a model that always answers 3 scores {share}, the share of 3s in the {len(labels)} test "
                f"digits; its features' k-NN {scores['knn']['top1']:.1f}%, linear probe "
                f"{scores['linear']['top1']:.1f}%")


COMMANDS = {"convert": convert, "pretrain": pretrain, "predict": predict, "export": export, "evaluate": evaluate}

if __name__ == "__main__":
    _journey.installed()
    COMMANDS[sys.argv[1]]()
