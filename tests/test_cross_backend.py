"""The same weights give the same logits on TensorFlow, JAX and PyTorch, and
a .keras file saved on one backend loads (safe_mode) on the others."""

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

BACKENDS = ("tensorflow", "jax", "torch")

SCRIPT = textwrap.dedent("""
    import sys, numpy as np, keras
    from keras_vit import ViT
    kind, path, inputs, out = sys.argv[1:]
    x = np.load(inputs)
    if kind == "keras":
        model = keras.saving.load_model(path, safe_mode=True)
    else:
        model = ViT.from_checkpoint(path)
    np.save(out, keras.ops.convert_to_numpy(model(x)))
""")


def run_on(backend, kind, path, inputs, tmp_path):
    out = tmp_path / f"{backend}-{kind}.npy"
    env = dict(os.environ, KERAS_BACKEND=backend)
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, kind, str(path), str(inputs), str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return np.load(out)


@pytest.fixture
def inputs(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(5).uniform(-1, 1, (2, 64, 64, 3)).astype("float32"))
    return path


def test_same_logits_on_every_backend(inputs, tmp_path):
    params = random_vit_params(image_size=64, patch=1, resnet_units=(1, 2), representation_size=24)
    checkpoint = save_npz(params, tmp_path / "hybrid.npz")
    here = to_numpy(ViT.from_checkpoint(checkpoint)(np.load(inputs)))
    for backend in BACKENDS:
        if backend == keras.backend.backend():
            continue
        there = run_on(backend, "npz", checkpoint, inputs, tmp_path)
        diff = np.abs(there - here).max()
        print(f"{keras.backend.backend()} vs {backend}: max |logit difference| = {diff:.2e}")
        assert diff < 1e-5


def test_keras_file_loads_on_other_backends(inputs, tmp_path):
    model = ViT(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=3, pooling="map", num_registers=1, layer_scale_init=0.5)
    model.get_layer("head").kernel.assign(np.random.default_rng(0).normal(size=(16, 3)))
    path = tmp_path / "vit.keras"
    model.save(path)
    here = to_numpy(model(np.load(inputs)))
    for backend in BACKENDS:
        if backend == keras.backend.backend():
            continue
        there = run_on(backend, "keras", path, inputs, tmp_path)
        assert np.abs(there - here).max() < 1e-5, backend
