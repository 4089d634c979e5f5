"""2-D rotary position embeddings of the patch tokens (DINOv3, EVA-02, the Perception Encoder)."""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.config import is_int
from keras_vit.config import pair
from keras_vit.layers.position_embedding import naflex_positions
from keras_vit.layers.position_embedding import sequence_length


def rope_coordinates(rows, cols, grid_h, grid_w, grid="centered", grid_offset=0.0, reference_grid=None):
    """The (y, x) coordinates that patches at `rows` and `cols` of a
    ``grid_h x grid_w`` grid turn by: numpy arrays or tensors alike.

    ``grid="centered"`` (DINOv3): the patch's centre in ``[-1, 1]``, ``y = 2
    (i + 0.5) / grid_h - 1``. ``grid="index"`` (EVA-02, the Perception
    Encoder; timm's ``RotaryEmbeddingCat``): the index plus `grid_offset`,
    times ``reference_grid / grid`` where a reference grid is given (timm's
    ``ref_feat_shape``: the grid the model was trained on, so a larger grid
    spans the same range).
    """
    if grid == "centered":
        return (rows + 0.5) / grid_h * 2 - 1, (cols + 0.5) / grid_w * 2 - 1
    if reference_grid is None:
        return rows + grid_offset, cols + grid_offset
    return (rows + grid_offset) * (reference_grid[0] / grid_h), (cols + grid_offset) * (reference_grid[1] / grid_w)


def rope_frequencies(head_dim, theta, grid="centered"):
    """The ``head_dim / 4`` frequencies of each axis, ``theta ** (-4k /
    head_dim)``, times 2 pi on DINOv3's centred grid; float64."""
    frequencies = theta ** -(np.arange(0, 1, 4 / head_dim, dtype=np.float64))
    return 2 * math.pi * frequencies if grid == "centered" else frequencies


def rope_angles(grid_size, head_dim, theta=100.0, grid="centered", grid_offset=0.0, reference_grid=None,
                grid_indexing="ij"):
    """The rotation angles of each patch, ``(gh * gw, head_dim)``: its
    `rope_coordinates` ``(y, x)`` times `rope_frequencies` ``f``, ``[y f; x
    f]`` (``grid_indexing="xy"``: ``[x f; y f]``), ``head_dim / 2`` angles,
    tiled twice so that dimension ``j`` and ``j + head_dim / 2`` turn
    together. DINOv3's (Siméoni et al., 2025; ``transformers``'
    ``DINOv3ViTRopePositionEmbedding``) by default; EVA-02's and PE's with
    ``grid="index"`` (timm's interleaved pairs ``(2j, 2j + 1)`` are the
    pairs ``(j, j + head_dim / 2)`` here once each head's query and key
    dimensions are ordered even ones first, as keras_vit's timm reader does).
    Computed in float64.
    """
    grid_h, grid_w = pair(grid_size, "grid_size")
    rows, cols = np.meshgrid(np.arange(grid_h, dtype=np.float64), np.arange(grid_w, dtype=np.float64),
                             indexing="ij")
    y, x = rope_coordinates(rows.reshape(-1), cols.reshape(-1), grid_h, grid_w, grid, grid_offset,
                            reference_grid)
    first, second = (x, y) if grid_indexing == "xy" else (y, x)
    frequencies = rope_frequencies(head_dim, theta, grid)
    angles = np.concatenate([first[:, None] * frequencies, second[:, None] * frequencies], axis=-1)
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
        theta: float. The base period (DINOv3's ``rope_theta``, 100; EVA-02's
            and PE's 10000).
        grid: ``"centered"`` (DINOv3's patch centres in [-1, 1]) or
            ``"index"`` (EVA-02's and PE's patch indices; `rope_coordinates`).
        grid_offset: float. Added to the indices of ``grid="index"``.
        reference_grid: None or (int, int). The grid ``grid="index"``
            rescales the indices to (timm's ``ref_feat_shape``).
        grid_indexing: ``"ij"`` (the rows' angles first) or ``"xy"`` (the
            columns', PE's).

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

    def __init__(self, grid_size, num_prefix_tokens=1, theta=100.0, grid="centered", grid_offset=0.0,
                 reference_grid=None, grid_indexing="ij", **kwargs):
        super().__init__(**kwargs)
        self.grid_size = pair(grid_size, "grid_size")
        if not is_int(num_prefix_tokens, 0):
            raise ValueError(f"num_prefix_tokens must be an int >= 0, got {num_prefix_tokens!r}.")
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.theta = float(theta)
        self.grid, self.grid_offset, self.grid_indexing = grid, float(grid_offset), grid_indexing
        self.reference_grid = None if reference_grid is None else pair(reference_grid, "reference_grid")

    def build(self, input_shape):
        head_dim = tuple(input_shape)[-1]
        if head_dim % 4:
            raise ValueError(f"Rotary position embeddings need a head size divisible by 4, "
                             f"got {head_dim}.")
        angles = rope_angles(self.grid_size, head_dim, **self._angles)[:, None, :]  # (N, 1, hd)
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

    @property
    def _angles(self):
        return dict(theta=self.theta, grid=self.grid, grid_offset=self.grid_offset,
                    reference_grid=self.reference_grid, grid_indexing=self.grid_indexing)

    def _naflex_angles(self, spatial_shapes, num_patches, head_dim):
        """`rope_angles` of each patch on its image's grid, float32
        ``(batch, num_patches, 1, head_dim)``; 0 (no turn) for the padding."""
        rows, cols, valid = naflex_positions(spatial_shapes, num_patches)
        shapes = ops.cast(spatial_shapes, "float32")
        y, x = rope_coordinates(ops.cast(rows, "float32"), ops.cast(cols, "float32"), shapes[:, :1],
                                shapes[:, 1:], self.grid, self.grid_offset, self.reference_grid)
        first, second = (x, y) if self.grid_indexing == "xy" else (y, x)
        frequencies = ops.convert_to_tensor(rope_frequencies(head_dim, self.theta, self.grid).astype("float32"))
        half = ops.concatenate([first[..., None] * frequencies, second[..., None] * frequencies], axis=-1)
        angles = ops.where(valid[..., None], ops.concatenate([half, half], axis=-1), 0.0)
        return angles[:, :, None, :]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=self.grid_size, num_prefix_tokens=self.num_prefix_tokens, **self._angles)
        return config
