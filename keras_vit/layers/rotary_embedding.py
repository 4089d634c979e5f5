"""2-D rotary position embeddings of the patch tokens (DINOv3)."""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.config import is_int
from keras_vit.config import pair
from keras_vit.layers.position_embedding import naflex_positions
from keras_vit.layers.position_embedding import sequence_length


def rope_angles(grid_size, head_dim, theta=100.0):
    """The rotation angles of each patch, ``(gh * gw, head_dim)``, as DINOv3
    computes them (Siméoni et al., "DINOv3", 2025; ``transformers``'
    ``DINOv3ViTRopePositionEmbedding``).

    A patch's centre in ``[-1, 1]`` (row ``y = 2 (i + 0.5) / gh - 1``, column
    ``x`` alike) times ``head_dim / 4`` frequencies ``theta ** (-4k /
    head_dim)``, times 2 pi: ``[y f; x f]`` (``head_dim / 2`` angles), tiled
    twice, so that dimension ``j`` and ``j + head_dim / 2`` turn together.
    The coordinates are relative to the grid, so a model runs at any
    resolution with the same weights. Computed in float64.
    """
    grid_h, grid_w = pair(grid_size, "grid_size")
    frequencies = theta ** -(np.arange(0, 1, 4 / head_dim, dtype=np.float64))
    rows = (np.arange(grid_h) + 0.5) / grid_h * 2 - 1
    cols = (np.arange(grid_w) + 0.5) / grid_w * 2 - 1
    coords = np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1).reshape(-1, 2)
    angles = 2 * math.pi * (coords[:, :, None] * frequencies).reshape(len(coords), -1)
    return np.tile(angles, 2)


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryPositionEmbedding(keras.layers.Layer):
    """Rotates the patch tokens' queries or keys by their grid position.

    ``x cos(a) + rotate_half(x) sin(a)`` per head, with `rope_angles` ``a``
    of the patch's row and column and ``rotate_half([u; v]) = [-v; u]``;
    the prefix tokens ([class], registers) are left as they are. DINOv3's
    position embeddings: nothing is added to the token sequence, and the
    attention scores depend on the patches' relative positions. Its training
    jitter, shift and rescale of the coordinates are augmentations; this
    layer computes the inference-time rotation.

    Args:
        grid_size: int or (int, int). The patch grid (rows, columns).
        num_prefix_tokens: int. Tokens before the patches (not rotated).
        theta: float. The base period (DINOv3's ``rope_theta``, 100).

    Call arguments:
        x: ``(batch, tokens, heads, head_dim)``: every token
            (``num_prefix_tokens + gh * gw``), or only some of the prefix
            tokens (a block updating the [class] token alone), which are
            returned as they are.
        spatial_shapes: None, or int ``(batch, 2)``: NaFlex
            (`keras_vit.naflex`), each image's patch grid (rows, columns);
            the ``x`` after the prefix are then each image's ``h * w``
            patches in row-major order and padding, and each patch turns by
            its centre on its own image's grid (`rope_angles` of that grid;
            the padding is left as it is).

    Output shape: that of ``x``.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import RotaryPositionEmbedding

        rope = RotaryPositionEmbedding(grid_size=(2, 3), num_prefix_tokens=1)
        q = np.ones((1, 7, 2, 8), "float32")
        y = np.asarray(rope(q))
        print(y.shape, np.array_equal(y[:, 0], q[:, 0]))  # -> (1, 7, 2, 8) True
        print(np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(q, axis=-1)))  # -> True
        ```
    """

    def __init__(self, grid_size, num_prefix_tokens=1, theta=100.0, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = pair(grid_size, "grid_size")
        if not is_int(num_prefix_tokens, 0):
            raise ValueError(f"num_prefix_tokens must be an int >= 0, got {num_prefix_tokens!r}.")
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.theta = float(theta)

    def build(self, input_shape):
        head_dim = tuple(input_shape)[-1]
        if head_dim % 4:
            raise ValueError(f"Rotary position embeddings need a head size divisible by 4, "
                             f"got {head_dim}.")
        angles = rope_angles(self.grid_size, head_dim, self.theta)[:, None, :]  # (N, 1, hd)
        self._cos = np.cos(angles).astype("float32")
        self._sin = np.sin(angles).astype("float32")

    def call(self, x, spatial_shapes=None):
        tokens, prefix = x.shape[1], self.num_prefix_tokens
        if tokens is not None and tokens <= prefix:
            return x  # prefix tokens only: nothing to rotate
        patches = math.prod(self.grid_size)
        if spatial_shapes is not None:
            patches = sequence_length(x) - prefix
            if ops.is_tensor(patches):  # TensorFlow's traced length: maybe prefix tokens only
                patches = ops.maximum(patches, 0)
            angles = self._naflex_angles(spatial_shapes, patches, x.shape[-1])
            cos, sin = ops.cos(angles), ops.sin(angles)
        elif tokens is not None and tokens != prefix + patches:
            raise ValueError(
                f"{self.name} rotates {patches} patches ({self.grid_size[0]}x{self.grid_size[1]}) "
                f"after {prefix} prefix tokens, {prefix + patches} tokens, but got {tokens}.")
        else:
            cos, sin = self._cos, self._sin
        head, grid = x[:, :prefix], x[:, prefix:]
        first, second = ops.split(grid, 2, axis=-1)
        rotated = ops.concatenate([-second, first], axis=-1)
        grid = grid * ops.cast(cos, x.dtype) + rotated * ops.cast(sin, x.dtype)
        return ops.concatenate([head, grid], axis=1) if prefix else grid

    def _naflex_angles(self, spatial_shapes, num_patches, head_dim):
        """`rope_angles` of each patch on its image's grid, float32
        ``(batch, num_patches, 1, head_dim)``; 0 (no turn) for the padding."""
        rows, cols, valid = naflex_positions(spatial_shapes, num_patches)
        shapes = ops.cast(spatial_shapes, "float32")
        y = (ops.cast(rows, "float32") + 0.5) / shapes[:, :1] * 2 - 1
        x = (ops.cast(cols, "float32") + 0.5) / shapes[:, 1:] * 2 - 1
        frequencies = self.theta ** -(np.arange(0, 1, 4 / head_dim, dtype=np.float64))
        frequencies = ops.convert_to_tensor((2 * math.pi * frequencies).astype("float32"))
        half = ops.concatenate([y[..., None] * frequencies, x[..., None] * frequencies], axis=-1)
        angles = ops.where(valid[..., None], ops.concatenate([half, half], axis=-1), 0.0)
        return angles[:, :, None, :]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=self.grid_size, num_prefix_tokens=self.num_prefix_tokens,
                      theta=self.theta)
        return config
