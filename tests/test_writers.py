"""`ViT.save_checkpoint`: a ViT written as a vit_jax .npz, a Hugging Face
directory and a timm .safetensors, read back by keras_vit (and by
transformers) with the same logits; what a format cannot express refused."""

import json
import pathlib
import tempfile

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy
from helpers import TINY as BASE
from helpers import to_numpy

from keras_vit import ViT
from keras_vit.cli import main
from keras_vit.weights import CheckpointError
from keras_vit.weights import save_checkpoint

# Each format with the architectures it can express.
CASES = [
    ("npz", {}),
    ("npz", dict(pooling="gap")),
    ("npz", dict(pooling="map")),
    ("npz", dict(representation_size=8)),
    ("npz", dict(position_embedding="sincos2d", pooling="gap")),
    ("npz", dict(num_classes=0, qkv_bias=False)),
    ("npz", dict(mlp_bias=False, pooling="map")),  # the MAP head's MLP keeps its biases
    ("npz", dict(image_size=64, patch_size=1, resnet_block_units=(1, 2), resnet_width_factor=0.5)),
    ("huggingface", {}),
    ("huggingface", dict(gelu_approximate=False, layer_norm_epsilon=1e-12)),
    ("huggingface", dict(num_classes=0, representation_size=8)),
    ("huggingface", dict(num_classes=0)),
    ("huggingface", dict(image_size=(32, 16), qkv_bias=False, class_names=list("abcde"))),
    ("timm", {}),
    ("timm", dict(gelu_approximate=False)),
    ("timm", dict(pooling="gap")),
    ("timm", dict(pooling="map")),
    ("timm", dict(num_registers=2, layer_scale_init=0.1)),
    ("timm", dict(qkv_bias=False, num_classes=0)),
    ("timm", dict(image_size=(32, 16), class_names=list("abcde"))),
    ("huggingface", dict(mlp_activation="quick_gelu")),
    # the ViT family (tests/test_family.py reads the sources' own files)
    ("timm", dict(distillation=True)),                                       # DeiT
    ("timm", dict(num_registers=4, layer_scale_init=1.0, mlp_activation="swiglu", num_classes=0)),
    ("timm", dict(norm_pre=True, patch_bias=False, layer_norm_epsilon=1e-5,   # CLIP
                  mlp_activation="quick_gelu", num_classes=12)),
    ("timm", dict(pooling="map", fc_norm=True, qk_norm=True, num_classes=0)),
    ("timm", dict(pooling="gap", class_token=True, fc_norm=True)),             # MAE, BEiT
    ("timm", dict(pooling="map", class_token=True, num_classes=0)),
]


def random_model(**changes):
    """A ViT with every weight random (a zero head or token would hide a
    mis-mapped key)."""
    model = ViT(**{**BASE, **changes})
    rng = np.random.default_rng(len(model.weights))
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    return model


def images(model, seed=0):
    size = model.image_size
    return np.random.default_rng(seed).normal(size=(2, *size, 3)).astype("float32")


def target(tmp_path, format, name="out"):
    return tmp_path / (name + ".npz" if format == "npz" else name)


@pytest.mark.parametrize("format, changes", CASES, ids=[f"{f}-{'-'.join(c) or 'paper'}" for f, c in CASES])
@pytest.mark.slow_cases("huggingface-image_size-qkv_bias-class_names",
                        "npz-image_size-patch_size-resnet_block_units-resnet_width_factor",
                        "npz-paper",
                        "timm-distillation")
def test_reader_gives_back_what_the_writer_wrote(tmp_path, format, changes):
    model = random_model(**changes)
    path = model.save_checkpoint(target(tmp_path, format), checkpoint_format=format)
    # sin-cos embeddings store no grid: the size is passed, as for any such file
    size = {"image_size": model.image_size} if model.position_embedding != "learned" else {}
    back = ViT.from_checkpoint(path, **size)
    x = images(model)
    np.testing.assert_allclose(to_numpy(back(x)), to_numpy(model(x)), rtol=0, atol=1e-6)
    if model.mlp_activation != "gelu":  # no GELU in the model: its form is not written
        model = model.with_config(gelu_approximate=False)
    assert back.config == model.config
    assert [v.path for v in back.weights] == [v.path for v in model.weights]


def test_the_old_format_keyword_is_a_deprecated_alias_of_checkpoint_format(tmp_path):
    """`save_checkpoint(format=...)` (`format` is an export format's name in
    `ViT.export`) writes what `checkpoint_format=` writes, with a warning,
    for one version; both at once are refused before anything is written."""
    model = random_model()
    new = model.save_checkpoint(tmp_path / "new.npz", "npz")
    with pytest.warns(DeprecationWarning, match=r"save_checkpoint\(format=...\) is deprecated; use "
                      r"save_checkpoint\(checkpoint_format=...\)"):
        old = save_checkpoint(model, tmp_path / "old.npz", format="npz")
    assert sorted(np.load(old)) == sorted(np.load(new))
    np.testing.assert_array_equal(to_numpy(ViT.from_checkpoint(old)(images(model))),
                                  to_numpy(ViT.from_checkpoint(new)(images(model))))
    with pytest.raises(TypeError, match="takes checkpoint_format= once"), pytest.warns(DeprecationWarning):
        model.save_checkpoint(tmp_path / "both.npz", checkpoint_format="npz", format="npz")
    assert not (tmp_path / "both.npz").exists()


def test_a_bare_timm_safetensors_file(tmp_path):
    # timm's own file without its hub config.json: read with the head count given.
    model = random_model(gelu_approximate=False)
    path = model.save_checkpoint(tmp_path / "model.safetensors", checkpoint_format="timm")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    back = ViT.from_checkpoint(path, num_heads=2)
    x = images(model)
    np.testing.assert_allclose(to_numpy(back(x)), to_numpy(model(x)), rtol=0, atol=1e-6)
    # What the tensors alone cannot say is refused, not read back as timm's defaults.
    for changes, lost in ((dict(gelu_approximate=True), r"gelu_approximate=True \(it would read as False\)"),
                          (dict(mlp_activation="quick_gelu"), r"mlp_activation='quick_gelu' \(it would "
                                                              r"read as 'gelu'\)\. Nothing"),
                          (dict(pooling="gap", class_token=True), r"pooling='gap' \(it would read as 'token'\)")):
        other = tmp_path / f"{sorted(changes)[0]}.safetensors"
        with pytest.raises(ValueError, match=r"cannot be written as a bare timm \.safetensors file: .*"
                           + lost + r".* Write the timm hub folder instead"):
            model.with_config(**changes).save_checkpoint(other, checkpoint_format="timm")
        assert not other.exists()


@pytest.mark.parametrize("changes", [{}, dict(gelu_approximate=False, layer_norm_epsilon=1e-12),
                                     dict(num_classes=0, representation_size=8),
                                     dict(image_size=(32, 16), qkv_bias=False)])
def test_transformers_loads_the_huggingface_directory(tmp_path, changes):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = random_model(**changes)
    path = model.save_checkpoint(tmp_path / "hf", checkpoint_format="huggingface")
    config = json.loads((path / "config.json").read_text())
    hf_class = transformers.ViTForImageClassification if model.num_classes else transformers.ViTModel
    assert config["architectures"] == [hf_class.__name__]
    hf = hf_class.from_pretrained(path).eval()  # no custom code, no missing or unused keys
    x = images(model)
    with torch.no_grad():
        out = hf(torch.from_numpy(x.transpose(0, 3, 1, 2)))
    expected = out.logits if model.num_classes else out.pooler_output
    np.testing.assert_allclose(expected.numpy(), to_numpy(model(x)), rtol=0, atol=1e-5)


def test_timm_hub_config_describes_the_model(tmp_path):
    model = random_model(pooling="gap", num_registers=2, class_names=list("abcde"))
    path = model.save_checkpoint(tmp_path / "timm", checkpoint_format="timm")
    config = json.loads((path / "config.json").read_text())
    args = config["model_args"]
    assert (args["embed_dim"], args["depth"], args["num_heads"], args["reg_tokens"]) == (16, 2, 2, 2)
    assert (args["global_pool"], args["class_token"], args["fc_norm"]) == ("avg", False, False)
    assert args["act_layer"] == "gelu_tanh" and int(args["embed_dim"] * args["mlp_ratio"]) == 32
    assert config["label_names"] == list("abcde") and config["num_classes"] == 5


@pytest.mark.parametrize(
    "format, changes, option",
    [
        ("timm", dict(image_size=64, patch_size=1, resnet_block_units=(1, 2)), "hybrid"),
        ("timm", dict(representation_size=8), "pre-logits"),
        ("timm", dict(position_embedding="sincos2d", pooling="gap"), "sin-cos"),
        ("huggingface", dict(pooling="gap"), "pooling 'gap'"),
        ("huggingface", dict(num_registers=1), "register tokens"),
        ("huggingface", dict(representation_size=8), "pre-logits layer and a head"),
        ("npz", dict(gelu_approximate=False), "exact (erf) GELU"),
        ("npz", dict(layer_scale_init=0.1), "LayerScale"),
        ("npz", dict(layer_norm_epsilon=1e-5), "epsilon"),
        ("npz", dict(distillation=True), "distillation"),
        ("npz", dict(mlp_activation="quick_gelu"), "mlp_activation='quick_gelu'"),
        ("huggingface", dict(qk_norm=True), "qk_norm"),
        ("huggingface", dict(mlp_activation="swiglu"), "mlp_activation='swiglu'"),
        ("huggingface", dict(patch_bias=False), "patch_bias=False"),
        ("timm", dict(norm_pre=True, layer_norm_epsilon=1e-5), "norm_pre=True, patch_bias=True"),
        ("huggingface", dict(mlp_bias=False), "mlp_bias=False"),
        ("huggingface", dict(norm_bias=False), "norm_bias=False"),
        ("timm", dict(mlp_bias=False), "mlp_bias=False"),
        ("timm", dict(position_embedding="rope"), "rotary position embeddings"),
        ("huggingface", dict(key_bias=False), "key_bias=False"),
        ("npz", dict(position_embedding="rope"), "rotary position embeddings"),
        ("npz", dict(pooling="gap", class_token=True), "class_token=True with 'gap' pooling"),
        ("timm", dict(distillation=True, distillation_head=False), "distillation_head=False"),
    ],
)
def test_what_a_format_cannot_express_is_refused(tmp_path, format, changes, option):
    model = ViT(**{**BASE, **changes})
    path = target(tmp_path, format)
    with pytest.raises(ValueError, match="cannot be written") as error:
        model.save_checkpoint(path, checkpoint_format=format)
    assert option in str(error.value) and "Nothing was written" in str(error.value)
    assert not path.exists()


def test_bad_format_and_existing_path(tmp_path):
    model = ViT(**BASE)
    with pytest.raises(ValueError, match="Unknown checkpoint format 'onnx'; use one of npz"):
        save_checkpoint(model, tmp_path / "x", checkpoint_format="onnx")
    (tmp_path / "taken.npz").write_bytes(b"mine")
    with pytest.raises(ValueError, match="exists; nothing was written"):
        model.save_checkpoint(tmp_path / "taken.npz")
    assert (tmp_path / "taken.npz").read_bytes() == b"mine"
    with pytest.raises(ValueError, match="does not end in .npz"):
        model.save_checkpoint(tmp_path / "model.bin")


@pytest.mark.parametrize("format", ["huggingface", "timm"])
def test_a_folder_format_writes_into_an_empty_folder_only(tmp_path, format):
    model = random_model()
    empty = tmp_path / "made_first"
    empty.mkdir()  # what most users do before saving
    model.save_checkpoint(empty, checkpoint_format=format)
    x = images(model)
    np.testing.assert_allclose(to_numpy(ViT.from_checkpoint(empty)(x)), to_numpy(model(x)),
                               rtol=0, atol=1e-6)
    made = tempfile.mkdtemp(dir=tmp_path)  # a str, as users pass it (mkdtemp, os.mkdir)
    assert model.save_checkpoint(made, checkpoint_format=format) == pathlib.Path(made)
    np.testing.assert_allclose(to_numpy(ViT.from_checkpoint(made)(x)), to_numpy(model(x)),
                               rtol=0, atol=1e-6)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="exists; nothing was written. Choose a new path or an "
                       "empty folder"):
        model.save_checkpoint(mine, checkpoint_format=format)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_a_small_grid_file_with_registers_reads(tmp_path):
    # timm's *_reg4_dinov2 (no_embed_class) at 28 px: a 2x2 grid, and the table
    # (4 rows, the patches') is shorter than the 5 prefix tokens.
    model = random_model(image_size=16, num_registers=4, layer_scale_init=1.0)
    table = model.parts.position_embedding.embeddings
    table.assign(np.concatenate([np.zeros((1, 5, 16), "float32"), to_numpy(table)[:, 5:]], 1))
    path = model.save_checkpoint(tmp_path / "reg4", checkpoint_format="timm")
    tensors = safetensors_numpy.load_file(str(path / "model.safetensors"))
    assert tensors["pos_embed"].shape == (1, 4, 16)  # no_embed_class, as timm keeps it: the patches' rows
    meta = json.loads((path / "config.json").read_text())
    assert meta["model_args"]["no_embed_class"] is True
    del meta["model_args"]["no_embed_class"]  # told by the shape alone, as a bare file
    (path / "config.json").write_text(json.dumps(meta))
    back = ViT.from_checkpoint(path)
    assert back.grid_size == (2, 2) and back.num_registers == 4
    x = images(model)
    np.testing.assert_allclose(to_numpy(back(x)), to_numpy(model(x)), rtol=0, atol=1e-6)


def test_a_distilled_file_gives_features_with_num_classes_0(tmp_path):
    model = random_model(distillation=True)
    path = model.save_checkpoint(tmp_path / "deit", checkpoint_format="timm")
    features = ViT.from_checkpoint(path, num_classes=0)
    assert features.num_classes == 0 and features.parts.head_dist is None
    x = images(model)
    encoded = to_numpy(model.intermediates(x)["encoded"])
    np.testing.assert_allclose(to_numpy(features(x)), (encoded[:, 0] + encoded[:, 1]) / 2,
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("format", ["npz", "huggingface", "timm"])
def test_convert_writes_each_format(tmp_path, capsys, format):
    model = random_model()
    model.save(tmp_path / "model.keras")
    out = target(tmp_path, format)
    assert main(["convert", str(tmp_path / "model.keras"), str(out), "--format", format]) == 0
    assert f"({format})" in capsys.readouterr().out
    x = images(model)
    np.testing.assert_allclose(to_numpy(ViT.from_checkpoint(out)(x)), to_numpy(model(x)),
                               rtol=0, atol=1e-6)
    # a second run refuses to overwrite, before reading anything
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", str(tmp_path / "missing.keras"), str(out), "--format", format])
    assert exit_info.value.code == 2
    assert "exists; nothing was written" in capsys.readouterr().err


# The Perception Encoder's options (timm's Eva of vit_pe_core_*)
PE = dict(position_embedding="learned_rope", rope_grid="index", rope_reference_grid=(2, 2), rope_grid_offset=1.0,
          rope_grid_indexing="xy", rope_theta=10000.0, norm_pre=True, patch_bias=False, layer_norm_epsilon=1e-5,
          pooling="map", class_token=True, gelu_approximate=False)


@pytest.mark.parametrize("changes", [dict(hidden_dim=88, num_heads=2, mlp_dim=120),
                                     dict(PE, hidden_dim=88, num_heads=2, mlp_dim=120)],
                         ids=["vision_transformer", "eva"])
def test_a_timm_mlp_ratio_that_falls_short_is_written_to_build_the_width(tmp_path, changes):
    """120 / 88 is 1.3636...; times 88 in float it is 119.99..., which timm's
    int(embed_dim * mlp_ratio) makes 119: the ratio written is the next float up."""
    model = random_model(**changes)
    path = model.save_checkpoint(tmp_path / "timm", checkpoint_format="timm")
    args = json.loads((path / "config.json").read_text())["model_args"]
    assert int(88 * (120 / 88)) == 119 and int(args["embed_dim"] * args["mlp_ratio"]) == 120
    back = ViT.from_checkpoint(path)
    assert back.config == model.config
    x = images(model)
    np.testing.assert_allclose(to_numpy(back(x)), to_numpy(model(x)), rtol=0, atol=1e-6)


def test_eva_pool_and_head_sizes_are_their_own(tmp_path):
    """The Perception Encoder's attention pool and head have sizes of their own, never held
    to the blocks' rules: 8 heads of 11 (the blocks' rotary heads are multiples of 4: 2 of
    44), an MLP 120 wide beside the blocks' 176 (its ratio written so that timm's
    int(embed_dim * ratio) makes 120), 7 classes. A config.json whose pool MLP the weights
    contradict is refused, naming it."""
    model = random_model(**PE, hidden_dim=88, num_heads=2, mlp_dim=176, num_classes=7, pooling_num_heads=8,
                         pooling_mlp_dim=120)
    path = model.save_checkpoint(tmp_path / "timm", checkpoint_format="timm")
    meta = json.loads((path / "config.json").read_text())
    args = meta["model_args"]
    assert (args["attn_pool_num_heads"], int(88 * args["attn_pool_mlp_ratio"]), args["num_classes"]) == (8, 120, 7)
    back = ViT.from_checkpoint(path)
    assert back.config == model.config
    x = images(model)
    np.testing.assert_allclose(to_numpy(back(x)), to_numpy(model(x)), rtol=0, atol=1e-6)
    (path / "config.json").write_text(json.dumps({**meta, "model_args": {**args, "attn_pool_mlp_ratio": 2.0}}))
    with pytest.raises(CheckpointError, match=r"attn_pool_mlp_ratio=2.0 \(an attention-pool MLP 176 wide\), "
                       "but the weights have an attention-pool MLP 120 wide: the folder mixes two models"):
        ViT.from_checkpoint(path)


def test_a_timm_attention_pool_beside_prefix_tokens_pools_them_as_timm(tmp_path):
    """timm's VisionTransformer pools the patch tokens alone unless told
    (pool_include_prefix), keras_vit's attention pool every token: the folder
    written says so, and one that leaves the prefix tokens out is refused."""
    model = random_model(pooling="map", class_token=True)
    path = model.save_checkpoint(tmp_path / "timm", checkpoint_format="timm")
    meta = json.loads((path / "config.json").read_text())
    assert meta["model_args"]["pool_include_prefix"] is True
    (path / "config.json").write_text(json.dumps({**meta, "model_args": {**meta["model_args"],
                                                                         "pool_include_prefix": False}}))
    with pytest.raises(CheckpointError, match=r"its attention pool takes the patch tokens alone \(timm's "
                       r"VisionTransformer without pool_include_prefix\), and keras_vit's takes every token"):
        ViT.from_checkpoint(path)
    with pytest.raises(ValueError, match=r"bare timm \.safetensors file: .*its attention pool beside prefix "
                       r"tokens \(refused without config.json\)"):
        model.save_checkpoint(tmp_path / "model.safetensors", checkpoint_format="timm")
