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


# -- the run's one ViTConfig -----------------------------------------------------

# The --init file of these runs: sizes other than those of its config's model
# (`helpers.TINY_RUN_MODEL`: 2 heads, MLP 32), at 16 px with 5 classes (the digits have 10).
THREE_HEADS = dict(image_size=16, patch_size=4, num_layers=1, num_heads=3, hidden_dim=12, mlp_dim=24,
                   num_classes=5)


def configs_built(monkeypatch):
    """The `ViTConfig`s built from here on, as ``{"run": n, "file": n}``:
    those the run builds, and those built while it reads its ``--init``
    file (`keras_vit.loading.read_pretrained`: the file's own model, which
    Keras deserializes, or a checkpoint reader's view of its arguments)."""
    from keras_vit.config import ViTConfig
    from keras_vit.training import run

    counts, reading = {"run": 0, "file": 0}, []
    post_init, read = ViTConfig.__post_init__, run.read_pretrained

    def counted(self):
        counts["file" if reading else "run"] += 1
        post_init(self)

    def read_counted(*args):
        reading.append(True)
        try:
            return read(*args)
        finally:
            reading.pop()

    monkeypatch.setattr(ViTConfig, "__post_init__", counted)
    monkeypatch.setattr(run, "read_pretrained", read_counted)
    return counts


@pytest.mark.parametrize("init", [None, ".keras", ".npz"])
def test_a_run_builds_its_model_from_the_one_vit_config_of_its_plan(init, tmp_path, monkeypatch):
    """`plan` builds the run's one `ViTConfig` (the preset's, or the --init
    file's, read once) and `model_for_run` builds the model from it; the
    file's weights land in it, at the run's resolution with a new head."""
    from keras_vit.training.run import model_for_run
    from keras_vit.training.run import plan

    overrides = {}
    if init:
        source = ViT(**THREE_HEADS)
        path = tmp_path / f"source{init}"
        source.save(path) if init == ".keras" else source.save_checkpoint(path)
        overrides = dict(kind="finetune", init=str(path), image_size=24)
    counts = configs_built(monkeypatch)
    run = plan(helpers.tiny_run_config(**overrides), tmp_path / "run")
    model = model_for_run(run)
    assert counts["run"] == 1 and counts["file"] == (1 if init else 0), counts
    assert model.config is run.vit_config and run.preset == (None if init else "vit_ti16")
    if init:
        assert (model.num_heads, model.mlp_dim, model.image_size) == (3, 24, (24, 24))
        np.testing.assert_array_equal(to_numpy(model.get_layer("encoder_norm").gamma),
                                      to_numpy(source.get_layer("encoder_norm").gamma))
        assert not to_numpy(model.get_layer("head").kernel).any(), "a new zero head"


@pytest.mark.slow
def test_a_run_builds_one_vit_config(tmp_path, monkeypatch):
    """A whole run (pre-training, then fine-tuning from its checkpoint with
    --init) builds one `ViTConfig` each, the trained copy that is saved
    included; reading the --init file builds at most the file's own."""
    from keras_vit.training import train

    counts = configs_built(monkeypatch)
    model, _ = train(helpers.tiny_run_config(), tmp_path / "pre", verbose=0)
    assert counts == {"run": 1, "file": 0}, counts
    model.save_checkpoint(tmp_path / "pre.npz")
    counts.update(run=0, file=0)
    tuned, _ = train(helpers.tiny_run_config(kind="finetune", init=str(tmp_path / "pre.npz"), image_size=24),
                     tmp_path / "ft", verbose=0)
    assert counts["run"] == 1 and counts["file"] <= 1, counts
    assert tuned.image_size == (24, 24)
