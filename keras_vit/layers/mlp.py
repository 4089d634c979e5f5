"""The two-layer GELU MLP of the Transformer encoder (Eq. 3), and the
activations of the ViT family (QuickGELU for CLIP, SwiGLU for DINOv2 giant)."""

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.config import BlockOptions
from keras_vit.layers.layer_norm import normalization


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """``Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout``.

    Kernels are Xavier-uniform and biases normal(1e-6), as the original code.

    Args:
        options: a `keras_vit.config.BlockOptions` (or its ``to_dict()``), of
            which the MLP reads ``mlp_dim`` (the hidden size);
            ``mlp_activation``: ``"gelu"`` (the paper's; tanh-approximated
            with ``gelu_approximate``, Flax's default and every Google
            checkpoint's, else the exact erf form of timm and HF),
            ``"quick_gelu"`` (``x * sigmoid(1.702 x)``, OpenAI's CLIP) or
            ``"swiglu"`` (``silu(a) * b`` of fc1's two halves ``[a; b]``,
            each `mlp_dim` wide: DINOv2 giant; Shazeer, "GLU Variants
            Improve Transformer", 2020); ``mlp_bias`` (biases on both dense
            layers, the original's; False: keras-hub's
            ``use_mlp_bias=False``, DINOv3's ``mlp_bias=False``); and
            ``mlp_norm`` (a norm of the hidden units before ``fc2``, named
            ``norm``: EVA-02's ``scale_mlp``, NormFormer's, Shleifer et al.,
            2021) of the block's ``norm_type``, ``layer_norm_epsilon`` and
            ``norm_bias``.
        dropout_rate: float. Dropout after each dense layer.
        seed: int or None. Seed of the dropout.

    Input shape: ``(..., D)``. Output shape: the same.

    ``Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout``; the output
    width D is the input width. Both kernels are Xavier uniform and both biases
    normal with stddev 1e-6, as in the original code. The sublayers are ``fc1``
    and ``fc2``; in `ViT` that gives ``encoder_block_{i}/mlp/fc1/kernel`` and so
    on.

    Examples:
        ```python
        import numpy as np
        from keras_vit.config import BlockOptions
        from keras_vit.layers import MlpBlock

        mlp = MlpBlock(BlockOptions(mlp_dim=128, gelu_approximate=False))
        x = np.random.default_rng(0).normal(size=(2, 17, 32)).astype("float32")
        print(tuple(mlp(x).shape))                        # -> (2, 17, 32)
        print(tuple(mlp.fc1.kernel.shape), tuple(mlp.fc2.kernel.shape))  # -> (32, 128) (128, 32)
        ```
    """

    def __init__(self, options, dropout_rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.options = BlockOptions.of(options)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=seed, dtype=self.dtype_policy, name="dropout"
        )

    def build(self, input_shape):
        o = self.options
        input_shape = tuple(input_shape)
        dense = dict(
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            use_bias=o.mlp_bias,
            dtype=self.dtype_policy,
        )
        gated = 2 if o.mlp_activation == "swiglu" else 1
        self.fc1 = keras.layers.Dense(gated * o.mlp_dim, name="fc1", **dense)
        self.fc2 = keras.layers.Dense(input_shape[-1], name="fc2", **dense)
        self.fc1.build(input_shape)
        self.norm = None
        if o.mlp_norm:
            self.norm = normalization(**o.norm_arguments, dtype=self.dtype_policy, name="norm")
            self.norm.build(input_shape[:-1] + (o.mlp_dim,))
        self.fc2.build(input_shape[:-1] + (o.mlp_dim,))

    def call(self, x, training=None):
        activation = self.options.mlp_activation
        if activation == "gelu":
            gelu = "gelu_approximate" if self.options.gelu_approximate else "gelu"
            x = kernels.dense(self.fc1, x, activation=gelu)
        elif activation == "quick_gelu":
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
        config.update(options=self.options.to_dict(), dropout_rate=self.dropout_rate, seed=self.seed)
        return config

    @classmethod
    def from_config(cls, config):
        if "options" not in config:  # saved with each option an argument, two renamed, the norm's a dict
            config = dict(config)
            norm = config.pop("norm", None)
            if norm is not None:
                config.update(mlp_norm=True, norm_type=norm.get("norm_type", "layer_norm"),
                              layer_norm_epsilon=norm.get("epsilon", 1e-6), norm_bias=norm.get("bias", True))
            options, config = BlockOptions.split(config, renamed=(("activation", "mlp_activation"),
                                                                  ("use_bias", "mlp_bias")))
            config["options"] = options
        return super().from_config(config)
