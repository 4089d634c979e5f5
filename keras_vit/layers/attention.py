"""Multi-head dot-product attention (Eq. 5-8 of the paper's Appendix A)."""

import keras
from keras import ops

from keras_vit.layers._utils import backend_platform
from keras_vit.layers._utils import upstream_gradient
from keras_vit.layers.projection import _onednn_branch
from keras_vit.layers.projection import dense

# Key tokens from which PyTorch's CPU inference runs `onednn_attention`: at
# 257 tokens (B/16 at 256 px) it measured level with the fused kernel, at 401
# 1.25x and at 577 (384 px) 1.4x faster (docs/performance.md).
ONEDNN_ATTENTION_MIN_TOKENS = 300


def fused_attention(query, key, value, scale, training=None):
    """``softmax(q kᵀ · scale) v`` through the backend's fused kernel.

    ``keras.ops.dot_product_attention``, except where a measurement proved a
    branch worth it:

    - JAX on a GPU in 16 bits with an odd number of tokens (197 with the
      [class] token). cuDNN's fused kernel takes gradients only of even
      lengths, so there JAX falls back to plain XLA attention in training.
      Instead the sequences are padded by one token that cuDNN's padding mask
      (``query_seq_lengths``, ``key_value_seq_lengths``) leaves out: the
      numbers of the unpadded attention. On an H100 (B/16, bf16, batch 128)
      one layer's attention forward and backward takes 0.67 ms instead of
      1.56 ms, a training step 50 ms instead of 64 ms.
    - JAX and TensorFlow on a CPU: `heads_first_attention`. There Keras's
      attention is two einsums over the tokens-first layout, which XLA:CPU
      runs at a quarter to a half of its matmul speed and TensorFlow 15-25%
      slower (forward and backward). PyTorch keeps its fused
      ``scaled_dot_product_attention``, which measured faster than either.
      JAX's inference (``training`` falsy) maps it over the images
      (`per_image_attention`).
    - PyTorch on a CPU without autograd, in float32, from
      ``ONEDNN_ATTENTION_MIN_TOKENS`` key tokens on: `onednn_attention`.

    Args:
        query: ``(batch, Tq, heads, head_dim)``.
        key: ``(batch, Tk, heads, head_dim)``.
        value: ``(batch, Tk, heads, head_dim)``.
        scale: float. Multiplies ``q kᵀ`` (``head_dim ** -0.5``).
        training: bool or None. Only chooses the kernel (JAX on a CPU): the
            result is the same function either way, with gradients.

    Returns:
        ``(batch, Tq, heads, head_dim)``.
    """
    platform = backend_platform()
    if platform == ("jax", "gpu") and _odd_length_16_bits(query, key):
        try:
            return padded_attention(query, key, value, scale, implementation="cudnn")
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # no cuDNN attention for this GPU, cuDNN or head size: Keras's path
    if platform == ("jax", "cpu") and not training:
        return per_image_attention(query, key, value, scale)
    if platform in (("jax", "cpu"), ("tensorflow", "cpu")):
        return heads_first_attention(query, key, value, scale)
    if platform[0] == "torch" and _onednn_attention_applies(query, key, value):
        return onednn_attention(query, key, value, scale)
    return ops.dot_product_attention(query, key, value, scale=scale)


def _onednn_attention_applies(query, key, value):
    """PyTorch: its tensors on the CPU, no autograd, float32, long enough."""
    import torch

    return (
        all(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in (query, key, value))
        and _onednn_branch(query) == "inference"
        and key.shape[1] >= ONEDNN_ATTENTION_MIN_TOKENS
    )


def onednn_attention(query, key, value, scale):
    """PyTorch only: ``softmax(q kᵀ · scale) v``, one head at a time, on oneDNN.

    PyTorch's fused CPU kernel (``scaled_dot_product_attention``) multiplies
    its blocks with MKL's GEMM, which runs at half of oneDNN's float32 speed
    on AMD's CPUs (``projection.py``); at long sequences attention is a
    larger share of the work (11% of B/16's FLOPs at 384 px, 4% at 224).
    Here each (image, head) is two oneDNN matmuls with the softmax between
    them, its ``(Tq, Tk)`` weights (1.3 MB at 577 tokens) still in cache.
    B/16's attention at batch 8 on the 2-core Zen 5: 577 tokens 48.6 ->
    32.8 ms, 1025 tokens 140 -> 86 ms (level at 257 tokens, hence
    ``ONEDNN_ATTENTION_MIN_TOKENS``). No autograd: inference only.

    Shapes as `fused_attention`; float32 tensors of PyTorch.
    """
    import torch

    linear = torch.ops.mkldnn._linear_pointwise  # (x, weight (out, in), bias, ...): x weightᵀ
    out = query.new_empty(tuple(query.shape[:3]) + (value.shape[-1],))
    for b in range(query.shape[0]):
        # (heads, T, head_dim), contiguous: oneDNN takes strided heads slowly.
        q = (query[b] * scale).transpose(0, 1).contiguous()
        k, v = (x[b].transpose(0, 1).contiguous() for x in (key, value))
        for h in range(q.shape[0]):
            weights = torch.softmax(linear(q[h], k[h], None, "none", [], ""), dim=-1)
            out[b, :, h] = linear(weights, v[h].t(), None, "none", [], "")
    return out


def heads_first_attention(query, key, value, scale):
    """``softmax(q kᵀ · scale) v`` as two batched matmuls over ``(batch, heads)``.

    The numbers of ``keras.ops.dot_product_attention`` (JAX's XLA attention:
    logits in float32 scaled after the product, softmax in float32, the
    weights cast to the value's dtype), in another layout: q, k and v are moved to
    ``(batch, heads, T, head_dim)`` first, so both products are plain batched
    matmuls with the batch dimensions leading. JAX's einsums over
    ``(batch, T, heads, head_dim)`` leave XLA:CPU a dot whose batch
    dimensions are not leading; it runs them at 46 GFLOP/s (batch 8) and
    18 GFLOP/s (batch 32) against 95 and 75 for this layout. One ViT-S/16
    layer's attention, ``jax.jit`` on this 2-core machine: forward 8.9-12.7
    -> 6.2-7.0 ms at batch 8 and 89-91 -> 28-37 ms at batch 32, forward and
    backward 21.5-22.9 -> 15.8-16.8 ms and 141-147 -> 100-111 ms. On
    TensorFlow (in a ``tf.function``) forward and backward at batch 8:
    S/16 16.3-19.6 -> 14.1-14.3 ms, B/16 33.0-35.0 -> 25.7-28.2 ms
    (docs/performance.md).

    Its gradient is written out (`_heads_first_softmax_attention`): on JAX
    it measured 3.0% faster per ViT-S/16 training step than autodiff's, on
    TensorFlow level.

    Shapes as `fused_attention`.
    """
    q, k, v = (ops.transpose(x, (0, 2, 1, 3)) for x in (query, key, value))
    # 16-bit q and k: their products are exact in float32, as JAX's bf16 x bf16
    # -> f32 dot, and the logits and softmax stay in float32.
    q, k = (ops.cast(x, "float32") for x in (q, k))
    x = _heads_first_softmax_attention(q, k, v, scale)  # (batch, heads, Tq, head_dim)
    return ops.transpose(x, (0, 2, 1, 3))


def _heads_first_softmax_attention(q, k, v, scale):
    """``softmax(q kᵀ · scale) v`` over ``(batch, heads, T, head_dim)``, float32
    ``q`` and ``k``, with its gradient written out.

    With ``w = softmax(q kᵀ · scale)`` and ``dy`` the gradient of ``w v``:
    ``dv = wᵀ dy``, ``dl = w ⊙ (dy vᵀ - rowsum(dy vᵀ ⊙ w)) · scale``,
    ``dq = dl k``, ``dk = dlᵀ q``. ``dk`` and ``dv`` are computed transposed,
    ``(qᵀ dl)ᵀ`` and ``(dyᵀ w)ᵀ``: autodiff's ``wᵀ dy`` contracts the leading
    axis of both operands, which XLA:CPU ran as plain loops at about 150
    GFLOP/s, and it materialized the scale broadcast to ``(batch, heads, Tq,
    Tk)`` (1.5 ms per ViT-S/16 layer at batch 8) for the fused products.
    """
    def transposed(x):
        return ops.swapaxes(x, -1, -2)

    @ops.custom_gradient
    def attention(q, k, v):
        weights = ops.softmax(ops.matmul(q, transposed(k)) * scale, axis=-1)
        cast_weights = ops.cast(weights, v.dtype)

        def grad(*args, upstream=None):
            dy = upstream_gradient(args, upstream)
            dw = ops.cast(ops.matmul(dy, transposed(v)), "float32")
            dl = weights * (dw - ops.sum(dw * weights, axis=-1, keepdims=True)) * scale
            return (
                ops.matmul(dl, k),
                transposed(ops.matmul(transposed(q), dl)),
                transposed(ops.matmul(transposed(dy), cast_weights)),
            )

        return ops.matmul(cast_weights, v), grad

    return attention(q, k, v)


def per_image_attention(query, key, value, scale):
    """`heads_first_attention` of one image at a time (``keras.ops.map``).

    For JAX's CPU inference. XLA:CPU runs the ``(batch * heads)``-batched
    products of `heads_first_attention` at 60-150 GFLOP/s; looping over the
    images (``jax.lax.map``) leaves it a batch of ``heads`` per product and
    that image's ``(heads, Tq, Tk)`` weights to softmax while in cache. B/16's
    attention forward at batch 8 on the 2-core Zen 5: 197 tokens 10.8 ->
    6.7 ms, 577 tokens (384 px) 138 -> 53 ms; B/16 ``predict`` at 384 px
    2.3 -> 3.2 images/s, at 224 px level. Its gradient is slower at 197-257
    tokens (S/16 ``fit`` 9.1 -> 8.7 images/s), so training keeps
    `heads_first_attention` (docs/performance.md).

    Shapes as `fused_attention`.
    """
    def one_image(qkv):
        q, k, v = (x[None] for x in qkv)
        return heads_first_attention(q, k, v, scale)[0]

    return ops.map(one_image, (query, key, value))


def _odd_length_16_bits(query, key):
    odd = query.shape[1] % 2 == 1 or key.shape[1] % 2 == 1
    return odd and keras.backend.standardize_dtype(query.dtype) in ("bfloat16", "float16")


def padded_attention(query, key, value, scale, implementation=None):
    """JAX only: attention over sequences padded to even lengths and masked.

    Each of ``Tq`` and ``Tk`` is padded by one zero token when odd; the padded
    keys are left out by ``key_value_seq_lengths`` and the padded query rows
    dropped, so the result is ``softmax(q kᵀ · scale) v`` of the inputs.
    ``implementation`` is that of ``jax.nn.dot_product_attention`` (``"cudnn"``
    on a GPU; ``"xla"`` computes the same anywhere).

    Shapes as `fused_attention`.
    """
    import jax
    import jax.numpy as jnp

    (batch, tq), tk = query.shape[:2], key.shape[1]

    def even(x, length):
        return jnp.pad(x, [(0, 0), (0, length % 2), (0, 0), (0, 0)])

    out = jax.nn.dot_product_attention(
        even(query, tq), even(key, tk), even(value, tk), scale=scale,
        query_seq_lengths=jnp.full((batch,), tq, "int32"),
        key_value_seq_lengths=jnp.full((batch,), tk, "int32"),
        implementation=implementation,
    )
    return out[:, :tq]


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadDotProductAttention(keras.layers.Layer):
    """Multi-head attention with the kernel layout of Flax and Keras MHA.

    ``softmax(q kᵀ / sqrt(d_head)) v`` for each head, then the output
    projection. Query, key and value kernels are ``(D, heads, d_head)`` and the
    output kernel ``(heads, d_head, D)``: the layout of the original ``.npz``
    checkpoints, so they load as they are.

    The attention itself runs through `fused_attention`
    (``keras.ops.dot_product_attention``) so each backend can use its fused
    kernel. When the weights are asked for, or
    attention dropout is active, it is computed explicitly (the same numbers),
    with the softmax in float32 under mixed precision.

    Args:
        num_heads: int. Number of heads.
        head_dim: int or None. Size of each head; defaults to D / num_heads.
        use_bias: bool. Biases on query, key and value. Defaults to True.
        dropout_rate: float. Dropout on the attention weights.
        seed: int or None. Seed of the dropout.

    Call arguments:
        query: ``(batch, Tq, D)``.
        value: ``(batch, Tv, D)``, attended to; defaults to ``query``
            (self-attention).
        return_attention_scores: bool. Also return the weights
            ``(batch, heads, Tq, Tv)`` (float32).

    Output shape: ``(batch, Tq, D)``.

    The query, key and value projections are ``EinsumDense`` layers with
    kernels ``(D, heads, head_dim)`` and biases ``(heads, head_dim)``; the
    output projection ``out`` has kernel ``(heads, head_dim, D)`` and bias
    ``(D,)`` (the layout of Flax, of Keras's ``MultiHeadAttention`` and of the
    original ``.npz`` files). All four kernels are Xavier uniform with the fans
    of the ``(D, heads * head_dim)`` matrix, as Flax's ``DenseGeneral``. By
    default the layer calls `fused_attention` (each backend's
    fused kernel); with ``return_attention_scores=True`` or when training with
    ``dropout_rate > 0`` it computes the same function explicitly (softmax in
    float32, also under mixed precision).

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.layers import MultiHeadDotProductAttention

        attention = MultiHeadDotProductAttention(num_heads=4)
        x = np.random.default_rng(0).normal(size=(2, 10, 32)).astype("float32")
        y, weights = attention(x, return_attention_scores=True)
        print(y.shape, weights.shape)                 # (2, 10, 32) (2, 4, 10, 10)
        print(attention.query.kernel.shape, attention.out.kernel.shape)   # (32, 4, 8) (4, 8, 32)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(weights).sum(-1), 1.0, rtol=1e-5)

        # Cross-attention: one query token attending to ten tokens.
        cross = MultiHeadDotProductAttention(num_heads=4)
        print(cross(x[:, :1], x).shape)               # (2, 1, 32)
        ```
    """

    def __init__(
        self, num_heads, head_dim=None, use_bias=True, dropout_rate=0.0, seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.head_dim = head_dim
        self.use_bias = use_bias
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=seed, dtype=self.dtype_policy, name="dropout"
        )

    def build(self, query_shape, value_shape=None):
        hidden_dim = tuple(query_shape)[-1]
        if self.head_dim is None and hidden_dim % self.num_heads:
            raise ValueError(
                f"hidden size {hidden_dim} is not divisible by num_heads "
                f"{self.num_heads}; pass head_dim or choose another num_heads."
            )
        head_dim = self.head_dim or hidden_dim // self.num_heads
        self._head_dim = head_dim
        projections = {}
        for name in ("query", "key", "value"):
            projections[name] = keras.layers.EinsumDense(
                "btd,dnh->btnh",
                output_shape=(None, self.num_heads, head_dim),
                bias_axes="nh" if self.use_bias else None,
                kernel_initializer="glorot_uniform",  # fans of the (D, H*hd) view
                dtype=self.dtype_policy,
                name=name,
            )
        self.query, self.key, self.value = (projections[n] for n in ("query", "key", "value"))
        self.out = keras.layers.EinsumDense(
            "btnh,nhd->btd",
            output_shape=(None, hidden_dim),
            bias_axes="d",
            kernel_initializer="glorot_uniform",
            dtype=self.dtype_policy,
            name="out",
        )
        value_shape = tuple(value_shape or query_shape)
        self.query.build(tuple(query_shape))
        self.key.build(value_shape)
        self.value.build(value_shape)
        self.out.build(tuple(query_shape)[:-1] + (self.num_heads, head_dim))

    def call(self, query, value=None, training=None, return_attention_scores=False):
        value = query if value is None else value
        q, k, v = (
            dense(x, layer.kernel, layer.bias)  # (batch, T, heads, head_dim)
            for x, layer in ((query, self.query), (value, self.key), (value, self.value))
        )
        scale = self._head_dim**-0.5
        weights = None
        if return_attention_scores or (training and self.dropout_rate > 0):
            logits = ops.einsum("bqhd,bkhd->bhqk", q, k)
            weights = ops.softmax(ops.cast(logits, "float32") * scale, axis=-1)
            dropped = self.dropout(ops.cast(weights, q.dtype), training=training)
            x = ops.einsum("bhqk,bkhd->bqhd", dropped, v)
        else:
            x = fused_attention(q, k, v, scale, training=training)
        x = dense(x, self.out.kernel, self.out.bias, input_axes=2)
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            use_bias=self.use_bias,
            dropout_rate=self.dropout_rate,
            seed=self.seed,
        )
        return config
