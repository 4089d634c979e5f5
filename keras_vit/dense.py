"""Dense prediction on a ViT's feature maps: DINOv3's linear segmentation
probe (`segmentation_probe`), its mean IoU (`mean_iou`), and the run of
``keras-vit segment`` on the embedded digit canvases (`segment_digits`).

The probe reads `keras_vit.ViT.feature_model`'s maps, concatenates them and
classifies every patch with one linear map
(`keras_vit.layers.LinearSegmentationHead`), the logits upsampled to the
pixels: how well the frozen features separate the classes, pixel by pixel.
"""

import time

import keras
import numpy as np

from keras_vit.config import is_int
from keras_vit.io import files
from keras_vit.layers import LinearSegmentationHead


@keras.saving.register_keras_serializable(package="keras_vit")
class SegmentationMeanIoU(keras.metrics.MeanIoU):
    """Keras's ``MeanIoU``, its confusion matrix counted with one matrix
    product of one-hot labels: the same counts, the same arguments and
    result, on every backend at the speed of a matmul.

    Keras 3.15's ``MeanIoU`` counts them with ``ops.scatter``, which
    PyTorch's backend runs as a Python loop over the pixels: about a second
    per batch of 64 masks of 32x32 on a CPU, where this takes milliseconds.
    Labels and predictions outside ``[0, num_classes)``, and the
    ``ignore_class``, are not counted, as Keras's. It takes the arguments
    of ``keras.metrics.MeanIoU`` (``num_classes``, ``name``, ``dtype``,
    ``ignore_class``, ``sparse_y_true``, ``sparse_y_pred``, ``axis``).
    """

    def update_state(self, y_true, y_pred, sample_weight=None):
        """Adds the pixels of a batch to the confusion matrix: `y_true`
        ``(batch, H, W)`` classes (or one-hot), `y_pred` ``(batch, H, W,
        num_classes)`` logits (or classes, with ``sparse_y_pred``)."""
        ops = keras.ops
        if not self.sparse_y_true:
            y_true = ops.argmax(y_true, axis=self.axis)
        if not self.sparse_y_pred:
            y_pred = ops.argmax(y_pred, axis=self.axis)
        weight = ops.ones(ops.shape(y_true), "float32") if sample_weight is None else \
            ops.broadcast_to(ops.cast(ops.cast(sample_weight, self.dtype), "float32"),
                             ops.shape(y_true))  # as Keras: in the metric's dtype (int32)
        y_true = ops.reshape(ops.cast(y_true, "int32"), (-1,))
        y_pred = ops.reshape(ops.cast(y_pred, "int32"), (-1,))
        valid = ops.logical_and(ops.logical_and(y_true >= 0, y_true < self.num_classes),
                                ops.logical_and(y_pred >= 0, y_pred < self.num_classes))
        if self.ignore_class is not None:
            valid = ops.logical_and(valid, y_true != self.ignore_class)
        weight = ops.where(valid, ops.reshape(weight, (-1,)), 0.0)
        true = ops.one_hot(ops.where(valid, y_true, 0), self.num_classes) * weight[:, None]
        predicted = ops.one_hot(ops.where(valid, y_pred, 0), self.num_classes)
        self.total_cm.assign_add(ops.cast(ops.matmul(ops.transpose(true), predicted),
                                          self.total_cm.dtype))


def segmentation_probe(model, num_classes, layers=None, norm=True, freeze=True, optimizer=None):
    """DINOv3's linear segmentation probe on `model`'s feature maps, compiled.

    The functional model ``images -> model.feature_model(layers, norm) ->
    LinearSegmentationHead`` (BatchNorm over the concatenated maps, a 1x1
    convolution to the classes, bilinear upsampling to the pixels), compiled
    with a per-pixel ``SparseCategoricalCrossentropy(from_logits=True)``
    and Keras's mean IoU (`SegmentationMeanIoU`, ``"mean_iou"``), so that it trains with
    ``fit`` on images and integer masks and saves to ``.keras``. Compile it
    again for other settings.

    Args:
        model: a `keras_vit.ViT`.
        num_classes: int, at least 2. Classes per pixel, the background included.
        layers: the blocks whose maps are read, as `ViT.feature_model` takes
            them: None for DINOv3's four evenly spaced blocks ending at the
            last, an int for the last n, or a list of block indices.
        norm: bool. The final LayerNorm on each block's tokens (DINOv3's
            ``use_backbone_norm``, its default).
        freeze: bool. The backbone's layers are made non-trainable (the
            probe of DINOv3's evaluation: only the head trains). The feature
            model shares `model`'s layers, so they are frozen in `model`
            too; ``False`` trains them with the head.
        optimizer: a Keras optimizer, or None for DINOv3's: AdamW, learning
            rate 1e-3, weight decay 1e-2, gradients clipped to a global norm
            of 35.

    Returns:
        A compiled ``keras.Model``: images ``(batch, H, W, C)`` (or ``(batch,
        C, H, W)``) to per-pixel logits ``(batch, H, W, num_classes)`` in
        either layout, as the masks are; its layers ``images``, the feature
        model (``{model.name}_features``), ``segmentation_head`` and, for a
        channels_first model, ``logits_channels_last``.

    A probe reloaded with ``keras.saving.load_model`` gives the same logits,
    but Keras 3.15 restores the weights inside a frozen nested model as
    trainable: freeze the backbone again before training it further, with
    ``features = probe.get_layer("vit_features")``, ``features.trainable =
    True`` and then ``features.trainable = False`` (on TensorFlow, setting
    ``trainable`` to the value it has already does nothing).

    Example:
        ```python
        import numpy as np
        import keras_vit

        model = keras_vit.ViT(image_size=32, patch_size=8, num_layers=4, num_heads=2,
                              hidden_dim=16, mlp_dim=32, num_classes=0)
        probe = keras_vit.segmentation_probe(model, num_classes=3)
        images = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
        masks = np.random.default_rng(1).integers(0, 3, (8, 32, 32)).astype("int32")
        probe.fit(images, masks, batch_size=4, epochs=1, verbose=0)
        print(tuple(probe.predict(images, verbose=0).shape))   # -> (8, 32, 32, 3)
        print(len(probe.trainable_weights))                    # -> 4  # the head's alone
        ```
    """
    if not is_int(num_classes, 2):
        raise ValueError(
            f"`num_classes` must be an int of at least 2, the background and at least one "
            f"class, got {num_classes!r}: with one class each pixel's softmax is 1 whatever "
            "the image, so the probe would learn and predict nothing. Count the background "
            "as a class: num_classes=2 for one kind of object on a background.")
    features = model.feature_model(layers=layers, norm=norm)
    if freeze:
        features.trainable = False
    images = keras.Input(shape=model.input_shape[1:], name="images")
    maps = features(images)
    head = LinearSegmentationHead(num_classes, model.image_size, data_format=model.config.data_format,
                                  dtype=model.dtype_policy, name="segmentation_head")
    logits = head([maps[name] for name in sorted(maps, key=_block_index)])
    if model.config.data_format == "channels_first":
        logits = keras.layers.Permute((2, 3, 1), name="logits_channels_last")(logits)
    probe = keras.Model(images, logits, name=f"{model.name}_segmentation_probe")
    if optimizer is None:
        optimizer = keras.optimizers.AdamW(1e-3, weight_decay=1e-2, global_clipnorm=35.0)
    probe.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[SegmentationMeanIoU(num_classes, sparse_y_true=True, sparse_y_pred=False,
                                     name="mean_iou")],
    )
    return probe


def _block_index(name):
    """``"encoder_block_10"`` -> 10: the maps in the blocks' order."""
    return int(name.rsplit("_", 1)[-1])


def mean_iou(masks, predictions, num_classes):
    """Mean intersection over union of predicted classes, Keras's
    ``MeanIoU`` (`SegmentationMeanIoU`): per class ``TP / (TP + FP + FN)`` over every pixel, then
    the mean over the classes that occur in `masks` or `predictions`.

    Args:
        masks: int ``(batch, H, W)``, the true class of each pixel.
        predictions: int ``(batch, H, W)``, the predicted class (the
            argmax of the probe's logits).
        num_classes: int.

    Returns:
        ``(mean, per_class)``: the mean IoU, a float, and the list of each
        class's IoU (None for a class that occurs in neither).
    """
    metric = SegmentationMeanIoU(num_classes, sparse_y_true=True, sparse_y_pred=True)
    metric.update_state(np.asarray(masks).reshape(-1), np.asarray(predictions).reshape(-1))
    confusion = keras.ops.convert_to_numpy(metric.total_cm).astype(np.float64)
    true_positives = np.diag(confusion)
    union = confusion.sum(0) + confusion.sum(1) - true_positives
    per_class = [float(tp / u) if u else None for tp, u in zip(true_positives, union)]
    return float(keras.ops.convert_to_numpy(metric.result())), per_class


def segment_digits(model, workdir, layers=None, norm=True, freeze=True, epochs=6,
                   train_canvases=2000, test_canvases=500, batch_size=64, learning_rate=3e-2,
                   digits_per_canvas=3, seed=0, verbose=2):
    """The linear segmentation probe of `model` on the embedded digit
    canvases (`keras_vit.data.digit_segmentation`): trained on canvases of
    the training digits, evaluated on canvases of the held-out digits; the
    run of ``keras-vit segment``.

    The canvases are at `model`'s image size and pixel scaling. The probe
    (`segmentation_probe`) trains with DINOv3's AdamW, its learning rate
    warmed up over the first tenth of the steps and cosine-decayed to 0.
    Into `workdir` go ``results.json`` (the held-out mean IoU, each class's
    IoU, the background-only baseline's mean IoU, the pixel accuracy, the
    settings and the seconds) and ``segmentation.png`` (held-out canvases:
    image, ground truth and prediction side by side).

    Args:
        model: a `keras_vit.ViT` of square images.
        workdir: the folder written into (created if missing).
        layers: the blocks read, as `segmentation_probe` takes them.
        norm: bool. The final LayerNorm on each block's tokens.
        freeze: bool. Only the head trains.
        epochs: int. Passes over the training canvases.
        train_canvases: int. Canvases of the 1437 training digits.
        test_canvases: int. Canvases of the 360 held-out digits.
        batch_size: int.
        learning_rate: float. The peak learning rate.
        digits_per_canvas: int.
        seed: int. The canvases' and the head's seed.
        verbose: Keras ``fit``'s verbosity.

    Returns:
        ``(results, paths)``: the dict written to results.json, and
        ``{"results": path, "picture": path}``.
    """
    from keras_vit.data.segmentation import SEGMENTATION_CLASSES
    from keras_vit.data.segmentation import digit_segmentation

    workdir = files.output_folder(workdir, "--workdir")
    height, width = model.image_size
    if height != width:
        raise ValueError(f"The digit canvases are square; this model takes {height}x{width} images. "
                         "Give it a square size first (ViT.with_image_size, or --image-size).")
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    num_classes = len(SEGMENTATION_CLASSES)
    scaling = dict(pixel_scale=model.pixel_scale, pixel_offset=model.pixel_offset)
    shared = dict(canvas_size=height, digits_per_canvas=digits_per_canvas, **scaling)
    images, masks = digit_segmentation("train", train_canvases, seed=seed, **shared)
    test_images, test_masks = digit_segmentation("test", test_canvases, seed=seed + 1, **shared)
    if model.config.data_format == "channels_first":
        images, test_images = images.transpose(0, 3, 1, 2), test_images.transpose(0, 3, 1, 2)

    keras.utils.set_random_seed(seed)
    steps = epochs * -(-train_canvases // batch_size)
    warmup = steps // 10
    schedule = keras.optimizers.schedules.CosineDecay(0.0, max(1, steps - warmup),
                                                      warmup_target=learning_rate, warmup_steps=warmup)
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=1e-2, global_clipnorm=35.0)
    probe = segmentation_probe(model, num_classes, layers, norm, freeze, optimizer)
    probe.fit(images, masks, batch_size=batch_size, epochs=epochs, shuffle=True, verbose=verbose)
    logits = probe.predict(test_images, batch_size=batch_size, verbose=0)
    predictions = keras.ops.convert_to_numpy(logits).argmax(-1)
    value, per_class = mean_iou(test_masks, predictions, num_classes)
    baseline, _ = mean_iou(test_masks, np.zeros_like(test_masks), num_classes)

    picture = workdir / "segmentation.png"
    shown = min(6, test_canvases)
    plot_segmentation(test_images[:shown], test_masks[:shown], predictions[:shown],
                      SEGMENTATION_CLASSES, **scaling).savefig(picture, dpi=150)
    features = probe.get_layer(f"{model.name}_features")
    results = {
        "mean_iou": round(value, 4),
        "baseline_mean_iou": round(baseline, 4),
        "class_iou": {name: None if iou is None else round(iou, 4)
                      for name, iou in zip(SEGMENTATION_CLASSES, per_class)},
        "pixel_accuracy": round(float((predictions == test_masks).mean()), 4),
        "baseline_pixel_accuracy": round(float((test_masks == 0).mean()), 4),
        "blocks": sorted(_block_index(name) for name in features.output),
        "norm": norm, "freeze": freeze, "epochs": epochs, "train_canvases": train_canvases,
        "test_canvases": test_canvases, "digits_per_canvas": digits_per_canvas,
        "canvas_size": height, "batch_size": batch_size, "learning_rate": learning_rate,
        "seed": seed, "backend": keras.backend.backend(), "model": model.name,
        "seconds": round(time.perf_counter() - start, 1),
    }
    files.write_json(workdir / "results.json", results, indent=1)
    return results, {"results": workdir / "results.json", "picture": picture}


def plot_segmentation(images, masks, predictions, class_names, pixel_scale=1 / 127.5,
                      pixel_offset=-1.0):
    """Each image, its true classes and the predicted ones, side by side, one
    row per image, in a matplotlib figure (``figure.savefig(path)``).

    Args:
        images: ``(n, H, W, 3)`` (or ``(n, 3, H, W)``) as the model takes
            them, ``pixels * pixel_scale + pixel_offset``.
        masks: int ``(n, H, W)``.
        predictions: int ``(n, H, W)``.
        class_names: the classes' names, class 0 (drawn black) first.
        pixel_scale: float or one per channel. How the images were scaled
            from pixels in [0, 255].
        pixel_offset: float or one per channel. See `pixel_scale`.
    """
    from keras_vit.explain.plots import pyplot

    plt = pyplot()  # first: a missing matplotlib is named with its extra
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    images = np.asarray(images, np.float64)
    if images.shape[-1] != 3:
        images = images.transpose(0, 2, 3, 1)
    pixels = np.clip((images - np.asarray(pixel_offset)) / np.asarray(pixel_scale) / 255.0, 0.0, 1.0)
    colors = ["black", *plt.get_cmap("tab10").colors, *plt.get_cmap("Set3").colors]
    cmap = ListedColormap(colors[:len(class_names)])
    count = len(images)
    figure, axes = plt.subplots(count, 3, figsize=(6.0, 2.0 * count + 0.6), squeeze=False)
    for row in range(count):
        axes[row, 0].imshow(pixels[row])
        for column, labels in ((1, masks[row]), (2, predictions[row])):
            axes[row, column].imshow(labels, cmap=cmap, vmin=-0.5, vmax=len(class_names) - 0.5,
                                     interpolation="nearest")
        for axis in axes[row]:
            axis.axis("off")
    for axis, title in zip(axes[0], ("image", "ground truth", "prediction")):
        axis.set_title(title, fontsize=9)
    figure.legend(handles=[Patch(color=colors[i], label=name) for i, name in enumerate(class_names)],
                  loc="lower center", ncol=min(6, len(class_names)), fontsize=7, frameon=False)
    figure.tight_layout(rect=(0, 0.6 / (2.0 * count + 0.6) + 0.02, 1, 1))
    return figure
