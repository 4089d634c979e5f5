"""DINOv3's linear segmentation head: per-pixel classes from patch feature maps."""

import keras
import numpy as np
from keras import ops

from keras_vit.config import is_int
from keras_vit.config import pair
from keras_vit.config import standardize_data_format


@keras.saving.register_keras_serializable(package="keras_vit")
class LinearSegmentationHead(keras.layers.Layer):
    """The linear probe of semantic segmentation: feature maps in, per-pixel
    class logits out.

    The linear head of DINOv3's segmentation probe (Siméoni et al.,
    "DINOv3", 2025; ``dinov3/eval/segmentation/models/heads/linear_head.py``),
    as DINOv2's ``BNHead`` before it: the maps are resized bilinearly to the
    grid of the first and concatenated on the channels, then

        logits = Conv1x1(BatchNorm(SpatialDropout(concat(maps))))

    and the logits are upsampled bilinearly (half-pixel centres, as
    PyTorch's ``align_corners=False``; ``keras.ops.image.resize``'s
    numbers, written as one product with an interpolation matrix per axis,
    `bilinear_matrix`, which every ONNX exporter traces with a dynamic
    batch) from the patch grid to `image_size`,
    so that the loss and the metrics compare them with every pixel's label.
    A linear map of each patch's features: only the features decide the
    classes, which is what a probe measures.

    Args:
        num_classes: int. Classes per pixel (the background included).
        image_size: int or (int, int). The (H, W) the logits are upsampled to.
        data_format: ``"channels_last"`` or ``"channels_first"``, of the maps
            and of the logits. Defaults to ``keras.config.image_data_format()``.
        dropout: float. Rate of the dropout of whole channels
            (``keras.layers.SpatialDropout2D``) before the normalization
            while training; DINOv3's 0.1.
        momentum: float. The BatchNormalization's moving-average momentum;
            0.9 is PyTorch's ``BatchNorm2d`` (its ``momentum=0.1``).
        epsilon: float. The BatchNormalization's epsilon; PyTorch's 1e-5.
        kernel_initializer: the 1x1 convolution's kernel initializer;
            DINOv3's normal(0, 0.01).
        bias_initializer: its bias initializer; zeros, as DINOv3.

    Input: one feature map, or a list of them (a dict: its values in the
        order of their sorted keys), each ``(batch, grid_h, grid_w,
        channels)`` (or ``(batch, channels, grid_h, grid_w)``), as
        `keras_vit.ViT.feature_model` gives them.
    Output shape: ``(batch, H, W, num_classes)`` (or ``(batch,
        num_classes, H, W)``), H and W from `image_size`.

    The sublayers are ``dropout``, ``batch_norm`` (over the concatenated
    channels) and ``classifier`` (the 1x1 ``Conv2D``); they compute in
    channels_last whatever `data_format` is (TensorFlow has no NCHW
    convolution on most CPUs), the maps and the logits transposed.

    Examples:
        ```python
        import numpy as np
        from keras_vit.layers import LinearSegmentationHead

        head = LinearSegmentationHead(num_classes=11, image_size=32)
        maps = [np.zeros((2, 8, 8, 64), "float32") for _ in range(4)]   # four blocks' maps
        print(tuple(head(maps).shape))                   # -> (2, 32, 32, 11)
        print(tuple(head.classifier.kernel.shape))       # -> (1, 1, 256, 11)
        ```
    """

    def __init__(
        self,
        num_classes,
        image_size,
        data_format=None,
        dropout=0.1,
        momentum=0.9,
        epsilon=1e-5,
        kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not is_int(num_classes, 1):
            raise ValueError(f"`num_classes` must be a positive int (the classes per pixel, "
                             f"the background included), got {num_classes!r}.")
        if not 0 <= dropout < 1:
            raise ValueError(f"`dropout` must be a rate in [0, 1), got {dropout!r}.")
        self.num_classes = int(num_classes)
        self.image_size = pair(image_size, "image_size")
        self.data_format = standardize_data_format(data_format)
        self.dropout_rate = float(dropout)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or keras.initializers.RandomNormal(stddev=0.01))
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.dropout = keras.layers.SpatialDropout2D(
            self.dropout_rate, data_format="channels_last", dtype=self.dtype_policy,
            name="dropout")
        self.batch_norm = keras.layers.BatchNormalization(
            axis=-1, momentum=self.momentum, epsilon=self.epsilon, dtype=self.dtype_policy,
            name="batch_norm")
        self.classifier = keras.layers.Conv2D(
            self.num_classes, 1, data_format="channels_last",
            kernel_initializer=self.kernel_initializer, bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy, name="classifier")

    def _map_shapes(self, input_shape):
        """The maps' shapes as a list of channels_last tuples, checked."""
        if isinstance(input_shape, dict):
            shapes = [input_shape[key] for key in sorted(input_shape)]
        elif input_shape and isinstance(input_shape[0], (list, tuple)):
            shapes = list(input_shape)
        else:
            shapes = [input_shape]
        shapes = [tuple(shape) for shape in shapes]
        if not shapes or any(len(shape) != 4 for shape in shapes):
            raise ValueError(
                f"{self.name} takes feature maps of rank 4, (batch, grid_h, grid_w, channels) in "
                f"{self.data_format}, one or a list of them, but got shapes {shapes}. Pass the "
                "maps of `ViT.feature_model`.")
        if self.data_format == "channels_first":
            shapes = [(s[0], s[2], s[3], s[1]) for s in shapes]
        if any(shape[-1] is None for shape in shapes):
            raise ValueError(f"{self.name} needs the maps' channels known, got shapes {shapes} "
                             f"({self.data_format}).")
        return shapes

    def build(self, input_shape):
        shapes = self._map_shapes(input_shape)
        channels = sum(shape[-1] for shape in shapes)
        concatenated = (shapes[0][0], shapes[0][1], shapes[0][2], channels)
        self.dropout.build(concatenated)
        self.batch_norm.build(concatenated)
        self.classifier.build(concatenated)

    def call(self, maps, training=None):
        if isinstance(maps, dict):
            maps = [maps[key] for key in sorted(maps)]
        elif not isinstance(maps, (list, tuple)):
            maps = [maps]
        if self.data_format == "channels_first":
            maps = [ops.transpose(x, (0, 2, 3, 1)) for x in maps]
        grid = tuple(maps[0].shape[1:3])
        maps = [x if tuple(x.shape[1:3]) == grid
                else ops.image.resize(x, grid, interpolation="bilinear", antialias=False)
                for x in maps]
        x = maps[0] if len(maps) == 1 else ops.concatenate(maps, axis=-1)
        x = self.dropout(x, training=training)
        x = self.batch_norm(x, training=training)
        x = self.classifier(x)
        rows, columns = (ops.convert_to_tensor(bilinear_matrix(size, length), x.dtype)
                         for size, length in zip(self.image_size, grid))
        x = ops.einsum("bHwc,Ww->bHWc", ops.einsum("Hh,bhwc->bHwc", rows, x), columns)
        if self.data_format == "channels_first":
            x = ops.transpose(x, (0, 3, 1, 2))
        return x

    def compute_output_shape(self, input_shape):
        batch = self._map_shapes(input_shape)[0][0]
        if self.data_format == "channels_first":
            return (batch, self.num_classes, *self.image_size)
        return (batch, *self.image_size, self.num_classes)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            image_size=self.image_size,
            data_format=self.data_format,
            dropout=self.dropout_rate,
            momentum=self.momentum,
            epsilon=self.epsilon,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config


def bilinear_matrix(size, length):
    """The ``(size, length)`` matrix of bilinear interpolation from `length`
    samples to `size`: half-pixel centres, clamped at the edges, no
    antialiasing; row i weights the two samples nearest to
    ``(i + 0.5) * length / size - 0.5``, so that ``matrix @ x`` is
    ``keras.ops.image.resize(x, ..., interpolation="bilinear",
    antialias=False)`` along that axis."""
    centres = np.clip((np.arange(size) + 0.5) * length / size - 0.5, 0, length - 1)
    low = np.floor(centres).astype(int)
    high = np.minimum(low + 1, length - 1)
    matrix = np.zeros((size, length), "float32")
    np.add.at(matrix, (np.arange(size), low), 1 - (centres - low))
    np.add.at(matrix, (np.arange(size), high), centres - low)
    return matrix
