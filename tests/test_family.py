"""The ViT family read with its sources' numbers: DeiT, DINOv2 (with
registers, SwiGLU), CLIP and SigLIP image towers as small random models made
with `transformers` and saved as Hugging Face files, and the same weights in
timm's key layout (timm's `vision_transformer.py` and `deit.py`, written out
here: timm is not imported). keras_vit's logits or features equal
transformers' within 1e-5 on every backend."""

import json

import numpy as np
import pytest
from helpers import LazyModule
from helpers import to_numpy

from keras_vit import ViT
from keras_vit.weights import CheckpointError

torch = LazyModule("torch", reason="transformers' models run on PyTorch")
transformers = LazyModule("transformers", reason="the family's reference models")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

SIZE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2)


# name -> (transformers model class, its config class, the config's arguments beyond `SIZE`,
# the output read, timm architecture): names, so that collecting the file imports no transformers.
FAMILIES = {
    "deit": ("DeiTForImageClassificationWithTeacher", "DeiTConfig",
             dict(intermediate_size=64, image_size=32, patch_size=8, num_labels=5, layer_norm_eps=1e-6),
             "logits", "deit_tiny_distilled_patch16_224"),
    "dinov2": ("Dinov2Model", "Dinov2Config", dict(image_size=28, patch_size=7, mlp_ratio=2),
               "pooler_output", "vit_small_patch14_dinov2"),
    "dinov2_giant": ("Dinov2Model", "Dinov2Config", dict(image_size=28, patch_size=7, use_swiglu_ffn=True),
                     "pooler_output", "vit_giant_patch14_dinov2"),
    "dinov2_registers": ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig",
                         dict(image_size=28, patch_size=7, num_register_tokens=4, mlp_ratio=2),
                         "pooler_output", "vit_small_patch14_reg4_dinov2"),
    "clip": ("CLIPVisionModel", "CLIPVisionConfig", dict(intermediate_size=64, image_size=32, patch_size=8),
             "pooler_output", "vit_base_patch16_clip_quickgelu_224"),
    "clip_projection": ("CLIPVisionModelWithProjection", "CLIPVisionConfig",
                        dict(intermediate_size=64, image_size=32, patch_size=8, projection_dim=12),
                        "image_embeds", "vit_base_patch16_clip_quickgelu_224"),
    "siglip": ("SiglipVisionModel", "SiglipVisionConfig", dict(intermediate_size=64, image_size=32, patch_size=8),
               "pooler_output", "vit_base_patch16_siglip_224"),
}


def make_family(name, folder):
    """A small random model of family `name`, saved under `folder`, and its
    output on images."""
    model_class, config_class, arguments, output, architecture = FAMILIES[name]
    config = getattr(transformers, config_class)(**SIZE, **arguments)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config)
    with torch.no_grad():  # every weight random, LayerNorms and LayerScale too
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    model.eval()
    path = folder / "hf"
    model.save_pretrained(path)
    size = config.image_size
    images = np.random.default_rng(0).normal(size=(2, size, size, 3)).astype("float32")
    with torch.no_grad():
        expected = getattr(model(torch.from_numpy(images.transpose(0, 3, 1, 2))), output).numpy()
    return name, path, images, expected, architecture, config


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    return make_family(request.param, tmp_path_factory.mktemp(request.param))


@pytest.mark.parametrize("model_class", ["DeiTForImageClassification", "DeiTModel"])
@pytest.mark.slow_cases("DeiTForImageClassification")
def test_a_deit_without_its_distillation_head_reads(tmp_path, model_class):
    # the [class] token's head alone (or, headless, its pooler), the distillation token in the sequence
    config = transformers.DeiTConfig(**SIZE, intermediate_size=64, image_size=32, patch_size=8,
                                     num_labels=5, layer_norm_eps=1e-6)
    torch.manual_seed(0)
    source = getattr(transformers, model_class)(config)
    with torch.no_grad():
        for parameter in source.parameters():
            parameter.normal_(0.0, 0.2)
    source.eval().save_pretrained(tmp_path / "hf")
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    with torch.no_grad():
        out = source(torch.from_numpy(images.transpose(0, 3, 1, 2)))
    expected = (out.logits if model_class != "DeiTModel" else out.pooler_output).numpy()
    model = ViT.from_checkpoint(tmp_path / "hf")
    assert (model.distillation, model.distillation_head) == (True, False)
    np.testing.assert_allclose(to_numpy(model(images)), expected, rtol=0, atol=1e-5)


def dinov3_source(folder, **options):
    """A small random transformers DINOv3ViTModel (RoPE, four registers;
    `options` change its config), saved under `folder`."""
    config = transformers.DINOv3ViTConfig(**SIZE, intermediate_size=64, image_size=32, patch_size=8,
                                          num_register_tokens=4, **options)
    torch.manual_seed(0)
    source = transformers.DINOv3ViTModel(config)
    with torch.no_grad():
        for parameter in source.parameters():
            parameter.normal_(0.0, 0.2)
    source.eval().save_pretrained(folder)
    return source


@pytest.mark.parametrize("gated", [False, True], ids=["dinov3", "dinov3-gated"])
@pytest.mark.slow_cases("dinov3")
def test_a_dinov3_file_gives_transformers_numbers_at_two_sizes(tmp_path, gated):
    # rotary position embeddings (no table), four registers, LayerScale, the
    # key without bias; the gated one (SwiGLU, as the largest) with a key
    # bias and no MLP biases. RoPE needs no resampling: 48 px reads as it is.
    source = dinov3_source(tmp_path / "hf", use_gated_mlp=gated, hidden_act="silu" if gated else "gelu",
                           key_bias=gated, mlp_bias=not gated)
    model = ViT.from_checkpoint(tmp_path / "hf")
    assert (model.position_embedding, model.num_registers, model.key_bias, model.mlp_bias) == (
        "rope", 4, gated, not gated)
    assert model.count_params() == sum(p.numel() for n, p in source.named_parameters()
                                       if n != "embeddings.mask_token")
    for size in (32, 48):
        images = np.random.default_rng(size).normal(size=(2, size, size, 3)).astype("float32")
        with torch.no_grad():
            expected = source(torch.from_numpy(images.transpose(0, 3, 1, 2))).pooler_output.numpy()
        at_size = model if size == 32 else ViT.from_checkpoint(tmp_path / "hf", image_size=size)
        np.testing.assert_allclose(to_numpy(at_size(images)), expected, rtol=0, atol=1e-5)
    # written back as a DINOv3ViTModel that transformers loads with the same numbers
    out = model.save_checkpoint(tmp_path / "out", checkpoint_format="huggingface")
    back = transformers.DINOv3ViTModel.from_pretrained(out).eval()
    with torch.no_grad():
        for parameter_name, parameter in back.named_parameters():
            if parameter_name == "embeddings.mask_token":  # pre-training's, not the model's: zero
                assert not parameter.any()
                continue
            np.testing.assert_array_equal(parameter.numpy(), dict(source.named_parameters())[
                parameter_name].detach().numpy(), err_msg=parameter_name)
    assert ViT.from_checkpoint(out).config == model.config
    # what keras_vit's DINOv3 does not have is named in the file's words, not read otherwise
    for change, message in ((dict(query_bias=False), "query_bias=False, value_bias=True"),
                            (dict(hidden_act="gelu_pytorch_tanh"),
                             f"hidden_act 'gelu_pytorch_tanh' with use_gated_mlp={gated}")):
        (out / "config.json").write_text(json.dumps({**source.config.to_dict(), **change}))
        with pytest.raises(CheckpointError, match=message):
            ViT.from_checkpoint(out)
    with pytest.raises(ValueError, match="DINOv3ViTModel gives features"):
        ViT(model.config.replace(num_classes=3)).save_checkpoint(tmp_path / "head", checkpoint_format="huggingface")


def test_huggingface_files_give_transformers_numbers(family):
    name, path, images, expected, _, _ = family
    model = ViT.from_checkpoint(path)
    np.testing.assert_allclose(to_numpy(model(images)), expected, rtol=0, atol=1e-5)
    print(f"{name}: {model.config}")


# -- the same weights in timm's layout ---------------------------------------------


def _fused(tensors, keys):
    return np.concatenate([tensors.pop(k) for k in keys])


def to_timm(hf, name, num_layers):
    """A Hugging Face state dict (legacy names) in timm's ``VisionTransformer``
    (``VisionTransformerDistilled`` for DeiT) layout, as timm's own
    converters write it (`_convert_dinov2`, `_convert_openai_clip`)."""
    hf = dict(hf)
    for prefix in ("deit.", "vision_model."):
        hf = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in hf.items()}
    out = {}
    clip_like = name.startswith(("clip", "siglip"))
    if clip_like:
        out["patch_embed.proj.weight"] = hf.pop("embeddings.patch_embedding.weight")
        if "embeddings.patch_embedding.bias" in hf:
            out["patch_embed.proj.bias"] = hf.pop("embeddings.patch_embedding.bias")
        out["pos_embed"] = hf.pop("embeddings.position_embedding.weight")[None]
        if "embeddings.class_embedding" in hf:
            out["cls_token"] = hf.pop("embeddings.class_embedding").reshape(1, 1, -1)
        if "pre_layrnorm.weight" in hf:
            out["norm_pre.weight"], out["norm_pre.bias"] = hf.pop("pre_layrnorm.weight"), hf.pop("pre_layrnorm.bias")
    else:
        out["patch_embed.proj.weight"] = hf.pop("embeddings.patch_embeddings.projection.weight")
        out["patch_embed.proj.bias"] = hf.pop("embeddings.patch_embeddings.projection.bias")
        out["cls_token"] = hf.pop("embeddings.cls_token")
        hf.pop("embeddings.mask_token", None)  # timm's _convert_dinov2 drops it
        pos_embed = hf.pop("embeddings.position_embeddings")
        if "embeddings.distillation_token" in hf:
            out["dist_token"] = hf.pop("embeddings.distillation_token")
        if "embeddings.register_tokens" in hf:  # no_embed_class: the cls row folded into the token
            out["reg_token"] = hf.pop("embeddings.register_tokens")
            out["cls_token"] = out["cls_token"] + pos_embed[:, :1]
            pos_embed = pos_embed[:, 1:]
        out["pos_embed"] = pos_embed
    for i in range(num_layers):
        t = f"blocks.{i}."
        if clip_like:
            h = f"encoder.layers.{i}."
            names = dict(norm1="layer_norm1", norm2="layer_norm2", q="self_attn.q_proj",
                         k="self_attn.k_proj", v="self_attn.v_proj", proj="self_attn.out_proj",
                         fc1="mlp.fc1", fc2="mlp.fc2")
        else:
            h = f"encoder.layer.{i}."
            dinov2 = name.startswith("dinov2")
            names = dict(norm1="norm1" if dinov2 else "layernorm_before",
                         norm2="norm2" if dinov2 else "layernorm_after",
                         q="attention.attention.query", k="attention.attention.key",
                         v="attention.attention.value", proj="attention.output.dense",
                         fc1="mlp.weights_in" if name == "dinov2_giant" else
                         "mlp.fc1" if dinov2 else "intermediate.dense",
                         fc2="mlp.weights_out" if name == "dinov2_giant" else
                         "mlp.fc2" if dinov2 else "output.dense")
        for part in ("weight", "bias"):
            out[f"{t}norm1.{part}"] = hf.pop(f"{h}{names['norm1']}.{part}")
            out[f"{t}norm2.{part}"] = hf.pop(f"{h}{names['norm2']}.{part}")
            out[f"{t}attn.qkv.{part}"] = _fused(hf, [f"{h}{names[n]}.{part}" for n in "qkv"])
            out[f"{t}attn.proj.{part}"] = hf.pop(f"{h}{names['proj']}.{part}")
            out[f"{t}mlp.fc1.{part}"] = hf.pop(f"{h}{names['fc1']}.{part}")
            out[f"{t}mlp.fc2.{part}"] = hf.pop(f"{h}{names['fc2']}.{part}")
        for j in (1, 2):
            if f"{h}layer_scale{j}.lambda1" in hf:
                out[f"{t}ls{j}.gamma"] = hf.pop(f"{h}layer_scale{j}.lambda1")
    final = "post_layernorm" if clip_like else "layernorm"
    out["norm.weight"], out["norm.bias"] = hf.pop(f"{final}.weight"), hf.pop(f"{final}.bias")
    if "cls_classifier.weight" in hf:
        for ours, theirs in (("head", "cls_classifier"), ("head_dist", "distillation_classifier")):
            out[f"{ours}.weight"], out[f"{ours}.bias"] = hf.pop(f"{theirs}.weight"), hf.pop(f"{theirs}.bias")
    if "visual_projection.weight" in hf:  # timm's CLIP head, bias zero
        out["head.weight"] = hf.pop("visual_projection.weight")
        out["head.bias"] = np.zeros(out["head.weight"].shape[0], "float32")
    if "head.probe" in hf:  # SigLIP's MAP head: timm's AttentionPoolLatent
        out["attn_pool.latent"] = hf.pop("head.probe")
        weight, bias = hf.pop("head.attention.in_proj_weight"), hf.pop("head.attention.in_proj_bias")
        d = weight.shape[1]
        out["attn_pool.q.weight"], out["attn_pool.kv.weight"] = weight[:d], weight[d:]
        out["attn_pool.q.bias"], out["attn_pool.kv.bias"] = bias[:d], bias[d:]
        for ours, theirs in (("proj", "attention.out_proj"), ("norm", "layernorm"),
                             ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
            for part in ("weight", "bias"):
                out[f"attn_pool.{ours}.{part}"] = hf.pop(f"head.{theirs}.{part}")
    assert not hf, sorted(hf)  # every tensor went somewhere
    return out


def test_the_same_weights_in_timm_layout_give_the_same_numbers(family, tmp_path):
    name, path, images, expected, architecture, config = family
    hf = safetensors_numpy.load_file(str(path / "model.safetensors"))
    folder = tmp_path / "timm"
    folder.mkdir()
    safetensors_numpy.save_file(to_timm(hf, name, config.num_hidden_layers),
                                str(folder / "model.safetensors"))
    size = config.image_size
    (folder / "config.json").write_text(json.dumps({
        "architecture": architecture,
        # timm.create_model's overrides of the architecture's sizes (the hub config's model_args)
        "model_args": dict(embed_dim=32, depth=2, num_heads=2, img_size=size,
                           patch_size=config.patch_size),
    }))
    model = ViT.from_checkpoint(folder)
    np.testing.assert_allclose(to_numpy(model(images)), expected, rtol=0, atol=1e-5)


# -- what is not read is named ------------------------------------------------------


def test_unknown_model_type_and_unknown_keys_are_named(tmp_path):
    _, path, _, _, _, _ = make_family("dinov2", tmp_path)
    other = tmp_path / "beit"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "beit", "hidden_size": 32}))
    (other / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="model_type 'beit'; keras_vit reads Hugging Face 'vit', 'deit', 'dinov2'"):
        ViT.from_checkpoint(other)
    # Dinov2ForImageClassification's head reads the [class] token and the mean
    # patch token together, which keras_vit's poolings do not: named, not skipped.
    classifier = tmp_path / "classifier"
    classifier.mkdir()
    (classifier / "config.json").write_text((path / "config.json").read_text())
    tensors = safetensors_numpy.load_file(str(path / "model.safetensors"))
    tensors["classifier.weight"] = np.zeros((3, 64), "float32")
    safetensors_numpy.save_file(tensors, str(classifier / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"keys keras_vit does not know.*classifier.weight"):
        ViT.from_checkpoint(classifier)


# -- DINOv2's position embeddings at another resolution -------------------------------


@pytest.mark.parametrize("new", [16, 32, 46])
def test_dinov2_resamples_its_37x37_table_as_dinov2_does(new):
    from keras_vit.layers import resample_position_embeddings

    table = np.random.default_rng(new).normal(size=(1, 1 + 37 * 37, 8)).astype("float32")
    ours = resample_position_embeddings(table, 37, new, num_prefix_tokens=1, method="dinov2")
    # DinoVisionTransformer.interpolate_pos_encoding: bicubic, scale_factor with the 0.1 offset
    grid = torch.from_numpy(table[:, 1:].reshape(1, 37, 37, 8)).permute(0, 3, 1, 2).double()
    scale = (new + 0.1) / 37
    theirs = torch.nn.functional.interpolate(grid, scale_factor=(scale, scale), mode="bicubic",
                                             align_corners=False, antialias=False)
    theirs = theirs.permute(0, 2, 3, 1).reshape(1, new * new, 8).numpy()
    np.testing.assert_allclose(ours[:, 1:], theirs, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(ours[:, :1], table[:, :1])
    # and it is not plain bicubic (`size=`): the offset moves the samples
    plain = resample_position_embeddings(table, 37, new, num_prefix_tokens=1, method="bicubic")
    assert np.abs(plain - ours).max() > 1e-3


def test_a_dinov2_file_at_another_size_resamples_with_dinov2s_offset(tmp_path):
    from keras_vit.layers import resample_position_embeddings

    _, path, _, _, _, _ = make_family("dinov2_registers", tmp_path)
    native = ViT.from_checkpoint(path)
    larger = ViT.from_checkpoint(path, image_size=56)  # 4x4 -> 8x8 patches
    table = to_numpy(native.get_layer("position_embedding").embeddings)
    expected = resample_position_embeddings(table, 4, 8, num_prefix_tokens=5, method="dinov2")
    np.testing.assert_allclose(to_numpy(larger.get_layer("position_embedding").embeddings),
                               expected, rtol=0, atol=1e-6)
    bilinear = ViT.from_checkpoint(path, image_size=56, resample_method="bilinear")
    assert not np.allclose(to_numpy(bilinear.get_layer("position_embedding").embeddings), expected)


@pytest.mark.backend_independent
def test_an_image_processors_normalisation_is_recorded_and_written_back(tmp_path):
    """A Hub folder's preprocessor_config.json (DINOv2's: ImageNet's mean and
    standard deviation) is recorded as the model's pixel scaling, which
    transformers' processor computes the same; the Hugging Face and timm
    writers write it back, and their readers read it."""
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    _, path, _, _, _, _ = make_family("dinov2", tmp_path)
    transformers.ViTImageProcessor(image_mean=mean, image_std=std,
                                   size={"height": 28, "width": 28}).save_pretrained(path)
    model = ViT.from_checkpoint(path)
    pixels = np.random.default_rng(0).integers(0, 256, (2, 28, 28, 3)).astype("uint8")

    def processed(folder):
        processor = transformers.ViTImageProcessor.from_pretrained(folder)
        return processor(images=list(pixels), do_resize=False, return_tensors="np")[
            "pixel_values"].transpose(0, 2, 3, 1)

    ours = pixels * np.asarray(model.pixel_scale) + np.asarray(model.pixel_offset)
    np.testing.assert_allclose(ours, processed(path), rtol=0, atol=1e-5)
    plain = ViT(image_size=28, patch_size=7, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3, pixel_scale=model.pixel_scale, pixel_offset=model.pixel_offset)
    out = plain.save_checkpoint(tmp_path / "written", checkpoint_format="huggingface")
    np.testing.assert_allclose(processed(out), ours, rtol=0, atol=1e-5)
    again = ViT.from_checkpoint(out)
    np.testing.assert_allclose(again.pixel_scale, model.pixel_scale, rtol=1e-12)
    np.testing.assert_allclose(again.pixel_offset, model.pixel_offset, rtol=1e-12)
    # timm keeps the same normalisation of [0, 1] pixels in its pretrained_cfg
    timm_out = plain.save_checkpoint(tmp_path / "timm", checkpoint_format="timm")
    written = json.loads((timm_out / "config.json").read_text())["pretrained_cfg"]
    np.testing.assert_allclose([written["mean"], written["std"]], [mean, std], rtol=1e-12)
    from_timm = ViT.from_checkpoint(timm_out)
    np.testing.assert_allclose(from_timm.pixel_scale, model.pixel_scale, rtol=1e-12)
    np.testing.assert_allclose(from_timm.pixel_offset, model.pixel_offset, rtol=1e-12)
    for fmt in ("huggingface", "timm"):  # the paper's [-1, 1] as mean and std 0.5, and back exactly
        paper = ViT.from_checkpoint(plain.with_config(pixel_scale=1 / 127.5, pixel_offset=-1.0)
                                    .save_checkpoint(tmp_path / f"paper_{fmt}", checkpoint_format=fmt))
        assert (paper.pixel_scale, paper.pixel_offset) == (1 / 127.5, -1.0)
