"""The two-layer GELU MLP of the Transformer encoder (Eq. 3), and the
activations of the ViT family (QuickGELU for CLIP, SwiGLU for DINOv2 giant)."""

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.config import MLP_ACTIVATIONS
from keras_vit.layers.layer_norm import normalization


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """``Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout``.

    Kernels are Xavier-uniform and biases normal(1e-6), as the original code.

    Args:
        mlp_dim: int. Hidden size of the MLP.
        dropout_rate: float. Dropout after each dense layer.
        gelu_approximate: bool. tanh approximation of GELU (Flax's default,
            used by all Google checkpoints) or the exact erf form (timm, HF).
        activation: ``"gelu"`` (the paper's), ``"quick_gelu"``
            (``x * sigmoid(1.702 x)``, OpenAI's CLIP) or ``"swiglu"``
            (``silu(a) * b`` of fc1's two halves ``[a; b]``, each
            `mlp_dim` wide: DINOv2 giant; Shazeer, "GLU Variants Improve
            Transformer", 2020).
        seed: int or None. Seed of the dropout.
        use_bias: bool. Biases on both dense layers (the original's); False
            for keras-hub's ``use_mlp_bias=False`` and DINOv3's
            ``mlp_bias=False``.
        norm: None, or the `keras_vit.layers.normalization` arguments of a
            norm of the hidden units before ``fc2`` (``norm``: EVA-02's
            ``scale_mlp``, NormFormer's; Shleifer et al., 2021).

    Input shape: ``(..., D)``. Output shape: the same.

    ``Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout``; the output
    width D is the input width. Both kernels are Xavier uniform and both biases
    normal with stddev 1e-6, as in the original code. The sublayers are ``fc1``
    and ``fc2``; in `ViT` that gives ``encoder_block_{i}/mlp/fc1/kernel`` and so
    on.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import MlpBlock

        mlp = MlpBlock(mlp_dim=128, gelu_approximate=False)
        x = np.random.default_rng(0).normal(size=(2, 17, 32)).astype("float32")
        print(tuple(mlp(x).shape))                        # -> (2, 17, 32)
        print(tuple(mlp.fc1.kernel.shape), tuple(mlp.fc2.kernel.shape))  # -> (32, 128) (128, 32)
        ```
    """

    def __init__(self, mlp_dim, dropout_rate=0.0, gelu_approximate=True, seed=None,
                 activation="gelu", use_bias=True, norm=None, **kwargs):
        super().__init__(**kwargs)
        if activation not in MLP_ACTIVATIONS:
            raise ValueError(f"Unknown MLP activation {activation!r}; use one of {MLP_ACTIVATIONS}.")
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.gelu_approximate = bool(gelu_approximate)
        self.activation = activation
        self.use_bias = bool(use_bias)
        self.norm_arguments = None if norm is None else dict(norm)
        self.seed = seed
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=seed, dtype=self.dtype_policy, name="dropout"
        )

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        dense = dict(
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            use_bias=self.use_bias,
            dtype=self.dtype_policy,
        )
        gated = 2 if self.activation == "swiglu" else 1
        self.fc1 = keras.layers.Dense(gated * self.mlp_dim, name="fc1", **dense)
        self.fc2 = keras.layers.Dense(input_shape[-1], name="fc2", **dense)
        self.fc1.build(input_shape)
        self.norm = None
        if self.norm_arguments is not None:
            self.norm = normalization(**self.norm_arguments, dtype=self.dtype_policy, name="norm")
            self.norm.build(input_shape[:-1] + (self.mlp_dim,))
        self.fc2.build(input_shape[:-1] + (self.mlp_dim,))

    def call(self, x, training=None):
        if self.activation == "gelu":
            gelu = "gelu_approximate" if self.gelu_approximate else "gelu"
            x = kernels.dense(self.fc1, x, activation=gelu)
        elif self.activation == "quick_gelu":
            x = kernels.dense(self.fc1, x)
            x = x * ops.sigmoid(1.702 * x)
        else:
            gate, x = ops.split(kernels.dense(self.fc1, x), 2, axis=-1)
            x = ops.silu(gate) * x
        x = self.dropout(x, training=training)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(kernels.dense(self.fc2, x), training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            gelu_approximate=self.gelu_approximate,
            seed=self.seed,
            activation=self.activation,
            use_bias=self.use_bias,
            norm=self.norm_arguments,
        )
        return config
