"""LayerNorm over the last axis, beside its reference: the Keras layer."""

from keras import ops

from keras_vit.kernels._platform import backend_platform
from keras_vit.kernels._platform import fast_paths_enabled
from keras_vit.kernels._platform import upstream_gradient


def layer_norm(layer, x):
    """``layer(x)`` for a ``keras.layers.LayerNormalization`` over the last
    axis; on JAX's and TensorFlow's CPU with its gradient written out.

    ``x̂ = (x - mean) / sqrt(var + ε)``, ``y = x̂ γ + β``, in float32 and cast
    to the layer's compute dtype, as Keras computes it (to float rounding).
    The gradient: ``dx = (g - mean(g) - x̂ mean(g x̂)) / sqrt(var + ε)`` with
    ``g = dy γ``, ``dγ = Σ dy x̂``, ``dβ = Σ dy``. Autodiff of Keras's
    LayerNorm, built from elementwise ops and reductions, runs as more passes
    there; on XLA:CPU its reductions also end a chain that autodiff left (the
    residual stream's gradient recomputed in every consumer fusion, O(depth²)
    work). Elsewhere, for other axes or without centre and scale, and inside
    `keras_layers_only`, it is ``layer(x)`` (`layer_norm_reference`).

    Args:
        layer: a built ``keras.layers.LayerNormalization``.
        x: ``(..., D)``.

    Returns:
        ``x``'s shape, in ``layer.compute_dtype``.
    """
    axis = layer.axis if isinstance(layer.axis, int) else tuple(layer.axis)
    plain = (
        not fast_paths_enabled()
        or backend_platform() not in (("jax", "cpu"), ("tensorflow", "cpu"))
        or axis not in (-1, (-1,), x.ndim - 1, (x.ndim - 1,))
        or not (layer.center and layer.scale) or layer.rms_scaling
    )
    if plain:
        return layer_norm_reference(layer, x)
    y = _layer_norm(ops.cast(x, "float32"), ops.cast(layer.gamma, "float32"),
                    ops.cast(layer.beta, "float32"), layer.epsilon)
    return ops.cast(y, layer.compute_dtype)


def layer_norm_reference(layer, x):
    """`layer_norm` in Keras alone: ``layer(x)``."""
    return layer(x)


def _layer_norm(x, gamma, beta, epsilon):
    @ops.custom_gradient
    def normalized(x, gamma, beta):
        centered = x - ops.mean(x, axis=-1, keepdims=True)
        inverse_std = ops.rsqrt(ops.mean(centered * centered, axis=-1, keepdims=True) + epsilon)
        x_hat = centered * inverse_std

        def grad(*args, upstream=None):
            dy = upstream_gradient(args, upstream)
            g = dy * gamma
            dx = inverse_std * (
                g - ops.mean(g, axis=-1, keepdims=True)
                - x_hat * ops.mean(g * x_hat, axis=-1, keepdims=True)
            )
            axes = tuple(range(x.ndim - 1))
            return dx, ops.sum(dy * x_hat, axis=axes), ops.sum(dy, axis=axes)

        return x_hat * gamma + beta, grad

    return normalized(x, gamma, beta)
