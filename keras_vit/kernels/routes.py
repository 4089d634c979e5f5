"""Which path each operation takes: one table of fast paths (`FAST_PATHS`)
and one predicate (`route`) that names every condition under which an
operation leaves its fast path for its Keras reference.

Every projection (`dense`, `matmul`), GELU, LayerNorm, attention and
optimizer update in keras_vit asks `route` and nothing else. The platform
is looked up once per backend (`backend_platform`); inside a traced
function (``jit``, ``tf.function``) the question is asked once, while
tracing.
"""

import functools

import keras

from keras_vit.kernels._platform import fast_paths_enabled

# operation -> {(backend, platform): fast path}; platform None: any device.
# Anything not listed runs the operation's Keras reference.
FAST_PATHS = {
    "dense": {("jax", "cpu"): "matmul"},
    "int8_dense": {("tensorflow", "cpu"): "xla_int8", ("torch", None): "dynamic_int8"},  # PyTorch: CPU tensors
    "matmul": {("jax", "cpu"): "sequential_gradient"},
    "gelu": {("jax", "cpu"): "gradient_from_x", ("tensorflow", "cpu"): "xla_gradient_from_x"},
    "layer_norm": {("jax", "cpu"): "written_out_gradient", ("tensorflow", "cpu"): "written_out_gradient"},
    "attention": {
        ("jax", "cpu"): "heads_first",  # "per_image" for inference
        ("tensorflow", "cpu"): "heads_first",
        ("jax", "gpu"): "padded_cudnn",  # 16 bits, an odd number of tokens
    },
    "optimizer": {("tensorflow", None): "resource_apply", ("torch", None): "fused"},
}
REFERENCE = "reference"
WEIGHTS = "weights"  # attention that returns or drops out its weights: computed explicitly


def backend_platform():
    """``(backend, platform)``: ``"cpu"``, ``"gpu"``, ... for JAX and
    TensorFlow, looked up once per backend; None for PyTorch, whose tensors
    carry their own device."""
    backend = keras.backend.backend()
    return backend, _platform(backend)


@functools.cache
def _platform(backend):
    if backend == "jax":
        import jax

        return jax.default_backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    return None


def _fast_path(operation):
    backend, platform = backend_platform()
    paths = FAST_PATHS[operation]
    return paths.get((backend, platform), paths.get((backend, None)))


def route(operation, *, layer=None, x=None, query=None, key=None, training=None, weights=False,
          dropout=False, gradients=(), variables=()):
    """The path `operation` takes here: a name from `FAST_PATHS`,
    `REFERENCE` (its Keras layer or ``keras.ops``), or for attention
    `WEIGHTS` (the weights computed explicitly).

    The conditions, in order:

    1. Inside `keras_layers_only` (`ViT.export` traces there): `REFERENCE`.
    2. ``attention`` whose weights are asked for (`weights`) or dropped out
       (`dropout`, while `training`): `WEIGHTS`, on every backend.
    3. The backend and platform have no fast path for the operation:
       `REFERENCE` (PyTorch's layers stop here, before the layer is read;
       JAX's ``int8_dense`` too: Keras's int8 call is XLA's int8 dot there).
    4. What the Keras layer itself must compute: a ``dense`` whose layer is
       quantized (int8, int4, float8), LoRA-enabled, has an activation or an
       equation other than a plain contraction (`plain_projection`); an
       ``int8_dense`` whose layer is not such a contraction quantized to
       int8 by Keras's defaults (`int8_projection`); a ``layer_norm`` not
       over the last axis, without centre and scale, or RMS-scaled:
       `REFERENCE`.
    5. What the fast path needs: JAX's padded cuDNN attention a 16-bit
       `query` with an odd number of query or `key` tokens; TensorFlow's
       ``ResourceApply*`` kernels no distribution strategy, dense
       `gradients` and resource `variables`; PyTorch's fused update dense
       `gradients` and `variables` of one device and dtype; PyTorch's
       dynamic int8 linear a CPU tensor `x` whose gradient is not asked for
       (no autograd through it), one of the engines that run it
       (``torch.backends.quantized.engine`` ``x86``, ``fbgemm`` or
       ``onednn``), and no ``torch.compile`` or ``torch.export`` tracing.
       Otherwise `REFERENCE`.
    6. ``attention`` on JAX's CPU outside training: ``"per_image"``.

    Args:
        operation: a key of `FAST_PATHS`.
        layer: the Keras layer of ``dense``, ``int8_dense`` and ``layer_norm``.
        x: the input of ``layer_norm`` and ``int8_dense`` (a tensor).
        query, key: the attention's inputs, ``(batch, T, heads, head_dim)``.
        training: bool or None.
        weights, dropout: bool. Attention weights returned; attention
            dropout rate > 0.
        gradients, variables: an optimizer update's.

    Returns:
        str.
    """
    if operation not in FAST_PATHS:
        raise ValueError(f"unknown operation {operation!r}; one of {sorted(FAST_PATHS)}.")
    if not fast_paths_enabled():
        return REFERENCE
    if operation == "attention" and (weights or (training and dropout)):
        return WEIGHTS
    path = _fast_path(operation)
    if path is None:
        return REFERENCE
    if operation == "dense" and plain_projection(layer) is None:
        return REFERENCE
    if operation == "int8_dense" and int8_projection(layer) is None:
        return REFERENCE
    if operation == "layer_norm" and not _plain_layer_norm(layer, x):
        return REFERENCE
    if path == "padded_cudnn" and not _odd_length_16_bits(query, key):
        return REFERENCE
    if path == "resource_apply" and not _tensorflow_update(gradients, variables):
        return REFERENCE
    if path == "fused" and not _torch_update(gradients, variables):
        return REFERENCE
    if path == "dynamic_int8" and not _torch_int8_inference(x):
        return REFERENCE
    if path == "heads_first" and backend_platform() == ("jax", "cpu") and not training:
        return "per_image"
    return path


def plain_projection(layer):
    """How many trailing axes of the input a float, non-LoRA ``Dense`` or
    ``EinsumDense`` without activation contracts with the leading axes of its
    kernel (1 for ``Dense``); None for any other layer, which only its own
    ``call`` computes as Keras would."""
    if getattr(layer, "quantization_mode", None) is not None:
        return None
    return _contraction(layer)


def int8_projection(layer):
    """`plain_projection`'s count for a ``Dense`` or ``EinsumDense`` that
    Keras quantized to int8 (``quantize("int8")`` or an ``int8_from_*``
    policy) with its default input quantizer: the input quantized per
    token, ``AbsMaxQuantizer`` to ``[-127, 127]`` over the contracted axes;
    None for any other layer (float, int4, float8, LoRA-enabled, weight-only
    or another quantizer, an activation)."""
    if getattr(layer, "quantization_mode", None) != "int8":
        return None
    quantizer = getattr(layer, "inputs_quantizer", None)
    if type(quantizer) is not keras.quantizers.AbsMaxQuantizer:
        return None
    config = quantizer.get_config()
    if tuple(config["value_range"]) != (-127, 127) or config["output_dtype"] != "int8":
        return None
    return _contraction(layer)


def _contraction(layer):
    """`plain_projection`'s count, whatever the layer's kernel dtype."""
    if getattr(layer, "lora_enabled", False):
        return None
    return kernel_input_axes(layer)


def kernel_input_axes(layer):
    """How many leading axes of the kernel of a ``Dense`` or ``EinsumDense``
    `layer` its input's last axes contract with, the rest being its output
    units (1 for ``Dense``; 2 for ``"btnh,nhd->btd"``); None for another
    layer, an activation, or an equation of another form."""
    if not isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)):
        return None
    if layer.activation is not keras.activations.linear:
        return None
    if isinstance(layer, keras.layers.Dense):
        return 1
    equation = layer.equation
    if "." in equation:
        return None
    inputs, rest = equation.split(",")
    kernel, output = rest.split("->")
    contracted = [axis for axis in kernel if axis in inputs]
    n = len(contracted)
    if not n or kernel[:n] != inputs[-n:] or output != inputs[:-n] + kernel[n:]:
        return None
    return n


def _plain_layer_norm(layer, x):
    axis = layer.axis if isinstance(layer.axis, int) else tuple(layer.axis)
    last = x.ndim - 1
    return axis in (-1, (-1,), last, (last,)) and layer.center and layer.scale and not layer.rms_scaling


def _odd_length_16_bits(query, key):
    odd = query.shape[1] % 2 == 1 or key.shape[1] % 2 == 1
    return odd and keras.backend.standardize_dtype(query.dtype) in ("bfloat16", "float16")


def _tensorflow_update(gradients, variables):
    import tensorflow as tf

    return (
        not tf.distribute.has_strategy()
        and not any(isinstance(g, tf.IndexedSlices) for g in gradients)
        and all(hasattr(v, "handle") for v in variables)  # Keras's variable, or its tf.Variable
    )


def _torch_update(gradients, variables):
    return all(not g.is_sparse for g in gradients) and len(
        {(v.value.device, v.value.dtype) for v in variables}
    ) == 1


def _torch_int8_inference(x):
    import torch

    return (
        x.device.type == "cpu"
        and not (torch.is_grad_enabled() and x.requires_grad)
        and torch.backends.quantized.engine in ("x86", "fbgemm", "onednn")
        and not torch.compiler.is_compiling()
    )
