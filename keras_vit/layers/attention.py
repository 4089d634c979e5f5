"""Multi-head dot-product attention (Eq. 5-8 of the paper's Appendix A)."""

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.config import BlockOptions
from keras_vit.layers.layer_norm import normalization
from keras_vit.layers.rotary_embedding import RotaryPositionEmbedding


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadDotProductAttention(keras.layers.Layer):
    """Multi-head attention with the kernel layout of Flax and Keras MHA.

    ``softmax(q kᵀ / sqrt(d_head)) v`` for each head, then the output
    projection. Query, key and value kernels are ``(D, heads, d_head)`` and the
    output kernel ``(heads, d_head, D)``: the layout of the original ``.npz``
    checkpoints, so they load as they are.

    The projections are Keras ``EinsumDense`` layers, called through
    `keras_vit.kernels.dense` (so quantization, float8 and LoRA apply to
    them); the attention itself, with the weights when they are asked for or
    dropped out, runs through `keras_vit.kernels.fused_attention` (Keras's
    ``dot_product_attention``, the weights written out, or a faster path with
    their numbers; the softmax in float32 under mixed precision).

    Args:
        options: a `keras_vit.config.BlockOptions` (or its ``to_dict()``),
            of which the attention reads ``num_heads``; ``qkv_bias`` and
            ``key_bias`` (biases on query, key and value; False ``key_bias``:
            on the query and value only, DINOv3's); ``qk_norm`` (a norm of
            each head's query and key, ``query_norm`` and ``key_norm`` with
            weights ``(head_dim,)`` shared by the heads, before their
            product: Dehghani et al., "Scaling Vision Transformers to 22
            Billion Parameters", 2023); ``attention_norm`` (a norm of the
            heads' outputs, a token's ``heads * head_dim`` together, weights
            ``(heads, head_dim)`` named ``out_norm``, before the output
            projection: EVA-CLIP's sub-LN, Fang et al., 2023); ``out_bias``;
            ``rope`` (the patch tokens' queries and keys turned by their
            grid position after the projections and `qk_norm`, DINOv3's);
            ``causal`` (token ``i`` attends to tokens ``0..i`` only: CLIP's
            text tower); and the norms' ``norm_type``, ``layer_norm_epsilon``
            and ``norm_bias``.
        dropout_rate: float. Dropout on the attention weights (a
            `TransformerEncoder`'s ``attention_dropout_rate``).
        seed: int or None. Seed of the dropout.
        head_dim: int or None. Size of each head; defaults to D / num_heads.

    Call arguments:
        query: ``(batch, Tq, D)``.
        value: ``(batch, Tv, D)``, attended to; defaults to ``query``
            (self-attention).
        return_attention_scores: bool. Also return the weights
            ``(batch, heads, Tq, Tv)`` (float32).
        key_mask: None, or ``(batch, Tv)`` (bool or 0/1): the tokens that
            may be attended to; the others (NaFlex's padding) get no weight.
        spatial_shapes: None, or int ``(batch, 2)``: NaFlex's patch grid of
            each image, for the rotary embeddings (`rope`).
        token_sizes: None, or ``(batch, Tv, 1)``: the patches each token
            holds after token merging; ``log(size)`` is added to each key's
            logits (ToMe's proportional attention, Bolya et al., 2023).
        return_keys: bool. Also return the keys ``(batch, Tv, heads,
            head_dim)`` (after `qk_norm`, before `rope`): token merging's
            metric.

    Output shape: ``(batch, Tq, D)``; then the weights and the keys, each if
    asked for.

    The query, key and value projections are ``EinsumDense`` layers with
    kernels ``(D, heads, head_dim)`` and biases ``(heads, head_dim)``; the
    output projection ``out`` has kernel ``(heads, head_dim, D)`` and bias
    ``(D,)`` (the layout of Flax, of Keras's ``MultiHeadAttention`` and of the
    original ``.npz`` files). All four kernels are Xavier uniform with the fans
    of the ``(D, heads * head_dim)`` matrix, as Flax's ``DenseGeneral``.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.config import BlockOptions
        from keras_vit.layers import MultiHeadDotProductAttention

        attention = MultiHeadDotProductAttention(BlockOptions(num_heads=4))
        x = np.random.default_rng(0).normal(size=(2, 10, 32)).astype("float32")
        y, weights = attention(x, return_attention_scores=True)
        print(tuple(y.shape), tuple(weights.shape))   # -> (2, 10, 32) (2, 4, 10, 10)
        print(tuple(attention.query.kernel.shape), tuple(attention.out.kernel.shape))  # -> (32, 4, 8) (4, 8, 32)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(weights).sum(-1), 1.0, rtol=1e-5)

        # Cross-attention: one query token attending to ten tokens.
        cross = MultiHeadDotProductAttention(BlockOptions(num_heads=4))
        print(tuple(cross(x[:, :1], x).shape))        # -> (2, 1, 32)
        ```
    """

    def __init__(self, options, dropout_rate=0.0, seed=None, head_dim=None, **kwargs):
        super().__init__(**kwargs)
        self.options = BlockOptions.of(options)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        self.head_dim = head_dim
        self.rotary = None if self.options.rope is None else RotaryPositionEmbedding(
            **self.options.rope, dtype=self.dtype_policy, name="rope")
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=seed, dtype=self.dtype_policy, name="dropout"
        )

    def build(self, query_shape, value_shape=None):
        o = self.options
        hidden_dim = tuple(query_shape)[-1]
        if self.head_dim is None and hidden_dim % o.num_heads:
            raise ValueError(
                f"hidden size {hidden_dim} is not divisible by num_heads "
                f"{o.num_heads}; pass head_dim or choose another num_heads."
            )
        head_dim = self.head_dim or hidden_dim // o.num_heads
        self._head_dim = head_dim
        projections = {}
        for name in ("query", "key", "value"):
            projections[name] = keras.layers.EinsumDense(
                "btd,dnh->btnh",
                output_shape=(None, o.num_heads, head_dim),
                bias_axes="nh" if o.qkv_bias and (name != "key" or o.key_bias) else None,
                kernel_initializer="glorot_uniform",  # fans of the (D, H*hd) view
                dtype=self.dtype_policy,
                name=name,
            )
        self.query, self.key, self.value = (projections[n] for n in ("query", "key", "value"))
        self.out = keras.layers.EinsumDense(
            "btnh,nhd->btd",
            output_shape=(None, hidden_dim),
            bias_axes="d" if o.out_bias else None,
            kernel_initializer="glorot_uniform",
            dtype=self.dtype_policy,
            name="out",
        )
        value_shape = tuple(value_shape or query_shape)
        query_heads, value_heads = (shape[:-1] + (o.num_heads, head_dim)
                                    for shape in (tuple(query_shape), value_shape))
        self.query.build(tuple(query_shape))
        self.key.build(value_shape)
        self.value.build(value_shape)
        self.out.build(query_heads)
        if self.rotary is not None:
            self.rotary.build(value_heads)
        self.output_norm = None
        if o.attention_norm:  # over each token's heads together
            self.output_norm = normalization(**o.norm_arguments, axis=(-2, -1),
                                             dtype=self.dtype_policy, name="out_norm")
            self.output_norm.build(query_heads)
        if o.qk_norm:
            self.query_norm, self.key_norm = (
                normalization(**o.norm_arguments, dtype=self.dtype_policy, name=name)
                for name in ("query_norm", "key_norm")
            )
            self.query_norm.build(query_heads)
            self.key_norm.build(value_heads)

    def call(self, query, value=None, training=None, return_attention_scores=False,
             key_mask=None, spatial_shapes=None, token_sizes=None, return_keys=False):
        value = query if value is None else value
        q = kernels.dense(self.query, query)  # (batch, Tq, heads, head_dim)
        k = kernels.dense(self.key, value)    # (batch, Tv, heads, head_dim)
        v = kernels.dense(self.value, value)
        if self.options.qk_norm:
            q, k = self.query_norm(q), self.key_norm(k)
        keys = k
        if self.rotary is not None:
            grids = {} if spatial_shapes is None else {"spatial_shapes": spatial_shapes}
            q, k = self.rotary(q, **grids), self.rotary(k, **grids)
        x = kernels.fused_attention(q, k, v, self._head_dim**-0.5, training=training,
                                    dropout=self.dropout, return_weights=return_attention_scores,
                                    causal=self.options.causal, key_mask=key_mask,
                                    key_offsets=None if token_sizes is None else ops.log(token_sizes[..., 0]))
        if return_attention_scores:
            x, weights = x
        if self.output_norm is not None:
            x = self.output_norm(x)
        x = kernels.dense(self.out, x)  # (batch, Tq, D)
        outputs = (x, *([weights] if return_attention_scores else []), *([keys] if return_keys else []))
        return outputs if len(outputs) > 1 else x

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape)

    def get_config(self):
        config = super().get_config()
        config.update(options=self.options.to_dict(), dropout_rate=self.dropout_rate, seed=self.seed,
                      head_dim=self.head_dim)
        return config

    @classmethod
    def from_config(cls, config):
        if "options" not in config:  # saved with each option an argument, three of them renamed
            options, config = BlockOptions.split(config, renamed=(
                ("use_bias", "qkv_bias"), ("norm_epsilon", "layer_norm_epsilon"), ("out_norm", "attention_norm")))
            config["options"] = options
        return super().from_config(config)
