"""Multihead attention pooling (MAP), the head of big_vision's ViTs."""

import keras
from keras import ops

from keras_vit.config import BlockOptions
from keras_vit.layers.attention import MultiHeadDotProductAttention
from keras_vit.layers.layer_norm import normalization
from keras_vit.layers.mlp import MlpBlock


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadAttentionPooling(keras.layers.Layer):
    """Pools a token sequence with a learned probe (Lee et al., 2019).

    ``y = MSA(probe, z)``, then ``y = y + MLP(LN(y))``; the probe's output is
    the image representation. Parameter names follow big_vision's ``MAPHead``.

    Args:
        num_heads: int. Attention heads.
        mlp_dim: int or None. MLP hidden size; defaults to 4 * D.
        layer_norm_epsilon: float. Defaults to 1e-6.
        gelu_approximate: bool. tanh (big_vision) or exact GELU.
        mlp_activation: the MLP's activation (`MlpBlock`'s ``activation``).
        norm_bias: bool. The LayerNorm's bias (beta); False: ``center=False``.
        norm_type: str. ``"layer_norm"`` or ``"rms_norm"`` (an RMSNorm instead).

    Call arguments:
        x: ``(batch, tokens, D)``.
        key_mask: None, or ``(batch, tokens)`` (bool or 0/1): the tokens the
            probe attends to (NaFlex: not the padding).

    Output shape: ``(batch, D)``.

    The variables in `ViT` follow big_vision's ``MAPHead``: ``pooling/probe``
    ``(1, 1, D)`` (Xavier uniform);
    ``pooling/attention/{query,key,value}/kernel`` ``(D, H, D/H)`` and ``/bias``
    ``(H, D/H)``; ``pooling/attention/out/kernel`` ``(H, D/H, D)`` and ``/bias``
    ``(D,)``; ``pooling/norm/gamma``, ``/beta`` ``(D,)``; ``pooling/mlp/fc1/...``,
    ``pooling/mlp/fc2/...`` as in `MlpBlock`. The attention always has q/k/v
    biases, whatever ``qkv_bias`` the encoder uses, and the head has no dropout.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import MultiHeadAttentionPooling

        pool = MultiHeadAttentionPooling(num_heads=4, mlp_dim=64)
        tokens = np.random.default_rng(0).normal(size=(2, 16, 32)).astype("float32")
        print(tuple(pool(tokens).shape))  # -> (2, 32)
        print(tuple(pool.probe.shape))   # -> (1, 1, 32)
        ```
    """

    def __init__(
        self, num_heads, mlp_dim=None, layer_norm_epsilon=1e-6, gelu_approximate=True,
        mlp_activation="gelu", norm_bias=True, norm_type="layer_norm", **kwargs,
    ):
        super().__init__(**kwargs)
        self.norm_type = norm_type
        self.mlp_activation = mlp_activation
        self.norm_bias = bool(norm_bias)
        self.num_heads = int(num_heads)
        self.mlp_dim = mlp_dim
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu_approximate = bool(gelu_approximate)
        self.attention = MultiHeadDotProductAttention(
            BlockOptions(num_heads=self.num_heads), dtype=self.dtype_policy, name="attention"
        )
        self.norm = normalization(self.norm_type, self.layer_norm_epsilon, self.norm_bias,
                                  dtype=self.dtype_policy, name="norm")

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        hidden_dim = input_shape[-1]
        self.probe = self.add_weight(
            shape=(1, 1, hidden_dim),
            initializer="glorot_uniform",
            name="probe",
        )
        self.mlp = MlpBlock(
            BlockOptions(mlp_dim=self.mlp_dim or 4 * hidden_dim, gelu_approximate=self.gelu_approximate,
                         mlp_activation=self.mlp_activation),
            dtype=self.dtype_policy, name="mlp",
        )
        probe_shape = (input_shape[0], 1, hidden_dim)
        self.attention.build(probe_shape, input_shape)
        self.norm.build(probe_shape)
        self.mlp.build(probe_shape)

    def call(self, x, key_mask=None):
        probe = ops.cast(self.probe, x.dtype)
        probe = ops.broadcast_to(probe, (ops.shape(x)[0], 1, ops.shape(x)[-1]))
        y = self.attention(probe, x) if key_mask is None else self.attention(probe, x, key_mask=key_mask)
        y = y + self.mlp(self.norm(y))
        return y[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            layer_norm_epsilon=self.layer_norm_epsilon,
            gelu_approximate=self.gelu_approximate,
            mlp_activation=self.mlp_activation,
            norm_bias=self.norm_bias,
            norm_type=self.norm_type,
        )
        return config
