"""``x W + b``, then GELU: the projections of Eq. 2-3 and the MLP of Eq. 3.

One ``keras.ops`` path for every backend, plus three branches that
measurements proved worth it (docs/performance.md):

- TensorFlow, and JAX on a CPU: GELU's gradient is written out from its
  input (`gelu`), so the backward keeps that input alone instead of the
  intermediates autodiff kept (about 280 MB for ViT-S/16 at batch 8 on
  TensorFlow; on JAX one read of the MLP's activations fewer); on
  TensorFlow's CPU the forward and the gradient are each one XLA kernel.
- JAX on a CPU: the projection's two gradient GEMMs run in sequence
  (`matmul`), not at once on the same few cores.
- PyTorch on a CPU: oneDNN's linear, where PyTorch's own ``matmul`` runs
  through MKL. MKL takes a narrower code path on AMD's CPUs: on the Zen 5
  EPYC this project measured last, its float32 GEMMs on ViT-S/16's and B/16's
  projections reach 210-235 GFLOP/s and oneDNN's 380-550 (AVX-512 at full
  width), on a Zen 4 164-203 against 209-225.

  * Without autograd (``predict``, ``evaluate``, ``torch.no_grad``): the
    weights are packed once for oneDNN, and the bias and GELU are applied in
    the same pass. The packed weights are cached per variable and packed
    again whenever the variable changes (PyTorch's in-place version counter),
    so ``fit``, ``assign`` and ``load_weights`` are seen.
  * With autograd (``fit``, ``train_on_batch``): a ``torch.autograd.Function``
    whose forward and the gradients of the input and kernel are each one
    oneDNN matmul (the bias's is a sum); ViT-S/16 ``fit`` at batch 8 went
    from 6.8 to 11.1 images/s on the Zen 5.

All agree with the ``keras.ops`` path to float32 rounding.
"""

import functools
import math
import weakref

import keras
from keras import ops

from keras_vit.layers._utils import backend_platform
from keras_vit.layers._utils import upstream_gradient

_ACTIVATIONS = (None, "gelu", "gelu_approximate")


def dense(x, kernel, bias=None, activation=None, input_axes=1):
    """``activation(x · kernel + bias)`` over the last ``input_axes`` axes of ``x``.

    Args:
        x: ``(..., *kernel.shape[:input_axes])``.
        kernel: ``(*in_dims, *out_dims)``, a tensor or a ``keras.Variable``
            (pass the variable itself: PyTorch's inference path caches its
            packed form per variable).
        bias: ``out_dims`` or None.
        activation: None, ``"gelu"`` (exact, erf) or ``"gelu_approximate"``
            (tanh; the original code's).
        input_axes: how many trailing axes of ``x`` (leading axes of
            ``kernel``) are contracted: 1 for ``(D, N)`` kernels, 2 for the
            attention output ``(heads, head_dim, D)``.

    Returns:
        ``(..., *out_dims)`` in ``x``'s dtype.

    `MlpBlock` and `MultiHeadDotProductAttention` compute their projections
    with it, from their ``Dense`` / ``EinsumDense`` sublayers' variables (so
    the variables keep the checkpoint layout and names).

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import dense

        rng = np.random.default_rng(0)
        x = rng.normal(size=(2, 5, 8)).astype("float32")
        qkv_kernel = rng.normal(size=(8, 4, 2)).astype("float32")   # (D, heads, head_dim)
        print(dense(x, qkv_kernel).shape)                            # (2, 5, 4, 2)
        out_kernel = rng.normal(size=(4, 2, 8)).astype("float32")   # (heads, head_dim, D)
        y = dense(dense(x, qkv_kernel), out_kernel, input_axes=2)
        print(y.shape)                                               # (2, 5, 8)
        ```
    """
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}.")
    x, kernel, bias = (
        v if v is None or isinstance(v, keras.Variable) else ops.convert_to_tensor(v)
        for v in (x, kernel, bias)
    )
    in_dims = tuple(kernel.shape[:input_axes])
    out_dims = tuple(kernel.shape[input_axes:])
    if tuple(x.shape[x.ndim - input_axes:]) != in_dims:
        raise ValueError(
            f"dense: the last {input_axes} axes of x {tuple(x.shape)} must match "
            f"the kernel's input axes {in_dims} (kernel {tuple(kernel.shape)})."
        )
    batch = tuple(ops.shape(x)[: x.ndim - input_axes])
    fan_in, fan_out = math.prod(map(int, in_dims)), math.prod(map(int, out_dims))
    x2 = ops.reshape(x, batch + (fan_in,)) if input_axes != 1 else x
    branch = _onednn_branch(x2)
    if branch == "inference":
        y = _onednn_dense(x2, kernel, bias, activation, fan_in, fan_out)
    else:
        w = ops.reshape(ops.cast(kernel, x.dtype), (fan_in, fan_out))
        b = None if bias is None else ops.reshape(ops.cast(bias, x.dtype), (fan_out,))
        if branch == "autograd":
            y = _onednn_linear().apply(x2, w, b)
        else:
            y = matmul(x2, w)
            if b is not None:
                y = y + b
        if activation is not None:
            y = gelu(y, approximate=activation == "gelu_approximate")
    return ops.reshape(y, batch + out_dims) if len(out_dims) != 1 else y


def matmul(x, kernel):
    """``x · kernel`` for ``x (..., in)`` and ``kernel (in, out)``.

    ``keras.ops.matmul``; on JAX's CPU with the two products of its gradient
    in sequence: ``dx = dy kernelᵀ`` first, then ``dkernel = xᵀ dy``
    (``jax.lax.optimization_barrier``). XLA:CPU otherwise schedules the two
    GEMMs, independent of each other, to run at once, and on a machine of few
    cores they compete for the same threads. ViT-S/16 ``train_on_batch`` at
    batch 8 on the 2-core Zen 5: 10.22 -> 10.54 images/s (+3.1%, five
    interleaved rounds, faster in each). Same numbers as autodiff's.
    """
    if backend_platform() != ("jax", "cpu"):
        return ops.matmul(x, kernel)
    return _jax_sequential_matmul()(x, kernel)


@functools.cache
def _jax_sequential_matmul():
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def sequential_matmul(x, kernel):
        return jnp.matmul(x, kernel)

    def forward(x, kernel):
        return jnp.matmul(x, kernel), (x, kernel)

    def backward(saved, dy):
        x, kernel = saved
        dx = jnp.matmul(dy, kernel.T)
        dx, x = jax.lax.optimization_barrier((dx, x))  # dkernel's GEMM after dx's
        dkernel = jnp.matmul(x.reshape(-1, kernel.shape[0]).T, dy.reshape(-1, kernel.shape[1]))
        return dx, dkernel

    sequential_matmul.defvjp(forward, backward)
    return sequential_matmul


def gelu(x, approximate=True):
    """GELU; on TensorFlow and JAX's CPU its gradient keeps only ``x``.

    ``keras.ops.gelu`` on every backend, to float32 rounding. TensorFlow
    builds GELU from five to eight elementwise ops and its autodiff keeps their
    intermediates for the backward pass (about two more tensors of the MLP's
    width per block, by the memory measured). There the gradient is written
    out from ``x`` alone (``Φ(x) + x φ(x)``, or the derivative of the tanh
    form), which on ViT-S/16 training at batch 8 lowers the peak memory by
    about 280 MB (2052-2084 -> 1784-1793 MB, below keras-hub's 1854).
    On TensorFlow's CPU the forward and the gradient are each compiled by XLA
    into one pass over memory instead of one pass per op: a GELU forward and
    backward of ``(8, 197, 1536)`` 6.2 -> 2.6 ms (tanh form) on this project's
    2-core machine (docs/performance.md). On JAX's CPU autodiff keeps the
    forward's tanh (or erf) until the backward, which then reads it besides
    ``x`` and the upstream gradient; from ``x`` alone the backward recomputes
    it in the same pass, one read of the MLP's activations fewer: ViT-S/16
    ``train_on_batch`` at batch 8 on the 2-core Zen 5 10.60 -> 10.97 images/s
    (tanh form, six interleaved rounds, faster in each) and 10.08 -> 10.71
    (erf), ViT-B/16 3.19 -> 3.31. PyTorch's GELU already keeps only ``x``
    and runs in one pass.

    Args:
        x: any shape.
        approximate: bool. tanh form (the original code's) or exact (erf).

    Returns:
        ``x``'s shape and dtype.
    """
    if keras.backend.backend() != "tensorflow" and backend_platform() != ("jax", "cpu"):
        return ops.gelu(x, approximate=approximate)
    return (_gelu_tanh if approximate else _gelu_erf)(x)


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
    into one kernel), else ``fn`` itself: measured on the CPU only."""
    if backend_platform() != ("tensorflow", "cpu"):
        return fn
    if fn not in _XLA:
        import tensorflow as tf

        _XLA[fn] = tf.function(fn, jit_compile=True, autograph=False)
    return _XLA[fn]


# --------------------------------------------------------------------------
# PyTorch, CPU, no autograd: oneDNN's linear with packed weights

# id of a variable's torch tensor -> (version, dtype, packed); an entry goes with its tensor.
# (Not a WeakKeyDictionary: tensors compare elementwise, so they can't be dict keys by value.)
_PACKED = {}


def _onednn_branch(x):
    """``"inference"`` or ``"autograd"`` where oneDNN's linear runs ``x``'s
    projection (PyTorch, CPU, float32 or bfloat16), else None."""
    if keras.backend.backend() != "torch":
        return None
    import torch

    if not (
        x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.bfloat16)
        and torch.backends.mkldnn.is_available()
        and not torch.compiler.is_compiling()  # leave torch.compile's graphs to inductor
    ):
        return None
    return "autograd" if torch.is_grad_enabled() else "inference"


def _raw(value):
    """The variable's own tensor, uncast, so the cache outlives autocast reads.

    Under mixed precision ``Variable.value`` is a new cast tensor at every
    read, which would miss the cache and pack the weights again at every call
    (B/16 ``mixed_bfloat16`` inference: 72 packs and 324 copies, 85 of 500 ms).
    """
    if isinstance(value, keras.Variable):
        return value.value if value._value is None else value._value
    return value


def _packed_weight(kernel, dtype, fan_in, fan_out):
    import torch

    raw = _raw(kernel)
    version = (raw._version, raw.data_ptr())
    entry = _PACKED.get(id(raw))
    if entry is not None and entry[0] == version and entry[1] == dtype:
        return entry[2]
    if entry is None:
        weakref.finalize(raw, _PACKED.pop, id(raw), None)
    weight = raw.detach().reshape(fan_in, fan_out).t().to(dtype).contiguous()  # (out, in)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    _PACKED[id(raw)] = (version, dtype, packed)
    return packed


def _onednn_dense(x, kernel, bias, activation, fan_in, fan_out):
    import torch

    weight = _packed_weight(kernel, x.dtype, fan_in, fan_out)
    if bias is not None:
        bias = _raw(bias).detach().reshape(fan_out).to(x.dtype)
    if activation is None:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    approximate = "tanh" if activation == "gelu_approximate" else "none"
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "gelu", [], approximate)


# --------------------------------------------------------------------------
# PyTorch, CPU, autograd: oneDNN's linear, forward and backward

@functools.cache
def _onednn_linear():
    """A ``torch.autograd.Function``: ``x (..., in) · kernel (in, out) + bias``.

    The forward, ``dx = dy kernelᵀ`` and ``dkernel = xᵀ dy`` are each one
    oneDNN matmul, with the transposes passed as strides; ``dbias`` sums
    ``dy``. Built on first use (torch is imported only on its backend).
    """
    import torch

    linear = torch.ops.mkldnn._linear_pointwise  # (x, weight (out, in), bias, ...): x weightᵀ + bias

    class OneDNNLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, kernel, bias):
            ctx.save_for_backward(x, kernel)
            ctx.has_bias = bias is not None
            return linear(x, kernel.t(), bias, "none", [], "")

        @staticmethod
        def backward(ctx, dy):
            x, kernel = ctx.saved_tensors
            dy = dy.reshape(-1, dy.shape[-1])
            dx = dkernel = dbias = None
            if ctx.needs_input_grad[0]:
                dx = linear(dy, kernel, None, "none", [], "").reshape(x.shape)  # dy kernelᵀ
            if ctx.needs_input_grad[1]:
                dkernel = linear(x.reshape(-1, x.shape[-1]).t(), dy.t(), None, "none", [], "")  # xᵀ dy
            if ctx.has_bias and ctx.needs_input_grad[2]:
                dbias = dy.sum(0)
            return dx, dkernel, dbias

    return OneDNNLinear
