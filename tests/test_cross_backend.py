"""What must not depend on the backend, compared across all three at once:
the same weights give the same logits on TensorFlow, JAX and PyTorch, a
.keras file saved on one loads (safe_mode) on the others, and the input
pipelines give the same bytes.

Each other backend is started once, in one subprocess that computes
everything the tests compare; every pair of backends is compared once, in
the KERAS_BACKEND=torch pass (conftest.HOME_BACKEND).
"""

import itertools
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from checkpoint_files import save_npz
from helpers import AUGMENTED
from helpers import to_numpy
from reference import random_vit_params

from keras_vit import ViT
from keras_vit.data import input_pipeline

pytestmark = [pytest.mark.cross_backend, pytest.mark.slow]

BACKENDS = ("tensorflow", "jax", "torch")
PAIRS = list(itertools.combinations(BACKENDS, 2))
HERE = keras.backend.backend()
TESTS = os.path.dirname(os.path.abspath(__file__))

STREAMS = {
    # RandAugment, MixUp and CutMix across an epoch's end.
    "augmented": dict(AUGMENTED, seed=11),
    # One host of two, resumed at batch 3.
    "host": dict(source="digits", split="train[:60]", image_size=16, batch_size=8, training=True, seed=4,
                 randaugment=(2, 5), mixup=0.5, shard=(1, 2), start_batch=3),
}

# Another backend's process runs the same function as this one.
SCRIPT = textwrap.dedent("""
    import sys, numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_cross_backend import backend_results
    checkpoint, keras_file, inputs, out = sys.argv[2:]
    np.savez(out, **backend_results(checkpoint, keras_file, np.load(inputs)))
""")


def backend_results(checkpoint, keras_file, x):
    """What each backend computes: the logits of the npz checkpoint and of the
    .keras file on `x`, and the first 2 batches of each of `STREAMS` as
    ``{name}_{i}`` arrays."""
    arrays = {"npz": to_numpy(ViT.from_checkpoint(checkpoint)(x)),
              "keras": to_numpy(keras.saving.load_model(keras_file, safe_mode=True)(x))}
    for name, kwargs in STREAMS.items():
        tensors = (t for batch in input_pipeline(**kwargs).take(2) for t in batch)
        arrays.update({f"{name}_{i}": np.asarray(t) for i, t in enumerate(tensors)})
    return arrays


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """backend -> `backend_results`, this backend's computed here (with the
    saved model's own logits as "model"), the two others' each in one
    subprocess (run side by side)."""
    tmp = tmp_path_factory.mktemp("cross_backend")
    x = np.random.default_rng(5).uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    np.save(tmp / "x.npy", x)
    params = random_vit_params(image_size=64, patch=1, resnet_units=(1, 2), representation_size=24)
    checkpoint = save_npz(params, tmp / "hybrid.npz")
    model = ViT(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=3, pooling="map", num_registers=1, layer_scale_init=0.5)
    model.get_layer("head").kernel.assign(np.random.default_rng(0).normal(size=(16, 3)))
    model.save(tmp / "vit.keras")
    processes = {
        backend: subprocess.Popen(
            [sys.executable, "-c", SCRIPT, TESTS, str(checkpoint), str(tmp / "vit.keras"), str(tmp / "x.npy"),
             str(tmp / f"{backend}.npz")],
            env=dict(os.environ, KERAS_BACKEND=backend), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for backend in BACKENDS if backend != HERE
    }
    out = {HERE: {**backend_results(checkpoint, tmp / "vit.keras", x), "model": to_numpy(model(x))}}
    for backend, process in processes.items():
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, f"KERAS_BACKEND={backend}:\n{stderr[-3000:]}"
        out[backend] = dict(np.load(tmp / f"{backend}.npz"))
    return out


def test_same_logits_on_every_backend(results):
    for a, b in PAIRS:
        diff = np.abs(results[a]["npz"] - results[b]["npz"]).max()
        print(f"{a} vs {b}: max |logit difference| = {diff:.2e}")
        assert diff < 1e-5, (a, b)


def test_keras_file_loads_on_other_backends(results):
    for backend in BACKENDS:
        assert np.abs(results[backend]["keras"] - results[HERE]["model"]).max() < 1e-5, backend
    for a, b in PAIRS:
        assert np.abs(results[a]["keras"] - results[b]["keras"]).max() < 1e-5, (a, b)


@pytest.mark.parametrize("stream", list(STREAMS))
def test_same_batches_on_every_backend(results, stream):
    """The augmented stream and a resumed host's shard are the same bytes on every backend."""
    count = len([k for k in results[HERE] if k.startswith(stream + "_")])
    assert count == 4
    if stream == "host":
        assert results[HERE]["host_0"].shape == (4, 16, 16, 3)
    for a, b in PAIRS:
        for i in range(count):
            key = f"{stream}_{i}"
            assert results[a][key].tobytes() == results[b][key].tobytes(), f"{a} vs {b}: {key} differs"
