"""Scoring a trained model: top-1 accuracy, and the paper's few-shot linear evaluation.

Few-shot (Sec. 4.1): "we solve a regularized least-squares regression problem
that maps the (frozen) representation of a subset of training images to
{-1, 1}^K target vectors", in closed form, and report the accuracy of the
resulting linear classifier on the test split. As big_vision's
``fewshot_lsr`` evaluator: the features are whitened with the training
subset's mean and standard deviation, a constant feature of 100 stands for an
almost unregularized bias, and the ridge penalty is ``l2_reg = 2 ** 10``.
"""

import keras
import numpy as np

from keras_vit.evaluation.metrics import check_finite

SHOTS = (1, 5, 10, 25)
BIAS_CONSTANT = 100.0


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


def linear_few_shot_accuracy(train_features, train_labels, test_features, test_labels,
                             num_classes, l2_reg=2.0**10):
    """Accuracy of the closed-form regularized least-squares classifier.

    Args:
        train_features: ``(n, d)`` frozen representations of the k-shot set.
        train_labels: ``(n,)`` integer labels.
        test_features: ``(m, d)`` representations of the test split.
        test_labels: ``(m,)`` integer labels of the test split.
        num_classes: K.
        l2_reg: ridge penalty.
    Returns: float, top-1 accuracy of ``argmax(x_test W)``, where W minimises
        ``|X W - Y|^2 + l2_reg |W|^2`` with Y in {-1, 1}^K.

    Examples:
        ```python
        import numpy as np
        from keras_vit.training import linear_few_shot_accuracy

        rng = np.random.default_rng(0)
        centres = rng.normal(size=(3, 8))
        train_labels, test_labels = np.repeat(np.arange(3), 5), np.repeat(np.arange(3), 20)
        train_features = centres[train_labels] + 0.1 * rng.normal(size=(15, 8))
        test_features = centres[test_labels] + 0.1 * rng.normal(size=(60, 8))
        print(linear_few_shot_accuracy(train_features, train_labels, test_features, test_labels,
                                       num_classes=3))   # -> 1.0
        ```
    """
    check_finite(train_features=train_features, test_features=test_features)
    return _least_squares_accuracy(train_features, train_labels, test_features, test_labels,
                                   num_classes, l2_reg)


def _least_squares_accuracy(train_features, train_labels, test_features, test_labels, num_classes,
                            l2_reg):
    """`linear_few_shot_accuracy` of features already checked to be finite."""
    x = np.asarray(train_features, "float64")
    mean = x.mean(0, keepdims=True)
    std = x.std(0, keepdims=True) + 1e-5

    def design(features):
        features = (np.asarray(features, "float64") - mean) / std
        return np.pad(features, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)

    x = design(x)
    y = 2.0 * np.eye(num_classes)[np.asarray(train_labels)] - 1.0
    n, d = x.shape
    if n >= d:
        w = np.linalg.solve(x.T @ x + l2_reg * np.eye(d), x.T @ y)
    else:  # the same solution through the n x n system
        w = x.T @ np.linalg.solve(x @ x.T + l2_reg * np.eye(n), y)
    predictions = (design(test_features) @ w).argmax(-1)
    return float((predictions == np.asarray(test_labels)).mean())


def few_shot_from_features(train_features, train_labels, test_features, test_labels,
                           num_classes, shots=SHOTS, seeds=3, l2_reg=2.0**10):
    """``{k: accuracy}`` for k images per class, averaged over `seeds` draws
    of the k-shot subsets (big_vision draws them the same way)."""
    check_finite(train_features=train_features, test_features=test_features)  # once, not each subset
    train_labels = np.asarray(train_labels)
    results = {}
    for k in shots:
        scores = []
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            chosen = []
            for label in range(num_classes):
                indices = np.flatnonzero(train_labels == label)
                if len(indices) < k:
                    raise ValueError(
                        f"{k}-shot evaluation needs {k} training images of class {label}; "
                        f"the split has {len(indices)}. Use fewer shots or a larger split."
                    )
                chosen.append(rng.permutation(indices)[:k])
            chosen = np.concatenate(chosen)
            scores.append(_least_squares_accuracy(
                train_features[chosen], train_labels[chosen], test_features, test_labels,
                num_classes, l2_reg,
            ))
        results[k] = float(np.mean(scores))
    return results


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
