"""Visual prompt tuning's learned tokens (Jia et al., "Visual Prompt
Tuning", ECCV 2022)."""

import math

import keras
from keras import ops


def vpt_initializer(patch_size, hidden_dim, seed=None):
    """VPT's initialisation of the prompts: uniform in ``[-v, v]`` with
    ``v = sqrt(6 / (3 * P_h * P_w + D))``, the Xavier bound of the patch
    embedding's ``(3 * P_h * P_w, D)`` matrix (KMnP/vpt
    ``src/models/vit_prompt/vit.py``, ``val``)."""
    bound = math.sqrt(6.0 / (3 * math.prod(patch_size) + hidden_dim))
    return keras.initializers.RandomUniform(-bound, bound, seed=seed)


@keras.saving.register_keras_serializable(package="keras_vit")
class VisualPrompts(keras.layers.Layer):
    """Puts learned prompt tokens between the prefix tokens and the patches.

    VPT (Jia et al., ECCV 2022) learns ``num_tokens`` tokens that join the
    sequence after the position embeddings, after the [class] token (and
    here the distillation token and registers) and before the patches:
    ``[prefix; P; patches]``. Shallow VPT inserts them once, before the
    first block; deep VPT (``depth`` = the number of blocks) gives each
    block ``i >= 1`` its own, replacing the prompt tokens the block before
    it wrote. The prompts pass through dropout (VPT's ``prompt_dropout``).

    Args:
        num_tokens: int >= 1. Prompt tokens per block, VPT's ``NUM_TOKENS``.
        depth: int >= 1. 1 for shallow VPT, the number of blocks for deep.
        num_prefix_tokens: int >= 0. Tokens before the prompts.
        dropout_rate: float. Dropout on the prompts in training.
        initializer: the prompts' initializer (`vpt_initializer` in `ViT`).

    Call arguments:
        x: ``(batch, tokens, D)``.
        block: int. 0 inserts the first prompts: ``(batch, tokens + N, D)``;
            ``i >= 1`` (deep) replaces tokens ``[prefix, prefix + N)`` with
            prompts ``i``, the shape unchanged.

    The variable is ``prompts`` ``(depth, num_tokens, D)``: VPT's
    ``prompt_embeddings`` in row 0, its ``deep_prompt_embeddings`` after.

    Example:
        ```python
        import numpy as np
        from keras_vit.layers import VisualPrompts

        layer = VisualPrompts(num_tokens=3, depth=2, num_prefix_tokens=1)
        x = np.zeros((2, 5, 8), "float32")        # [class] and four patches
        y = layer(x)                               # [class; 3 prompts; patches]
        print(tuple(y.shape), tuple(layer(y, block=1).shape))   # -> (2, 8, 8) (2, 8, 8)
        print(tuple(layer.prompts.shape))          # -> (2, 3, 8)
        ```
    """

    def __init__(self, num_tokens, depth=1, num_prefix_tokens=1, dropout_rate=0.0,
                 initializer="glorot_uniform", seed=None, **kwargs):
        super().__init__(**kwargs)
        for name, value, lowest in (("num_tokens", num_tokens, 1), ("depth", depth, 1),
                                    ("num_prefix_tokens", num_prefix_tokens, 0)):
            if int(value) < lowest:
                raise ValueError(f"`{name}` must be at least {lowest}, got {value}.")
        self.num_tokens = int(num_tokens)
        self.depth = int(depth)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.dropout_rate = float(dropout_rate)
        self.initializer = keras.initializers.get(initializer)
        self.seed = seed
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=self.dtype_policy,
                                            name="dropout")

    def build(self, input_shape):
        self.prompts = self.add_weight(shape=(self.depth, self.num_tokens, tuple(input_shape)[-1]),
                                       initializer=self.initializer, name="prompts")

    def call(self, x, block=0, training=None):
        if not 0 <= block < self.depth:
            raise ValueError(f"block {block} has no prompts: this layer has {self.depth} "
                             "row(s) of them (1 for shallow VPT).")
        prompts = ops.cast(self.prompts[block], x.dtype)
        prompts = ops.broadcast_to(prompts[None], (ops.shape(x)[0], *prompts.shape))
        prompts = self.dropout(prompts, training=training)
        start = self.num_prefix_tokens
        rest = x[:, start:] if block == 0 else x[:, start + self.num_tokens:]
        return ops.concatenate([x[:, :start], prompts, rest], axis=1)

    def get_config(self):
        config = super().get_config()
        config.update(num_tokens=self.num_tokens, depth=self.depth,
                      num_prefix_tokens=self.num_prefix_tokens, dropout_rate=self.dropout_rate,
                      initializer=keras.initializers.serialize(self.initializer), seed=self.seed)
        return config
