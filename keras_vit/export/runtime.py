"""An exported artifact run in its own runtime, without Keras's model: what
``keras-vit predict ARTIFACT IMAGE...`` runs (onnxruntime, OpenVINO,
TensorFlow for a SavedModel and LiteRT, ``torch.export`` for ``.pt2``)."""

import pathlib

import numpy as np

from keras_vit.extras import require

SUFFIXES = (".onnx", ".xml", ".tflite", ".pt2")


def is_artifact(path):
    """Whether `path` is an artifact `load` runs: an ``.onnx``, ``.xml``,
    ``.tflite`` or ``.pt2`` file, or a SavedModel folder."""
    path = pathlib.Path(path)
    return (path / "saved_model.pb").is_file() or (path.is_file() and path.suffix in SUFFIXES)


def load(path):
    """The artifact at `path`, loaded by its runtime, as a function: a batch
    as its one input takes it (a NumPy array) -> ``{output name: array}``;
    an artifact of one unnamed output gives it as ``"logits"``."""
    path = pathlib.Path(path)
    if (path / "saved_model.pb").is_file():
        tf = require("tensorflow", "Running a SavedModel", extra="tensorflow")
        loaded = tf.saved_model.load(str(path))
        return lambda x: _named(loaded.serve(tf.constant(x)), lambda t: t.numpy())
    if path.suffix == ".onnx":
        onnxruntime = require("onnxruntime", "Running an ONNX file", extra="export")
        session = onnxruntime.InferenceSession(str(path))
        names, [given] = [o.name for o in session.get_outputs()], session.get_inputs()
        return lambda x: _named(dict(zip(names, session.run(None, {given.name: x}))))
    if path.suffix == ".xml":
        openvino = require("openvino", "Running an OpenVINO model", extra="export")
        # float32, as Keras computes (the CPU plugin's default is bfloat16 on CPUs with its units)
        compiled = openvino.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return lambda x: _named({port.any_name: value for port, value in compiled(x).items()})
    if path.suffix == ".tflite":
        tf = require("tensorflow", "Running a LiteRT file", extra="tensorflow")
        runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()
        [given] = runner.get_input_details()
        return lambda x: _named(runner(**{given: x}))
    torch = require("torch", "Running a torch.export program", extra="torch")
    module = torch.export.load(str(path)).module()
    return lambda x: _named(module(torch.from_numpy(np.ascontiguousarray(x))),
                            lambda t: t.detach().numpy())


def _named(outputs, to_numpy=np.asarray):
    """`outputs` (a dict, or one array) as ``{name: NumPy array}``, one
    unnamed output as ``"logits"``."""
    if not isinstance(outputs, dict):
        return {"logits": to_numpy(outputs)}
    named = {name: to_numpy(value) for name, value in outputs.items()}
    if "logits" not in named and len(named) == 1:
        named = {"logits": next(iter(named.values()))}
    return named
