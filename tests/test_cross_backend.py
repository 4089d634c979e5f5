"""What must not depend on the backend, compared across all three at once:
the same weights give the same logits on TensorFlow, JAX and PyTorch, a
.keras file saved on one loads (safe_mode) on the others, and the input
pipelines give the same bytes.

Each other backend is started once, in one subprocess that computes
everything the tests compare; every pair of backends is compared once, in
the KERAS_BACKEND=torch pass (conftest.HOME_BACKEND).
"""

import itertools
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from checkpoint_files import save_npz
from helpers import to_numpy
from reference import random_vit_params

from keras_vit import ViT
from keras_vit.data import input_pipeline

pytestmark = [pytest.mark.cross_backend, pytest.mark.slow]

BACKENDS = ("tensorflow", "jax", "torch")
HERE = keras.backend.backend()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# 100 digits in batches of 32, augmented: batch 3 holds the last 4 of epoch 0 and the first 28 of epoch 1.
AUGMENTED = dict(source="digits", split="train[:100]", image_size=16, batch_size=32, training=True,
                 randaugment=(1, 10), mixup=0.5, cutmix=1.0, seed=11)
# One host of two, resumed at batch 3.
HOST = dict(source="digits", split="train[:60]", image_size=16, batch_size=8, training=True, seed=4,
            randaugment=(2, 5), mixup=0.5, shard=(1, 2), start_batch=3)

SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, keras
    from keras_vit import ViT
    from keras_vit.data import input_pipeline
    checkpoint, keras_file, inputs, streams, out = sys.argv[1:]
    x = np.load(inputs)
    logits = {"npz": ViT.from_checkpoint(checkpoint)(x),
              "keras": keras.saving.load_model(keras_file, safe_mode=True)(x)}
    arrays = {name: keras.ops.convert_to_numpy(value) for name, value in logits.items()}
    for name, kwargs in json.loads(streams).items():
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
        for i, t in enumerate(t for batch in input_pipeline(**kwargs).take(2) for t in batch):
            arrays[f"{name}_{i}"] = np.asarray(t)
    np.savez(out, **arrays)
""")


def pipeline_arrays(kwargs):
    return [np.asarray(t) for batch in input_pipeline(**kwargs).take(2) for t in batch]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """backend -> {"npz", "keras": logits; "augmented_i", "host_i": batch arrays},
    this backend's computed here, the two others' each in one subprocess (run side by side)."""
    tmp = tmp_path_factory.mktemp("cross_backend")
    x = np.random.default_rng(5).uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    np.save(tmp / "x.npy", x)
    params = random_vit_params(image_size=64, patch=1, resnet_units=(1, 2), representation_size=24)
    checkpoint = save_npz(params, tmp / "hybrid.npz")
    model = ViT(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=3, pooling="map", num_registers=1, layer_scale_init=0.5)
    model.get_layer("head").kernel.assign(np.random.default_rng(0).normal(size=(16, 3)))
    model.save(tmp / "vit.keras")
    streams = {"augmented": AUGMENTED, "host": HOST}
    processes = {}
    for backend in BACKENDS:
        if backend != HERE:
            processes[backend] = subprocess.Popen(
                [sys.executable, "-c", SCRIPT, str(checkpoint), str(tmp / "vit.keras"), str(tmp / "x.npy"),
                 json.dumps(streams), str(tmp / f"{backend}.npz")],
                env=dict(os.environ, KERAS_BACKEND=backend), cwd=ROOT, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
    here = {"npz": to_numpy(ViT.from_checkpoint(checkpoint)(x)), "keras": to_numpy(model(x))}
    for name, kwargs in streams.items():
        here.update({f"{name}_{i}": a for i, a in enumerate(pipeline_arrays(kwargs))})
    out = {HERE: here}
    for backend, process in processes.items():
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, f"KERAS_BACKEND={backend}:\n{stderr[-3000:]}"
        out[backend] = dict(np.load(tmp / f"{backend}.npz"))
    return out


def pairs():
    return list(itertools.combinations(BACKENDS, 2))


def test_same_logits_on_every_backend(results):
    for a, b in pairs():
        diff = np.abs(results[a]["npz"] - results[b]["npz"]).max()
        print(f"{a} vs {b}: max |logit difference| = {diff:.2e}")
        assert diff < 1e-5, (a, b)


def test_keras_file_loads_on_other_backends(results):
    for a, b in pairs():
        assert np.abs(results[a]["keras"] - results[b]["keras"]).max() < 1e-5, (a, b)


@pytest.mark.parametrize("stream", ["augmented", "host"])
def test_same_batches_on_every_backend(results, stream):
    """The augmented stream (RandAugment, MixUp, CutMix across an epoch's end)
    and a resumed host's shard are the same bytes on every backend."""
    count = len([k for k in results[HERE] if k.startswith(stream + "_")])
    assert count == 4
    if stream == "host":
        assert results[HERE]["host_0"].shape == (4, 16, 16, 3)
    for a, b in pairs():
        for i in range(count):
            key = f"{stream}_{i}"
            assert results[a][key].tobytes() == results[b][key].tobytes(), f"{a} vs {b}: {key} differs"
