"""One pre-LayerNorm Transformer encoder block (Eq. 2-3)."""

import keras
from keras import ops

from keras_vit.config import BlockOptions
from keras_vit.config import is_int
from keras_vit.layers import token_merging as tome
from keras_vit.layers.attention import MultiHeadDotProductAttention
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_norm import normalization
from keras_vit.layers.mlp import MlpBlock


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerEncoder(keras.layers.Layer):
    """``z' = MSA(LN(z)) + z`` (Eq. 2), then ``z = MLP(LN(z')) + z'`` (Eq. 3).

    The options of the block (heads, qk-norm, rotary embeddings, the key
    and output biases, the attention's output norm; the MLP's width,
    activation, biases and norm; LayerScale; the norms) are one
    `keras_vit.config.BlockOptions`, named as `ViTConfig`'s fields
    (`ViTConfig.block_options`); the block hands the same value to its
    attention and its MLP. Its own arguments are the rest: the dropouts
    and seed of training, this block's stochastic-depth rate, and token
    merging (ToMe's, on a trained model). Dropout follows the
    attention output projection and both MLP dense layers (never q/k/v);
    ``layer_scale_init`` (CaiT, DeiT III) multiplies each branch by a
    learned per-channel scale.

    Args:
        options: a `keras_vit.config.BlockOptions`, or its ``to_dict()``.
        dropout_rate: float. Dropout after dense layers. Defaults to 0.
        attention_dropout_rate: float. Dropout on the attention weights.
        drop_path_rate: float. Stochastic-depth rate of this block: each
            residual branch dropped per sample (Huang et al., "Deep Networks
            with Stochastic Depth", 2016).
        seed: int or None. Seed of the dropouts.
        token_merging: int. Tokens merged away between the attention and the
            MLP (ToMe's ``r``, Bolya et al., "Token Merging: Your ViT But
            Faster", ICLR 2023; `keras_vit.layers.token_merging`): the most
            similar pairs by the cosine of their keys averaged over heads,
            averaged weighted by their sizes; capped at half of the tokens
            that are not prefix tokens. 0: none.
        num_prefix_tokens: int. The first tokens ([class], distillation,
            registers), which token merging never merges.
        proportional_attention: bool. With `token_sizes`, ``log(size)``
            added to each key's logits (ToMe's ``prop_attn``).

    Call arguments:
        x: ``(batch, tokens, D)``.
        return_attention_scores: bool. Also return the attention weights
            ``(batch, heads, queries, tokens)``; the output is unchanged.
        num_queries: int or None. Update only the first ``num_queries``
            tokens: their queries attend to every token (keys and values come
            from all of them), and the MLP runs on them alone. The output is
            those rows of the full output, at a fraction of the cost: `ViT`
            with token pooling computes only the [class] token in its last
            block, the one row Eq. 4 reads.
        key_mask: None, or ``(batch, tokens)`` (bool or 0/1): the tokens
            attended to (NaFlex: the prefix tokens and each image's patches,
            not the padding).
        spatial_shapes: None, or int ``(batch, 2)``: NaFlex's patch grid of
            each image, for rotary position embeddings (`rope`).
        token_sizes: None, or float32 ``(batch, tokens, 1)``: the patches
            each token holds, after an earlier block's token merging.
        token_sources: None, or float32 ``(batch, tokens, N)``: which of the
            `N` first tokens each token holds (ToMe's source tracking),
            merged with the tokens.

    Output shape: ``(batch, tokens, D)``, or ``(batch, num_queries, D)``;
    with `token_merging` (and no `num_queries`), ``(x, sizes)`` or ``(x,
    sizes, sources)`` with `token_sources`, ``tokens - r`` each; then the
    attention weights if asked for.

    In `ViT` the blocks are ``encoder_block_0`` ... ``encoder_block_{L-1}``.
    Their sublayers are ``norm1``, ``attention`` (a `MultiHeadDotProductAttention`
    with ``query``, ``key``, ``value``, ``out``), ``norm2`` and ``mlp`` (an
    `MlpBlock` with ``fc1``, ``fc2``), plus the optional weights
    ``layer_scale_1`` and ``layer_scale_2``.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.config import BlockOptions
        from keras_vit.layers import TransformerEncoder

        block = TransformerEncoder(BlockOptions(num_heads=4, mlp_dim=128), drop_path_rate=0.1)
        x = np.random.default_rng(0).normal(size=(2, 17, 64)).astype("float32")
        y = block(x)
        y2, scores = block(x, return_attention_scores=True)
        print(tuple(y.shape), tuple(scores.shape))  # -> (2, 17, 64) (2, 4, 17, 17)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(y), keras.ops.convert_to_numpy(y2), atol=1e-5)
        print([w.path for w in block.weights][:4])
        # -> ['transformer_encoder/norm1/gamma', 'transformer_encoder/norm1/beta',
        # ->  'transformer_encoder/attention/query/kernel', 'transformer_encoder/attention/query/bias']
        ```
    """

    def __init__(self, options, dropout_rate=0.0, attention_dropout_rate=0.0, drop_path_rate=0.0,
                 seed=None, token_merging=0, num_prefix_tokens=0, proportional_attention=True, **kwargs):
        super().__init__(**kwargs)
        self.options = BlockOptions.of(options)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.seed = seed
        self.token_merging = int(token_merging)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.proportional_attention = bool(proportional_attention)
        policy = self.dtype_policy
        self.norm1 = normalization(**self.options.norm_arguments, dtype=policy, name="norm1")
        self.attention = MultiHeadDotProductAttention(
            self.options, self.attention_dropout_rate, seed=seed, dtype=policy, name="attention")
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=policy, name="dropout")
        self.norm2 = normalization(**self.options.norm_arguments, dtype=policy, name="norm2")
        self.mlp = MlpBlock(self.options, self.dropout_rate, seed=seed, dtype=policy, name="mlp")
        self.drop_path = DropPath(self.drop_path_rate, seed=seed, dtype=policy, name="drop_path")

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        self.norm1.build(input_shape)
        self.attention.build(input_shape)
        self.norm2.build(input_shape)
        self.mlp.build(input_shape)
        self.layer_scale = None
        if self.options.layer_scale_init is not None:
            self.layer_scale = [
                self.add_weight(
                    shape=(input_shape[-1],),
                    initializer=keras.initializers.Constant(self.options.layer_scale_init),
                    name=f"layer_scale_{i}",
                )
                for i in (1, 2)
            ]

    def _scaled(self, x, index):
        if self.layer_scale is None:
            return x
        return x * ops.cast(self.layer_scale[index], x.dtype)

    def merges(self, num_queries=None):
        """Whether a call merges tokens (and returns their sizes)."""
        return self.token_merging > 0 and num_queries is None

    def merged_count(self, tokens):
        """The tokens this block merges away from `tokens` (an int)."""
        if tokens is None:
            raise ValueError(
                "token merging needs the sequence length as a number, and this one is free "
                "(an image size or a sequence given at run time): give images of the model's "
                "image_size, or use a model without token merging (`with_token_merging(0)`).")
        return tome.merged_count(tokens, self.token_merging, self.num_prefix_tokens)

    def call(self, x, training=None, return_attention_scores=False, num_queries=None,
             key_mask=None, spatial_shapes=None, token_sizes=None, token_sources=None):
        tokens = self.norm1(x)
        queries = tokens
        if num_queries is not None:
            if not is_int(num_queries, 1):
                raise ValueError(f"num_queries must be a positive int or None, got {num_queries!r}.")
            x, queries = x[:, :num_queries], tokens[:, :num_queries]
        merges = self.merges(num_queries)
        extra = {name: value for name, value in (("key_mask", key_mask),
                                                 ("spatial_shapes", spatial_shapes))
                 if value is not None}
        if token_sizes is not None and self.proportional_attention:
            extra["token_sizes"] = token_sizes
        y = self.attention(
            queries, tokens, training=training,
            return_attention_scores=return_attention_scores, return_keys=merges, **extra,
        )
        if return_attention_scores or merges:
            y, *rest = y
            scores = rest[0] if return_attention_scores else None
        y = self.dropout(y, training=training)
        x = x + self.drop_path(self._scaled(y, 0), training=training)
        merged = ()
        if merges:  # ToMe: between the attention and the MLP
            r = self.merged_count(x.shape[1])
            if r:
                matching = tome.bipartite_soft_matching(ops.mean(rest[-1], axis=2), r,
                                                        self.num_prefix_tokens)
                x, token_sizes = tome.merge_weighted_average(x, token_sizes, matching,
                                                             self.num_prefix_tokens)
                if token_sources is not None:
                    token_sources = tome.merge(token_sources, matching, self.num_prefix_tokens)
            elif token_sizes is None:
                token_sizes = tome.unit_sizes(x)
            merged = (token_sizes,) if token_sources is None else (token_sizes, token_sources)
        y = self.mlp(self.norm2(x), training=training)
        x = x + self.drop_path(self._scaled(y, 1), training=training)
        outputs = (x, *merged, *([scores] if return_attention_scores else []))
        return outputs if len(outputs) > 1 else x

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, return_attention_scores=False, num_queries=None,
                            key_mask=None, spatial_shapes=None, token_sizes=None, token_sources=None):
        batch, tokens = x.shape[0], x.shape[1]
        queries = tokens if num_queries is None else num_queries
        merged = ()
        if self.merges(num_queries):
            queries = tokens - self.merged_count(tokens)
            merged = (keras.KerasTensor((batch, queries, 1), dtype="float32"),)
            if token_sources is not None:
                merged += (keras.KerasTensor((batch, queries, token_sources.shape[-1]),
                                             dtype="float32"),)
        y = keras.KerasTensor((batch, queries, *x.shape[2:]), dtype=self.compute_dtype)
        scores = (keras.KerasTensor((batch, self.options.num_heads, tokens if num_queries is None else
                                     num_queries, tokens), dtype="float32"),)
        outputs = (y, *merged, *(scores if return_attention_scores else ()))
        return outputs if len(outputs) > 1 else y

    def get_config(self):
        config = super().get_config()
        config.update(
            options=self.options.to_dict(),
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            drop_path_rate=self.drop_path_rate,
            seed=self.seed,
            token_merging=self.token_merging,
            num_prefix_tokens=self.num_prefix_tokens,
            proportional_attention=self.proportional_attention,
        )
        return config

    @classmethod
    def from_config(cls, config):
        if "options" not in config:  # saved with each option an argument of its own
            options, config = BlockOptions.split(config)
            config["options"] = options
        return super().from_config(config)
