"""The patch tokens of a sequence laid out as a feature map (dense features)."""

import keras
from keras import ops

from keras_vit.config import standardize_data_format


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenMap(keras.layers.Layer):
    """Drops the prefix tokens of a sequence and reshapes its patch tokens
    to the patch grid: the dense features that DINO's
    ``get_intermediate_layers(..., reshape=True)`` and timm's
    ``forward_intermediates`` give, as a layer.

    The sequence reads ``[prefix; x_p^1 E; ...; x_p^N E]`` (Eq. 1, with the
    [class], distillation and register tokens as the prefix), the patches
    in row-major order over an ``(h, w)`` grid, as `PatchEmbedding` makes them.

    Args:
        num_prefix_tokens: int. Tokens before the patches (0 or more).
        grid_size: ``(h, w)``: patches per column and row.
        data_format: ``"channels_last"``, ``"channels_first"``, or None for
            Keras's image data format.
        return_prefix: bool. Also return the prefix tokens.

    Input shape: ``(batch, num_prefix_tokens + h * w, D)``.
    Output shape: ``(batch, h, w, D)`` (``(batch, D, h, w)`` channels
        first); with ``return_prefix``, a tuple of that and the prefix
        ``(batch, num_prefix_tokens, D)``.

    `ViT.feature_model` puts one after each block it reads. The layer has
    no weights.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.layers import TokenMap

        x = np.arange(2 * 7 * 3, dtype="float32").reshape(2, 7, 3)   # 1 prefix + 2 x 3 patches
        maps, prefix = TokenMap(1, (2, 3), "channels_last", return_prefix=True)(x)
        print(tuple(maps.shape), tuple(prefix.shape))   # -> (2, 2, 3, 3) (2, 1, 3)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(maps)[:, 1, 0], x[:, 4])
        first = TokenMap(1, (2, 3), "channels_first")(x)
        print(tuple(first.shape))                       # -> (2, 3, 2, 3)
        ```
    """

    def __init__(self, num_prefix_tokens=1, grid_size=(14, 14), data_format=None,
                 return_prefix=False, **kwargs):
        super().__init__(**kwargs)
        if int(num_prefix_tokens) < 0:
            raise ValueError(f"`num_prefix_tokens` must be 0 or more, got {num_prefix_tokens}.")
        grid_size = tuple(int(n) for n in grid_size)
        if len(grid_size) != 2 or min(grid_size) < 1:
            raise ValueError(f"`grid_size` must be two positive ints (h, w), got {grid_size}.")
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.grid_size = grid_size
        self.data_format = standardize_data_format(data_format)
        self.return_prefix = bool(return_prefix)

    def build(self, input_shape):
        tokens = tuple(input_shape)[1]
        expected = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        if tokens is not None and tokens != expected:
            raise ValueError(
                f"TokenMap takes {self.num_prefix_tokens} prefix tokens and a {self.grid_size} "
                f"grid of patches, {expected} tokens; the sequence has {tokens}. Give the "
                "`num_prefix_tokens` and `grid_size` of the model that made it.")

    def call(self, x):
        h, w = self.grid_size
        maps = ops.reshape(x[:, self.num_prefix_tokens:], (-1, h, w, ops.shape(x)[-1]))
        if self.data_format == "channels_first":
            maps = ops.transpose(maps, (0, 3, 1, 2))
        if self.return_prefix:
            return maps, x[:, :self.num_prefix_tokens]
        return maps

    def compute_output_shape(self, input_shape):
        batch, _, hidden_dim = tuple(input_shape)
        h, w = self.grid_size
        shape = (batch, h, w, hidden_dim)
        if self.data_format == "channels_first":
            shape = (batch, hidden_dim, h, w)
        if self.return_prefix:
            return shape, (batch, self.num_prefix_tokens, hidden_dim)
        return shape

    def get_config(self):
        config = super().get_config()
        config.update(num_prefix_tokens=self.num_prefix_tokens, grid_size=self.grid_size,
                      data_format=self.data_format, return_prefix=self.return_prefix)
        return config
