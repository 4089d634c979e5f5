"""A training step under each dtype policy, and compiled with XLA; `fit` fed
by the input pipeline; training code that imports no TensorFlow."""

import os
import subprocess
import sys

import keras
import helpers
import numpy as np
import pytest
from helpers import to_numpy

from keras_vit import ViT
from keras_vit.data import input_pipeline

BACKEND = keras.backend.backend()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = dict(helpers.TINY, num_classes=4, dropout_rate=0.1, drop_path_rate=0.1, attention_dropout_rate=0.1)


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
@pytest.mark.slow
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
    # The backend's graph without XLA; on JAX, whose step without jit runs op
    # by op (a 4-step fit is then 17 s of compilations), its jitted step.
    fit_one_epoch(model, jit_compile=BACKEND == "jax")


@pytest.mark.slow
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


def test_fit_takes_the_pipeline():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    train = input_pipeline("digits", "train", image_size=8, batch_size=32, training=True, mixup=0.2, flip=False)
    history = model.fit(train, steps_per_epoch=3, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    test = input_pipeline("digits", "test[:40]", image_size=8, batch_size=32, training=False)
    assert model.predict(test, verbose=0).shape == (40, 10)


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the TensorFlow backend imports TensorFlow through Keras")
@pytest.mark.slow
def test_training_imports_no_tensorflow():
    code = ("import sys, keras_vit.training\n"
            "from keras_vit.training import pretrain_optimizer, softmax_cross_entropy, learning_rate_schedule\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorflow_datasets')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "KERAS_BACKEND": BACKEND}, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-2000:]
