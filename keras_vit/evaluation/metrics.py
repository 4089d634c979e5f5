"""The scores of the evaluation protocols, on predictions and features as
NumPy arrays: top-k, ImageNet ReaL, a 200-class subset of ImageNet's logits
(ImageNet-A, -R), DINO's weighted k-NN, a logistic-regression probe, and the
paper's few-shot linear evaluation.

Few-shot (Sec. 4.1): "we solve a regularized least-squares regression problem
that maps the (frozen) representation of a subset of training images to
{-1, 1}^K target vectors", in closed form, and report the accuracy of the
resulting linear classifier on the test split. As big_vision's
``fewshot_lsr`` evaluator: the features are whitened with the training
subset's mean and standard deviation, a constant feature of 100 stands for an
almost unregularized bias, and the ridge penalty is ``l2_reg = 2 ** 10``.

None of these imports Keras: they score what a model gave
(`keras_vit.training.scoring.predict_features`, ``model.predict``).
"""

import numpy as np

SHOTS = (1, 5, 10, 25)
BIAS_CONSTANT = 100.0


def check_finite(**arrays):
    """Raises a ValueError for the first of `arrays` (argument name ->
    features or logits of any shape) that holds a NaN or an infinity,
    naming it and how many it holds: a score of them would be a number
    that means nothing (argmax and the neighbours' order take NaN as a
    value)."""
    for name, values in arrays.items():
        values = np.asarray(values)
        if not np.issubdtype(values.dtype, np.inexact):  # integers are finite
            continue
        bad = int(values.size - np.isfinite(values).sum())
        if bad:
            raise ValueError(f"{name} holds {bad} non-finite values (NaN or infinity) of {values.size}, so "
                             "no score of them means anything. The likely cause is the model that computed "
                             "them: weights that diverged in training, activations that overflowed float16, "
                             "or NaN in its input images. Check that its outputs are finite, then score them.")


def _top1(predictions):
    """Top-1 class ids ``(n,)`` from ids ``(n,)`` or logits ``(n, classes)``."""
    predictions = np.asarray(predictions)
    if predictions.ndim == 2:
        check_finite(predictions=predictions)
        return predictions.argmax(-1)
    if predictions.ndim != 1 or not np.issubdtype(predictions.dtype, np.integer):
        raise ValueError(
            f"predictions must be top-1 class ids (n,) or logits (n, classes); got "
            f"{predictions.dtype} of shape {predictions.shape}."
        )
    return predictions


def top_k_accuracy(logits, labels, k=1):
    """The fraction of images whose label is among the `k` largest of their
    ``(n, classes)`` logits; ties go to the lower class id, as argmax's."""
    logits, labels = np.asarray(logits), np.asarray(labels)
    if logits.ndim != 2 or len(logits) != len(labels):
        raise ValueError(f"top_k_accuracy needs logits (n, classes) and labels (n,); got shapes "
                         f"{logits.shape} and {labels.shape}.")
    if not len(labels):
        raise ValueError("top_k_accuracy: no images to score.")
    check_finite(logits=logits)
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    return float((top == labels[:, None]).any(-1).mean())


def real_accuracy(predictions, real_labels):
    """ImageNet ReaL accuracy (Beyer et al., 2020, "Are we done with
    ImageNet?"): an image is right when its top-1 class is in its set of
    reassessed labels. Images whose set is empty (3,163 of ImageNet's
    50,000 validation images) are left out, as the paper and timm's
    ``RealLabelsImagenet`` score them.

    Args:
        predictions: top-1 ImageNet class ids ``(n,)``, or logits ``(n, 1000)``.
        real_labels: n lists of ImageNet class ids, in the order of
            `predictions` (`imagenet_real_labels` gives the validation
            images', in file order).
    Returns: float, the accuracy over the images with a non-empty set.

    Examples:
        ```python
        from keras_vit.evaluation import real_accuracy

        print(real_accuracy([3, 7, 1, 5], [[3], [2, 7], [], [4]]))   # -> 0.6666666666666666
        ```
    """
    top1 = _top1(predictions)
    real_labels = list(real_labels)
    if len(real_labels) != len(top1):
        raise ValueError(f"{len(top1)} predictions and {len(real_labels)} sets of real labels: "
                         "give one set per image, in the same order.")
    scored = [(int(p), labels) for p, labels in zip(top1, real_labels) if len(labels)]
    if not scored:
        raise ValueError("Every image's set of real labels is empty: there is nothing to score.")
    return sum(p in set(int(x) for x in labels) for p, labels in scored) / len(scored)


def subset_predictions(logits, indices):
    """Top-1 classes among `indices` only: ImageNet-A and -R cover 200 of
    ImageNet's 1,000 classes, and a model is scored on those 200 logits
    (Hendrycks et al.; timm's ``--class-map``).

    Args:
        logits: ``(n, 1000)``.
        indices: the covered ImageNet class ids, e.g. `IMAGENET_A_INDICES`.
    Returns: ``(n,)`` ImageNet class ids, each one of `indices`.
    """
    logits, indices = np.asarray(logits), np.asarray(indices)
    if logits.ndim != 2 or indices.max() >= logits.shape[-1]:
        raise ValueError(f"subset_predictions needs logits (n, classes) covering class "
                         f"{indices.max()}; got shape {logits.shape}.")
    check_finite(logits=logits)
    return indices[logits[:, indices].argmax(-1)]


def l2_normalize(features):
    """Each row divided by its Euclidean norm (a zero row stays zero)."""
    features = np.asarray(features, "float64")
    return features / np.maximum(np.linalg.norm(features, axis=-1, keepdims=True), 1e-12)


def knn_predictions(train_features, train_labels, test_features, k=20, temperature=0.07,
                    num_classes=None, chunk=1024):
    """DINO's weighted k-NN classifier (Caron et al., 2021, ``eval_knn.py``;
    DINOv2 and DINOv3 evaluate the same way): features L2-normalised,
    cosine similarity to every training image, the `k` most similar vote
    with weight ``exp(similarity / temperature)``, and the class with the
    largest summed vote wins (ties: the lower class id).

    Returns: ``(m,)`` predicted class ids of the test features.
    """
    check_finite(train_features=train_features, test_features=test_features)
    train_labels = np.asarray(train_labels).astype("int64")
    train, test = l2_normalize(train_features), l2_normalize(test_features)
    if train.ndim != 2 or test.ndim != 2 or train.shape[1] != test.shape[1]:
        raise ValueError(f"k-NN needs (n, d) training and (m, d) test features; got shapes "
                         f"{train.shape} and {test.shape}.")
    if len(train) != len(train_labels):
        raise ValueError(f"{len(train)} training features and {len(train_labels)} labels.")
    if not 0 < k <= len(train):
        raise ValueError(f"k={k}: it must be between 1 and the {len(train)} training images.")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be positive.")
    num_classes = num_classes or int(train_labels.max()) + 1
    predictions = []
    for start in range(0, len(test), chunk):
        similarity = test[start:start + chunk] @ train.T  # (c, n)
        nearest = np.argpartition(-similarity, k - 1, axis=-1)[:, :k]
        weights = np.exp(np.take_along_axis(similarity, nearest, -1) / temperature)
        votes = np.zeros((len(similarity), num_classes))
        np.add.at(votes, (np.arange(len(similarity))[:, None], train_labels[nearest]), weights)
        predictions.append(votes.argmax(-1))
    return np.concatenate(predictions) if predictions else np.zeros((0,), "int64")


def knn_accuracy(train_features, train_labels, test_features, test_labels, k=20,
                 temperature=0.07):
    """Top-1 accuracy of DINO's weighted k-NN on frozen features
    (`knn_predictions`): k=20 neighbours, votes ``exp(cos / 0.07)``.

    Args:
        train_features: ``(n, d)`` features of the labelled images.
        train_labels: ``(n,)`` integer labels.
        test_features: ``(m, d)``.
        test_labels: ``(m,)``.
        k: neighbours that vote.
        temperature: the votes' temperature T.

    Examples:
        ```python
        import numpy as np
        from keras_vit.evaluation import knn_accuracy

        rng = np.random.default_rng(0)
        centres = rng.normal(size=(3, 8))
        train_labels, test_labels = np.repeat(np.arange(3), 10), np.repeat(np.arange(3), 5)
        train = centres[train_labels] + 0.1 * rng.normal(size=(30, 8))
        test = centres[test_labels] + 0.1 * rng.normal(size=(15, 8))
        print(knn_accuracy(train, train_labels, test, test_labels, k=5))   # -> 1.0
        ```
    """
    test_labels = np.asarray(test_labels)
    if not len(test_labels):
        raise ValueError("k-NN: no test images to score.")
    num_classes = int(max(np.max(train_labels), np.max(test_labels))) + 1
    predictions = knn_predictions(train_features, train_labels, test_features, k, temperature,
                                  num_classes)
    return float((predictions == test_labels).mean())


# The inverse regularisation strengths the probe tries (scikit-learn's C =
# 1 / (n * weight decay)): DINOv2's linear evaluation sweeps a grid of this
# span on a held-out split.
PROBE_C = tuple(float(c) for c in np.logspace(-6, 5, 12))


def linear_probe_accuracy(train_features, train_labels, test_features, test_labels,
                          validation_fraction=0.2, c_grid=PROBE_C, max_iter=1000, seed=0):
    """Top-1 accuracy (a float) of `linear_probe`: a logistic-regression
    probe on frozen features, its regularisation chosen on held-out images.

    Examples:
        ```python
        import numpy as np
        from keras_vit.evaluation import linear_probe_accuracy

        rng = np.random.default_rng(0)
        centres = rng.normal(size=(3, 8))
        train_labels, test_labels = np.repeat(np.arange(3), 20), np.repeat(np.arange(3), 5)
        train = centres[train_labels] + 0.3 * rng.normal(size=(60, 8))
        test = centres[test_labels] + 0.3 * rng.normal(size=(15, 8))
        print(linear_probe_accuracy(train, train_labels, test, test_labels))   # -> 1.0
        ```
    """
    return linear_probe(train_features, train_labels, test_features, test_labels,
                        validation_fraction, c_grid, max_iter, seed)["accuracy"]


def linear_probe(train_features, train_labels, test_features, test_labels, validation_fraction=0.2,
                 c_grid=PROBE_C, max_iter=1000, seed=0):
    """A logistic-regression probe on frozen features, as
    DINOv2 and DINOv3 report linear evaluation: multinomial logistic
    regression (L-BFGS) on standardised features; its regularisation is
    chosen on a held-out `validation_fraction` of the training images
    (stratified), and the probe is then fitted again on all of them. The
    paper's closed-form few-shot probe is `linear_few_shot_accuracy`.

    Args:
        train_features: ``(n, d)``.
        train_labels: ``(n,)`` integer labels.
        test_features: ``(m, d)``.
        test_labels: ``(m,)``.
        validation_fraction: the held-out part of the training images on
            which C is chosen.
        c_grid: the inverse regularisation strengths tried.
        max_iter: L-BFGS iterations per fit.
        seed: the held-out split's seed.
    Returns: ``{"accuracy": float, "C": the chosen C, "validation_accuracy":
        its held-out accuracy}``.
    """
    from keras_vit.extras import require

    require("sklearn", "The linear probe (keras_vit.evaluation.linear_probe)")
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = np.asarray(train_features, "float64"), np.asarray(train_labels).astype("int64")
    test_x, test_y = np.asarray(test_features, "float64"), np.asarray(test_labels).astype("int64")
    if x.ndim != 2 or test_x.ndim != 2 or x.shape[1] != test_x.shape[1] or len(x) != len(y):
        raise ValueError(f"The linear probe needs (n, d) training features with n labels and "
                         f"(m, d) test features; got {x.shape}, {y.shape}, {test_x.shape}.")
    if not len(test_y):
        raise ValueError("The linear probe: no test images to score.")
    check_finite(train_features=x, test_features=test_x)
    if len(np.unique(y)) < 2:
        raise ValueError("The linear probe needs training images of at least two classes.")
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction={validation_fraction} must be in (0, 1).")
    counts = np.bincount(y)
    stratify = y if counts[counts > 0].min() >= 2 else None
    fit_x, held_x, fit_y, held_y = train_test_split(x, y, test_size=validation_fraction,
                                                    random_state=seed, stratify=stratify)

    def probe(c):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=max_iter))

    scores = [(float(probe(c).fit(fit_x, fit_y).score(held_x, held_y)), c) for c in c_grid]
    best_score = max(score for score, _ in scores)
    best_c = min(c for score, c in scores if score == best_score)  # ties: the most regularised
    accuracy = float(probe(best_c).fit(x, y).score(test_x, test_y))
    return {"accuracy": accuracy, "C": best_c, "validation_accuracy": best_score}


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
        from keras_vit.evaluation import linear_few_shot_accuracy

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
