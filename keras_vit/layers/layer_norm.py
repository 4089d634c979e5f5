"""LayerNorm (Ba et al., "Layer Normalization", 2016), before every block's
attention and MLP (Eq. 2-3) and after the encoder (Eq. 4); or, for the models
that use it (AIMv2), RMSNorm (Zhang and Sennrich, "Root Mean Square Layer
Normalization", 2019) in its place (`normalization`)."""

import keras

from keras_vit import kernels


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerNormalization(keras.layers.LayerNormalization):
    """Keras's ``LayerNormalization``, computed by `keras_vit.kernels.layer_norm`.

    Its arguments, weights (``gamma``, ``beta``) and configuration are
    Keras's; `keras_vit.kernels.route` decides whether it runs as the Keras
    layer computes it or with its gradient written out (the same numbers to
    float rounding). Every LayerNorm of keras_vit's models is one. It keeps
    Keras's class name: a ``.keras`` file keys a model's layers by it, so
    files saved with Keras's layer load into this one.

    Input shape: ``(..., D)`` (over the last axis by default). Output shape:
    the same, in the layer's compute dtype.

    Example:
        ```python
        import keras
        import numpy as np
        from keras_vit.layers import LayerNormalization

        x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
        norm = LayerNormalization(epsilon=1e-6, name="norm")
        keras_norm = keras.layers.LayerNormalization(epsilon=1e-6)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(norm(x)),
                                   keras.ops.convert_to_numpy(keras_norm(x)), atol=1e-5)
        print(tuple(norm(x).shape), [w.path for w in norm.weights])  # -> (2, 5, 8) ['norm/gamma', 'norm/beta']
        ```
    """

    def call(self, inputs):
        return kernels.layer_norm(self, inputs)


def normalization(norm_type="layer_norm", epsilon=1e-6, bias=True, **kwargs):
    """A norm over the last axis of a model of `norm_type`
    (`keras_vit.ViTConfig.norm_type`): a `LayerNormalization`
    (``"layer_norm"``: ``(x - mean) / sqrt(var + epsilon) * gamma + beta``,
    ``beta`` with `bias`), or Keras's ``RMSNormalization`` (``"rms_norm"``:
    ``x / sqrt(mean(x^2) + epsilon) * scale``, no bias). `kwargs`: the
    layer's (``name``, ``dtype``)."""
    if norm_type == "rms_norm":
        return keras.layers.RMSNormalization(epsilon=epsilon, **kwargs)
    return LayerNormalization(epsilon=epsilon, center=bias, **kwargs)
