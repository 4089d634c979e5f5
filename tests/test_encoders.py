"""The newer encoders, read from timm's own files: small random models that
timm 1.0.31 made and saved for the hub (tests/data/make_timm_architectures.py
says how), with timm's logits. Each reads with timm's logits within 1e-5 on
every backend, writes back to timm's layout key for key (the keys, shapes
and values of timm's own file, under an architecture of the same family),
and takes what keras_vit gives any ViT: feature maps, the dense probe,
NaFlex. Where transformers has the model (AIMv2), its folder reads with
transformers' numbers too."""

import json
import pathlib

import numpy as np
import pytest
from helpers import LazyModule
from helpers import to_numpy

import keras_vit
from keras_vit import ViT
from keras_vit.io.tensors import load_safetensors
from keras_vit.weights import CheckpointError

torch = LazyModule("torch", reason="transformers' models run on PyTorch")
transformers = LazyModule("transformers", reason="AIMv2's reference model")

TIMM = pathlib.Path(__file__).parent / "data" / "timm"
# Each family: its timm folder's name and the ViT options it reads as
ENCODERS = {
    "aimv2": dict(norm_type="rms_norm", norm_bias=False, patch_norm=True, out_bias=False,
                  mlp_bias=False, qkv_bias=False, mlp_activation="swiglu", pooling="gap",
                  layer_norm_epsilon=1e-5, mlp_dim=88),
    # the Perception Encoder (vit_pe_core_*): a learned table beside rotary embeddings on its
    # reference grid, columns first; a LayerNorm before the encoder; MAP beside the [class] token
    "pe_core": dict(position_embedding="learned_rope", rope_grid="index", rope_grid_offset=1.0,
                    rope_grid_indexing="xy", rope_reference_grid=(4, 4), rope_theta=10000.0,
                    norm_pre=True, patch_bias=False, pooling="map", class_token=True,
                    layer_norm_epsilon=1e-5),
    # PE core as timm's vit_pe_core_tiny_patch16_384 builds it at width 48: 4 heads of 12 in the blocks, and
    # its attention pool's own 8 heads of 6, which no rotary embedding reaches (the blocks' rule of head
    # sizes in multiples of 4 is not the pool's)
    "pe_core_pool_heads": dict(position_embedding="learned_rope", hidden_dim=48, num_heads=4, pooling="map",
                               pooling_num_heads=8, pooling_mlp_dim=None, rope_reference_grid=(24, 24),
                               layer_norm_epsilon=1e-5),
    # PE's spatial towers (vit_pe_spatial_*): PE core's without the MAP head and any final norm
    "pe_spatial": dict(position_embedding="learned_rope", rope_grid="index", rope_grid_indexing="xy",
                       norm_pre=True, pooling="gap", class_token=True, fc_norm=False, final_norm=False),
    # timm's ViTs with rotary embeddings (vit_*_patch16_rope_*; Heo et al., ECCV 2024): no table
    "rope_vit": dict(position_embedding="rope", rope_grid="index", rope_grid_indexing="xy", rope_theta=100.0,
                     rope_reference_grid=None, layer_scale_init=1e-5, pooling="token"),
    # EVA-02 (eva02_*): EvaAttention (a query and value bias, no key bias), a SwiGLU MLP, rotary
    # embeddings on its reference grid beside the learned table, the patch tokens' mean and fc_norm
    "eva02": dict(position_embedding="learned_rope", rope_grid="index", rope_reference_grid=(16, 16),
                  key_bias=False, mlp_activation="swiglu", mlp_norm=False, pooling="gap", fc_norm=True,
                  class_token=True),
    # B and L's: q, k and v apart, a LayerNorm inside the MLP
    "eva02_mlp_norm": dict(position_embedding="learned_rope", rope_grid="index", key_bias=False,
                           mlp_activation="swiglu", mlp_norm=True, pooling="gap", fc_norm=True),
    # EVA-02's CLIP towers (eva02_*_clip_*): B and L's, with a norm of the attention heads' outputs
    # (EVA-CLIP's sub-LN), the [class] token
    "eva02_clip": dict(position_embedding="learned_rope", rope_grid="index", key_bias=False,
                       mlp_activation="swiglu", mlp_norm=True, attention_norm=True, pooling="token",
                       fc_norm=False),
    # timm's rotary ViTs with registers (vit_*_patch16_rope_reg*_gap_256): EvaAttention, rotary embeddings
    # alone on a reference grid, a register token and no [class] token, the patch tokens' mean
    "rope_registers": dict(position_embedding="rope", rope_grid="index", rope_reference_grid=(4, 4),
                           key_bias=False, num_registers=1, pooling="gap", class_token=None,
                           layer_scale_init=1e-5),
    # C-RADIOv3 (vit_*_radio_v3): 7 registers beside the [class] token (RADIO's further summary
    # tokens), LayerScale, no final norm; timm's table of the patches alone, zero rows for the prefix
    "radio": dict(num_registers=7, layer_scale_init=1e-5, final_norm=False, fc_norm=False, pooling="token",
                  position_embedding="learned"),
}


@pytest.fixture(scope="module", params=list(ENCODERS))
def encoder(request):
    """(family, the model read from timm's folder, timm's images and logits)."""
    reference = np.load(TIMM / f"{request.param}.npz")
    return request.param, ViT.from_checkpoint(TIMM / request.param), reference["images"], reference["logits"]


@pytest.mark.slow_cases("pe_core", "pe_core_pool_heads")
def test_logits_are_timms(encoder):
    family, model, images, logits = encoder
    options = {name: getattr(model.config, name) for name in ENCODERS[family]}
    assert options == ENCODERS[family]
    difference = np.abs(to_numpy(model(images)) - logits).max()
    print(f"{family}: max |logit - timm's| = {difference:.2e}")
    assert difference < 1e-5


def test_written_back_in_timms_layout(encoder, tmp_path):
    family, model, images, logits = encoder
    folder = model.save_checkpoint(tmp_path / "timm", checkpoint_format="timm")
    ours, theirs = load_safetensors(folder / "model.safetensors"), load_safetensors(TIMM / family / "model.safetensors")
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    for key, value in theirs.items():
        np.testing.assert_allclose(ours[key], value, atol=1e-6, err_msg=key)
    written = json.loads((folder / "config.json").read_text())
    timms = json.loads((TIMM / family / "config.json").read_text())
    assert written["architecture"].split("_")[0] == timms["architecture"].split("_")[0]  # the same family
    again = ViT.from_checkpoint(folder)
    assert again.config == model.config
    np.testing.assert_allclose(to_numpy(again(images)), to_numpy(model(images)), atol=1e-6, rtol=0)


@pytest.mark.slow_cases("aimv2")
def test_features_probe_and_naflex(encoder):
    family, model, images, _ = encoder
    grid, width = model.config.grid_size, model.config.hidden_dim
    norm = model.parts.encoder_norm is not None  # fc_norm, or no final norm: none before pooling
    maps = model.feature_model(layers=[0, 1], norm=norm)(images)
    assert {name: tuple(m.shape) for name, m in maps.items()} == {
        f"encoder_block_{i}": (2, *grid, width) for i in (0, 1)}
    probe = keras_vit.segmentation_probe(model, 3, layers=[1], norm=norm)
    assert tuple(probe(images).shape) == (2, *model.config.image_size, 3)
    flex = model.with_naflex(grid[0] * grid[1])
    pixels = [np.round((image + 1) * 127.5).astype(np.float32) for image in images]
    x = keras_vit.naflex_inputs(pixels, model.config.patch_size[0], grid[0] * grid[1])
    np.testing.assert_allclose(to_numpy(flex(x)), to_numpy(model(np.stack(pixels) / 127.5 - 1)),
                               atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def transformers_aimv2(tmp_path_factory):
    """A small random ``Aimv2VisionModel`` (no attention-pooling head) saved with
    ``save_pretrained``, its images and the mean of its ``last_hidden_state``."""
    config = transformers.Aimv2VisionConfig(hidden_size=32, intermediate_size=88, num_hidden_layers=2,
                                            num_attention_heads=4, image_size=32, patch_size=8,
                                            use_head=False)
    torch.manual_seed(0)
    model = transformers.Aimv2VisionModel(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    folder = tmp_path_factory.mktemp("aimv2") / "hf"
    model.save_pretrained(folder)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    with torch.no_grad():
        tokens = model(pixel_values=torch.from_numpy(images).permute(0, 3, 1, 2)).last_hidden_state
    return folder, images, tokens.mean(1).numpy()


def test_transformers_aimv2_gives_its_features(transformers_aimv2):
    folder, images, features = transformers_aimv2
    model = ViT.from_checkpoint(folder)
    assert {name: getattr(model.config, name) for name in ENCODERS["aimv2"]} == ENCODERS["aimv2"]
    difference = np.abs(to_numpy(model(images)) - features).max()
    print(f"AIMv2 (transformers): max |feature - transformers'| = {difference:.2e}")
    assert difference < 1e-5
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "use_head": True}))
    with pytest.raises(CheckpointError, match=r"use_head=True, its attention-pooling head "
                       r"\(Aimv2AttentionPoolingHead.*Nothing was read"):
        ViT.from_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps(config))


def test_radio_resamples_its_table_as_radio_does():
    """RADIO's folders resample by CPE (a square grid of the longer side, cropped from the
    top left) unless told otherwise: `resample_position_embeddings(..., method="cpe")`."""
    from keras_vit.layers import resample_position_embeddings

    native = ViT.from_checkpoint(TIMM / "radio")
    tall = ViT.from_checkpoint(TIMM / "radio", image_size=(48, 24))
    layer = native.parts.position_embedding
    np.testing.assert_allclose(
        to_numpy(tall.parts.position_embedding.embeddings),
        resample_position_embeddings(to_numpy(layer.embeddings), layer.grid_size, (6, 3), 8, "cpe"), atol=1e-6)
    assert tall.parts.position_embedding.embeddings.shape == (1, 8 + 18, 32)
