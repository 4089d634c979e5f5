"""The projections of Eq. 2-3 and the MLP's GELU (Eq. 3), each beside its
``keras.ops`` reference.

- `dense`: a Keras ``Dense`` or ``EinsumDense`` layer, then GELU. On JAX's
  CPU a plain float kernel is multiplied through `matmul`; an int8 kernel
  on TensorFlow's CPU and PyTorch's through `int8_dense` (XLA's int8 dot,
  PyTorch's dynamic int8 linear); everywhere else, and for an int4, float8
  or LoRA layer, the layer itself is called; a DoRA layer multiplies by
  `dora_kernel` everywhere.
- `gelu`: on TensorFlow and JAX's CPU with its gradient written out from its
  input; on TensorFlow's CPU the forward and the gradient are each one XLA
  kernel.
- `matmul`: on JAX's CPU the two products of its gradient run in sequence,
  and bfloat16 operands are multiplied with a float32 result, then rounded,
  their gradient's transposed bfloat16 operands written out transposed.

What each gains, measured, is in docs/performance.md.
"""

import functools
import math

import keras
from keras import ops

from keras_vit.kernels._platform import fast_paths_enabled
from keras_vit.kernels._platform import upstream_gradient
from keras_vit.kernels.quantized import int8_dense
from keras_vit.kernels.routes import REFERENCE
from keras_vit.kernels.routes import int8_projection
from keras_vit.kernels.routes import kernel_input_axes
from keras_vit.kernels.routes import plain_projection
from keras_vit.kernels.routes import route

ACTIVATIONS = (None, "gelu", "gelu_approximate")


def dense(layer, x, activation=None):
    """``activation(layer(x))`` for a built Keras ``Dense`` or ``EinsumDense``.

    Args:
        layer: a ``keras.layers.Dense`` or ``EinsumDense`` without an
            activation of its own.
        x: the layer's input, e.g. ``(batch, tokens, D)``.
        activation: None, ``"gelu"`` (exact, erf) or ``"gelu_approximate"``
            (tanh; the original code's).

    Returns:
        ``layer(x)``'s shape and dtype.

    The same numbers as `dense_reference` to float rounding. The layer is
    called (so whatever Keras does in its ``call`` applies: quantized kernels
    and their scales, float8, LoRA) unless `plain_projection` holds and JAX
    runs on a CPU, where its kernel goes through `matmul`, or
    `int8_projection` holds on TensorFlow's CPU or PyTorch's (outside
    autograd), where `int8_dense` computes Keras's int8 ``call`` on the
    backend's int8 kernels (on PyTorch to 7-bit rounding of the input). A
    DoRA layer (`has_dora`) is multiplied by `dora_kernel` everywhere, in
    export traces too: Keras's ``call`` knows no magnitudes.

    Example:
        ```python
        import keras
        import numpy as np
        from keras_vit import kernels

        layer = keras.layers.EinsumDense("btd,dnh->btnh", output_shape=(None, 4, 2), bias_axes="nh")
        x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
        layer.build(x.shape)
        y = kernels.dense(layer, x, activation="gelu")
        print(tuple(y.shape))                                # -> (2, 5, 4, 2)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(y),
                                   keras.ops.convert_to_numpy(kernels.dense_reference(layer, x, "gelu")),
                                   rtol=1e-5, atol=1e-6)
        ```
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}.")
    # DoRA: its own kernel on every route (Keras's call would leave the magnitudes out)
    path = None if has_dora(layer) else route("dense", layer=layer)
    if path == REFERENCE and int8_projection(layer) is not None:
        x = ops.convert_to_tensor(x)
        path = route("int8_dense", layer=layer, x=x)
    if path is None:
        y = _projection(layer, x, kernel_input_axes(layer), dora_kernel(layer))
    elif path == "matmul":
        y = _projection(layer, x, plain_projection(layer))
    elif path == REFERENCE:
        y = layer(x)
    else:
        y = int8_dense(layer, x, path)
    if activation is None:
        return y
    return gelu(y, approximate=activation == "gelu_approximate")


def dense_reference(layer, x, activation=None):
    """`dense` in Keras alone: ``layer(x)``, then ``keras.ops.gelu``."""
    y = layer(x)
    if activation is None:
        return y
    return ops.gelu(y, approximate=activation == "gelu_approximate")


def has_dora(layer):
    """Whether `layer` computes with `dora_kernel` (it has a
    ``dora_magnitude``: `keras_vit.variants.add_dora`)."""
    return getattr(layer, "dora_magnitude", None) is not None


def dora_kernel(layer):
    """The kernel of a DoRA layer (Liu et al., "DoRA: Weight-Decomposed
    Low-Rank Adaptation", ICML 2024): ``m * W / ||W||_c`` with ``W = W0 +
    (lora_alpha / lora_rank) A · B``, Keras's LoRA kernel (``layer.kernel``),
    its norm taken per output unit over the input axes
    (`kernel_input_axes`) and held out of the gradient (the paper's Sec.
    4.3, peft's ``DoraLinearLayer``), ``m`` the layer's ``dora_magnitude``
    (one value per output unit: the kernel's shape after its input axes).
    So ``x · dora_kernel + b`` is peft's ``m / ||W||_c (W0 x + s B A x) + b``.

    Example:
        ```python
        import keras
        import numpy as np
        from keras_vit import ViT
        from keras_vit.kernels.projection import dora_kernel

        model = ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8,
                    mlp_dim=16, num_classes=3)
        model.enable_dora(rank=2)
        fc1 = model.get_layer("encoder_block_0").mlp.fc1
        kernel = keras.ops.convert_to_numpy(dora_kernel(fc1))
        np.testing.assert_allclose(kernel, keras.ops.convert_to_numpy(fc1.kernel), rtol=1e-6)  # m = ||W0||
        print(tuple(fc1.dora_magnitude.shape))    # -> (16,)
        ```
    """
    return layer.kernel * (layer.dora_magnitude / ops.stop_gradient(kernel_norm(layer)))


def kernel_norm(layer):
    """The norm of each output unit's weights in `layer`'s kernel (its
    LoRA kernel, with LoRA), over the input axes (`kernel_input_axes`): the
    kernel's shape after them. DoRA's ``||W||_c``, and its magnitude's
    initial value."""
    return ops.sqrt(ops.sum(ops.square(layer.kernel), axis=tuple(range(kernel_input_axes(layer)))))


def _projection(layer, x, input_axes, kernel=None):
    """``x · kernel + bias`` through `matmul`, ``kernel`` (the layer's
    unless given)'s first `input_axes` axes contracted with ``x``'s last."""
    kernel = layer.kernel if kernel is None else kernel
    in_dims = tuple(kernel.shape[:input_axes])
    out_dims = tuple(kernel.shape[input_axes:])
    fan_in, fan_out = math.prod(in_dims), math.prod(out_dims)
    batch = tuple(ops.shape(x)[: x.ndim - input_axes])
    y = matmul(
        ops.reshape(x, batch + (fan_in,)),
        ops.reshape(ops.cast(kernel, x.dtype), (fan_in, fan_out)),
    )
    y = ops.reshape(y, batch + out_dims)
    if layer.bias is not None:
        y = y + ops.cast(layer.bias, y.dtype)
    return y


def matmul(x, kernel):
    """``x · kernel`` for ``x (..., in)`` and ``kernel (in, out)``.

    ``keras.ops.matmul``; on JAX's CPU with the two products of its gradient
    in sequence, ``dx = dy kernelᵀ`` first, then ``dkernel = xᵀ dy``
    (``jax.lax.optimization_barrier``): XLA:CPU otherwise runs the two
    independent GEMMs at once, on the same few cores. Autodiff's numbers.

    There, bfloat16 operands (``mixed_bfloat16``) are multiplied with a
    float32 result requested (``preferred_element_type``) and rounded to
    bfloat16 after: XLA:CPU (jaxlib 0.10) hands bf16 × bf16 -> f32 products
    to YNNPACK, which runs them on the CPU's bfloat16 dot-product units,
    and a bf16 -> bf16 product to Eigen at float32's speed or below. The
    sums are float32's either way; only their order differs. The gradient's
    transposed bfloat16 operands (``kernelᵀ``, ``xᵀ``) are written out
    transposed first, which YNNPACK's bfloat16 dots need: read transposed,
    XLA:CPU converts both operands to float32 and multiplies at float32's
    speed (docs/performance.md has the rates).
    """
    if route("matmul") != "sequential_gradient":
        return ops.matmul(x, kernel)
    return _jax_sequential_matmul()(x, kernel)


@functools.cache
def _jax_sequential_matmul():
    import jax
    import jax.numpy as jnp

    def product(a, b):
        if a.dtype == b.dtype == jnp.bfloat16:
            return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
        return jnp.matmul(a, b)

    @jax.custom_vjp
    def sequential_matmul(x, kernel):
        return product(x, kernel)

    def forward(x, kernel):
        return product(x, kernel), (x, kernel)

    def transposed(a):
        """``aᵀ`` for a 2-D ``a``; in bfloat16 written out in that layout.
        XLA folds a transpose into the dot that reads it (the operand read
        transposed), and XLA:CPU hands YNNPACK no bf16 dot with a transposed
        operand: it runs it in float32 instead. A row of padding, sliced off
        again, is not folded, so the dot gets ``aᵀ`` as a plain operand."""
        if a.dtype != jnp.bfloat16:
            return a.T
        return jax.lax.pad(a.T, jnp.zeros((), a.dtype), [(0, 1, 0), (0, 0, 0)])[:-1]

    def backward(saved, dy):
        x, kernel = saved
        dx = product(dy, transposed(kernel))
        dx, x = jax.lax.optimization_barrier((dx, x))  # dkernel's GEMM after dx's
        dkernel = product(transposed(x.reshape(-1, kernel.shape[0])), dy.reshape(-1, kernel.shape[1]))
        return dx, dkernel

    sequential_matmul.defvjp(forward, backward)
    return sequential_matmul


def gelu(x, approximate=True):
    """GELU; on TensorFlow and JAX's CPU its gradient keeps only ``x``.

    ``keras.ops.gelu`` (`gelu_reference`) to float32 rounding. Autodiff keeps
    GELU's intermediates for the backward pass (TensorFlow: its five to eight
    elementwise ops; JAX: the tanh or erf); here the gradient is written out
    from ``x`` alone (``Φ(x) + x φ(x)``, or the derivative of the tanh form).
    On TensorFlow's CPU the forward and the gradient are each compiled by XLA
    into one pass over memory. PyTorch's GELU already keeps only ``x``. In an
    export's graph on TensorFlow (`keras_layers_only`) the exact GELU is
    ``0.5 x (1 + erf(x / sqrt(2)))``: ``keras.ops.gelu``'s erfc has no ONNX op.

    Args:
        x: any shape.
        approximate: bool. tanh form (the original code's) or exact (erf).

    Returns:
        ``x``'s shape and dtype.
    """
    if route("gelu") == REFERENCE:
        if not approximate and not fast_paths_enabled() and keras.backend.backend() == "tensorflow":
            # An export's graph (`keras_layers_only`): TensorFlow writes the exact
            # GELU with erfc, which tf2onnx passes on as an op onnxruntime does not
            # have; Φ(x) through erf is the same function, and every exporter has Erf.
            return 0.5 * x * (1.0 + ops.erf(x * math.sqrt(0.5)))
        return gelu_reference(x, approximate)
    return (_gelu_tanh if approximate else _gelu_erf)(x)


def gelu_reference(x, approximate=True):
    """`gelu` in Keras alone: ``keras.ops.gelu``."""
    return ops.gelu(x, approximate=approximate)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _gelu_tanh_value(x):
    return ops.gelu(x, approximate=True)


def _gelu_tanh_gradient(x, upstream):
    x2 = x * x
    t = ops.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x2))
    slope = 0.5 * _SQRT_2_OVER_PI * x * (1 - t * t) * (1 + 3 * 0.044715 * x2)
    return upstream * (0.5 * (1 + t) + slope)


def _gelu_erf_value(x):
    return ops.gelu(x, approximate=False)


def _gelu_erf_gradient(x, upstream):
    cdf = 0.5 + 0.5 * ops.erf(x * math.sqrt(0.5))
    return upstream * (cdf + _INV_SQRT_2PI * x * ops.exp(-0.5 * x * x))


@ops.custom_gradient
def _gelu_tanh(x):
    def grad(*args, upstream=None):
        return _fused(_gelu_tanh_gradient)(x, upstream_gradient(args, upstream))

    return _fused(_gelu_tanh_value)(x), grad


@ops.custom_gradient
def _gelu_erf(x):
    def grad(*args, upstream=None):
        return _fused(_gelu_erf_gradient)(x, upstream_gradient(args, upstream))

    return _fused(_gelu_erf_value)(x), grad


_XLA = {}  # function -> its tf.function(jit_compile=True), one per function


def _fused(fn):
    """``fn`` compiled by XLA on TensorFlow's CPU (its elementwise ops fused
    into one kernel), else ``fn`` itself: measured on the CPU only. Its
    trace is made shape-generic once it is called with a second shape
    (``reduce_retracing``): eager calls of many shapes (`keras_vit.explain`,
    token merging's shrinking blocks) reuse it, where a trace per shape
    made TensorFlow log its retracing warning; XLA compiles each shape."""
    if route("gelu") != "xla_gradient_from_x":
        return fn
    if fn not in _XLA:
        import tensorflow as tf

        _XLA[fn] = tf.function(fn, jit_compile=True, autograph=False, reduce_retracing=True)
    return _XLA[fn]
