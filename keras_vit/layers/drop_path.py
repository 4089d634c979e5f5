"""Stochastic depth (Huang et al., 2016), one decision per sample."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Drops a whole residual branch for a random subset of the batch.

    In training each sample's branch is zeroed with probability ``rate`` and
    the kept ones are scaled by ``1 / (1 - rate)``; at inference it is the
    identity.

    Args:
        rate: float in [0, 1). The probability of dropping the branch.
        seed: int or None. Seed of the random generator.

    Input shape: any, batch first. Output shape: the same.

    Not part of the paper's equations: it applies to the residual branches of
    Eq. 2 and 3. ``ViT(drop_path_rate=r)`` gives block ``i`` the rate
    ``r * i / (L - 1)``.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.layers import DropPath

        layer = DropPath(rate=0.5, seed=0)
        x = np.ones((8, 4, 2), "float32")
        print(keras.ops.convert_to_numpy(layer(x)).min())          # -> 1.0  # identity at inference
        y = keras.ops.convert_to_numpy(layer(x, training=True))
        print(sorted(set(y[:, 0, 0].tolist())))                    # -> [0.0, 2.0]  # per sample
        ```
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"`rate` must be in [0, 1), got {rate}.")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        # No weights that depend on the input: built now, so that a model
        # holding it is complete at construction (otherwise JAX's
        # predict_on_batch runs a whole eager forward pass to build it).
        self.built = True

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = keras.random.uniform(shape, seed=self.seed_generator) < keep
        return ops.where(mask, x / ops.cast(keep, x.dtype), ops.zeros_like(x))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config
