"""Top-1 accuracy and the paper's few-shot linear evaluation (Sec. 4.1)
against independent NumPy computations."""

import numpy as np
import pytest
from helpers import TINY_FEATURES
from helpers import to_numpy

from keras_vit import ViT
from keras_vit.training import scoring



def ridge_by_lstsq(x, y, l2_reg):
    """argmin |XW - Y|^2 + l2 |W|^2 as an ordinary least-squares problem on
    the augmented system [X; sqrt(l2) I] W = [Y; 0] (no normal equations)."""
    d = x.shape[1]
    a = np.concatenate([x, np.sqrt(l2_reg) * np.eye(d)])
    b = np.concatenate([y, np.zeros((d, y.shape[1]))])
    return np.linalg.lstsq(a, b, rcond=None)[0]


def reference_accuracy(x_train, y_train, x_test, y_test, num_classes, l2_reg):
    mean, std = x_train.mean(0), x_train.std(0) + 1e-5
    design = lambda f: np.hstack([(f - mean) / std, np.full((len(f), 1), 100.0)])  # noqa: E731
    targets = np.where(np.arange(num_classes) == y_train[:, None], 1.0, -1.0)
    w = ridge_by_lstsq(design(x_train), targets, l2_reg)
    return np.mean((design(x_test) @ w).argmax(1) == y_test)


@pytest.mark.parametrize("n_train,dim", [(40, 6), (12, 30)])  # both closed forms (n >= d, d > n)
def test_linear_few_shot_matches_reference(n_train, dim):
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 1.0, (4, dim))
    y_train = np.arange(n_train) % 4
    x_train = centres[y_train] + rng.normal(0, 1.5, (n_train, dim))
    y_test = rng.integers(0, 4, 200)
    x_test = centres[y_test] + rng.normal(0, 1.5, (200, dim))
    for l2_reg in (1e-2, 1.0, 2.0**10):
        ours = scoring.linear_few_shot_accuracy(x_train, y_train, x_test, y_test, 4, l2_reg)
        assert ours == pytest.approx(reference_accuracy(x_train, y_train, x_test, y_test, 4, l2_reg), abs=1e-12)
    # Separable data is learned from a few shots; this is not a constant answer.
    assert scoring.linear_few_shot_accuracy(x_train, y_train, x_test, y_test, 4, 1.0) > 0.5


def test_few_shot_subsets_and_errors():
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(3), 6)
    features = rng.normal(size=(18, 5)) + 3 * np.eye(5)[labels]
    results = scoring.few_shot_from_features(features, labels, features, labels, 3, shots=(1, 5), seeds=2)
    assert set(results) == {1, 5} and all(0 <= v <= 1 for v in results.values())
    # k-shot draws k per class with the seed's permutation, averaged over seeds.
    expected = []
    for seed in range(2):
        r = np.random.default_rng(seed)
        chosen = np.concatenate([r.permutation(np.flatnonzero(labels == c))[:5] for c in range(3)])
        expected.append(reference_accuracy(features[chosen], labels[chosen], features, labels, 3, 2.0**10))
    assert results[5] == pytest.approx(np.mean(expected), abs=1e-12)
    with pytest.raises(ValueError, match="25-shot evaluation needs 25 training images of class 0"):
        scoring.few_shot_from_features(features, labels, features, labels, 3, shots=(25,))


def batches(x, y, size=4):
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


def test_accuracy_and_features_of_a_model():
    model = ViT(**TINY_FEATURES, representation_size=6)
    rng = np.random.default_rng(2)
    model.get_layer("head").kernel.assign(rng.normal(size=(6, 3)))
    x = rng.uniform(-1, 1, (10, 16, 16, 3)).astype("float32")
    logits = to_numpy(model(x))
    y = logits.argmax(1)
    y[:3] = (y[:3] + 1) % 3  # three wrong on purpose
    assert scoring.accuracy(model, batches(x, y)) == pytest.approx(0.7)
    onehot = np.eye(3, dtype="float32")[y]
    assert scoring.accuracy(model, batches(x, onehot)) == pytest.approx(0.7)
    features, labels = scoring.predict_features(model, batches(x, y))
    np.testing.assert_allclose(features, to_numpy(model.intermediates(x)["features"]), atol=1e-5)
    np.testing.assert_array_equal(labels, y)
    with pytest.raises(ValueError, match=r"uint8 images; the model expects floats in \[-1, 1\]"):
        scoring.accuracy(model, batches((x * 100).astype("uint8"), y))


@pytest.mark.backend_independent  # a stand-in model: what goes to predict_on_batch, not how it runs
def test_the_last_batch_is_padded_to_the_first_batchs_shape():
    """A compiled backend traces each input shape: the smaller last batch
    goes in padded (its last example repeated), and its outputs come back cut."""

    class Recorder:
        shapes = []

        def predict_on_batch(self, images):
            self.shapes.append(images["patches"].shape if isinstance(images, dict) else images.shape)
            flat = images["patches"] if isinstance(images, dict) else images
            return np.eye(3)[(flat.reshape(len(flat), -1).sum(1) > 0).astype(int)]

    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (10, 4, 4, 3)).astype("float32")
    y = (x.reshape(10, -1).sum(1) > 0).astype(int)
    assert scoring.accuracy(Recorder(), batches(x, y)) == 1.0
    assert Recorder.shapes == [(4, 4, 4, 3)] * 3  # 4, 4 and 2 examples
    naflex = [({"patches": x[i:i + 4].reshape(-1, 16, 3), "valid": np.ones((len(x[i:i + 4]), 16), bool)},
               y[i:i + 4]) for i in range(0, 10, 4)]
    Recorder.shapes = []
    assert scoring.accuracy(Recorder(), naflex) == 1.0
    assert Recorder.shapes == [(4, 16, 3)] * 3
