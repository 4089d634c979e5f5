"""Files made by the original code that used to load wrongly or not at all:
timm files without a head count, fractional ResNet widths, the hybrids
vit_jax names, and broken or out-of-range configs."""

import json
import math
import pathlib
import shutil

import numpy as np
import pytest
from checkpoint_files import save_npz
from checkpoint_files import save_safetensors
from checkpoint_files import to_timm
from helpers import to_numpy
from reference import random_vit_params
from reference import vit_forward

from keras_vit import ViT
from keras_vit import ViTConfig
from keras_vit.presets import PRESETS
from keras_vit.presets import count_params
from keras_vit.presets import preset_config
from keras_vit.weights import CheckpointError


def images(size=32, n=2, seed=3):
    return np.random.default_rng(seed).uniform(-1, 1, (n, size, size, 3)).astype("float32")


def assert_parity(model, params, x, **kwargs):
    diff = np.abs(to_numpy(model(x)) - vit_forward(params, x, **kwargs)).max()
    print(f"max |logit difference| = {diff:.2e}")
    assert diff < 1e-5


# -- hybrids: vit_jax's parameter shapes, written out from its modules ----------


def vit_jax_shapes(hidden_dim, num_layers, num_heads, mlp_dim, patch_size, resnet_block_units=None,
                   resnet_width_factor=1, image_size=224, num_classes=1000, channels=3, **unused):
    """Every parameter vit_jax's VisionTransformer creates, name -> shape
    (models_vit.py, models_resnet.py: StdConv, GroupNorm, ResidualUnit)."""
    shapes, in_channels, stride = {}, channels, 1
    if resnet_block_units is not None:
        width = int(64 * resnet_width_factor)
        shapes["conv_root/kernel"] = (7, 7, channels, width)
        shapes["gn_root/scale"] = shapes["gn_root/bias"] = (width,)
        in_channels = width
        for i, units in enumerate(resnet_block_units):
            nout = width * 2**i
            for u in range(units):
                unit = f"block{i + 1}/unit{u + 1}/"
                strides = 2 if i > 0 and u == 0 else 1
                if in_channels != 4 * nout or strides != 1:  # needs_projection
                    shapes[unit + "conv_proj/kernel"] = (1, 1, in_channels, 4 * nout)
                    shapes[unit + "gn_proj/scale"] = shapes[unit + "gn_proj/bias"] = (4 * nout,)
                shapes[unit + "conv1/kernel"] = (1, 1, in_channels, nout)
                shapes[unit + "conv2/kernel"] = (3, 3, nout, nout)
                shapes[unit + "conv3/kernel"] = (1, 1, nout, 4 * nout)
                for gn, c in (("gn1", nout), ("gn2", nout), ("gn3", 4 * nout)):
                    shapes[unit + gn + "/scale"] = shapes[unit + gn + "/bias"] = (c,)
                in_channels = 4 * nout
        stride = 4 * 2 ** max(len(resnet_block_units) - 1, 0)
    d, heads = hidden_dim, num_heads
    shapes["embedding/kernel"] = (patch_size, patch_size, in_channels, d)
    shapes["embedding/bias"] = (d,)
    shapes["cls"] = (1, 1, d)
    shapes["Transformer/posembed_input/pos_embedding"] = (1, (image_size // (patch_size * stride)) ** 2 + 1, d)
    for i in range(num_layers):
        block = f"Transformer/encoderblock_{i}/"
        for norm in ("LayerNorm_0", "LayerNorm_2"):
            shapes[block + norm + "/scale"] = shapes[block + norm + "/bias"] = (d,)
        for name in ("query", "key", "value"):
            shapes[block + f"MultiHeadDotProductAttention_1/{name}/kernel"] = (d, heads, d // heads)
            shapes[block + f"MultiHeadDotProductAttention_1/{name}/bias"] = (heads, d // heads)
        shapes[block + "MultiHeadDotProductAttention_1/out/kernel"] = (heads, d // heads, d)
        shapes[block + "MultiHeadDotProductAttention_1/out/bias"] = (d,)
        shapes[block + "MlpBlock_3/Dense_0/kernel"], shapes[block + "MlpBlock_3/Dense_0/bias"] = (d, mlp_dim), (mlp_dim,)
        shapes[block + "MlpBlock_3/Dense_1/kernel"], shapes[block + "MlpBlock_3/Dense_1/bias"] = (mlp_dim, d), (d,)
    shapes["Transformer/encoder_norm/scale"] = shapes["Transformer/encoder_norm/bias"] = (d,)
    shapes["head/kernel"], shapes["head/bias"] = (d, num_classes), (num_classes,)
    return shapes


@pytest.mark.backend_independent  # full-size builds: one pass
@pytest.mark.parametrize("preset", ["r_vit_ti16", "r26_vit_s32", "r50_vit_l32", "r50_vit_b16"])
def test_hybrid_presets_count_as_vit_jax(preset):
    config = PRESETS[preset]["config"]
    expected = sum(math.prod(s) for s in vit_jax_shapes(**config).values())
    print(f"{preset}: vit_jax {expected:,d} parameters")
    assert count_params(**config) == count_params(preset_config(preset)) == expected
    if preset in ("r_vit_ti16", "r26_vit_s32"):  # small enough to build here
        assert ViT.from_preset(preset).count_params() == expected


@pytest.mark.parametrize(
    "units, width, patch, size",
    [((), 64, 2, 32),                 # R+Ti/16's root-only stem (patch 8 at full size)
     ((2, 2, 2, 2), 32, 1, 64),       # R26+S/32's stages, half width
     ((3, 4, 6, 3), 32, 1, 64)],      # R50+L/32's stages, half width
    ids=["r_ti", "r26", "r50_l32"])
@pytest.mark.slow_cases("r26", "r50_l32")
def test_hybrid_npz_loads_and_matches_vit_jax(units, width, patch, size, tmp_path):
    params = random_vit_params(image_size=size, patch=patch, resnet_units=units, resnet_width=width,
                               layers=1, hidden=32, heads=4, mlp_dim=32)
    model = ViT.from_checkpoint(save_npz(params, tmp_path / "hybrid.npz"))
    assert model.resnet_block_units == units and model.resnet_width_factor == width / 64
    assert model.count_params() == sum(v.size for v in params.values())
    assert_parity(model, params, images(size))


def test_fractional_width_factor(tmp_path):
    params = random_vit_params(image_size=32, patch=1, resnet_units=(1,), resnet_width=32, layers=1)
    model = ViT.from_checkpoint(save_npz(params, tmp_path / "half.npz"))
    assert model.resnet_width_factor == 0.5
    assert model.get_layer("resnet").conv_root.filters == 32
    assert_parity(model, params, images(32))
    restored = ViT.from_config(model.get_config())
    assert restored.resnet_width_factor == 0.5 and restored.count_params() == model.count_params()
    with pytest.raises(ValueError, match=r"resnet_width_factor=0.25 gives int\(64 \* 0.25\) = 16 root channels"):
        ViT(image_size=32, patch_size=1, resnet_block_units=(1,), resnet_width_factor=0.25)
    with pytest.raises(ValueError, match=r"resnet_block_units=\(1, 0\) has a stage without units"):
        ViT(image_size=32, patch_size=1, resnet_block_units=(1, 0))


# -- timm head counts ---------------------------------------------------------------


def timm_folder(tmp_path, params, config):
    folder = tmp_path / "timm"
    folder.mkdir()
    save_safetensors(to_timm(params), folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_timm_width_outside_the_table_needs_the_head_count(tmp_path):
    params = random_vit_params(hidden=512, heads=8, mlp_dim=64, layers=1, image_size=16)
    path = save_safetensors(to_timm(params), tmp_path / "medium.safetensors")
    with pytest.raises(CheckpointError, match=r"width 512 is not one of timm's standard sizes.*num_heads="):
        ViT.from_checkpoint(path)
    model = ViT.from_checkpoint(path, num_heads=8)
    assert model.num_heads == 8
    assert_parity(model, params, images(16), approximate_gelu=False)
    with pytest.raises(CheckpointError, match="num_heads=7 does not divide the width 512"):
        ViT.from_checkpoint(path, num_heads=7)


def test_timm_hub_folder_gives_heads_and_class_names(tmp_path):
    params = random_vit_params(hidden=512, heads=8, mlp_dim=64, layers=1, image_size=16, num_classes=3)
    # timm.create_model("vit_medium_patch16_gap_256", **model_args): the entry point's model
    # with a [class] token, biased qkv and no LayerScale, as these weights are
    folder = timm_folder(tmp_path, params, {
        "architecture": "vit_medium_patch16_gap_256", "num_classes": 3,
        "model_args": {"class_token": True, "global_pool": "token", "qkv_bias": True, "init_values": None},
        "label_names": ["n01", "n02", "n03"], "pretrained_cfg": {"tag": "test"}})
    model = ViT.from_checkpoint(folder)
    assert model.num_heads == 8 and model.class_names == ["n01", "n02", "n03"]
    assert_parity(model, params, images(16), approximate_gelu=False)


def test_timm_model_args_override_and_disagreement(tmp_path):
    params = random_vit_params(hidden=64, heads=2, mlp_dim=64, layers=1, image_size=16)
    folder = timm_folder(tmp_path, params, {"architecture": "vit_base_patch16_224",
                                            "model_args": {"embed_dim": 64, "num_heads": 2}})
    model = ViT.from_checkpoint(folder)
    assert model.num_heads == 2
    assert_parity(model, params, images(16), approximate_gelu=False)
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_base_patch16_224"}))
    with pytest.raises(CheckpointError, match=r"config.json names timm's 'vit_base_patch16_224', built with "
                       r"embed_dim=768 \(a width of 768\), but the weights have a width of 64: the folder mixes"):
        ViT.from_checkpoint(folder)


DATA = pathlib.Path(__file__).parent / "data"

# (id, config.json's changes: model_args and top-level fields, the message's "who sets what")
MIXED_FOLDERS = [
    # the pooling head's 3 heads do not divide the width 32 either: the depth is named first
    ("depth", {"depth": 3, "attn_pool_num_heads": 3}, {},
     r"config.json's model_args set depth=3 \(3 blocks\), but the weights have 2 blocks"),
    ("embed_dim", {"embed_dim": 48}, {}, r"set embed_dim=48 \(a width of 48\), but the weights have a width of 32"),
    ("patch_size", {"patch_size": [16, 16]}, {},
     r"set patch_size=\[16, 16\] \(patches of 16x16\), but the weights have patches of 8x8"),
    ("mlp_ratio", {"mlp_ratio": 2.0}, {},
     r"set mlp_ratio=2.0 \(an MLP 64 wide\), but the weights have an MLP 128 wide"),
    ("in_chans", {"in_chans": 1}, {},
     r"set in_chans=1 \(1 input channels\), but the weights have 3 input channels"),
    ("num_classes", {"num_classes": 7}, {}, r"set num_classes=7 \(7 classes\), but the weights have 5 classes"),
    ("registers", {"num_reg_tokens": 2}, {},
     r"set num_reg_tokens=2 \(2 registers\), but the weights have 0 registers"),
    ("top-level-num_classes", {}, {"num_classes": 9},
     r"config.json sets num_classes=9 \(9 classes\), but the weights have 5 classes"),
]


@pytest.mark.backend_independent  # refused while reading the files, before any model is built
@pytest.mark.parametrize("case", MIXED_FOLDERS, ids=[case[0] for case in MIXED_FOLDERS])
def test_a_timm_config_json_that_contradicts_its_weights_names_the_size(tmp_path, case):
    """A size config.json sets that the weights fix too (the Perception
    Encoder's folder: 2 blocks 32 wide, patches of 8x8, an MLP 128 wide, 5
    classes) and that they contradict refuses the folder, naming the argument,
    its value and the weights'."""
    _, model_args, top, message = case
    pe = tmp_path / "pe"
    shutil.copytree(DATA / "timm" / "pe_core", pe)
    meta = json.loads((pe / "config.json").read_text())
    meta = {**meta, **top, "model_args": {**meta["model_args"], **model_args}}
    (pe / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=f"^timm checkpoint {pe / 'model.safetensors'}: .*{message}: the "
                       "folder mixes two models. Use the config.json saved with these weights.$"):
        ViT.from_checkpoint(pe)


@pytest.mark.backend_independent  # refused while reading the files, before any model is built
def test_a_timm_head_count_that_the_query_norm_contradicts_is_named(tmp_path):
    """With qk_norm, the query's norm is one head wide, so the weights fix
    the head count that config.json sets."""
    params = random_vit_params(hidden=64, heads=2, mlp_dim=64, layers=1, image_size=16)
    state = to_timm(params)
    state["blocks.0.attn.q_norm.weight"] = state["blocks.0.attn.k_norm.weight"] = np.ones(32, np.float32)
    folder = tmp_path / "timm"
    folder.mkdir()
    save_safetensors(state, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_base_patch16_224", "model_args": {
        "embed_dim": 64, "depth": 1, "num_heads": 4, "qk_norm": True}}))
    with pytest.raises(CheckpointError, match=r"model_args set num_heads=4 \(4 heads\), but the weights have "
                       "2 heads: the folder mixes two models"):
        ViT.from_checkpoint(folder)


@pytest.mark.backend_independent  # refused while reading the file, before any model is built
def test_a_bare_perception_encoder_file_is_refused_naming_its_config_json(tmp_path):
    """timm's Perception Encoder (tests/data/timm/pe_core_pool_heads: vit_pe_core_tiny_patch16_384
    at width 48) without its config.json: its keys are a plain ViT's with an attention pool
    beside the [class] token, and its rotary embeddings and LayerNorm epsilon are in no tensor.
    Read by its keys as a VisionTransformer its logits were some 1e-2 off timm's; it is
    refused, head count given or not, naming the config.json it needs. Its folder reads
    (tests/test_encoders.py, with timm's logits)."""
    bare = tmp_path / "model.safetensors"
    shutil.copy(DATA / "timm" / "pe_core_pool_heads" / "model.safetensors", bare)
    for num_heads in (None, 4):
        with pytest.raises(CheckpointError, match=r"attention-pooling head beside a \[class\] token or registers, "
                           r"as timm's Eva of the Perception Encoder .*never by matching key names. Read the timm "
                           r"hub folder: this model.safetensors beside the config.json timm saved with it.*"
                           "Nothing was read"):
            ViT.from_checkpoint(bare, num_heads=num_heads)


@pytest.mark.backend_independent  # refused while reading the files, before any model is built
def test_a_timm_architecture_keras_vit_does_not_read_is_refused_by_name(tmp_path):
    """timm's Perception Encoder (tests/data/make_timm_architectures.py: a small random
    vit_pe_core_tiny_patch16_384 saved by timm's save_for_hf; tests/test_encoders.py reads
    it) has a plain ViT's key names (norm_pre, attn_pool.*; its rotary embeddings have no
    weights): named as another Eva (EVA-02's CLIP towers, EVA-01, the ViTs with mixed
    rotary embeddings), its weights are refused by that architecture's
    arguments, not read by their keys. So are a name timm does not have and arguments
    keras_vit's ViT does not have (BEiT-3's scaled norms, RADIO's final_norm=False, ...);
    an old name is read as the one it stands for."""
    pe = tmp_path / "pe"
    shutil.copytree(DATA / "timm" / "pe_core", pe)
    meta = json.loads((pe / "config.json").read_text())
    for architecture, refused in (("eva02_enormous_patch14_clip_224", "use_post_norm=True"),
                                  ("eva_giant_patch14_224", "use_rot_pos_emb=False"),
                                  ("vit_small_patch16_rope_mixed_224", "rope_type='mixed'")):
        (pe / "config.json").write_text(json.dumps({**meta, "architecture": architecture}))
        with pytest.raises(CheckpointError, match=f"timm's {architecture} builds it with .*{refused}.*, "
                           "which keras_vit's ViT does not have.*Nothing was read"):
            ViT.from_checkpoint(pe)
    params = random_vit_params(hidden=64, heads=2, mlp_dim=64, layers=1, image_size=16)
    folder = timm_folder(tmp_path, params, {"architecture": "vit_custom", "model_args": {"num_heads": 2}})
    with pytest.raises(CheckpointError, match=r"names timm's architecture 'vit_custom', which is not "
                       r"one of the 244 ViT architectures of timm 1.0.31.*never by matching key names"):
        ViT.from_checkpoint(folder)
    assert ViT.from_checkpoint(folder / "model.safetensors", num_heads=2).num_heads == 2  # the way out it names
    for architecture, refused in (("beit3_base_patch16_224", "scale_attn_norm=True, scale_mlp_norm=True"),
                                  ("vit_dwee_patch16_reg1_gap_256", "attn_layer='diff'"),
                                  ("vit_base_patch16_18x2_224", "block_fn='ParallelThingsBlock'"),
                                  ("vit_base_patch16_224", "pos_embed='none'")):
        model_args = {"embed_dim": 64, "num_heads": 2, **({"pos_embed": "none"} if "pos_embed" in refused else {})}
        (folder / "config.json").write_text(json.dumps({"architecture": architecture, "model_args": model_args}))
        with pytest.raises(CheckpointError, match=f"timm's {architecture} builds it with .*{refused}.*, which "
                           "keras_vit's ViT does not have.*Nothing was read"):
            ViT.from_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_base_patch16_224_in21k",
                                                    "model_args": {"embed_dim": 64, "num_heads": 2}}))
    assert ViT.from_checkpoint(folder).num_heads == 2  # timm's vit_base_patch16_224.augreg_in21k


# A [class] token with a position embedding and no registers, as these weights are (the
# architecture's own otherwise): timm.create_model(architecture, **model_args).
_AS_THE_WEIGHTS = {"class_token": True, "global_pool": "token", "reg_tokens": 0, "no_embed_class": False}


@pytest.mark.parametrize("architecture, width, heads", [
    ("deit3_medium_patch16_224", 512, 8),               # deit.py
    ("vit_little_patch16_reg4_gap_256.sbb_in1k", 320, 5),  # with a tag
    ("vit_base_patch16_plus_240", 896, 14),             # not vit_base's 768/12
])
@pytest.mark.slow_cases("vit_base_patch16_plus_240-896-14", "vit_little_patch16_reg4_gap_256.sbb_in1k-320-5")
def test_timm_architecture_gives_timm_head_count(architecture, width, heads, tmp_path):
    """(width, heads) as timm's model functions define them."""
    params = random_vit_params(hidden=width, heads=heads, mlp_dim=32, layers=1, image_size=16, patch=16)
    model = ViT.from_checkpoint(timm_folder(tmp_path, params, {"architecture": architecture,
                                                               "model_args": _AS_THE_WEIGHTS}))
    assert model.num_heads == heads
    assert_parity(model, params, images(16), approximate_gelu=False)


def test_hugging_face_id2label_names_only_real_classes(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    for labels, expected in (({0: "cat", 1: "dog", 2: "fish"}, ["cat", "dog", "fish"]), (None, None)):
        config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        intermediate_size=64, image_size=32, patch_size=8, num_labels=3,
                                        **({"id2label": labels} if labels else {}))
        folder = tmp_path / str(bool(labels))
        transformers.ViTForImageClassification(config).save_pretrained(folder, safe_serialization=True)
        assert ViT.from_checkpoint(folder).class_names == expected  # None: LABEL_0, LABEL_1, ...


# -- broken configs -------------------------------------------------------------------


def test_broken_config_json_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "vit", "hidden_size": 32,')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match=f"{tmp_path / 'config.json'} is not valid JSON"):
        ViT.from_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 32}))
    with pytest.raises(CheckpointError, match="config.json lacks 'num_hidden_layers'"):
        ViT.from_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="holds a JSON list, not an object"):
        ViT.from_checkpoint(tmp_path)


@pytest.mark.parametrize("argument, value, message", [
    ("num_layers", -1, "`num_layers` must be an int >= 1, got -1"),
    ("num_layers", 2.5, "`num_layers` must be an int >= 1, got 2.5"),
    ("num_heads", 0, "`num_heads` must be an int >= 1, got 0"),
    ("hidden_dim", 0, "`hidden_dim` must be an int >= 1"),
    ("mlp_dim", -4, "`mlp_dim` must be an int >= 1"),
    ("num_classes", -1, "`num_classes` must be an int >= 0"),
    ("num_registers", -2, "`num_registers` must be an int >= 0"),
    ("num_channels", 0, "`num_channels` must be an int >= 1"),
    ("representation_size", -3, "`representation_size` must be an int >= 1"),
    ("layer_norm_epsilon", 0.0, "`layer_norm_epsilon` must be a number > 0"),
    ("dropout_rate", 1.0, r"`dropout_rate` must be in \[0, 1\), got 1.0"),
    ("attention_dropout_rate", -0.1, r"`attention_dropout_rate` must be in \[0, 1\)"),
    ("drop_path_rate", 2, r"`drop_path_rate` must be in \[0, 1\)"),
    ("patch_size", 0, "`patch_size` must be a positive int"),
    ("rope_theta", 0, "`rope_theta` must be a number > 0"),
    ("rope_theta", 10_000.0, "rope_theta=10000.0 is the base period of rotary position "
     "embeddings, and this model's are 'learned'"),
    ("key_bias", "no", "`key_bias` must be True or False"),
    ("pixel_scale", 0, "`pixel_scale` must not be 0"),
    ("pixel_offset", (1.0, 2.0), r"`pixel_offset` must be a number or 3 numbers \(one per channel\)"),
    ("qkv_bias", 1, "`qkv_bias` must be True or False"),
    ("position_embedding", "alibi", "Unknown position_embedding 'alibi'; use one of "
     r"\('learned', 'sincos2d', 'rope', 'learned_rope'\)"),
])
def test_out_of_range_arguments_are_named(argument, value, message):
    kwargs = dict(image_size=32, patch_size=8, num_layers=1, num_heads=4, hidden_dim=32, mlp_dim=64,
                  num_classes=5)
    with pytest.raises(ValueError, match=message):
        ViT(**{**kwargs, argument: value})


@pytest.mark.backend_independent
def test_options_that_contradict_each_other_are_named():
    kwargs = dict(image_size=32, patch_size=8, num_layers=1, num_heads=4, hidden_dim=32, mlp_dim=64)
    with pytest.raises(ValueError, match="qkv_bias=False already leaves out the query, key and value"):
        ViTConfig(**kwargs, qkv_bias=False, key_bias=False)
    with pytest.raises(ValueError, match=r"the head size 6 \(hidden_dim / num_heads\) must be a "
                                         "multiple of 4"):
        ViTConfig(**{**kwargs, "hidden_dim": 24}, position_embedding="rope")
