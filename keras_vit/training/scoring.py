"""Scoring a trained model: top-1 accuracy, and the paper's few-shot linear
evaluation of its frozen features (Sec. 4.1; the closed-form scores of the
features are `keras_vit.evaluation.metrics.few_shot_from_features` and
`linear_few_shot_accuracy`, which need no Keras).
"""

import keras
import numpy as np

from keras_vit.evaluation.metrics import SHOTS
from keras_vit.evaluation.metrics import few_shot_from_features
from keras_vit.evaluation.metrics import linear_few_shot_accuracy  # keras_vit.training's name for it


def _check_float_images(images):
    dtype = keras.backend.standardize_dtype(images.dtype)
    if not dtype.startswith(("float", "bfloat")):
        raise ValueError(
            f"The data gives {dtype} images; the model expects floats in [-1, 1]. "
            "Use keras_vit.data.input_pipeline (it scales them), or `images / 127.5 - 1`."
        )


def feature_extractor(model):
    """A model from images to the representation y the head reads (Eq. 4,
    after pooling and pre-logits): ``(batch, features)``."""
    if model.parts.head is None:
        return model
    return keras.Model(model.input, model.parts.head.input, name=f"{model.name}_features")


def predict_batches(model, dataset):
    """`model`'s outputs (NumPy) on each of `dataset`'s (images, labels)
    batches, with the batch's integer labels: ``(outputs, labels)`` per
    batch. The images are an array, or NaFlex's dict
    (`keras_vit.naflex_inputs`), whose ``"patches"`` must be float. A
    batch smaller than the first (the last) is padded to the first's size
    with copies of its last example, and its outputs cut back, so the model
    runs one shape: a compiled backend (TensorFlow's `tf.function`, JAX's
    `jit`) traces it once."""
    rows = None
    for images, labels in dataset:
        images = keras.tree.map_structure(keras.ops.convert_to_numpy, images)
        _check_float_images(images["patches"] if isinstance(images, dict) else images)
        labels = keras.ops.convert_to_numpy(labels)
        if labels.ndim > 1:  # one-hot
            labels = labels.argmax(-1)
        n = len(labels)
        rows = rows or n
        if n < rows:
            images = keras.tree.map_structure(
                lambda x: np.pad(x, [(0, rows - n)] + [(0, 0)] * (x.ndim - 1), mode="edge"), images)
        yield keras.ops.convert_to_numpy(model.predict_on_batch(images))[:n], labels


def predict_features(model, dataset):
    """``(features (n, d), labels (n,))`` of a dataset of (images, labels)
    batches, through `feature_extractor(model)`.

    Examples:
        ```python
        from keras_vit import ViT
        from keras_vit.data import input_pipeline
        from keras_vit.training.scoring import feature_extractor, predict_features

        model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                    num_classes=10, representation_size=8)
        print(feature_extractor(model).output_shape)   # -> (None, 8)
        test = input_pipeline("digits", "test", image_size=16, batch_size=256, training=False)
        features, labels = predict_features(model, test)
        print(tuple(features.shape), features.dtype, tuple(labels.shape))  # -> (360, 8) float64 (360,)
        ```
    """
    extractor = feature_extractor(model)
    features, labels = [], []
    for batch_features, batch_labels in predict_batches(extractor, dataset):
        features.append(batch_features)
        labels.append(batch_labels)
    return np.concatenate(features).astype("float64"), np.concatenate(labels)


def accuracy(model, dataset):
    """Top-1 accuracy of ``model``'s logits on every example of ``dataset``
    (batches of images and integer or one-hot labels).

    Examples:
        ```python
        from keras_vit import ViT
        from keras_vit.data import input_pipeline
        from keras_vit.training import accuracy

        model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                    num_classes=10)
        test = input_pipeline("digits", "test", image_size=16, batch_size=256, training=False)
        print(accuracy(model, test))   # -> 0.10833333333333334  # the zero-initialised head predicts class 0
        ```
    """
    correct = total = 0
    for logits, labels in predict_batches(model, dataset):
        correct += int((logits.argmax(-1) == labels).sum())
        total += len(labels)
    if not total:
        raise ValueError("The evaluation dataset is empty.")
    return correct / total


def few_shot_accuracy(model, train_dataset, test_dataset, num_classes, shots=SHOTS, seeds=3,
                      l2_reg=2.0**10):
    """The paper's few-shot linear evaluation of ``model``'s frozen features:
    ``{k: accuracy}`` for k in `shots`. Datasets give (images, labels)
    batches, preprocessed for evaluation (no augmentation).

    Examples:
        ```python
        from keras_vit import ViT
        from keras_vit.data import input_pipeline
        from keras_vit.training import few_shot_accuracy

        model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                    num_classes=10)
        train = input_pipeline("digits", "train", image_size=16, batch_size=256, training=False)
        test = input_pipeline("digits", "test", image_size=16, batch_size=256, training=False)
        print(sorted(few_shot_accuracy(model, train, test, num_classes=10, shots=(1, 5))))   # -> [1, 5]
        ```
    """
    train = predict_features(model, train_dataset)
    test = predict_features(model, test_dataset)
    return few_shot_from_features(*train, *test, num_classes, shots, seeds, l2_reg)
