"""Eq. 1's linear projection E of flattened image patches."""

import keras
import numpy as np
from keras import ops

from keras_vit.config import pair
from keras_vit.config import standardize_data_format


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
        kernel_initializer: initializer of E. Defaults to LeCun normal, as
            Flax's ``nn.Conv``.
        bias_initializer: initializer of the bias. Defaults to zeros.
        use_bias: bool. False for CLIP's patch embedding, which has none.

    Input shape: ``(batch, H, W, C)`` (or ``(batch, C, H, W)``), H and W
        divisible by the patch size; or NaFlex's flattened patches
        ``(batch, N, P_h * P_w * C)`` (`keras_vit.naflex`: each patch in
        (row, column, channel) order), whatever ``data_format`` is.
    Output shape: ``(batch, (H / P_h) * (W / P_w), hidden_dim)``, or
        ``(batch, N, hidden_dim)``.

    Flattened patches are multiplied by the convolution's kernel reshaped to
    ``(P_h * P_w * C, D)``, the same ``E`` (Eq. 1's ``x_p E`` as written): a
    model's weights serve both inputs.

    In `ViT` this layer is ``patch_embedding``; its variables are
    ``patch_embedding/projection/kernel`` ``(P_h, P_w, C, D)`` and
    ``patch_embedding/projection/bias`` ``(D,)``. With ``patch_size=1`` it embeds
    every position of a CNN feature map (the hybrid of Sec. 3.1). The output is
    channels-last whatever ``data_format`` is; ``grid_size(input_shape)`` returns
    ``(H / P_h, W / P_w)``.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import PatchEmbedding

        layer = PatchEmbedding(hidden_dim=64, patch_size=8)
        tokens = layer(np.zeros((2, 32, 48, 3), "float32"))
        print(tuple(tokens.shape))                # -> (2, 24, 64)  # a 4 x 6 grid
        print(layer.grid_size((2, 32, 48, 3)))    # -> (4, 6)
        print(tuple(layer.projection.kernel.shape))  # -> (8, 8, 3, 64)
        ```
    """

    def __init__(
        self,
        hidden_dim,
        patch_size,
        data_format=None,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.use_bias = bool(use_bias)
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
            use_bias=self.use_bias,
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

    def _flat_channels(self, input_shape):
        """The channels of flattened patches ``(batch, N, P_h * P_w * C)``."""
        values = tuple(input_shape)[-1]
        area = self.patch_size[0] * self.patch_size[1]
        if values is None or values % area:
            raise ValueError(
                f"{self.name} takes flattened {self.patch_size[0]}x{self.patch_size[1]} patches "
                f"of P_h * P_w * C values each, got shape {tuple(input_shape)}: {values} is not a "
                f"multiple of {area}. Make them with `keras_vit.naflex_inputs(images, "
                f"patch_size={self.patch_size}, ...)`.")
        return values // area

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) == 3:  # NaFlex's flattened patches
            self.projection.build((None, *self.patch_size, self._flat_channels(input_shape)))
            return
        self.grid_size(input_shape)
        if self.data_format == "channels_first":
            input_shape = (input_shape[0], *input_shape[2:], input_shape[1])
        self.projection.build(input_shape)

    def call(self, images):
        if len(images.shape) == 3:  # flattened patches: x_p E with E = the kernel, reshaped
            kernel = ops.cast(self.projection.kernel, images.dtype)
            x = ops.matmul(images, ops.reshape(kernel, (-1, self.hidden_dim)))
            return x + ops.cast(self.projection.bias, images.dtype) if self.use_bias else x
        x = self.token_map(images)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], self.hidden_dim))

    def token_map(self, images):
        """The patches' embeddings on their grid, before `call` flattens
        them: ``(batch, gh, gw, hidden_dim)`` for images ``(batch, H, W, C)``
        (or channels first)."""
        if self.data_format == "channels_first":
            images = ops.transpose(images, (0, 2, 3, 1))
        return self.projection(images)

    def compute_output_shape(self, input_shape):
        if len(tuple(input_shape)) == 3:
            self._flat_channels(input_shape)
            return (input_shape[0], input_shape[1], self.hidden_dim)
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
            use_bias=self.use_bias,
        )
        return config


def _bilinear_resize_1d(old, new):
    """(new, old) matrix of 1-D bilinear resizing, half-pixel centres, no
    antialiasing: ``jax.image.resize(..., "bilinear", antialias=False)``."""
    sample = (np.arange(new, dtype=np.float64) + 0.5) * (old / new) - 0.5
    weights = np.maximum(0.0, 1.0 - np.abs(sample[:, None] - np.arange(old)[None, :]))
    total = weights.sum(axis=1, keepdims=True)
    # As jax: normalise each output row by its weight sum (so edges clamp),
    # zero rows whose sum vanishes or whose sample lies outside the image.
    tiny = 1000.0 * float(np.finfo(np.float32).eps)
    weights = np.where(np.abs(total) > tiny, weights / np.where(total != 0, total, 1), 0.0)
    inside = (sample >= -0.5) & (sample <= old - 0.5)
    return np.where(inside[:, None], weights, 0.0)


def bilinear_resize_matrix(old_size, new_size):
    """The matrix ``R`` of bilinear resizing of a patch from `old_size` to
    `new_size`, each an int or (h, w).

    ``R @ x.reshape(-1)`` is ``jax.image.resize(x, new_size, "bilinear",
    antialias=False).reshape(-1)`` for a 2-D patch ``x`` (half-pixel centres,
    row-major flattening): FlexiViT's ``resize_matrix`` (Beyer et al.,
    "FlexiViT: One Model for All Patch Sizes", CVPR 2023), computed in NumPy
    as the Kronecker product of the two separable 1-D resizes.

    Returns: float64 array of shape ``(new_h * new_w, old_h * old_w)``.
    """
    old_h, old_w = pair(old_size, "old_size")
    new_h, new_w = pair(new_size, "new_size")
    return np.kron(_bilinear_resize_1d(old_h, new_h), _bilinear_resize_1d(old_w, new_w))


def resize_patch_kernel(kernel, new_patch_size):
    """FlexiViT's pseudo-inverse resize (PI-resize) of a patch-embedding kernel.

    Beyer et al., "FlexiViT: One Model for All Patch Sizes", CVPR 2023: with
    ``R = bilinear_resize_matrix(old, new)``, each (in, out) channel's kernel
    becomes ``w_new = pinv(R.T) @ w_old``, so that for upsampling
    (new >= old on both axes) ``<x, w_old> == <R x, w_new>`` for every patch
    ``x``: the embedding of a patch is unchanged when the patch is bilinearly
    resized together with the kernel. Downsizing gives the least-squares
    solution, as in FlexiViT.

    Args:
        kernel: array of shape ``(P_h, P_w, in_channels, hidden_dim)`` (the
            Keras ``Conv2D`` layout of ``PatchEmbedding``).
        new_patch_size: int or (int, int), the new ``(P_h', P_w')``.

    Returns: float32 NumPy array of shape
        ``(P_h', P_w', in_channels, hidden_dim)``.
    """
    kernel = np.asarray(keras.ops.convert_to_numpy(kernel), dtype=np.float64)
    if kernel.ndim != 4:
        raise ValueError(
            "`kernel` must have shape (patch_h, patch_w, in_channels, hidden_dim), "
            f"got shape {kernel.shape}."
        )
    old_h, old_w, channels, hidden = kernel.shape
    new_h, new_w = pair(new_patch_size, "new_patch_size")
    if (new_h, new_w) == (old_h, old_w):
        return kernel.astype(np.float32)
    matrix = bilinear_resize_matrix((old_h, old_w), (new_h, new_w))
    flat = kernel.reshape(old_h * old_w, channels * hidden)
    resized = np.linalg.pinv(matrix.T) @ flat
    return resized.reshape(new_h, new_w, channels, hidden).astype(np.float32)
