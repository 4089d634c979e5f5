"""int8 projections on the backend's int8 kernels, beside the ``keras.ops``
form of what Keras's own int8 ``Dense`` and ``EinsumDense`` compute.

Keras 3.15's ``quantize("int8")`` keeps a layer's ``kernel`` as int8 and one
float32 ``kernel_scale`` per output channel (``kernel = round(w ·
kernel_scale)``, ``kernel_scale = 127 / max|w|`` over the contracted axes).
Its ``call`` quantizes the input per token (``AbsMaxQuantizer``: ``q =
round(x · s)``, ``s = 127 / (max|x| + 1e-7)`` over the contracted axes),
multiplies int8 by int8 into int32 and divides by ``s · kernel_scale``, then
adds the bias; the input's gradient is the float one through ``kernel /
kernel_scale``. That is `int8_dense_reference`, written in 2-D: every
projection of a ViT contracts its input's trailing axes with its kernel's
leading ones (`int8_projection`), so ``(tokens, fan_in) · (fan_in,
fan_out)``.

`int8_dense` runs it on a fast kernel where there is one (`route`'s
``int8_dense``), for inference and, on TensorFlow, training alike:

- TensorFlow's CPU, ``xla_int8``: the same computation compiled by XLA
  (``jit_compile``): its int8 dot, the quantization and the bias fused
  around it, the same numbers, Keras's gradient written out. TensorFlow's
  graph runs Keras's int8 ``MatMul`` at a third of float32's rate.
- PyTorch's CPU tensors outside autograd, ``dynamic_int8``:
  ``torch.ops.quantized.linear_dynamic`` (FBGEMM or oneDNN, what
  ``torch.ao.nn.quantized.dynamic.Linear`` runs) on the layer's own int8
  kernel and scales, packed once per layer (``linear_prepack``, a
  per-channel ``qint8`` weight at ``1 / kernel_scale``) and again after
  ``kernel`` or ``kernel_scale`` is assigned. Keras's call runs the int8
  product through ``torch.einsum`` in int32, off BLAS. Each token is
  divided by its ``max|x|`` first and its output multiplied back: Keras's
  per-token scaling, around PyTorch's quantizer, which rounds the whole
  input to 7 bits (``reduce_range``, as ``torch.ao``'s dynamic ``Linear``:
  FBGEMM's AVX2 kernels overflow their 16-bit sums at 8). The kernel's
  integers are Keras's; the input's rounding steps are twice Keras's, so
  the error is up to twice Keras's int8 error (`tests/test_kernels.py`
  bounds it). PyTorch 2.13 marks quantized tensors deprecated (its warning
  at the first packing). Under autograd (training, a gradient asked for)
  Keras's call runs, whose gradient it has.
- JAX: none. Keras's int8 call is already XLA's int8 dot
  (``preferred_element_type=int32``).

A LoRA-enabled, int4, float8 or otherwise quantized layer is called as
Keras calls it. What each route gains, measured per CPU, is in
docs/performance.md and benchmarks/results/.
"""

import functools
import math
import weakref

import keras
from keras import ops

from keras_vit.kernels._platform import upstream_gradient
from keras_vit.kernels.routes import int8_projection


def int8_dense(layer, x, path):
    """``layer(x)`` for an int8 `layer` (`int8_projection`), on `path`.

    Args:
        layer: a built ``keras.layers.Dense`` or ``EinsumDense`` quantized to
            int8, its kernel ``(*in_dims, *out_dims)``.
        x: ``(*batch, *in_dims)``, a tensor.
        path: `route`'s ``int8_dense`` path: ``"xla_int8"``,
            ``"dynamic_int8"``, or ``"reference"`` (`int8_dense_reference`).

    Returns:
        ``(*batch, *out_dims)``, the layer's compute dtype.
    """
    product = {"xla_int8": _xla_product, "dynamic_int8": _torch_product, "reference": _product}[path]
    return _projection(layer, x, product)


def int8_dense_reference(layer, x):
    """What Keras's int8 ``call`` computes, in ``keras.ops``: `x`
    ``(*batch, *in_dims)`` quantized per token, the int8 × int8 -> int32
    product with the kernel ``(fan_in, fan_out)``, divided by both scales,
    plus the bias: ``(*batch, *out_dims)``, equal to ``layer(x)``."""
    return _projection(layer, x, _product)


def _projection(layer, x, product):
    n = int8_projection(layer)
    kernel_shape = tuple(layer.kernel.shape)
    fan_in, out_dims = math.prod(kernel_shape[:n]), kernel_shape[n:]
    batch = tuple(ops.shape(x)[: x.ndim - n])
    y = product(layer, ops.reshape(x, batch + (fan_in,)))
    return ops.reshape(y, batch + out_dims)


def _operands(layer):
    """The int8 kernel ``(fan_in, fan_out)``, its scale ``(fan_out,)``, the
    bias ``(fan_out,)`` in the compute dtype (zeros without one) and the
    input quantizer's epsilon."""
    scale = ops.convert_to_tensor(layer.kernel_scale)
    fan_out = math.prod(scale.shape)
    kernel = ops.convert_to_tensor(layer.kernel)
    if layer.bias is None:
        bias = ops.zeros((fan_out,), layer.compute_dtype)
    else:
        bias = ops.reshape(ops.cast(layer.bias, layer.compute_dtype), (fan_out,))
    epsilon = layer.inputs_quantizer.get_config()["epsilon"]
    return ops.reshape(kernel, (-1, fan_out)), ops.reshape(scale, (fan_out,)), bias, epsilon


def _product(layer, x):
    return _int8_matmul(x, *_operands(layer), layer.compute_dtype)


def _int8_matmul(x, kernel, scale, bias, epsilon, dtype):
    """``x (..., fan_in)`` quantized per row, times the int8 ``kernel
    (fan_in, fan_out)`` in int32, divided by both scales, plus ``bias``:
    ``(..., fan_out)``."""
    q, x_scale = keras.quantizers.abs_max_quantize(x, axis=-1, epsilon=epsilon)
    y = ops.divide(ops.cast(ops.matmul(q, kernel), dtype), ops.multiply(x_scale, scale))
    return ops.add(y, bias)


def _xla_product(layer, x):
    kernel, scale, bias, epsilon = _operands(layer)

    @ops.custom_gradient
    def product(x, kernel, scale, bias):
        def grad(*args, upstream=None):
            upstream = upstream_gradient(args, upstream)
            float_kernel = ops.divide(ops.cast(kernel, layer.compute_dtype), scale)
            rows = tuple(range(upstream.ndim - 1))
            return ops.matmul(upstream, ops.transpose(float_kernel)), None, None, ops.sum(upstream, axis=rows)

        return _xla_int8_matmul()(x, kernel, scale, bias, epsilon, layer.compute_dtype), grad

    return product(x, kernel, scale, bias)


@functools.cache
def _xla_int8_matmul():
    import tensorflow as tf

    return tf.function(_int8_matmul, jit_compile=True, autograph=False)


# layer -> (kernel tensor, scale tensor, their version counters, packed weight)
_PACKED = weakref.WeakKeyDictionary()


def _torch_product(layer, x):
    """``linear_dynamic`` on each token divided by its ``max|x| + epsilon``,
    multiplied back, plus the bias (one ``addcmul``): ``x (..., fan_in)`` ->
    ``(..., fan_out)``."""
    import torch

    _, _, bias, epsilon = _operands(layer)
    x32 = x.to(torch.float32)
    row_max = torch.amax(torch.abs(x32), dim=-1, keepdim=True) + epsilon  # 5x vector_norm(x, inf) here
    y = torch.ops.quantized.linear_dynamic(x32 / row_max, _packed_kernel(layer), True)
    return ops.cast(torch.addcmul(bias.to(torch.float32), y, row_max), layer.compute_dtype)


def _packed_kernel(layer):
    """The layer's int8 kernel as ``linear_prepack``'s weight, ``qint8`` per
    output channel at ``1 / kernel_scale``: its integers unchanged. Packed on
    the first call and again when either variable holds another tensor or
    was written in place (``assign``, ``load_weights``: the tensor's
    version counter)."""
    import torch

    kernel, scale = layer.kernel.value, layer.kernel_scale.value
    versions = (kernel._version, scale._version)
    cached = _PACKED.get(layer)
    if cached is not None and cached[0] is kernel and cached[1] is scale and cached[2] == versions:
        return cached[3]
    with torch.no_grad():
        step = 1.0 / scale.reshape(-1).to(torch.float64)
        weight = (kernel.reshape(-1, step.numel()).t().to(torch.float64) * step[:, None]).to(torch.float32)
        weight = torch.quantize_per_channel(
            weight, step, torch.zeros_like(step, dtype=torch.int64), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(weight, None)
    _PACKED[layer] = (kernel, scale, versions, packed)
    return packed
