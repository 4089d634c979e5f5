"""Parity of every checkpoint format with the code the weights came from."""

import json

import numpy as np
import pytest
from checkpoint_files import renumber_new
from checkpoint_files import save_npz
from checkpoint_files import save_safetensors
from checkpoint_files import to_big_vision
from checkpoint_files import to_timm
from helpers import to_numpy
from reference import random_vit_params
from reference import vit_forward

from keras_vit import ViT
from keras_vit.layers import resample_position_embeddings
from keras_vit.weights import CheckpointError

TOL = 1e-5


def images(size=32, n=2, seed=3):
    height, width = (size, size) if isinstance(size, int) else size
    return np.random.default_rng(seed).uniform(-1, 1, (n, height, width, 3)).astype("float32")


def assert_parity(model, params, x, **reference_kwargs):
    got = to_numpy(model(x))
    expected = vit_forward(params, x, **reference_kwargs)
    diff = np.abs(got - expected).max()
    print(f"max |logit difference| = {diff:.2e}")
    assert diff < TOL, diff


# -- vit_jax / AugReg .npz ----------------------------------------------------

@pytest.mark.parametrize(
    "kwargs",
    [
        dict(pooling="token"),
        dict(pooling="gap"),
        dict(pooling="token", representation_size=24),
        dict(pooling="token", image_size=64, patch=1, resnet_units=(1, 2)),
    ],
    ids=["token", "gap", "pre_logits", "hybrid"],
)
@pytest.mark.slow_cases("hybrid")
def test_vit_jax_npz_matches_reference(kwargs, tmp_path):
    params = random_vit_params(**kwargs)
    model = ViT.from_checkpoint(save_npz(params, tmp_path / "vit.npz"))
    assert model.gelu_approximate and model.layer_norm_epsilon == 1e-6
    assert_parity(model, params, images(kwargs.get("image_size", 32)))


def test_vit_jax_new_numbering_and_optimizer_prefix(tmp_path):
    params = random_vit_params()
    renamed = {f"opt/target/{k}": v for k, v in renumber_new(params).items()}
    assert any("MlpBlock_0" in k for k in renamed)
    assert_parity(ViT.from_checkpoint(save_npz(renamed, tmp_path / "new.npz")), params, images())


# -- big_vision .npz ----------------------------------------------------------

@pytest.mark.parametrize("pooling, scan", [("token", False), ("map", True), ("gap", False)])
def test_big_vision_npz_matches_reference(pooling, scan, tmp_path):
    params = random_vit_params(pooling=pooling)
    path = save_npz(to_big_vision(params, scan=scan), tmp_path / "bv.npz")
    model = ViT.from_checkpoint(path)
    assert model.pooling == pooling
    assert_parity(model, params, images())


def test_big_vision_sincos_checkpoint_has_no_position_weights(tmp_path):
    params = to_big_vision(random_vit_params(pooling="gap"))
    del params["params/pos_embedding"]
    with pytest.raises(CheckpointError, match=r"no learned position embeddings\). Pass `image_size"):
        ViT.from_checkpoint(save_npz(params, tmp_path / "sincos.npz"))
    model = ViT.from_checkpoint(save_npz(params, tmp_path / "sincos.npz"), image_size=32)
    assert model.position_embedding == "sincos2d" and tuple(model(images()).shape) == (2, 5)


# -- Hugging Face -------------------------------------------------------------

@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_pytorch_tanh"])
def test_huggingface_vit_matches_transformers(hidden_act, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        image_size=32, patch_size=8, num_labels=5, hidden_act=hidden_act,
    )
    hf = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():  # random, non-trivial weights everywhere
        for p in hf.parameters():
            p.normal_(0, 0.2)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    x = images()
    with torch.no_grad():
        expected = hf(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()
    model = ViT.from_checkpoint(tmp_path)
    assert model.layer_norm_epsilon == 1e-12 and model.gelu_approximate == (hidden_act != "gelu")
    diff = np.abs(to_numpy(model(x)) - expected).max()
    print(f"max |logit difference| vs transformers = {diff:.2e}")
    assert diff < TOL


def test_huggingface_vit_model_pooler_is_pre_logits(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                    intermediate_size=64, image_size=32, patch_size=8)
    hf = transformers.ViTModel(config, add_pooling_layer=True).eval()
    hf.save_pretrained(tmp_path, safe_serialization=True)
    x = images()
    with torch.no_grad():
        expected = hf(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).pooler_output.numpy()
    model = ViT.from_checkpoint(tmp_path / "model.safetensors")
    assert model.num_classes == 0 and model.representation_size == 32
    assert np.abs(to_numpy(model(x)) - expected).max() < TOL


# -- timm ---------------------------------------------------------------------

@pytest.mark.slow
def test_timm_safetensors_matches_reference_with_exact_gelu(tmp_path):
    params = random_vit_params(hidden=192, heads=3, mlp_dim=64, layers=1, image_size=16)
    path = save_safetensors(to_timm(params), tmp_path / "timm.safetensors")
    model = ViT.from_checkpoint(path)
    assert model.num_heads == 3 and not model.gelu_approximate  # heads from timm's widths
    assert_parity(model, params, images(16), approximate_gelu=False)


def test_timm_bfloat16_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    params = random_vit_params()
    state = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in to_timm(params).items()}
    save_file(state, str(tmp_path / "bf16.safetensors"))
    rounded = {k: torch.from_numpy(v).to(torch.bfloat16).float().numpy() for k, v in params.items()}
    model = ViT.from_checkpoint(tmp_path / "bf16.safetensors", num_heads=4)
    assert_parity(model, rounded, images(), approximate_gelu=False)


def test_timm_head_count_override(tmp_path):
    params = random_vit_params()  # width 32: no timm model, so heads are given
    path = save_safetensors(to_timm(params), tmp_path / "timm.safetensors")
    assert_parity(ViT.from_checkpoint(path, num_heads=4), params, images(), approximate_gelu=False)


# -- resolution and head changes ----------------------------------------------

@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
@pytest.mark.slow_cases("bilinear")
def test_new_image_size_resamples_position_embeddings(method, tmp_path):
    params = random_vit_params()
    model = ViT.from_checkpoint(save_npz(params, tmp_path / "vit.npz"), image_size=48, resample_method=method)
    expected = resample_position_embeddings(
        params["Transformer/posembed_input/pos_embedding"], 4, 6, 1, method)
    np.testing.assert_allclose(to_numpy(model.get_layer("position_embedding").embeddings), expected, atol=1e-6)
    # The rest of the network is the checkpoint's: same as resampling by hand.
    params48 = dict(params, **{"Transformer/posembed_input/pos_embedding": expected})
    assert_parity(model, params48, images(48))


def test_new_num_classes_gets_a_zero_head(tmp_path):
    params = random_vit_params()
    model = ViT.from_checkpoint(save_npz(params, tmp_path / "vit.npz"), num_classes=10)
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").kernel), np.zeros((32, 10)))
    features = ViT.from_checkpoint(tmp_path / "vit.npz", num_classes=0)
    head_free = {k: v for k, v in params.items() if not k.startswith("head/")}
    assert_parity(features, head_free, images())


@pytest.mark.slow
def test_non_square_grid_needs_and_uses_the_image_size(tmp_path):
    params = random_vit_params(image_size=(32, 16))
    path = save_npz(params, tmp_path / "wide.npz")
    with pytest.raises(CheckpointError, match=r"hold 8 patches, not a square grid\). Pass `image_size"):
        ViT.from_checkpoint(path)
    with pytest.raises(CheckpointError, match="hold 8 patches, which a 4x4 grid does not fit"):
        ViT.from_checkpoint(path, image_size=32)
    assert_parity(ViT.from_checkpoint(path, image_size=(32, 16)), params, images((32, 16)))


def test_fine_tuning_can_drop_pre_logits(tmp_path):
    params = random_vit_params(representation_size=24)
    path = save_npz(params, tmp_path / "i21k.npz")
    model = ViT.from_checkpoint(path, num_classes=7, representation_size=None)
    assert "pre_logits" not in [layer.name for layer in model.layers]
    assert model.get_layer("head").kernel.shape == (32, 7)
    features = ViT.from_checkpoint(path, num_classes=0, representation_size=None)
    head_free = {k: v for k, v in params.items() if not k.startswith(("head/", "pre_logits/"))}
    assert_parity(features, head_free, images())


def test_overrides_reach_the_model(tmp_path):
    path = save_npz(random_vit_params(), tmp_path / "vit.npz")
    model = ViT.from_checkpoint(path, dropout_rate=0.1, drop_path_rate=0.1)
    assert model.dropout_rate == 0.1 and model.get_layer("encoder_block_1").drop_path_rate == 0.1


# -- errors -------------------------------------------------------------------

def test_pickle_files_are_refused(tmp_path):
    for name in ("pytorch_model.bin", "model.pth", "weights.pkl"):
        (tmp_path / name).write_bytes(b"\x80\x04not really")
        with pytest.raises(CheckpointError, match="pickle-based .* convert it to safetensors|Convert it to safetensors"):
            ViT.from_checkpoint(tmp_path / name)
    for name, meta in (("hf", {"model_type": "vit"}), ("timm", {"architecture": "vit_base_patch16_224"})):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(meta))
        (directory / "pytorch_model.bin").write_bytes(b"\x80\x04")
        with pytest.raises(CheckpointError, match="pytorch_model.bin is a pickle-based PyTorch file"):
            ViT.from_checkpoint(directory)


def test_missing_extra_and_misshaped_keys_are_named(tmp_path):
    params = random_vit_params()
    missing = {k: v for k, v in params.items() if k != "Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias"}
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint:\n    encoder_block_1/mlp/fc2/bias"):
        ViT.from_checkpoint(save_npz(missing, tmp_path / "missing.npz"))
    extra = dict(params, **{"Transformer/encoderblock_0/Extra_0/kernel": np.zeros(3)})
    with pytest.raises(CheckpointError, match="keys keras_vit does not know.*Extra_0/kernel"):
        ViT.from_checkpoint(save_npz(extra, tmp_path / "extra.npz"))
    bad = dict(params, **{"head/bias": np.zeros(4, "float32")})
    with pytest.raises(CheckpointError, match=r"head/bias: checkpoint \(4,\), model \(5,\)"):
        ViT.from_checkpoint(save_npz(bad, tmp_path / "bad.npz"))
    timm = to_timm(params)
    # qk_norm is read now (tests/test_family.py); half of one is named, not skipped
    timm["blocks.0.attn.q_norm.weight"] = np.ones(8, "float32")
    with pytest.raises(CheckpointError, match=r"expected key 'blocks.0.attn.q_norm.bias' is missing"):
        ViT.from_checkpoint(save_safetensors(timm, tmp_path / "qk.safetensors"), num_heads=4)
    timm = dict(to_timm(params), **{"blocks.0.attn.rope.freqs": np.ones(8, "float32")})
    with pytest.raises(CheckpointError, match=r"keys keras_vit does not know.*blocks.0.attn.rope.freqs"):
        ViT.from_checkpoint(save_safetensors(timm, tmp_path / "rope.safetensors"), num_heads=4)


def test_a_load_parses_each_file_once(tmp_path, monkeypatch):
    """The format's choice and the reader read config.json (and Hugging Face's
    preprocessor_config.json) from one parse; a file changed since is parsed again."""
    from keras_vit.io import files
    from keras_vit.weights import read_checkpoint

    model = ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3)
    parsed = []
    read_json = files.read_json
    monkeypatch.setattr(files, "read_json", lambda path, **k: parsed.append(path.name) or read_json(path, **k))
    for format in ("timm", "huggingface"):
        folder = model.save_checkpoint(tmp_path / format, checkpoint_format=format)
        parsed.clear()
        read_checkpoint(folder)
        assert sorted(parsed) == sorted({*parsed}) and "config.json" in parsed, (format, parsed)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1, "image_size": 16}))
    parsed.clear()
    read_checkpoint(folder)
    assert parsed.count("config.json") == 1


def test_a_head_count_other_than_the_files_own_is_refused(tmp_path):
    """npz, Hugging Face and keras-hub files store their head count: another one
    would load (the shapes fit) and compute something else."""
    npz = save_npz(random_vit_params(heads=4), tmp_path / "vit.npz")
    assert ViT.from_checkpoint(npz, num_heads=4).num_heads == 4
    with pytest.raises(CheckpointError, match=r"vit.npz stores num_heads=4; num_heads=2 would split the "
                       "same weights into other heads.*Leave num_heads out"):
        ViT.from_checkpoint(npz, num_heads=2)


def test_truncated_and_unknown_files(tmp_path):
    npz = save_npz(random_vit_params(), tmp_path / "vit.npz")
    data = npz.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="could not be read as an .npz checkpoint.*truncated"):
        ViT.from_checkpoint(tmp_path / "cut.npz")
    st = save_safetensors(to_timm(random_vit_params()), tmp_path / "timm.safetensors")
    (tmp_path / "cut.safetensors").write_bytes(st.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="could not be read as safetensors.*truncated"):
        ViT.from_checkpoint(tmp_path / "cut.safetensors")
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    with pytest.raises(CheckpointError, match="unknown checkpoint format. Known formats: vit_jax"):
        ViT.from_checkpoint(tmp_path / "model.onnx")
    np.savez(tmp_path / "other.npz", weights=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a ViT checkpoint: it has no 'embedding/kernel'"):
        ViT.from_checkpoint(tmp_path / "other.npz")
    with pytest.raises(CheckpointError, match="No checkpoint file or folder at"):
        ViT.from_checkpoint(tmp_path / "absent.npz")


@pytest.mark.backend_independent  # the table of released files, no model
def test_the_released_files_old_architecture_keyword_is_a_deprecated_alias_of_preset():
    from keras_vit import released

    with pytest.warns(DeprecationWarning, match=r"pretrained\(architecture=...\) is deprecated; use "
                      r"pretrained\(preset=...\)"):
        old = released.pretrained(architecture="vit_b16")
    assert old == released.pretrained(preset="vit_b16") == released.pretrained("vit_b16")
    with pytest.warns(DeprecationWarning, match="PretrainedWeights.architecture is deprecated"):
        assert old[0].architecture == old[0].preset == "vit_b16"
    with pytest.warns(DeprecationWarning, match=r"default_pretrained\(architecture=...\) is deprecated"):
        assert released.default_pretrained(architecture="vit_b16") == released.default_pretrained("vit_b16")
    with pytest.raises(TypeError, match="takes preset= once"), pytest.warns(DeprecationWarning):
        released.pretrained("vit_b16", architecture="vit_b16")
