"""What an exported artifact carries about itself: the model's class names,
and a ``keras_vit`` record (its image size, pixel scaling, whether the
preprocessing is inside, its inputs and outputs), in each format's own
place for such data, so that a deployer needs nothing beside the file:

- ONNX: ``metadata_props`` ``class_names`` (a JSON list) and ``keras_vit``;
- OpenVINO: ``rt_info`` ``keras_vit/class_names`` and ``keras_vit/info``;
- SavedModel: ``assets.extra/keras_vit.json`` (TF Serving's folder for
  extra files, which ``tf.saved_model.load`` leaves alone);
- ``.pt2``: the extra files ``class_names.json`` and ``keras_vit.json``;
- LiteRT (``.tflite``): the flatbuffer's metadata entries ``class_names``
  and ``keras_vit``, each naming a buffer of UTF-8 JSON (as TensorFlow's
  converter adds its own ``CONVERSION_METADATA``).

`class_names` and `artifact_info` read them back, each with the format's
own library.
"""

import json
import pathlib
import tempfile

from keras_vit.export import routes
from keras_vit.io import files

_KEYS = ("class_names", "keras_vit")  # the record's entries (`record`): ONNX's and LiteRT's names
_SAVED_MODEL_FILE = ("assets.extra", "keras_vit.json")
_PT2_FILES = {"class_names": "class_names.json", "keras_vit": "keras_vit.json"}
_OPENVINO_KEYS = {"class_names": "class_names", "keras_vit": "info"}  # under rt_info's "keras_vit"


def record(model, preprocessing, dynamic_image_size=False):
    """``{"class_names": [...] or None, "keras_vit": {...}}`` of `model`'s
    artifact."""
    c = model.config
    if preprocessing:
        inputs = "images: uint8 (batch, height, width, 3), any size"
    elif dynamic_image_size:
        axes = (f"{c.num_channels}, height, width" if c.data_format == "channels_first"
                else f"height, width, {c.num_channels}")
        inputs = (f"images: float32 (batch, {axes}), height and width multiples of the patch size "
                  f"{c.patch_size[0]}x{c.patch_size[1]}")
    elif c.naflex:
        inputs = "NaFlex sequences: patches, patch_mask, spatial_shapes (keras_vit.naflex_inputs)"
    else:
        inputs = "images: float32 (batch, " + ", ".join(map(str, model.input_shape[1:])) + ")"
    info = {"image_size": list(c.image_size), "pixel_scale": c.pixel_scale, "pixel_offset": c.pixel_offset,
            "data_format": c.data_format, "naflex": bool(c.naflex), "max_num_patches": c.max_num_patches,
            "patch_size": list(c.patch_size), "preprocessing": bool(preprocessing),
            "dynamic_image_size": bool(dynamic_image_size), "activation": c.head_activation,
            "input": inputs,
            "outputs": ["logits", "probabilities"] if preprocessing else ["logits"]}
    return {"class_names": list(c.class_names) if c.class_names else None, "keras_vit": info}


def torch_extra_files(model, preprocessing, dynamic_image_size=False):
    """The ``.pt2`` extra files (name -> JSON text) of `model`'s record."""
    data = record(model, preprocessing, dynamic_image_size)
    return {_PT2_FILES[key]: json.dumps(value) for key, value in data.items()}


def write(path, format, model, preprocessing, outputs=None, dynamic_image_size=False):
    """Puts `model`'s record (`record`) into the artifact at `path`, written
    in `format`, with its route's writer (``write_<metadata>`` of
    `keras_vit.export.routes.ROUTES`); with `outputs`, the ONNX or OpenVINO
    outputs renamed to them in order (exporters that name them their own
    way)."""
    data = record(model, preprocessing, dynamic_image_size)
    routes.route(format).write_metadata(pathlib.Path(path), data, outputs)


def write_saved_model(path, data, outputs=None):
    """`data` as ``assets.extra/keras_vit.json`` in the SavedModel folder
    `path` (its outputs are named already)."""
    path.joinpath(_SAVED_MODEL_FILE[0]).mkdir(exist_ok=True)
    files.write_json(path.joinpath(*_SAVED_MODEL_FILE), data)


def write_pt2(path, data, outputs=None):
    """Nothing: a ``.pt2`` program gets its record as extra files when it is
    written (`torch_extra_files`)."""


def write_onnx(path, data, outputs=None):
    """`data` as ``metadata_props`` of the ONNX file `path`, its outputs
    renamed to `outputs` in order."""
    import onnx

    proto = onnx.load(str(path))
    kept = [entry for entry in proto.metadata_props if entry.key not in _KEYS]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    for key, value in data.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    if outputs:
        _rename_onnx_outputs(proto.graph, outputs)
    files.write_atomic(path, proto.SerializeToString())


def _rename_onnx_outputs(graph, names):
    """The graph's outputs named `names`, in order, wherever they appear."""
    renames = {output.name: name for output, name in zip(graph.output, names) if output.name != name}
    if not renames:
        return
    for node in graph.node:
        node.output[:] = [renames.get(name, name) for name in node.output]
        node.input[:] = [renames.get(name, name) for name in node.input]
    for output in graph.output:
        output.name = renames.get(output.name, output.name)


def write_openvino(path, data, outputs=None):
    """`data` as ``rt_info`` of the OpenVINO model `path` (and the ``.bin``
    beside it), its outputs named `outputs` in order, or the record's
    names where the exporter left them unnamed."""
    import openvino

    model = openvino.Core().read_model(str(path))
    for result in model.get_results():  # scalars of the graph that Keras's route from TensorFlow
        if result.get_output_partial_shape(0).rank.get_length() == 0:  # leaves as outputs
            model.remove_result(result)
    for key, value in data.items():
        model.set_rt_info(json.dumps(value), ["keras_vit", _OPENVINO_KEYS[key]])
    for output, name in zip(model.outputs, outputs or data["keras_vit"]["outputs"]):
        if outputs or not output.get_names():  # OpenVINO's PyTorch front end may leave it unnamed
            output.get_tensor().set_names({name})
    with tempfile.TemporaryDirectory(prefix=".keras_vit_", dir=path.parent) as work:
        staged = pathlib.Path(work) / path.name
        openvino.save_model(model, str(staged), compress_to_fp16=False)
        del model  # its weights may be mapped from the .bin being replaced
        staged.with_suffix(".bin").replace(path.with_suffix(".bin"))
        staged.replace(path)


def write_tflite(path, data, outputs=None):
    """`data`'s entries as metadata of the LiteRT flatbuffer at `path`, as
    TensorFlow's converter adds its ``CONVERSION_METADATA``
    (``tensorflow/lite/python/util.py``): a buffer of the entry's bytes,
    here its UTF-8 JSON, and a ``Metadata`` naming it; an entry of the
    same name has its buffer replaced. A model over 2 GB keeps its weights
    after the flatbuffer, at offsets from the file's start (its
    ``buffer_location`` entry): they are carried over, moved by the
    flatbuffer's growth rounded up to 64 bytes, so their alignment holds."""
    import flatbuffers
    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema_fb

    content = path.read_bytes()
    model = schema_fb.ModelT.InitFromObj(schema_fb.Model.GetRootAs(content, 0))
    model.metadata = model.metadata or []
    present = {entry.name.decode("utf-8"): entry for entry in model.metadata}
    for key in _KEYS:
        buffer = schema_fb.BufferT()
        buffer.data = np.frombuffer(json.dumps(data[key]).encode("utf-8"), dtype=np.uint8)
        if key in present:
            model.buffers[present[key].buffer] = buffer
            continue
        model.buffers.append(buffer)
        entry = schema_fb.MetadataT()
        entry.name, entry.buffer = key, len(model.buffers) - 1
        model.metadata.append(entry)
    outside = _outside_offsets(model)
    start = min((offset for _, _, offset in outside), default=len(content))  # where the flatbuffer ends

    def pack():
        builder = flatbuffers.Builder(min(start + 65536, flatbuffers.Builder.MAX_BUFFER_SIZE))
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return memoryview(builder.Bytes)[builder.Head():]

    flatbuffer = pack()
    if not outside:
        return files.write_atomic(path, flatbuffer)
    shift = (len(flatbuffer) - start + 63) // 64 * 64
    for holder, field, offset in outside:
        setattr(holder, field, offset + shift)
    flatbuffer = pack()  # as long as before: only the offsets' values changed
    padding = bytes(start + shift - len(flatbuffer))
    files.write_atomic(path, lambda file: (file.write(flatbuffer), file.write(padding),
                                           file.write(memoryview(content)[start:])))


def _outside_offsets(model):
    """``(object, field, offset)`` of each buffer and custom options that a
    LiteRT model keeps after its flatbuffer (offset > 1, as TFLite reads
    them)."""
    found = [(buffer, "offset", buffer.offset) for buffer in model.buffers if buffer.offset > 1]
    for subgraph in model.subgraphs or ():
        found += [(op, "largeCustomOptionsOffset", op.largeCustomOptionsOffset)
                  for op in subgraph.operators or () if op.largeCustomOptionsOffset > 1]
    return found


def _unreadable(path, problem):
    """The error for an artifact file at `path` that its format's library
    cannot read, `problem` saying why."""
    return ValueError(f"{path} is not a readable {routes.artifact_route(path).title}: {problem}. It is damaged, "
                      "cut short or a file of another kind; export the model again.")


def read_onnx(path):
    """The record in the ONNX file at `path`'s ``metadata_props``, or None."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except DecodeError as error:
        raise _unreadable(path, f"protobuf cannot parse it ({error})") from error
    if not proto.HasField("graph"):  # what an empty file parses as
        raise _unreadable(path, "it holds no graph")
    props = {e.key: e.value for e in proto.metadata_props}
    return {key: json.loads(props[key]) for key in _KEYS} if "keras_vit" in props else None


def read_openvino(path):
    """The record in the OpenVINO model at `path`'s ``rt_info``, or None."""
    import openvino

    try:
        model = openvino.Core().read_model(str(path))
    except RuntimeError as error:  # OpenVINO's last line says what is wrong
        raise _unreadable(path, f"OpenVINO cannot read it ({str(error).strip().splitlines()[-1]})") from error
    if not model.has_rt_info(["keras_vit", _OPENVINO_KEYS["keras_vit"]]):
        return None
    return {key: json.loads(model.get_rt_info(["keras_vit", name]).astype(str))
            for key, name in _OPENVINO_KEYS.items()}


def read_pt2(path):
    """The record in the ``.pt2`` archive at `path`'s extra files, or None."""
    import zipfile

    if not zipfile.is_zipfile(path):  # checked before torch, which logs its own traceback first
        raise _unreadable(path, "it is not a zip archive")
    import torch

    extra = {name: "" for name in _PT2_FILES.values()}
    try:
        torch.export.load(str(path), extra_files=extra)
    except RuntimeError as error:
        raise _unreadable(path, f"torch.export cannot load it ({str(error).strip().splitlines()[0]})") from error
    if not extra["keras_vit.json"]:
        return None
    return {key: json.loads(extra[name]) for key, name in _PT2_FILES.items()}


def read_tflite(path):
    """The metadata `write_tflite` wrote into the LiteRT file at `path`,
    or None; the file mapped, not read (it may hold gigabytes of weights).
    A LiteRT flatbuffer names itself ``TFL3`` at bytes 4-8."""
    import mmap
    import struct

    with open(path, "rb") as file:
        if file.read(8)[4:] != b"TFL3":
            raise _unreadable(path, "it does not start as a LiteRT flatbuffer (identifier TFL3)")
    from tensorflow.lite.python import schema_py_generated as schema_fb

    found = {}
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as content:
        try:
            model = schema_fb.Model.GetRootAs(content, 0)
            for i in range(model.MetadataLength()):
                entry = model.Metadata(i)
                name = entry.Name().decode("utf-8")
                if name in _KEYS:
                    found[name] = json.loads(model.Buffers(entry.Buffer()).DataAsNumpy().tobytes())
        except (struct.error, IndexError) as error:  # an offset past the file's end
            raise _unreadable(path, f"its flatbuffer points past the file's end ({error})") from error
    return found if "keras_vit" in found else None


def read_saved_model(path):
    """The record in the SavedModel folder `path`'s ``assets.extra``, or None."""
    found = path.joinpath(*_SAVED_MODEL_FILE)
    return files.read_json(found, "keras_vit's record of the export") if found.is_file() else None


def artifact_info(path):
    """The record an exported artifact carries: ``{"class_names": [...] or
    None, "keras_vit": {...}}``, read by its route's reader
    (``read_<metadata>``) with the format's own library (onnx, openvino,
    torch, TensorFlow's LiteRT schema; a SavedModel's is a JSON file).

    Args:
        path: an artifact of a route of `keras_vit.export.routes.ROUTES`:
            an ``.onnx``, ``.xml``, ``.pt2`` or ``.tflite`` file, or a
            SavedModel folder.

    Raises:
        ValueError: a path of another kind, a file its format's library
            cannot read (damaged, cut short, or of another kind), or an
            artifact without the record (exported by an earlier version);
            the message names the file, and the fix is to export it again.
    """
    path = pathlib.Path(path)
    found = routes.artifact_route(path)
    if found is None:
        raise ValueError(f"{path} is not an artifact keras_vit exports with its class names: "
                         f"{routes.artifacts()}.")
    data = found.read_metadata(path)
    if data is None:
        raise ValueError(f"{path} carries no keras_vit record (it was exported by an earlier version, "
                         "or by other code): export the model again.")
    return data
