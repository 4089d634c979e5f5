"""Int8 exports for a CPU: a ViT's ONNX file quantized with onnxruntime's own
tools, run by onnxruntime or converted for OpenVINO.

`ViT.export(path, format="onnx" | "openvino", quantize="int8",
calibration_images=None)` calls `export_int8`, which

1. exports the float32 model to ONNX as `ViT.export` does on each backend
   (tf2onnx, jax2onnx, PyTorch's dynamo exporter);
2. writes each product of an activation with a weight as a ``MatMul``
   (`einsum_to_matmul`: JAX's and PyTorch's exporters write Keras's
   ``EinsumDense``, the attention's query, key, value and output
   projections, as ``Einsum``, which onnxruntime does not quantize);
3. runs onnxruntime's ``quant_pre_process`` (ONNX's shape inference);
4. quantizes every ``MatMul`` whose second operand is a weight
   (`quantize_onnx`): the attention's four projections and the MLP's two, 96%
   of ViT-B/16's multiply-adds. Their weights become int8, one scale per
   output channel; their inputs uint8. Without calibration images
   dynamically (``quantize_dynamic``: each input is quantized as it runs,
   from its own range); with them statically (``quantize_static``, QDQ
   format: each input's scale and zero point measured on the images, their
   minimum and maximum). The LayerNorms, softmax, GELU, the attention's two
   products of activations, the patch embedding and the head stay float32.

The weights use 7 of the 8 bits (``reduce_range``): on a CPU without VNNI
(AVX2, AVX-512 without ``avx512_vnni``) onnxruntime multiplies uint8 by int8
with ``vpmaddubsw``, which adds each pair of products in 16 bits and
saturates with 8-bit weights (ViT-B/16 cut to 4 blocks, random weights: its
top-1 then followed float32's on 16 of 32 images, with 7-bit weights on 30);
an exported file may run on any CPU.

OpenVINO runs the statically quantized (QDQ) model with int8 kernels (which
pay where the CPU has VNNI or AMX; on AVX2 alone they are no faster than
float32's), and the dynamically quantized one's ``DynamicQuantizeLinear``
and ``MatMulInteger`` in float32, slower than the float model: its int8
export needs calibration images (`check_mode`). It is converted with
``openvino.convert_model`` and written, as `ViT.export`'s float32 OpenVINO
export is, as an ``.xml`` file and the ``.bin`` file beside it, with float32
constants.

The file is written when it is whole (`keras_vit.io.files.write_atomic`): a
failure on the way leaves the path as it was. docs/deploy.md has the
measured speeds and where the time goes.

The module imports no Keras, ONNX or backend at its top: `keras_vit.cli`'s
parser reads `QUANTIZE_MODES` without starting a backend.
"""

import os
import pathlib
import shutil
import tempfile

from keras_vit.export import routes

# What `ViT.export`'s ``quantize`` takes; the formats it quantizes are those whose route is
# quantized through another's float32 file (`keras_vit.export.routes.Route.quantized_through`).
QUANTIZE_MODES = ("int8",)
QUANTIZED_FORMATS = routes.QUANTIZED_FORMATS
# The operators quantized: the products of an activation with a weight.
OP_TYPES = ("MatMul",)
# Calibration images per run of the calibrating model.
CALIBRATION_BATCH = 16
# How far outside the model's pixel range calibration images may go, as a
# fraction of its width (a resize's overshoot, an augmentation).
RANGE_SLACK = 0.1


def check_request(model, format, quantize, calibration_images, preprocessing=False):
    """Checks `ViT.export`'s ``quantize`` and ``calibration_images`` against
    `format` and `model` (not a NaFlex model; `check_mode`,
    `calibration_array`, `pixel_array`), before anything is exported.

    Args:
        model: a `keras_vit.ViT`.
        format: str, the export format.
        quantize: None (float32) or one of `QUANTIZE_MODES`.
        calibration_images: None, or images as the artifact takes them:
            float (N, H, W, C) (channels_first: (N, C, H, W)) at the model's
            image size, scaled as its ``pixel_scale`` and ``pixel_offset``
            say; with `preprocessing`, uint8 pixels (N, H, W, 3) of one size.
        preprocessing: bool, ``ViT.export``'s.

    Returns:
        The calibration images as a float32 (uint8) NumPy array, or None.
    """
    if model.config.naflex and (quantize is not None or calibration_images is not None):
        raise ValueError(
            f"{model.name} is a NaFlex model: the int8 export quantizes a model with one image input, "
            "and this one takes NaFlex's dict. Export it in float32 (drop `quantize`), or quantize the "
            "fixed-size model: `model.with_config(naflex=False, max_num_patches=None)`.")
    check_mode(format, quantize, calibrated=calibration_images is not None)
    if calibration_images is None:
        return None
    if preprocessing:
        return pixel_array(calibration_images)
    return calibration_array(model, calibration_images)


def pixel_array(images):
    """`images` as a uint8 NumPy array after checking that an artifact with
    preprocessing takes them: a non-empty uint8 batch (N, H, W, 3). Raises a
    TypeError or ValueError naming the problem and the fix."""
    import keras
    import numpy as np

    how = ("With preprocessing=True the calibration images are raw pixels as the artifact takes "
           "them: uint8 (N, height, width, 3) of one size (keras_vit.data.read_pixels gives each "
           "file's).")
    if not hasattr(images, "shape") or isinstance(images, (str, bytes, os.PathLike)):
        raise TypeError(f"calibration_images must be an array, got a {type(images).__name__}. {how}")
    array = np.asarray(keras.ops.convert_to_numpy(images))
    if array.dtype != np.uint8 or array.ndim != 4 or array.shape[-1] != 3:
        raise ValueError(f"calibration_images are {array.dtype} of shape {array.shape}. {how}")
    if len(array) == 0:
        raise ValueError(f"calibration_images is empty: give a few hundred images like those the "
                         f"artifact will see. {how}")
    return array


def check_mode(format, quantize, calibrated):
    """Raises a TypeError or ValueError naming the fix unless an export to
    `format` quantized as `quantize` (None: float32), `calibrated` (bool:
    with calibration images) or not, has a route: a mode of
    `QUANTIZE_MODES`, a format of `QUANTIZED_FORMATS`, calibration only
    with a mode, and without calibration only where the route takes a
    dynamic int8 export (its record's ``supports["int8"]``). Needs no model
    (`keras-vit export` checks its flags before it reads one)."""
    if quantize is None:
        if calibrated:
            raise ValueError("calibration_images calibrate an int8 export: pass quantize='int8' "
                             "with them, or leave them out for a float32 export.")
        return
    modes = ", ".join(repr(mode) for mode in QUANTIZE_MODES)
    if not isinstance(quantize, str):
        raise TypeError(f"quantize takes {modes} or None, got {quantize!r} "
                        f"({type(quantize).__name__}).")
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"quantize={quantize!r} is not offered: choose {modes} (or None for "
                         "float32). Keras's other modes (int4, float8) quantize the model itself: "
                         "model.quantize('int4').")
    route = routes.route(format)
    if format not in QUANTIZED_FORMATS:
        raise ValueError(f"format={format!r} has no {quantize} route: quantize={quantize!r} exports "
                         f"{routes.either(f'format={name!r}' for name in QUANTIZED_FORMATS)} "
                         f"({route.supports['int8_calibrated']}). Export {format} without quantize "
                         "(float32), or choose one of those formats.")
    if not calibrated and route.supports.get("int8"):
        dynamic = [routes.ROUTES[name] for name in QUANTIZED_FORMATS if not routes.ROUTES[name].supports.get("int8")]
        raise ValueError(
            f"format={format!r} with quantize={quantize!r} needs calibration_images: "
            f"{route.supports['int8']}. Pass a few hundred images as the model takes them "
            "(keras_vit.data.read_images(paths, model=model)), or export "
            f"{routes.either(f'format={r.name!r} for {r.runs_in}' for r in dynamic)}, which quantizes without them.")


def calibration_array(model, images):
    """`images` as a float32 NumPy array after checking that `model` takes
    them: a non-empty float batch of its image size, channels and data
    format, finite, within the range its pixel scaling gives pixels in [0,
    255] (`RANGE_SLACK` of its width either side). Raises a TypeError or
    ValueError naming the problem and the fix."""
    import keras
    import numpy as np

    from keras_vit import input_checks

    if not hasattr(images, "shape") or isinstance(images, (str, bytes, os.PathLike)):
        shape = ", ".join(map(str, model.config.input_shape))
        raise TypeError(f"calibration_images must be an array of images (N, {shape}), got a "
                        f"{type(images).__name__}. Read image files with "
                        "keras_vit.data.read_images(paths, model=model).")
    input_checks.check_images(model, images)
    array = np.asarray(keras.ops.convert_to_numpy(images), dtype="float32")
    if len(array) == 0:
        raise ValueError("calibration_images is empty: give a few hundred images like those the "
                         "model will see, or leave calibration_images out (onnx: dynamic "
                         "quantization).")
    if not np.isfinite(array).all():
        raise ValueError("calibration_images hold NaN or infinite values: give real images.")
    config = model.config
    scale = np.asarray(config.pixel_scale, "float64")
    offset = np.asarray(config.pixel_offset, "float64")
    ends = np.stack(np.broadcast_arrays(offset, 255 * scale + offset))
    low, high = float(ends.min()), float(ends.max())
    slack = RANGE_SLACK * (high - low)
    if array.min() < low - slack or array.max() > high + slack:
        raise ValueError(
            f"calibration_images span [{array.min():.4g}, {array.max():.4g}], but {model.name} "
            f"takes images scaled to [{low:.4g}, {high:.4g}] (pixels in [0, 255] times "
            f"pixel_scale {np.round(scale, 6).tolist()} plus pixel_offset "
            f"{np.round(offset, 6).tolist()}): calibrating on other values measures the wrong "
            "ranges. Scale them as the model takes them "
            "(pixels * pixel_scale + pixel_offset; the default: pixels / 127.5 - 1), or read image "
            "files with keras_vit.data.read_images(paths, model=model).")
    return array


def einsum_to_matmul(model):
    """Rewrites, in place, each ``Einsum`` of an activation and a weight in
    the ONNX `model` (a ``ModelProto``) as a ``MatMul`` of the activation,
    its contracted axes flattened, with the weight as a matrix, and a
    ``Reshape`` to the output's axes.

    The ``Einsum`` nodes rewritten are those whose second input is an
    initializer and whose equation reads ``batch + contracted, weight ->
    batch + kept``: the activation's contracted axes last, and the output
    the activation's other axes then the weight's kept ones (Keras's
    ``EinsumDense`` of the attention: ``btd,dnh->btnh`` for the query, key
    and value, ``btnh,nhd->btd`` for the output). Others stay.

    Args:
        model: an ``onnx.ModelProto``.

    Returns:
        int, the nodes rewritten.
    """
    import numpy as np
    from onnx import helper
    from onnx import numpy_helper

    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    nodes, added, replaced, rewritten = [], [], set(), 0
    for node in graph.node:
        parts = _einsum_parts(node, weights)
        if parts is None:
            nodes.append(node)
            continue
        batch, contracted, kept, weight_axes = parts
        weight = numpy_helper.to_array(weights[node.input[1]])
        sizes = dict(zip(weight_axes, weight.shape))
        matrix = weight.transpose([weight_axes.index(axis) for axis in contracted + kept])
        matrix = matrix.reshape(int(np.prod([sizes[a] for a in contracted])), -1)
        stem = node.output[0]
        added.append(numpy_helper.from_array(np.ascontiguousarray(matrix), f"{stem}/matrix"))
        rows = node.input[0]
        if len(contracted) > 1:  # (..., n, h) -> (..., n * h)
            shape = np.array([0] * len(batch) + [-1], "int64")
            added.append(numpy_helper.from_array(shape, f"{stem}/rows_shape"))
            nodes.append(helper.make_node("Reshape", [rows, f"{stem}/rows_shape"], [f"{stem}/rows"],
                                          name=f"{stem}/reshape_rows"))
            rows = f"{stem}/rows"
        product = f"{stem}/product" if len(kept) > 1 else stem
        nodes.append(helper.make_node("MatMul", [rows, f"{stem}/matrix"], [product],
                                      name=f"{stem}/matmul"))
        if len(kept) > 1:  # (..., n * h) -> (..., n, h)
            shape = [0] * len(batch) + [sizes[a] for a in kept]
            added.append(numpy_helper.from_array(np.array(shape, "int64"), f"{stem}/output_shape"))
            nodes.append(helper.make_node("Reshape", [product, f"{stem}/output_shape"], [stem],
                                          name=f"{stem}/reshape_output"))
        replaced.add(node.input[1])
        rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    unused = replaced - used  # the weights now written as matrices
    kept_weights = [tensor for tensor in graph.initializer if tensor.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(kept_weights + added)
    return rewritten


def _einsum_parts(node, weights):
    """``(batch, contracted, kept, weight_axes)``, lists of an ``Einsum``'s
    axis letters, when `node` is one that `einsum_to_matmul` rewrites; else
    None."""
    if node.op_type != "Einsum" or len(node.input) != 2 or node.input[1] not in weights:
        return None
    equation = next(a.s for a in node.attribute if a.name == "equation").decode().replace(" ", "")
    operands, _, output = equation.partition("->")
    if operands.count(",") != 1 or "." in equation:
        return None
    rows, weight = operands.split(",")
    contracted = [a for a in rows if a in weight and a not in output]
    batch = [a for a in rows if a not in contracted]
    kept = list(output[len(batch):])
    if (rows != "".join(batch + contracted) or not output.startswith("".join(batch))
            or sorted(weight) != sorted(contracted + kept) or len(set(rows)) != len(rows)
            or len(set(output)) != len(output)):
        return None
    return batch, contracted, kept, list(weight)


def quantize_onnx(source, target, calibration_images=None):
    """Quantizes the ONNX file `source` to `target` with onnxruntime: each
    ``MatMul`` with a weight but the head's (`weight_products`), int8
    weights per output channel in 7 bits, uint8 inputs; dynamically without
    `calibration_images`, statically (QDQ, MinMax) with them.

    Args:
        source: path of a float32 ONNX model (after ``quant_pre_process``).
        target: path of the quantized model.
        calibration_images: None, or an array that `source`'s one input
            takes.
    """
    from onnxruntime import quantization

    settings = dict(op_types_to_quantize=list(OP_TYPES), nodes_to_quantize=weight_products(source),
                    per_channel=True, reduce_range=True, weight_type=quantization.QuantType.QInt8)
    if calibration_images is None:
        quantization.quantize_dynamic(source, target, **settings)
        return
    # The products' outputs stay float32 (onnxruntime runs each as MatMulIntegerToFloat):
    # requantizing them for the bias and the next op lost accuracy and gained no speed.
    quantization.quantize_static(
        source, target, calibration_reader(_input_name(source), calibration_images),
        quant_format=quantization.QuantFormat.QDQ, activation_type=quantization.QuantType.QUInt8,
        calibrate_method=quantization.CalibrationMethod.MinMax,
        extra_options={"OpTypesToExcludeOutputQuantization": list(OP_TYPES)}, **settings)


def weight_products(path):
    """The names of the ONNX file `path`'s ``MatMul`` nodes that `quantize_onnx`
    quantizes: those whose second operand is a weight (an initializer),
    except the head's, the product nearest the outputs (found walking back
    from each). The attention's products of two activations stay float32
    (onnxruntime's ``MatMulConstBOnly`` leaves them so in dynamic
    quantization only)."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    weights = {tensor.name for tensor in graph.initializer}
    producers = {name: node for node in graph.node for name in node.output}
    head, seen = set(), set()
    stack = [value.name for value in graph.output]
    while stack:
        node = producers.get(stack.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op_type in ("MatMul", "Gemm"):
            head.add(node.name)
        else:
            stack.extend(node.input)
    return [node.name for node in graph.node
            if node.op_type in OP_TYPES and node.input[1] in weights and node.name not in head]


def calibration_reader(input_name, images, batch_size=CALIBRATION_BATCH):
    """An onnxruntime ``CalibrationDataReader`` that feeds `images` to the
    input `input_name` in batches of `batch_size`."""
    from onnxruntime.quantization import CalibrationDataReader

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.starts = iter(range(0, len(images), batch_size))

        def get_next(self):
            start = next(self.starts, None)
            return None if start is None else {input_name: images[start:start + batch_size]}

        def __len__(self):
            return -(-len(images) // batch_size)

    return Batches()


def _input_name(path):
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    weights = {tensor.name for tensor in graph.initializer}
    return next(value.name for value in graph.input if value.name not in weights)


def export_int8(model, filepath, format, calibration_images=None, verbose=False, **export_kwargs):
    """Writes `model` to `filepath` quantized to int8 for onnxruntime
    (``format="onnx"``) or OpenVINO (``"openvino"``: the ``.xml`` and the
    ``.bin`` beside it): its float32 ONNX export through `write_int8`.

    Args:
        model: a `keras_vit.ViT`.
        filepath: str or path, ending in ``.onnx`` or ``.xml``.
        format: one of `QUANTIZED_FORMATS`.
        calibration_images: None, or the array `check_request` returned.
        verbose: bool, the float32 export's messages.
        **export_kwargs: the float32 ONNX export's other arguments
            (``input_signature``, ...).
    """
    from keras_vit.io import files

    route = routes.route(format)
    path = files.output_file(filepath, "export path", (route.suffix,))
    through = routes.route(route.quantized_through)
    with tempfile.TemporaryDirectory(prefix="keras_vit_int8_") as work:
        source = pathlib.Path(work) / f"float32{through.suffix}"
        model.export(str(source), format=through.name, verbose=verbose, **export_kwargs)
        write_int8(source, path, format, calibration_images)


def write_int8(source, path, format, calibration_images=None):
    """Writes the float32 ONNX file `source` (a ViT's export) quantized to
    int8 to `path`, as the module describes: its ``Einsum`` products with a
    weight as ``MatMul`` (`einsum_to_matmul`), onnxruntime's
    pre-processing, `quantize_onnx`, and for OpenVINO the conversion.

    Args:
        source: str or path, a float32 ONNX file.
        path: str or path, the ``.onnx`` file, or the ``.xml`` file of
            OpenVINO's pair (the ``.bin`` is written beside it).
        format: one of `QUANTIZED_FORMATS`.
        calibration_images: None (dynamic quantization; onnx only), or an
            array that `source`'s input takes (static).
    """
    import onnx
    from onnxruntime.quantization import quant_pre_process

    path = pathlib.Path(path)
    with tempfile.TemporaryDirectory(prefix="keras_vit_int8_") as work:
        work = pathlib.Path(work)
        graph = onnx.load(source)
        einsum_to_matmul(graph)
        onnx.save(graph, work / "matmul.onnx")
        del graph
        # ONNX's shape inference alone: onnxruntime's symbolic one fails on tf2onnx's and
        # jax2onnx's graphs of a ViT ("Incomplete symbolic shape inference"), and its graph
        # optimization fuses the head's MatMul and bias into a Gemm, which quantize_dynamic
        # splits again under another name (onnxruntime optimizes the graph when it loads it).
        quant_pre_process(work / "matmul.onnx", work / "prepared.onnx", skip_optimization=True,
                          skip_symbolic_shape=True)
        quantize_onnx(work / "prepared.onnx", work / "int8.onnx", calibration_images)
        route = routes.route(format)
        if route.converter is None:
            _publish(work / "int8.onnx", path)
            return
        (work / "converted").mkdir()
        route.convert(work / "int8.onnx", work / "converted" / path.name)
        # the artifact's own file last, so that it names whole files (OpenVINO's .xml its .bin)
        for file in sorted((work / "converted").iterdir(), key=lambda file: file.name == path.name):
            _publish(file, path.with_name(file.name))


def _publish(source, path):
    """Copies the file `source` to `path` through a temporary file beside
    `path`, renamed when whole (`keras_vit.io.files.write_atomic`)."""
    from keras_vit.io import files

    with open(source, "rb") as file:
        files.write_atomic(path, lambda out: shutil.copyfileobj(file, out, 1 << 24))
