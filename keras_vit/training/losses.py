"""The classification losses of the ViT paper's code (Dosovitskiy et al.,
ICLR 2021): softmax cross-entropy for single-label data (vit_jax fine-tuning,
ImageNet pre-training) and sigmoid cross-entropy for the multi-label
ImageNet-21k and JFT pre-training (vision_transformer issue #34); and the
contrastive losses of image-text models (`CLIPLoss`, `SigLIPLoss`) on a
batch's ``logits_per_image`` (`keras_vit.ImageTextModel`).

Both are `keras.losses.Loss` subclasses computed in float32 from logits,
also under a mixed-precision policy, on labels of shape ``(batch, classes)``:
one-hot, multi-hot or soft (Mixup), not class indices. Per example they
sum over classes; the batch is then averaged (Keras's default reduction).
"""

import numbers

import keras


def _float32_logits_and_labels(y_true, y_pred, loss_name):
    y_pred = keras.ops.cast(y_pred, "float32")
    y_true = keras.ops.cast(y_true, "float32")
    if len(y_true.shape) != len(y_pred.shape) or (
        y_true.shape[-1] is not None and y_pred.shape[-1] is not None
        and y_true.shape[-1] != y_pred.shape[-1]
    ):
        raise ValueError(
            f"{loss_name} takes labels of the logits' shape (one-hot, multi-hot or soft "
            f"labels), got labels of shape {tuple(y_true.shape)} for logits of shape "
            f"{tuple(y_pred.shape)}. Turn class indices into one-hot labels first "
            "(keras.ops.one_hot)."
        )
    return y_true, y_pred


@keras.saving.register_keras_serializable(package="keras_vit")
class SigmoidCrossEntropy(keras.losses.Loss):
    """Sigmoid cross-entropy summed over classes, for multi-label pre-training.

    big_vision's ``sigmoid_xent``, per example:

        -sum(labels * log_sigmoid(logits) + (1 - labels) * log_sigmoid(-logits), axis=-1)

    then the mean over the batch. This is a sum over classes, where
    `keras.losses.BinaryCrossentropy` takes the mean: with 21k classes the
    two differ by a factor of 21,843 in the loss and its gradients. Use it
    with the head bias at -10, ``ViT(head_bias_init=-10)``, so that the
    initial sigmoid outputs are close to 0 (vision_transformer issue #2).
    ``log_sigmoid`` is evaluated stably for large logits of either sign.

    Args:
        reduction: Keras loss reduction; the default averages over the batch.
        name: str or None.

    Input shape: ``y_true`` and ``y_pred`` (logits) ``(batch, classes)``.
    Output shape: a scalar, or ``(batch,)`` with ``reduction=None``.
    """

    def __init__(self, reduction="sum_over_batch_size", name="sigmoid_cross_entropy"):
        super().__init__(name=name, reduction=reduction, dtype="float32")

    def call(self, y_true, y_pred):
        labels, logits = _float32_logits_and_labels(y_true, y_pred, "SigmoidCrossEntropy")
        return -keras.ops.sum(
            labels * keras.ops.log_sigmoid(logits)
            + (1.0 - labels) * keras.ops.log_sigmoid(-logits),
            axis=-1,
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class SoftmaxCrossEntropy(keras.losses.Loss):
    """Softmax cross-entropy on one-hot or soft labels, as vit_jax.

    vit_jax's loss, ``-mean(sum(onehot * log_softmax(logits), axis=-1))``,
    with optional label smoothing of the labels first (as Keras's
    `CategoricalCrossentropy`):

        labels = labels * (1 - label_smoothing) + label_smoothing / classes

    ``log_softmax`` is evaluated stably for large logits.

    Args:
        label_smoothing: float in [0, 1]. 0 in the paper.
        reduction: Keras loss reduction; the default averages over the batch.
        name: str or None.

    Input shape: ``y_true`` and ``y_pred`` (logits) ``(batch, classes)``.
    Output shape: a scalar, or ``(batch,)`` with ``reduction=None``.
    """

    def __init__(self, label_smoothing=0.0, reduction="sum_over_batch_size",
                 name="softmax_cross_entropy"):
        super().__init__(name=name, reduction=reduction, dtype="float32")
        if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real) \
                or not 0 <= label_smoothing <= 1:
            raise ValueError(
                f"`label_smoothing` must be a number in [0, 1], got {label_smoothing!r}."
            )
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        labels, logits = _float32_logits_and_labels(y_true, y_pred, "SoftmaxCrossEntropy")
        if self.label_smoothing:
            classes = keras.ops.cast(keras.ops.shape(logits)[-1], "float32")
            labels = labels * (1.0 - self.label_smoothing) + self.label_smoothing / classes
        return -keras.ops.sum(labels * keras.ops.log_softmax(logits, axis=-1), axis=-1)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


def sigmoid_cross_entropy(reduction="sum_over_batch_size"):
    """The multi-label pre-training loss (ImageNet-21k, JFT); see
    `SigmoidCrossEntropy`. Returns a `SigmoidCrossEntropy`."""
    return SigmoidCrossEntropy(reduction=reduction)


def softmax_cross_entropy(label_smoothing=0.0, reduction="sum_over_batch_size"):
    """The single-label loss of vit_jax; see `SoftmaxCrossEntropy`.
    Returns a `SoftmaxCrossEntropy`.

    Examples:
        ```python
        import numpy as np
        from keras_vit.training import sigmoid_cross_entropy, softmax_cross_entropy

        logits = np.array([[2.0, -1.0, 0.5], [0.3, 0.2, -4.0]], "float32")
        one_hot = np.array([[0, 1, 0], [1, 0, 0]], "float32")
        multi_hot = np.array([[0, 1, 0], [1, 0, 1]], "float32")
        print(round(float(softmax_cross_entropy()(one_hot, logits)), 4))    # -> 1.9464
        print(round(float(sigmoid_cross_entropy()(multi_hot, logits)), 4))  # -> 4.8925
        print(tuple(sigmoid_cross_entropy(reduction=None)(multi_hot, logits).shape))  # -> (2,)
        ```
    """
    return SoftmaxCrossEntropy(label_smoothing=label_smoothing, reduction=reduction)


def _pair_labels(y_true, y_pred, loss_name):
    """The matching matrix (image ``i`` matches text ``j`` where 1) and the
    logits, float32, both ``(images, texts)``."""
    if len(y_pred.shape) != 2 or tuple(y_true.shape) != tuple(y_pred.shape):
        raise ValueError(
            f"{loss_name} takes the batch's logits_per_image (images, texts) and a matching "
            f"matrix of the same shape (1 where image i goes with text j; the identity for "
            f"paired batches), got labels {tuple(y_true.shape)} and logits {tuple(y_pred.shape)}. "
            "ImageTextModel.fit without labels pairs image i with text i.")
    return keras.ops.cast(y_true, "float32"), keras.ops.cast(y_pred, "float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class CLIPLoss(keras.losses.Loss):
    """CLIP's symmetric softmax contrastive loss (Radford et al., 2021, Fig. 3).

    For logits ``L = exp(t) · u vᵀ`` of a batch of B images and B texts,
    the mean of the image-to-text and text-to-image cross-entropies:

        loss_i = (CE(L[i, :], y[i, :]) + CE(L[:, i], y[:, i])) / 2

    with ``CE(l, y) = -sum(y / sum(y) · log_softmax(l))``: for the
    identity matching (``fit`` without labels) ``-log_softmax(L)[i, i]``
    and its column's, as open_clip's ``ClipLoss``.

    Input shape: ``y_true`` (the matching matrix) and ``y_pred``
    (``logits_per_image``), both ``(B, B)``.
    Output shape: a scalar, or ``(B,)`` with ``reduction=None``.
    """

    def __init__(self, reduction="sum_over_batch_size", name="clip_loss"):
        super().__init__(name=name, reduction=reduction, dtype="float32")

    def call(self, y_true, y_pred):
        labels, logits = _pair_labels(y_true, y_pred, "CLIPLoss")
        ops = keras.ops

        def cross_entropy(axis):  # 1: each image over the texts; 0: each text over the images
            return -ops.sum(labels / ops.sum(labels, axis=axis, keepdims=True)
                            * ops.log_softmax(logits, axis=axis), axis=axis)

        return (cross_entropy(1) + cross_entropy(0)) / 2


@keras.saving.register_keras_serializable(package="keras_vit")
class SigLIPLoss(keras.losses.Loss):
    """SigLIP's pairwise sigmoid loss (Zhai et al., ICCV 2023, Algorithm 1).

    For logits ``L = exp(t) · u vᵀ + b``, every image-text pair is a binary
    decision with label ``z = 1`` for a match and ``-1`` otherwise:

        loss_i = -sum_j log_sigmoid(z[i, j] · L[i, j])

    averaged over the B images (big_vision's ``sigmoid`` loss: the sum over
    texts, the mean over images).

    Input shape: ``y_true`` (the matching matrix, 1 and 0) and ``y_pred``
    (``logits_per_image``), both ``(B, B')``.
    Output shape: a scalar, or ``(B,)`` with ``reduction=None``.
    """

    def __init__(self, reduction="sum_over_batch_size", name="siglip_loss"):
        super().__init__(name=name, reduction=reduction, dtype="float32")

    def call(self, y_true, y_pred):
        labels, logits = _pair_labels(y_true, y_pred, "SigLIPLoss")
        return -keras.ops.sum(keras.ops.log_sigmoid((2.0 * labels - 1.0) * logits), axis=1)
