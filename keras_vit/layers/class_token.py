"""The learnable [class] embedding of Eq. 1 (and register tokens)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends learnable tokens to a sequence: ``z_0 = [x_class; x_p^1 E; ...]``.

    With ``num_tokens=1`` this is the [class] token of Eq. 1, whose state at the
    encoder output is the image representation y (Eq. 4). With more tokens it
    serves as the register tokens of Darcet et al. (2024).

    Args:
        num_tokens: int. How many tokens to prepend. Defaults to 1.
        initializer: initializer of the tokens. Defaults to zeros, as the
            original implementation.

    Input shape: ``(batch, sequence, hidden_dim)``.
    Output shape: ``(batch, num_tokens + sequence, hidden_dim)``.

    In `ViT` the [class] token is the layer ``class_token`` (variable
    ``class_token/tokens``, ``(1, 1, D)``) and the registers are the layer
    ``registers`` (``registers/tokens``, ``(1, R, D)``). ``registers`` runs
    before ``class_token``, so the sequence is ``[class] + registers + patches``.
    The tokens are cast to the input's dtype and broadcast over the batch.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.layers import ClassToken

        layer = ClassToken()
        x = np.ones((2, 16, 32), "float32")
        y = layer(x)
        print(tuple(y.shape))          # -> (2, 17, 32)
        print(float(keras.ops.sum(y[0, 0])))   # -> 0.0  # the token starts at zero
        print(tuple(layer.tokens.shape))  # -> (1, 1, 32)
        ```
    """

    def __init__(self, num_tokens=1, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        if int(num_tokens) < 1:
            raise ValueError(f"`num_tokens` must be at least 1, got {num_tokens}.")
        self.num_tokens = int(num_tokens)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        hidden_dim = tuple(input_shape)[-1]
        self.tokens = self.add_weight(
            shape=(1, self.num_tokens, hidden_dim),
            initializer=self.initializer,
            name="tokens",
        )

    def call(self, x):
        tokens = ops.cast(self.tokens, x.dtype)
        tokens = ops.broadcast_to(tokens, (ops.shape(x)[0],) + tuple(tokens.shape[1:]))
        return ops.concatenate([tokens, x], axis=1)

    def compute_output_shape(self, input_shape):
        batch, length, hidden_dim = tuple(input_shape)
        length = None if length is None else length + self.num_tokens
        return (batch, length, hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_tokens=self.num_tokens,
            initializer=keras.initializers.serialize(self.initializer),
        )
        return config
