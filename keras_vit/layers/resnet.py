"""The BiT ResNet stem of the hybrid ViT (Sec. 3.1, App. B.1)."""

import keras
from keras import ops

from keras_vit.config import resnet_stride
from keras_vit.config import standardize_data_format


@keras.saving.register_keras_serializable(package="keras_vit")
class StandardizedConv2D(keras.layers.Conv2D):
    """Conv2D with weight standardization (Qiao et al., 2019), as BiT.

    Each output filter is standardized over (h, w, in) before the
    convolution: ``(w - mean) / (std + 1e-5)``, exactly as vit_jax's
    ``StdConv``. Arguments are those of ``keras.layers.Conv2D``.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import StandardizedConv2D

        conv = StandardizedConv2D(8, 3, padding="same", use_bias=False)
        print(tuple(conv(np.ones((1, 8, 8, 4), "float32")).shape))  # -> (1, 8, 8, 8)
        ```
    """

    def convolution_op(self, inputs, kernel):
        kernel = ops.cast(kernel, "float32")
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        std = ops.std(kernel - mean, axis=(0, 1, 2), keepdims=True)
        kernel = ops.cast((kernel - mean) / (std + 1e-5), inputs.dtype)
        return super().convolution_op(inputs, kernel)


def resnet_width(width_factor):
    """Channels of the root conv: ``int(64 * width_factor)``, as vit_jax."""
    width = int(64 * width_factor)
    if width_factor <= 0 or width % 32:
        raise ValueError(
            f"resnet_width_factor={width_factor!r} gives int(64 * {width_factor!r}) = {width} root "
            "channels; BiT's GroupNorm (32 groups) needs a positive multiple of 32, e.g. "
            "resnet_width_factor=0.5, 1 or 1.5.")
    return width


def _conv(filters, kernel_size, strides, data_format, dtype, name):
    return StandardizedConv2D(
        filters, kernel_size, strides=strides, padding="same", use_bias=False,
        data_format=data_format, dtype=dtype, name=name,
    )


def _norm(data_format, dtype, name, zero=False):
    return keras.layers.GroupNormalization(
        groups=32, axis=-1 if data_format == "channels_last" else 1, epsilon=1e-6,
        gamma_initializer="zeros" if zero else "ones", dtype=dtype, name=name,
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(keras.layers.Layer):
    """The bottleneck unit of vit_jax's BiT ResNet: 1x1 -> 3x3 (strided) -> 1x1.

    ``relu(shortcut(x) + GN(conv3(relu(GN(conv2(relu(GN(conv1(x)))))))))``
    (post-activation), where ``shortcut`` is the identity or, when the shape
    changes, ``GN(conv_proj(x))``; the last GroupNorm starts at zero scale.

    Args:
        width: int. Bottleneck width; the output has ``4 * width`` channels.
        strides: int. Stride of the 3x3 convolution.
        data_format: ``"channels_last"`` or ``"channels_first"``.

    Input shape: ``(batch, H, W, C)``. Output: ``(batch, H/s, W/s, 4*width)``.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import BottleneckUnit

        unit = BottleneckUnit(width=32, strides=2)
        print(tuple(unit(np.zeros((1, 16, 16, 64), "float32")).shape))  # -> (1, 8, 8, 128)
        print(unit.conv_proj is not None)                          # -> True
        ```
    """

    def __init__(self, width, strides=1, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.width = int(width)
        self.strides = int(strides)
        self.data_format = standardize_data_format(data_format)
        fmt, policy = self.data_format, self.dtype_policy
        self.conv1 = _conv(self.width, 1, 1, fmt, policy, "conv1")
        self.gn1 = _norm(fmt, policy, "gn1")
        self.conv2 = _conv(self.width, 3, self.strides, fmt, policy, "conv2")
        self.gn2 = _norm(fmt, policy, "gn2")
        self.conv3 = _conv(4 * self.width, 1, 1, fmt, policy, "conv3")
        self.gn3 = _norm(fmt, policy, "gn3", zero=True)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        channels = input_shape[-1 if self.data_format == "channels_last" else 1]
        self.conv_proj = self.gn_proj = None
        if channels != 4 * self.width or self.strides != 1:
            fmt, policy = self.data_format, self.dtype_policy
            self.conv_proj = _conv(4 * self.width, 1, self.strides, fmt, policy, "conv_proj")
            self.gn_proj = _norm(fmt, policy, "gn_proj")
        shape = input_shape
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)
        if self.conv_proj is not None:
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))

    def call(self, x):
        residual = x if self.conv_proj is None else self.gn_proj(self.conv_proj(x))
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape):
        return self.conv3.compute_output_shape(self.conv2.compute_output_shape(tuple(input_shape)))

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width, strides=self.strides, data_format=self.data_format)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStem(keras.layers.Layer):
    """The hybrid's CNN: BiT root and bottleneck stages (R50: (3, 4, 9)).

    Root: 7x7/2 standardized conv, GroupNorm, ReLU, 3x3/2 max-pool. Then one
    stage per entry of ``block_units``; stage s has width ``int(64 *
    width_factor) * 2^(s-1)`` and stride 2 except the first. For ViT, R50's stage 4 is
    removed and its units moved to stage 3 (Sec. 3.1 / App. B.1), which
    makes the total stride 16. Sub-layer names follow vit_jax
    (``conv_root``, ``gn_root``, ``block{s}_unit{u}``).

    Args:
        block_units: tuple of ints. Units per stage; ``()`` is the root only.
        width_factor: float. Width multiplier: the root has
            ``int(64 * width_factor)`` channels, as in vit_jax (a multiple of
            32, for GroupNorm's 32 groups). Defaults to 1.
        data_format: ``"channels_last"`` or ``"channels_first"``.

    Input shape: ``(batch, H, W, C)``. Output shape:
        ``(batch, H / stride, W / stride, 4 * 2^(S-1) * width)`` with
        ``width = int(64 * width_factor)`` and ``stride = 4 * 2^(S-1)``
        (``width`` channels and stride 4 for the root alone).

    In ``ViT(resnet_block_units=...)`` the stem is the layer ``resnet``; its
    units are ``block{s}_unit{u}``, with vit_jax's layer and variable names, so
    hybrid ``.npz`` checkpoints map one to one. R50's stage 4 is folded into
    stage 3 for ViT: ``(3, 4, 6, 3)`` becomes ``(3, 4, 9)``, total stride 16.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import ResNetStem

        stem = ResNetStem(block_units=(1, 1))      # a small two-stage stem
        features = stem(np.zeros((1, 64, 64, 3), "float32"))
        print(stem.stride, tuple(features.shape))  # -> 8 (1, 8, 8, 512)
        print([unit.name for unit in stem.units])  # -> ['block1_unit1', 'block2_unit1']
        ```
    """

    def __init__(self, block_units=(3, 4, 9), width_factor=1.0, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.block_units = tuple(int(n) for n in block_units)
        if any(n < 1 for n in self.block_units):
            raise ValueError(
                f"resnet_block_units={self.block_units} has a stage without units; each stage "
                "needs at least 1 (vit_jax's ResNetStage always has unit1). Use () for the "
                "root alone.")
        self.width_factor = width_factor
        self.data_format = standardize_data_format(data_format)
        # channels_first images are transposed in `call`, as in PatchEmbedding:
        # TensorFlow has no NCHW convolution on a CPU, and the kernels and
        # GroupNorm scales are the same in both layouts.
        fmt, policy = "channels_last", self.dtype_policy
        width = resnet_width(width_factor)
        self.conv_root = _conv(width, 7, 2, fmt, policy, "conv_root")
        self.gn_root = _norm(fmt, policy, "gn_root")
        self.pool = keras.layers.MaxPooling2D(
            3, strides=2, padding="same", data_format=fmt, dtype=policy, name="pool"
        )
        self.units = []
        for stage, units in enumerate(self.block_units):
            for unit in range(units):
                self.units.append(
                    BottleneckUnit(
                        width * 2**stage,
                        strides=2 if stage > 0 and unit == 0 else 1,
                        data_format=fmt, dtype=policy,
                        name=f"block{stage + 1}_unit{unit + 1}",
                    )
                )

    @property
    def stride(self):
        """int: the total stride, ``4 * 2 ** (len(block_units) - 1)`` (4 for the root alone)."""
        return resnet_stride(self.block_units)

    def _to_channels_last(self, shape):
        shape = tuple(shape)
        if self.data_format == "channels_first":
            return (shape[0], *shape[2:], shape[1])
        return shape

    def build(self, input_shape):
        shape = self._to_channels_last(input_shape)
        self.conv_root.build(shape)
        shape = self.conv_root.compute_output_shape(shape)
        self.gn_root.build(shape)
        shape = self.pool.compute_output_shape(shape)
        for unit in self.units:
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, x):
        if self.data_format == "channels_first":
            x = ops.transpose(x, (0, 2, 3, 1))
        x = self.pool(ops.relu(self.gn_root(self.conv_root(x))))
        for unit in self.units:
            x = unit(x)
        if self.data_format == "channels_first":
            x = ops.transpose(x, (0, 3, 1, 2))
        return x

    def compute_output_shape(self, input_shape):
        shape = self.pool.compute_output_shape(
            self.conv_root.compute_output_shape(self._to_channels_last(input_shape))
        )
        for unit in self.units:
            shape = unit.compute_output_shape(shape)
        if self.data_format == "channels_first":
            return (shape[0], shape[3], shape[1], shape[2])
        return tuple(shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            block_units=self.block_units,
            width_factor=self.width_factor,
            data_format=self.data_format,
        )
        return config
