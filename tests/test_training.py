"""A training step under each dtype policy, and compiled with XLA."""

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_vit import ViT

TINY = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
            num_classes=4, dropout_rate=0.1, drop_path_rate=0.1, attention_dropout_rate=0.1)


def data(n=16):
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (n, 32, 32, 3)).astype("float32"), rng.integers(0, 4, n)


def fit_one_epoch(model, jit_compile):
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    x, y = data()
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    after = [to_numpy(w) for w in model.trainable_weights]
    assert all(np.isfinite(loss) for loss in history.history["loss"])
    assert sum(not np.array_equal(a, b) for a, b in zip(before, after)) == len(before), "every weight must train"
    return history


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_fit_under_dtype_policy(policy):
    model = ViT(**TINY, dtype=policy)
    assert model.get_layer("encoder_block_0").attention.query.compute_dtype == policy.replace("mixed_", "")
    assert all(w.dtype == "float32" for w in model.weights), "variables stay float32"
    x, _ = data(2)
    reference = ViT(**TINY)
    reference.set_weights(model.get_weights())
    reference.get_layer("head").kernel.assign(np.ones((16, 4)))
    model.get_layer("head").kernel.assign(np.ones((16, 4)))
    low = to_numpy(model(x)).astype("float32")
    # LayerNorm statistics and the softmax run in float32: logits stay close.
    np.testing.assert_allclose(low, to_numpy(reference(x)), atol=0.1, rtol=0.05)
    record = model.intermediates(x)
    assert keras.backend.standardize_dtype(record["attention_0"].dtype) == "float32"
    fit_one_epoch(model, jit_compile=False)


def test_fit_with_xla():
    backend = keras.backend.backend()
    if backend == "torch":
        pytest.skip("jit_compile=True on torch is torch.compile (TorchDynamo), not XLA; "
                    "the issue asks for XLA on TensorFlow and JAX")
    model = ViT(**TINY)
    fit_one_epoch(model, jit_compile=True)
    assert model.jit_compile is True


def test_static_shapes_for_tpu():
    """Every tensor in the graph has a static shape except the batch."""
    model = ViT(**TINY)
    for layer in model.layers:
        for node in layer._inbound_nodes:
            for tensor in node.output_tensors:
                assert None not in tuple(tensor.shape)[1:], (layer.name, tensor.shape)


def test_mixed_float16_compiles_with_loss_scaling():
    """The model carries its policy, so `compile` adds loss scaling."""
    model = ViT(**TINY, dtype="mixed_float16")
    assert model.dtype_policy.name == "mixed_float16"
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)


def test_mixed_bfloat16_predicts_the_same_digits_as_float32():
    """Inference under mixed_bfloat16 gives float32's top-1 on held-out images (but near-ties)."""
    from keras_vit.data.sources import load_source

    def arrays(split):
        batch = next(iter(load_source("digits", split).dataset.batch(2000)))
        return np.asarray(batch["image"], "float32") / 127.5 - 1, np.asarray(batch["label"])

    (x, y), (x_test, y_test) = arrays("train"), arrays("test")
    config = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                  num_classes=10)  # 17 tokens: the odd length of the real models
    keras.utils.set_random_seed(0)  # before the build: the initial weights too
    model = ViT(**config)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=64, epochs=12, verbose=0)
    low = ViT(**config, dtype="mixed_bfloat16")
    low.set_weights(model.get_weights())
    full = to_numpy(model.predict(x_test, verbose=0)).astype("float32")
    half = to_numpy(low.predict(x_test, verbose=0)).astype("float32")
    accuracy = (full.argmax(-1) == y_test).mean()
    print(f"float32 test accuracy {accuracy:.1%}")
    assert accuracy > 0.85, f"the float32 model must have learned the digits: {accuracy:.1%}"
    # bfloat16 keeps 8 bits: the logits move by a small fraction of their
    # spread, and top-1 changes at most on a near-tie (one digit in a hundred).
    error = np.abs(half - full).mean()
    assert error < 0.02 * full.std(), (error, full.std())
    agree = (half.argmax(-1) == full.argmax(-1)).mean()
    assert agree >= 0.99, f"mixed_bfloat16 agrees with float32 on {agree:.1%} of the digits"
