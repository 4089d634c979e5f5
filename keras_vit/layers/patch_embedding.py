"""Eq. 1's linear projection E of flattened image patches."""

import keras
from keras import ops

from keras_vit.layers._utils import pair
from keras_vit.layers._utils import standardize_data_format


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Splits an image into P×P patches and projects each one to D dimensions.

    This is the projection ``E`` of Eq. 1 of the ViT paper,
    ``x_p^i E`` for ``x_p^i`` in ``R^{P²·C}``, computed as one convolution whose
    kernel and stride are both the patch size (the same thing as flattening
    each patch and multiplying by ``E``). Patches are read in row-major order,
    so the output sequence is ``grid_h * grid_w`` long.

    With ``patch_size=1`` it embeds every position of a CNN feature map: the
    hybrid model of Sec. 3.1.

    Args:
        hidden_dim: int. D, the size of each patch embedding.
        patch_size: int or (int, int). P, or (P_h, P_w) for rectangular patches.
        data_format: ``"channels_last"`` or ``"channels_first"``. Defaults to
            ``keras.config.image_data_format()``.
        kernel_initializer, bias_initializer: initializers of E and its bias.
            Defaults to LeCun normal and zeros, as Flax's ``nn.Conv``.

    Input shape: ``(batch, H, W, C)`` (or ``(batch, C, H, W)``), H and W
        divisible by the patch size.
    Output shape: ``(batch, (H / P_h) * (W / P_w), hidden_dim)``.
    """

    def __init__(
        self,
        hidden_dim,
        patch_size,
        data_format=None,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.patch_size = pair(patch_size, "patch_size")
        self.data_format = standardize_data_format(data_format)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.projection = keras.layers.Conv2D(
            self.hidden_dim,
            kernel_size=self.patch_size,
            strides=self.patch_size,
            padding="valid",
            # channels_first images are transposed in `call`: TensorFlow has no
            # NCHW convolution on CPUs without oneDNN (no AVX-512), and the
            # kernel (P_h, P_w, C, D) is the same for both layouts.
            data_format="channels_last",
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="projection",
        )

    def _spatial(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 4:
            raise ValueError(
                f"{self.name} expects images of rank 4 (batch, height, width, "
                f"channels) in {self.data_format}, but got shape {input_shape}."
            )
        if self.data_format == "channels_last":
            return input_shape[1], input_shape[2]
        return input_shape[2], input_shape[3]

    def grid_size(self, input_shape):
        """(grid_h, grid_w) for an input of `input_shape` (batch included)."""
        height, width = self._spatial(input_shape)
        for size, patch, axis in ((height, self.patch_size[0], "height"),
                                  (width, self.patch_size[1], "width")):
            if size is not None and size % patch:
                raise ValueError(
                    f"Image {axis} {size} is not divisible by the patch size "
                    f"{patch} of {self.name}. Resize the images to a multiple of "
                    f"{patch} or choose another patch size."
                )
        return (
            None if height is None else height // self.patch_size[0],
            None if width is None else width // self.patch_size[1],
        )

    def build(self, input_shape):
        self.grid_size(input_shape)
        input_shape = tuple(input_shape)
        if self.data_format == "channels_first":
            input_shape = (input_shape[0], *input_shape[2:], input_shape[1])
        self.projection.build(input_shape)

    def call(self, images):
        if self.data_format == "channels_first":
            images = ops.transpose(images, (0, 2, 3, 1))
        x = self.projection(images)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], self.hidden_dim))

    def compute_output_shape(self, input_shape):
        grid_h, grid_w = self.grid_size(input_shape)
        tokens = None if grid_h is None or grid_w is None else grid_h * grid_w
        return (input_shape[0], tokens, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_dim=self.hidden_dim,
            patch_size=self.patch_size,
            data_format=self.data_format,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
