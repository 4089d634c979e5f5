"""keras_vit.explain against an independent NumPy computation: the attention
weights of the reference forward pass (tests/reference.py), and rollout,
attention distance, position-embedding similarity and filter components
written here with plain loops and NumPy, on every backend."""

import json
import sys

import keras
import numpy as np
import pytest
from checkpoint_files import save_npz
from helpers import to_numpy
from reference import random_vit_params
from reference import vit_forward

from keras_vit import ViT
from keras_vit import explain
from keras_vit.cli import main

TOL = 1e-5


@pytest.fixture(scope="module", params=["token", "gap"])
def case(request, tmp_path_factory):
    """A small model from random vit_jax weights (a [class] token, or none
    with global average pooling), images, and the reference's attention."""
    params = random_vit_params(seed=5, image_size=32, patch=8, hidden=32, layers=3, heads=4, mlp_dim=64,
                               pooling=request.param)
    model = ViT.from_checkpoint(save_npz(params, tmp_path_factory.mktemp("explain") / "vit.npz"))
    images = np.random.default_rng(2).uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    record = []
    vit_forward(params, images, record=record)
    return model, images, record, params


@pytest.mark.slow_cases("token")
def test_attention_weights_are_the_reference_and_leave_outputs_unchanged(case):
    model, images, reference, _ = case
    before = to_numpy(model(images))
    weights = explain.attention_weights(model, images, batch_size=2)  # two batches
    assert len(weights) == len(reference) == 3
    for ours, theirs in zip(weights, reference):
        assert ours.shape == (3, 4, 17 if model.pooling == "token" else 16, ours.shape[-1])
        np.testing.assert_allclose(ours, theirs, atol=TOL)
        np.testing.assert_allclose(ours.sum(-1), 1.0, atol=TOL)
    np.testing.assert_array_equal(to_numpy(model(images)), before)
    np.testing.assert_allclose(to_numpy(model.intermediates(images)["logits"]), before, atol=1e-6)


def reference_rollout(attention, has_class, fusion="mean", discard=0.0):
    prefix = 1 if has_class else 0
    out = []
    for b in range(attention[0].shape[0]):
        joint = None
        for layer in attention:
            a = layer[b].mean(0) if fusion == "mean" else layer[b].max(0)
            a = a.copy()
            if discard:
                order = np.argsort(a.ravel(), kind="stable")[: int(a.size * discard)]
                for index in order:
                    if index != 0:
                        a.flat[index] = 0.0
            a = a + np.eye(len(a))
            a = a / a.sum(1, keepdims=True)
            joint = a if joint is None else a @ joint
        row = joint[0] if has_class else joint.mean(0)
        row = row[prefix:]
        out.append((row / row.sum()).reshape(4, 4))
    return np.stack(out)


@pytest.mark.parametrize("fusion,discard", [("mean", 0.0), ("max", 0.0), ("mean", 0.5)])
def test_attention_rollout_is_the_reference(case, fusion, discard):
    model, images, reference, _ = case
    ours = explain.attention_rollout(model, images, head_fusion=fusion, discard_ratio=discard)
    theirs = reference_rollout(reference, model.pooling == "token", fusion, discard)
    assert ours.shape == (3, 4, 4)
    np.testing.assert_allclose(ours, theirs, atol=TOL)
    np.testing.assert_allclose(ours.sum((1, 2)), 1.0, atol=TOL)


def test_mean_attention_distance_is_the_reference(case):
    model, images, reference, _ = case
    prefix = 1 if model.pooling == "token" else 0
    expected = np.zeros((3, 4))
    for layer, weights in enumerate(reference):
        for head in range(4):
            total = 0.0
            for b in range(3):
                for q in range(16):
                    for k in range(16):
                        dy = (q // 4 - k // 4) * 8.0
                        dx = (q % 4 - k % 4) * 8.0
                        total += weights[b, head, prefix + q, prefix + k] * np.hypot(dy, dx)
            expected[layer, head] = total / (3 * 16)
    np.testing.assert_allclose(explain.mean_attention_distance(model, images), expected, atol=TOL * 10, rtol=TOL)


def test_position_embedding_similarity_is_the_reference(case):
    model, _, _, params = case
    table = params["Transformer/posembed_input/pos_embedding"][0].astype("float64")
    table = table[1:] if model.pooling == "token" else table
    ours = explain.position_embedding_similarity(model)
    assert ours.shape == (4, 4, 4, 4)
    for i in range(16):
        for j in range(16):
            a, b = table[i], table[j]
            cosine = a @ b / np.sqrt((a @ a) * (b @ b))
            assert abs(ours[i // 4, i % 4, j // 4, j % 4] - cosine) < TOL
    np.testing.assert_allclose(ours[1, 2, 1, 2], 1.0, atol=TOL)


def test_patch_embedding_components_are_the_reference(case):
    model, _, _, params = case
    kernel = params["embedding/kernel"].astype("float64")  # (8, 8, 3, 32)
    filters = kernel.reshape(-1, 32).T
    covariance = np.cov(filters, rowvar=False)
    values, vectors = np.linalg.eigh(covariance)
    vectors = vectors[:, np.argsort(values)[::-1][:10]].T
    vectors *= np.sign(vectors[np.arange(10), np.abs(vectors).argmax(1)])[:, None]
    ours = explain.patch_embedding_components(model, n=10)
    assert ours.shape == (10, 8, 8, 3)
    np.testing.assert_allclose(ours.reshape(10, -1), vectors, atol=TOL)
    with pytest.raises(ValueError, match=r"`n` must be an int in \[1, 32\]"):
        explain.patch_embedding_components(model, n=33)


def test_functions_that_do_not_apply_say_so(tmp_path):
    hybrid = ViT(image_size=32, patch_size=1, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                 num_classes=3, resnet_block_units=(1,))
    with pytest.raises(ValueError, match="hybrid model.*not image patches"):
        explain.patch_embedding_components(hybrid)
    fixed = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=3, pooling="gap", position_embedding="sincos2d")
    with pytest.raises(ValueError, match="no learned position embeddings"):
        explain.position_embedding_similarity(fixed)
    with pytest.raises(TypeError, match="Expected a keras_vit.ViT"):
        explain.attention_rollout(keras.Sequential([keras.layers.Dense(2)]), np.zeros((1, 16, 16, 3)))


def test_wrong_image_size_is_the_models_own_error():
    model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=3)
    wrong = np.zeros((1, 24, 24, 3), "float32")
    with pytest.raises(ValueError) as model_error:
        model.intermediates(wrong)
    with pytest.raises(ValueError) as ours:
        explain.attention_rollout(model, wrong)
    assert str(ours.value) == str(model_error.value)


@pytest.mark.slow
def test_report_and_command_write_the_pictures(case, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the plots extra (matplotlib) is not installed")
    model, images, _, _ = case
    written = explain.write_report(model, images, tmp_path / "report")
    for name in ("attention_rollout", "mean_attention_distance", "position_embedding_similarity",
                 "patch_embedding_components"):
        data = written[name].read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
    numbers = json.loads(written["numbers"].read_text())
    np.testing.assert_allclose(numbers["mean_attention_distance"],
                               explain.mean_attention_distance(model, images), atol=1e-3)

    from PIL import Image

    photo = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(0).uniform(0, 255, (40, 50, 3))).astype("uint8")).save(photo)
    model.save(tmp_path / "model.keras")
    assert main(["explain", str(tmp_path / "model.keras"), str(photo), "--out", str(tmp_path / "cli"),
                 "--token-merging", "4"]) == 0
    out = capsys.readouterr().out
    assert "attention_rollout: " in out and "token_merging: " in out
    assert (tmp_path / "cli" / "attention_rollout.png").exists()
    # ToMe's picture beside them: 16 patches, 4 merged away in each of 3 blocks (the third
    # capped at half of the 8 left), so 4 tokens hold them
    assert (tmp_path / "cli" / "token_merging.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "cli" / "explain.json").read_text())["token_merging"] == {
        "r": 4, "tokens": [4]}


def test_plots_without_matplotlib_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'pip install "keras-vision-transformer\[plots\]"'):
        explain.plot_mean_attention_distance(np.zeros((2, 2)))
    model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=3)
    assert explain.mean_attention_distance(model, np.zeros((1, 16, 16, 3), "float32")).shape == (1, 2)
