"""``softmax(q kᵀ · scale) v`` (Eq. 5-8 of the paper's Appendix A) through
the fastest path each backend has, beside its ``keras.ops`` reference
(`attention_reference`). What each path gains, measured, is in
docs/performance.md."""

import functools

import keras
from keras import ops

from keras_vit.kernels._platform import upstream_gradient
from keras_vit.kernels.routes import route


def fused_attention(query, key, value, scale, training=None, dropout=None, return_weights=False,
                    causal=False, key_mask=None, key_offsets=None):
    """``softmax(q kᵀ · scale) v`` through the path `routes.route` picks.

    `attention_reference` (``keras.ops.dot_product_attention``, or Eq. 5-8
    written out when the weights are returned or dropped out), except:

    - JAX on a GPU in 16 bits with an odd number of tokens (197 with the
      [class] token): cuDNN's fused kernel takes gradients only of even
      lengths, so the sequences are padded by one token that cuDNN's padding
      mask leaves out (`padded_attention`): the numbers of the unpadded
      attention.
    - JAX and TensorFlow on a CPU: `heads_first_attention`, both products as
      batched matmuls with the batch axes leading (Keras's two einsums over
      the tokens-first layout run slower there). JAX's inference (``training``
      falsy) maps it over the images (`per_image_attention`).

    Args:
        query: ``(batch, Tq, heads, head_dim)``.
        key: ``(batch, Tk, heads, head_dim)``.
        value: ``(batch, Tk, heads, head_dim)``.
        scale: float. Multiplies ``q kᵀ`` (``head_dim ** -0.5``).
        training: bool or None. Whether `dropout` is active; on JAX's CPU
            it also chooses the kernel (the same function either way, with
            gradients).
        dropout: a ``keras.layers.Dropout`` on the weights, or None.
        return_weights: bool. Also return the weights ``(batch, heads, Tq,
            Tk)`` (float32).
        causal: bool. Each query attends to the keys at its position and
            before (a text tower's causal mask, CLIP's): always
            `attention_reference`, whose Keras op takes the mask.
        key_mask: None, or ``(batch, Tk)``, bool or 0/1: the keys each query
            may attend to (NaFlex's padding left out); every query must have
            a key left. Taken by the heads-first paths of JAX's and
            TensorFlow's CPU, elsewhere by `attention_reference`.
        key_offsets: None, or float ``(batch, Tk)``: added to every query's
            logit of that key (token merging's proportional attention,
            ``log(size)``). Taken as `key_mask` is.

    Returns:
        ``(batch, Tq, heads, head_dim)``, and the weights if `return_weights`.
    """
    if causal:
        return attention_reference(query, key, value, scale, training, dropout, return_weights,
                                   causal=causal, key_mask=key_mask)
    path = route("attention", query=query, key=key, training=training, weights=return_weights,
                 dropout=dropout is not None and dropout.rate > 0)
    if key_mask is not None or key_offsets is not None:
        keys = dict(key_mask=key_mask, key_offsets=key_offsets)
        if path == "per_image":
            return per_image_attention(query, key, value, scale, **keys)
        if path == "heads_first":
            return heads_first_attention(query, key, value, scale, **keys)
        return attention_reference(query, key, value, scale, training, dropout, return_weights,
                                   **keys)
    if path == "padded_cudnn":
        try:
            return padded_attention(query, key, value, scale, implementation="cudnn")
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # no cuDNN attention for this GPU, cuDNN or head size: Keras's path
    if path == "per_image":
        return per_image_attention(query, key, value, scale)
    if path == "heads_first":
        return heads_first_attention(query, key, value, scale)
    return attention_reference(query, key, value, scale, training, dropout, return_weights)


def attention_reference(query, key, value, scale, training=None, dropout=None, return_weights=False,
                        causal=False, key_mask=None, key_offsets=None):
    """`fused_attention` in Keras alone: ``keras.ops.dot_product_attention``;
    with the weights returned or dropped out, Eq. 5-8 written out: the
    logits ``q kᵀ``, their softmax in float32 (under mixed precision too),
    `dropout` on the weights, then ``weights · v``. `causal`: query ``i``
    attends to keys ``0..i`` only (Keras's ``is_causal``; written out, the
    later keys' logits are set to -inf before the softmax). `key_mask`
    ``(batch, Tk)``: the keys where it is 0 or False get no weight (Keras's
    ``mask``; written out, their logits are -inf); every query must have a
    key left. `key_offsets` ``(batch, Tk)``: added to each key's logits
    (Keras's ``bias``)."""
    mask = None if key_mask is None else ops.cast(key_mask, "bool")[:, None, None, :]
    bias = None if key_offsets is None else ops.cast(key_offsets, "float32")[:, None, None, :]
    if not return_weights and not (training and dropout is not None and dropout.rate > 0):
        if bias is not None:
            bias = ops.cast(bias, query.dtype)
        return ops.dot_product_attention(query, key, value, bias=bias, mask=mask, scale=scale,
                                         is_causal=causal)
    logits = ops.cast(ops.einsum("bqhd,bkhd->bhqk", query, key), "float32") * scale
    if bias is not None:
        logits = logits + bias
    if causal:
        allowed = ops.arange(ops.shape(key)[1])[None, :] <= ops.arange(ops.shape(query)[1])[:, None]
        logits = ops.where(allowed, logits, float("-inf"))
    if mask is not None:
        logits = ops.where(mask, logits, float("-inf"))
    weights = ops.softmax(logits, axis=-1)
    dropped = weights if dropout is None else dropout(ops.cast(weights, query.dtype), training=training)
    x = ops.einsum("bhqk,bkhd->bqhd", ops.cast(dropped, value.dtype), value)
    return (x, weights) if return_weights else x


def heads_first_attention(query, key, value, scale, key_mask=None, key_offsets=None):
    """``softmax(q kᵀ · scale) v`` as two batched matmuls over ``(batch, heads)``.

    The numbers of ``keras.ops.dot_product_attention`` (JAX's XLA attention:
    logits in float32 scaled after the product, softmax in float32, the
    weights cast to the value's dtype), in another layout: q, k and v are
    moved to ``(batch, heads, T, head_dim)`` first, so both products are plain
    batched matmuls with the batch dimensions leading. Its gradient is written
    out (`_heads_first_softmax_attention`). `key_mask` ``(batch, Tk)``: the
    keys where it is 0 get no weight (their logits -inf); `key_offsets`
    ``(batch, Tk)``: added to each key's logits.

    Shapes as `fused_attention`.
    """
    q, k, v = (ops.transpose(x, (0, 2, 1, 3)) for x in (query, key, value))
    # 16-bit q and k: their products are exact in float32, as JAX's bf16 x bf16
    # -> f32 dot, and the logits and softmax stay in float32.
    q, k = (ops.cast(x, "float32") for x in (q, k))
    bias = _key_bias(key_mask, key_offsets)
    x = _heads_first_softmax_attention(q, k, v, scale, *bias)  # (batch, heads, Tq, head_dim)
    return ops.transpose(x, (0, 2, 1, 3))


def _key_bias(key_mask, key_offsets):
    """None, or ``(batch, 1, 1, Tk)`` float32 added to the logits: each
    key's offset (0 without), -inf where `key_mask` leaves it out; as a
    tuple of none or one."""
    if key_mask is None and key_offsets is None:
        return ()
    bias = 0.0 if key_offsets is None else ops.cast(key_offsets, "float32")[:, None, None, :]
    if key_mask is not None:
        bias = ops.where(ops.cast(key_mask, "bool")[:, None, None, :], bias, float("-inf"))
    return (bias,)


def _heads_first_softmax_attention(q, k, v, scale, *bias):
    """``softmax(q kᵀ · scale + bias) v`` over ``(batch, heads, T, head_dim)``,
    float32 ``q`` and ``k``, with its gradient written out; `bias`: none, or
    one float32 tensor that broadcasts to the logits (no gradient).

    With ``w = softmax(q kᵀ · scale)`` and ``dy`` the gradient of ``w v``:
    ``dv = wᵀ dy``, ``dl = w ⊙ (dy vᵀ - rowsum(dy vᵀ ⊙ w)) · scale``,
    ``dq = dl k``, ``dk = dlᵀ q``. ``dk`` and ``dv`` are computed transposed,
    ``(qᵀ dl)ᵀ`` and ``(dyᵀ w)ᵀ``: autodiff's ``wᵀ dy`` contracts the leading
    axis of both operands, which XLA:CPU runs as plain loops, and it
    materialized the scale broadcast to ``(batch, heads, Tq, Tk)``.
    """
    def transposed(x):
        return ops.swapaxes(x, -1, -2)

    @ops.custom_gradient
    def attention(q, k, v, *bias):
        logits = ops.matmul(q, transposed(k)) * scale
        weights = ops.softmax(logits + bias[0] if bias else logits, axis=-1)
        cast_weights = ops.cast(weights, v.dtype)

        def grad(*args, upstream=None):
            dy = upstream_gradient(args, upstream)
            dw = ops.cast(ops.matmul(dy, transposed(v)), "float32")
            dl = weights * (dw - ops.sum(dw * weights, axis=-1, keepdims=True)) * scale
            return (
                ops.matmul(dl, k),
                transposed(ops.matmul(transposed(q), dl)),
                transposed(ops.matmul(transposed(dy), cast_weights)),
                *(ops.zeros_like(b) for b in bias),
            )

        return ops.matmul(cast_weights, v), grad

    return attention(q, k, v, *bias)


def per_image_attention(query, key, value, scale, key_mask=None, key_offsets=None):
    """`heads_first_attention` of one image at a time (``keras.ops.scan`` on
    JAX, ``keras.ops.map`` elsewhere).

    For JAX's CPU inference: XLA:CPU runs the ``(batch * heads)``-batched
    products of `heads_first_attention` slowly; looping over the images
    leaves it a batch of ``heads`` per product and that image's
    ``(heads, Tq, Tk)`` weights to softmax while in cache. Its gradient is
    slower at ViT's sequence lengths, so training keeps
    `heads_first_attention`.

    Shapes as `fused_attention`.
    """
    masks = () if key_mask is None else (ops.cast(key_mask, "int32"),)
    offsets = () if key_offsets is None else (key_offsets,)
    step = _one_image_attention(scale, bool(masks), bool(offsets))
    images = (query, key, value, *masks, *offsets)
    if keras.backend.backend() == "jax":
        return ops.scan(step, (), images)[1]
    # TensorFlow's ops.scan stacks outputs of the carry's shape only
    return ops.map(lambda inputs: step((), inputs)[1], images)


@functools.lru_cache(maxsize=None)
def _one_image_attention(scale, masked, offset):
    """`per_image_attention`'s loop step, one image: the same function each
    time for the same arguments. Outside ``jax.jit`` JAX compiles each loop
    it is given, and keeps the program by the step function: a step made
    anew on each call (``keras.ops.map`` wraps its function in a new one
    each time) was compiled anew on each eager call, 0.2 s per attention
    layer, more than a tiny model's whole forward pass.

    Args:
        scale: float, as `fused_attention`'s.
        masked: bool. The inputs hold a ``key_mask`` after q, k and v.
        offset: bool. The inputs end with ``key_offsets``.

    Returns:
        A ``keras.ops.scan`` step: ``(carry, (q, k, v[, key_mask][,
        key_offsets]))`` of one image, each without the batch axis, to
        ``(carry, (Tq, heads, head_dim))``; the carry is ``()``.
    """
    def one_image(carry, inputs):
        q, k, v, *rest = (x[None] for x in inputs)
        mask = rest.pop(0) if masked else None
        return carry, heads_first_attention(q, k, v, scale, mask, rest[0] if offset else None)[0]

    return one_image


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
