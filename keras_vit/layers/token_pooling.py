"""Reads the image representation y off the encoder output (Eq. 4)."""

import keras
from keras import ops

TOKEN_POOLINGS = ("token", "gap", "distillation")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """``"token"``: the [class] token's state ``z_L^0`` (Eq. 4).
    ``"gap"``: the mean over patch tokens (prefix tokens excluded), the global
    average pooling of the paper's Appendix D.3.
    ``"distillation"``: DeiT's distillation token, the second (Touvron et
    al., "Training data-efficient image transformers & distillation through
    attention", ICML 2021).

    Args:
        mode: ``"token"``, ``"gap"`` or ``"distillation"``.
        num_prefix_tokens: int. Tokens before the patches.

    Call arguments:
        x: ``(batch, tokens, D)``.
        patch_mask: None, or ``(batch, tokens - num_prefix_tokens)`` (bool
            or 0/1): NaFlex's patches; ``"gap"`` averages these alone, not
            the padding.

    Output shape: ``(batch, D)``.

    ``ViT(pooling="token")`` and ``ViT(pooling="gap")`` use this layer under
    the name ``pooling``; with ``"token"`` the LayerNorm of Eq. 4 is the
    preceding ``encoder_norm``. The layer has no weights.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.layers import TokenPooling

        x = np.arange(2 * 5 * 3, dtype="float32").reshape(2, 5, 3)   # 1 prefix + 4 patch tokens
        first = keras.ops.convert_to_numpy(TokenPooling("token")(x))
        mean = keras.ops.convert_to_numpy(TokenPooling("gap", num_prefix_tokens=1)(x))
        np.testing.assert_array_equal(first, x[:, 0])
        np.testing.assert_allclose(mean, x[:, 1:].mean(axis=1))
        ```
    """

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if mode not in TOKEN_POOLINGS:
            raise ValueError(f"Unknown pooling {mode!r}; use one of {TOKEN_POOLINGS}.")
        if mode == "token" and num_prefix_tokens < 1:
            raise ValueError("Token pooling needs a [class] token.")
        if mode == "distillation" and num_prefix_tokens < 2:
            raise ValueError("Distillation pooling needs a [class] and a distillation token.")
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, x, patch_mask=None):
        if self.mode == "token":
            return x[:, 0]
        if self.mode == "distillation":
            return x[:, 1]
        if patch_mask is None:
            return ops.mean(x[:, self.num_prefix_tokens:], axis=1)
        weights = ops.cast(patch_mask, x.dtype)[..., None]
        total = ops.sum(x[:, self.num_prefix_tokens:] * weights, axis=1)
        return total / ops.maximum(ops.sum(weights, axis=1), 1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode, num_prefix_tokens=self.num_prefix_tokens)
        return config
