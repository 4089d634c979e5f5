"""An exported artifact run in its own runtime, without Keras's model: what
``keras-vit predict ARTIFACT IMAGE...`` runs, each route's loader
(``load_<runtime>`` of its record, `keras_vit.export.routes.ROUTES`):
onnxruntime, OpenVINO, TensorFlow for a SavedModel and LiteRT,
``torch.export`` for ``.pt2``."""

import numpy as np

from keras_vit.export import routes
from keras_vit.extras import require


def is_artifact(path):
    """Whether `path` is an artifact `load` runs: a file or folder of a
    route of `keras_vit.export.routes.ROUTES`."""
    return routes.artifact_route(path) is not None


def load(path):
    """The artifact at `path`, loaded by its route's runtime, as a function:
    a batch as its one input takes it (a NumPy array) -> ``{output name:
    array}``; an artifact of one unnamed output gives it as ``"logits"``."""
    found = routes.artifact_route(path)
    if found is None:
        raise ValueError(f"{path} is not an artifact keras_vit runs: {routes.artifacts()}.")
    return found.load_runtime(str(path))


def load_saved_model(path):
    """A SavedModel's ``serve`` signature, in TensorFlow."""
    tf = require("tensorflow", "Running a SavedModel", extra="tensorflow")
    loaded = tf.saved_model.load(path)
    return lambda x: _named(loaded.serve(tf.constant(x)), lambda t: t.numpy())


def load_onnx(path):
    """An ONNX file in onnxruntime."""
    onnxruntime = require("onnxruntime", "Running an ONNX file", extra="export")
    session = onnxruntime.InferenceSession(path)
    names, [given] = [o.name for o in session.get_outputs()], session.get_inputs()
    return lambda x: _named(dict(zip(names, session.run(None, {given.name: x}))))


def load_openvino(path):
    """An OpenVINO model on the CPU, in float32 as Keras computes (the CPU
    plugin's default is bfloat16 on CPUs with its units)."""
    openvino = require("openvino", "Running an OpenVINO model", extra="export")
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return lambda x: _named({port.any_name: value for port, value in compiled(x).items()})


def load_tflite(path):
    """A LiteRT file's signature, in TensorFlow's LiteRT interpreter."""
    tf = require("tensorflow", "Running a LiteRT file", extra="tensorflow")
    runner = tf.lite.Interpreter(model_path=path).get_signature_runner()
    [given] = runner.get_input_details()
    return lambda x: _named(runner(**{given: x}))


def load_pt2(path):
    """A ``torch.export`` program's module, in PyTorch."""
    torch = require("torch", "Running a torch.export program", extra="torch")
    module = torch.export.load(path).module()
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
