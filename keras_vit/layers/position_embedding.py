"""Learned 1-D position embeddings E_pos of Eq. 1, and their 2-D resampling."""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.config import POSITION_EMBEDDINGS
from keras_vit.config import pair

RESAMPLE_METHODS = ("bilinear", "bicubic", "dinov2", "cpe")


def _linear_matrix(old, new):
    """(new, old) weights of scipy.ndimage.zoom(order=1): corners aligned."""
    weights = np.zeros((new, old))
    coords = np.zeros(new) if new == 1 else np.arange(new) * (old - 1) / (new - 1)
    low = np.clip(np.floor(coords).astype(int), 0, old - 1)
    high = np.minimum(low + 1, old - 1)
    frac = coords - low
    np.add.at(weights, (np.arange(new), low), 1.0 - frac)
    np.add.at(weights, (np.arange(new), high), frac)
    return weights


def _cubic_matrix(old, new, a=-0.75, offset=0.0):
    """(new, old) weights of bicubic convolution with half-pixel centres.

    The same weights as ``torch.nn.functional.interpolate(mode="bicubic",
    align_corners=False)``, which timm uses to resample position embeddings.
    With `offset`, those of DINOv2's ``scale_factor=(new + offset) / old``:
    output pixel ``i`` samples the input at ``(i + 0.5) * old / (new +
    offset) - 0.5`` (PyTorch maps a given scale factor back by its inverse).
    """

    def kernel(t):
        t = np.abs(t)
        return np.where(
            t <= 1,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0),
        )

    weights = np.zeros((new, old))
    coords = (np.arange(new) + 0.5) * old / (new + offset) - 0.5
    base = np.floor(coords).astype(int)
    for offset in (-1, 0, 1, 2):
        index = np.clip(base + offset, 0, old - 1)
        np.add.at(weights, (np.arange(new), index), kernel(coords - (base + offset)))
    return weights


def resample_position_embeddings(
    embeddings, old_grid, new_grid, num_prefix_tokens=1, method="bilinear"
):
    """Resamples the grid part of position embeddings to a new patch grid.

    Sec. 3.2 of the paper: "we perform 2D interpolation of the pre-trained
    position embeddings, according to their location in the original image".
    The prefix rows ([class], registers) are kept as they are.

    Args:
        embeddings: array of shape ``(1, num_prefix_tokens + gh * gw, D)``.
        old_grid: int or (int, int). The patch grid (rows, columns) of
            ``embeddings``.
        new_grid: int or (int, int). The patch grid to resample to.
        num_prefix_tokens: int. Rows before the grid that are not resampled.
        method: ``"bilinear"``: the original vit_jax loader, i.e.
            ``scipy.ndimage.zoom(grid, zoom, order=1)``, corners aligned.
            ``"bicubic"``: timm's ``F.interpolate(mode="bicubic")``,
            half-pixel centres.
            ``"dinov2"``: DINOv2's (Oquab et al., 2023;
            ``DinoVisionTransformer.interpolate_pos_encoding``): bicubic with
            ``scale_factor = (new + 0.1) / old``, the 0.1 offset its authors
            add against floating-point error in the output size.
            ``"cpe"``: RADIO's cropped position embeddings (Ranzinger et al.,
            CVPR 2024): ``"bilinear"`` to a square grid of the new grid's
            longer side, then its top-left ``nh x nw`` rows: an image of
            another aspect ratio sees a part of the table at the scale of
            a square one.

    Returns:
        A float32 NumPy array of shape ``(1, num_prefix_tokens + nh * nw, D)``.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import resample_position_embeddings

        posemb = np.random.default_rng(0).normal(0, 0.02, (1, 1 + 14 * 14, 8)).astype("float32")
        hires = resample_position_embeddings(posemb, 14, 24)                     # 224 px -> 384 px, P = 16
        print(tuple(hires.shape))                                                # -> (1, 577, 8)
        np.testing.assert_array_equal(hires[:, :1], posemb[:, :1])               # [class] row kept
        np.testing.assert_allclose(hires[0, 1], posemb[0, 1], rtol=1e-6)         # corners aligned (bilinear)
        rect = resample_position_embeddings(posemb, (14, 14), (12, 20), method="bicubic")
        print(tuple(rect.shape))                                                 # -> (1, 241, 8)
        ```
    """
    if method not in RESAMPLE_METHODS:
        raise ValueError(
            f"Unknown resampling method {method!r}; use one of {RESAMPLE_METHODS}."
        )
    old_h, old_w = pair(old_grid, "old_grid")
    new_h, new_w = pair(new_grid, "new_grid")
    embeddings = np.asarray(embeddings, dtype=np.float64)
    expected = num_prefix_tokens + old_h * old_w
    if embeddings.ndim != 3 or embeddings.shape[:2] != (1, expected):
        raise ValueError(
            f"Position embeddings of shape {embeddings.shape} do not fit a "
            f"{old_h}x{old_w} grid with {num_prefix_tokens} prefix tokens: "
            f"expected (1, {expected}, D)."
        )
    side = max(new_h, new_w)  # "cpe": the square grid its rows are cropped from
    matrix = {"bilinear": _linear_matrix, "bicubic": _cubic_matrix,
              "dinov2": lambda old, new: _cubic_matrix(old, new, offset=0.1),
              "cpe": lambda old, new: _linear_matrix(old, side)[:new]}[method]
    prefix = embeddings[:, :num_prefix_tokens]
    grid = embeddings[0, num_prefix_tokens:].reshape(old_h, old_w, -1)
    grid = np.einsum("Hh,Ww,hwd->HWd", matrix(old_h, new_h), matrix(old_w, new_w), grid)
    grid = grid.reshape(1, new_h * new_w, -1)
    return np.concatenate([prefix, grid], axis=1).astype(np.float32)


def sincos_2d(grid, hidden_dim, temperature=10_000.0):
    """Fixed 2-D sin-cos embeddings of big_vision, shape ``(gh * gw, D)``."""
    grid_h, grid_w = grid
    if hidden_dim % 4:
        raise ValueError(
            f"sin-cos position embeddings need hidden_dim divisible by 4, "
            f"got {hidden_dim}."
        )
    y, x = np.mgrid[:grid_h, :grid_w]
    omega = np.arange(hidden_dim // 4) / max(hidden_dim // 4 - 1, 1)
    omega = 1.0 / temperature**omega
    y = np.einsum("m,d->md", y.flatten(), omega)
    x = np.einsum("m,d->md", x.flatten(), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)


def sequence_length(x):
    """The length of the token sequence `x` ``(batch, tokens, ...)``: an
    int, or a scalar tensor where it is unknown when traced."""
    return x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]


def naflex_positions(spatial_shapes, num_patches):
    """Each NaFlex sequence position's patch: ``(rows, cols, valid)``,
    int32, int32 and bool ``(batch, num_patches)``.

    Position ``n`` of an image whose grid is ``(h, w)`` (a row of
    `spatial_shapes`) is patch ``(n // w, n % w)`` (row-major) when ``n < h
    w``; the padding after it is ``valid`` False, at ``(0, 0)``. Traceable:
    `num_patches` is an int, or a scalar tensor where the sequence length
    is unknown when traced (TensorFlow's training step over batches of
    several lengths); the grids are tensors.
    """
    shapes = ops.cast(spatial_shapes, "int32")
    heights, widths = shapes[:, :1], ops.maximum(shapes[:, 1:], 1)
    if isinstance(num_patches, int):
        # A constant, not a traced range: jax2onnx cannot convert Keras's `arange(n)` (ONNX export).
        index = ops.convert_to_tensor(np.arange(num_patches, dtype="int32")[None, :])
    else:
        index = ops.arange(num_patches, dtype="int32")[None, :]
    valid = index < heights * widths
    rows = ops.where(valid, ops.floor_divide(index, widths), 0)
    cols = ops.where(valid, index - ops.floor_divide(index, widths) * widths, 0)
    return rows, cols, valid


def naflex_resize_weights(index, out_size, in_size):
    """``(batch, N, in_size)`` weights of antialiased bilinear resizing
    (`keras_vit.naflex.antialiased_resize_matrix`) of one axis of length
    `in_size` to `out_size` (``(batch, 1)``), for the output positions
    `index` ``(batch, N)``, in float32: PyTorch's ``F.interpolate(...,
    mode="bilinear", antialias=True)``, which Hugging Face's Siglip2 applies
    to its position table. To the same size the rows are one-hot."""
    index, out_size = ops.cast(index, "float32"), ops.cast(out_size, "float32")
    scale = in_size / out_size
    support = ops.maximum(scale, 1.0)[..., None]
    centre = ((index + 0.5) * scale)[..., None]
    source = ops.convert_to_tensor(np.arange(in_size, dtype="float32") + 0.5)  # as in naflex_positions
    weights = ops.maximum(0.0, 1.0 - ops.abs(source - centre) / support)
    return weights / ops.sum(weights, axis=-1, keepdims=True)


def grid_positions(images, patch_size, data_format="channels_last"):
    """The patch rows and columns of `images` ``(batch, H, W, C)`` (or
    channels first): float32 ``(H / P_h,)`` and ``(W / P_w,)``, ``0, 1,
    ...``. They are counted from the images' values (sums of ones reshaped
    to rows of a patch), never read from their shape, so an exporter keeps
    the size free (`keras_vit.ViT.export` with ``dynamic_image_size=True``),
    and a height or width that is not a multiple of the patch size fails
    in the graph (the reshape), in every runtime; summed over the batch, so
    an empty batch has them too."""
    if data_format == "channels_first":
        images = ops.transpose(images, (0, 2, 3, 1))
    ones = ops.sum(ops.zeros_like(ops.cast(images[..., 0], "float32")), axis=0) + 1.0  # (H, W)
    return tuple(ops.cumsum(ops.reshape(line, (-1, patch))[:, 0]) - 1.0
                 for line, patch in ((ones[:, 0], patch_size[0]), (ones[0, :], patch_size[1])))


def _count(vector):
    """float32 scalar: the length of `vector`, counted from its values (a
    sum of ones), so that an exporter keeps it free."""
    return ops.sum(ops.ones_like(vector))


def grid_shapes(rows, cols, tokens):
    """NaFlex's ``spatial_shapes`` of a batch whose images share the grid of
    `rows` and `cols` (`grid_positions`): int32 ``(batch, 2)``, the batch
    that of `tokens` ``(batch, ...)``; what rotary embeddings turn the
    patches of images of any size by (`keras_vit.layers.RotaryPositionEmbedding`)."""
    size = ops.stack([_count(rows), _count(cols)])
    batch = ops.sum(ops.zeros_like(ops.cast(tokens, "float32")), axis=(1, 2))  # (batch,) zeros
    return ops.cast(batch[:, None] + size[None, :], "int32")


def resize_weights(positions, old, method="bilinear", side=None):
    """`resample_position_embeddings`' weights in `keras.ops`, for a new
    grid known only as it runs: float32 ``(new, old)``, the rows of
    `_linear_matrix` (``"bilinear"``; ``"cpe"``: those of the square grid
    of `side`, the new grid's longer side, float32 scalar) or `_cubic_matrix`
    (``"bicubic"``; ``"dinov2"``: its 0.1 offset) for the output positions
    `positions` (float32 ``(new,)``, ``0 .. new - 1``: `grid_positions`)."""
    new = _count(positions)
    if method in ("bilinear", "cpe"):  # scipy's zoom(order=1): corners aligned
        length = side if method == "cpe" else new
        coords = positions * ((old - 1) / ops.maximum(length - 1.0, 1.0))
        source = ops.convert_to_tensor(np.arange(old, dtype="float32"))[None, :]
        return ops.maximum(0.0, 1.0 - ops.abs(coords[:, None] - source))
    a = -0.75  # PyTorch's bicubic convolution, half-pixel centres
    coords = (positions + 0.5) * (old / (new + (0.1 if method == "dinov2" else 0.0))) - 0.5
    base = ops.floor(coords)
    weights = 0.0
    for step in (-1.0, 0.0, 1.0, 2.0):
        t = ops.abs(coords - (base + step))
        kernel = ops.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                           ops.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))
        index = ops.clip(base + step, 0.0, old - 1.0)
        weights = weights + _one_hot_rows(index, old) * kernel[:, None]
    return weights


def _one_hot_rows(positions, old):
    """float32 ``(new, old)``: row ``i`` one-hot at ``positions[i]`` (the
    identity where ``new == old``)."""
    source = ops.convert_to_tensor(np.arange(old, dtype="float32"))
    return ops.cast(ops.equal(positions[:, None], source[None, :]), "float32")


def sincos_2d_at(rows, cols, hidden_dim, temperature=10_000.0):
    """`sincos_2d` at given patch rows and columns (int tensors of any
    shape), in float32: shape ``(*rows.shape, hidden_dim)``."""
    omega = 1.0 / temperature ** (np.arange(hidden_dim // 4) / max(hidden_dim // 4 - 1, 1))
    omega = ops.convert_to_tensor(omega.astype("float32"))
    y = ops.cast(rows, "float32")[..., None] * omega
    x = ops.cast(cols, "float32")[..., None] * omega
    return ops.concatenate([ops.sin(x), ops.cos(x), ops.sin(y), ops.cos(y)], axis=-1)


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds position embeddings to the token sequence: ``z_0 = [...] + E_pos``.

    ``E_pos`` of Eq. 1 has one learned row for each prefix token ([class],
    registers) and one for each patch of a ``grid_size`` grid, in row-major
    order. The layer knows its grid, so :meth:`resampled` can interpolate the
    grid rows to another resolution (Sec. 3.2).

    Args:
        grid_size: int or (int, int). The patch grid (rows, columns).
        num_prefix_tokens: int. Tokens before the patches. Defaults to 1.
        kind: ``"learned"`` (the paper, initialised normal(0.02)),
            ``"sincos2d"`` (fixed 2-D sin-cos of big_vision, nothing learned;
            prefix tokens get no position embedding) or ``"rope"``
            (DINOv3's rotary embeddings, which each block's attention
            applies to queries and keys: nothing is added here).
        initializer: initializer of learned embeddings.

    Call arguments:
        x: ``(batch, num_prefix_tokens + gh * gw, hidden_dim)``; with
            `spatial_shapes`, ``(batch, num_prefix_tokens + N, hidden_dim)``.
        spatial_shapes: None, or int ``(batch, 2)``: NaFlex (`keras_vit.naflex`),
            each image's patch grid (rows, columns), its ``h * w`` patches
            first in the ``N`` after the prefix, then padding. Learned
            embeddings are resized to each image's grid (bilinear with
            antialiasing, as Hugging Face's
            ``Siglip2VisionEmbeddings.resize_positional_embeddings``:
            `naflex_resize_weights`, one row of weights per patch, so the
            shapes are static and it traces); sin-cos ones are computed at
            each patch's row and column; the padding gets none.
        grid: None, or ``(rows, cols)`` (`grid_positions` of the images):
            images of any size, ``x`` holding
            ``num_prefix_tokens + len(rows) * len(cols)`` tokens. Learned
            embeddings are resampled to that grid in the graph as
            `resampled` resamples them (`resize_weights`, by
            `resample_method`); sin-cos ones are computed on it.
        resample_method: one of `RESAMPLE_METHODS`, with `grid`.

    Output shape: that of ``x``.

    In `ViT` this layer is ``position_embedding``; its variable is
    ``position_embedding/embeddings`` ``(1, num_prefix_tokens + gh * gw, D)``,
    one row per prefix token ([class], registers) then one per patch in
    row-major order.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import PositionEmbedding

        layer = PositionEmbedding(grid_size=(4, 4), num_prefix_tokens=1)
        x = np.zeros((2, 17, 32), "float32")
        print(tuple(layer(x).shape))                 # -> (2, 17, 32)
        print(tuple(layer.embeddings.shape))         # -> (1, 17, 32)
        print(tuple(layer.resampled((6, 6)).shape))  # -> (1, 37, 32)

        fixed = PositionEmbedding(grid_size=4, num_prefix_tokens=0, kind="sincos2d")
        print(tuple(fixed(np.zeros((1, 16, 32), "float32")).shape), len(fixed.weights))  # -> (1, 16, 32) 0
        ```
    """

    def __init__(
        self,
        grid_size,
        num_prefix_tokens=1,
        kind="learned",
        initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if kind not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"Unknown position embedding kind {kind!r}; use one of {POSITION_EMBEDDINGS}."
            )
        self.grid_size = pair(grid_size, "grid_size")
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.kind = kind
        self.initializer = keras.initializers.get(
            initializer or keras.initializers.RandomNormal(stddev=0.02)
        )

    @property
    def sequence_length(self):
        """int: the length of the sequence, ``num_prefix_tokens + gh * gw``."""
        return self.num_prefix_tokens + math.prod(self.grid_size)

    def build(self, input_shape):
        hidden_dim = tuple(input_shape)[-1]  # the length is checked in `call` (NaFlex: any)
        if self.kind == "learned":
            self.embeddings = self.add_weight(
                shape=(1, self.sequence_length, hidden_dim),
                initializer=self.initializer,
                name="embeddings",
            )
        elif self.kind == "sincos2d":
            table = np.zeros((1, self.sequence_length, hidden_dim), np.float32)
            table[0, self.num_prefix_tokens:] = sincos_2d(self.grid_size, hidden_dim)
            self._table = table

    def call(self, x, spatial_shapes=None, grid=None, resample_method="bilinear"):
        if self.kind == "rope":
            return x
        table = self.embeddings if self.kind == "learned" else self._table
        if grid is not None:
            return self._add_on_grid(x, table, *grid, resample_method)
        if spatial_shapes is None:
            length = x.shape[1]
            if length is not None and length != self.sequence_length:
                raise ValueError(
                    f"{self.name} was made for a {self.grid_size[0]}x"
                    f"{self.grid_size[1]} grid with {self.num_prefix_tokens} prefix "
                    f"tokens ({self.sequence_length} tokens) but got {length} tokens."
                )
            return x + ops.cast(table, x.dtype)
        prefix, (grid_h, grid_w) = self.num_prefix_tokens, self.grid_size
        hidden_dim = x.shape[-1]
        patches = sequence_length(x) - prefix  # NaFlex: any length up to max_num_patches
        rows, cols, valid = naflex_positions(spatial_shapes, patches)
        if self.kind == "learned":
            shapes = ops.cast(spatial_shapes, "float32")
            weights = (naflex_resize_weights(rows, shapes[:, :1], grid_h)[..., :, None]
                       * naflex_resize_weights(cols, shapes[:, 1:], grid_w)[..., None, :])
            weights = ops.reshape(weights, (-1, patches, grid_h * grid_w))
            grid = ops.reshape(ops.cast(table[0, prefix:], "float32"), (grid_h * grid_w, hidden_dim))
            positions = ops.matmul(weights, grid)
        else:
            positions = sincos_2d_at(rows, cols, hidden_dim)
        positions = ops.where(valid[..., None], positions, 0.0)
        return self._add(x, table, positions)

    def _add_on_grid(self, x, table, rows, cols, method):
        """`call` on the grid of `rows` and `cols` (`grid_positions`)."""
        prefix, (grid_h, grid_w) = self.num_prefix_tokens, self.grid_size
        hidden_dim = x.shape[-1]
        if self.kind == "learned":
            # the table's own grid keeps the table (`keras_vit.assign.transfer_weights`, DINOv2)
            same = ops.logical_and(ops.equal(_count(rows), grid_h), ops.equal(_count(cols), grid_w))
            side = ops.maximum(_count(rows), _count(cols)) if method == "cpe" else None  # the square it crops
            row_weights, col_weights = (
                ops.where(same, _one_hot_rows(positions, old), resize_weights(positions, old, method, side))
                for positions, old in ((rows, grid_h), (cols, grid_w)))
            old = ops.reshape(ops.cast(table[0, prefix:], "float32"), (grid_h, grid_w, hidden_dim))
            positions = ops.einsum("Hh,hwd->Hwd", row_weights, old)
            positions = ops.einsum("Ww,Hwd->HWd", col_weights, positions)
        else:  # sin-cos on the new grid
            positions = sincos_2d_at(rows[:, None] + 0.0 * cols[None, :],
                                     cols[None, :] + 0.0 * rows[:, None], hidden_dim)
        return self._add(x, table, ops.reshape(positions, (1, -1, hidden_dim)))

    def _add(self, x, table, positions):
        """`x` plus the prefix rows of `table` and, after them, `positions`
        (one row per patch of `x`)."""
        prefix = self.num_prefix_tokens
        grid = x[:, prefix:] + ops.cast(positions, x.dtype)
        if not prefix:
            return grid
        return ops.concatenate([x[:, :prefix] + ops.cast(table[:, :prefix], x.dtype), grid], axis=1)

    def resampled(self, grid_size, method="bilinear"):
        """The learned embeddings interpolated to `grid_size`, as NumPy."""
        if self.kind != "learned":
            raise ValueError("Only learned position embeddings are resampled.")
        return resample_position_embeddings(
            keras.ops.convert_to_numpy(self.embeddings),
            self.grid_size,
            grid_size,
            self.num_prefix_tokens,
            method,
        )

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            grid_size=self.grid_size,
            num_prefix_tokens=self.num_prefix_tokens,
            kind=self.kind,
            initializer=keras.initializers.serialize(self.initializer),
        )
        return config
