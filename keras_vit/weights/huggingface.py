"""Hugging Face directories of the ViT family: ViT, DeiT, DINOv2, DINOv3, CLIP, SigLIP and
SigLIP 2's NaFlex towers (Tschannen et al., "SigLIP 2", arXiv:2502.14786, 2025)."""

import dataclasses
import pathlib
import re
import types

import numpy as np

from keras_vit.assign import model_state
from keras_vit.config import mean_and_std
from keras_vit.config import scaling_of_normalization
from keras_vit.io.files import CheckpointError
from keras_vit.io.files import weights_folder
from keras_vit.io.tensors import load_safetensors
from keras_vit.weights import rows as r
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import config_view
from keras_vit.weights.checkpoint import read_config_json
from keras_vit.weights.checkpoint import require
from keras_vit.weights.checkpoint import square_grid
from keras_vit.weights.checkpoint import stored_heads
from keras_vit.weights.checkpoint import write_files
from keras_vit.weights.formats import huggingface_column

# transformers' MLP activations <-> our (mlp_activation, gelu_approximate), each pair
# written as its first name: QuickGELU, tanh or erf GELU
_ACTIVATIONS = {"gelu": ("gelu", False), "gelu_pytorch_tanh": ("gelu", True), "quick_gelu": ("quick_gelu", False),
                "gelu_python": ("gelu", False), "gelu_new": ("gelu", True), "gelu_fast": ("gelu", True)}


def class_names(id2label, num_classes):
    """The head's class names from an ``id2label`` mapping, or None when it holds only ``transformers``'
    placeholders (``LABEL_0``, ...) or does not cover the head's `num_classes` classes."""
    if not id2label or not num_classes:
        return None
    names = [id2label.get(str(i), id2label.get(i)) for i in range(num_classes)]
    if (len(id2label) != num_classes or any(n is None for n in names)
            or all(re.fullmatch(r"LABEL_\d+", str(n)) for n in names)):
        return None
    return [str(n) for n in names]


def read_huggingface(path, num_heads=None):
    """A `Checkpoint` of a folder saved by ``save_pretrained`` of a Hugging Face ViT or DeiT (with or without
    a head), DINOv2 (with registers), DINOv3, CLIP or SigLIP image tower (or a two-tower model's), or SigLIP 2
    NaFlex (`naflex_config`); a model type or key it does not know is refused by name. `path`: the folder or
    its ``model.safetensors``; `num_heads`: the folder's own count or None
    (`keras_vit.weights.checkpoint.stored_heads`)."""
    checkpoint = _read_image_tower(weights_folder(path))
    stored_heads(checkpoint, num_heads)
    return checkpoint


def _read_image_tower(directory, tensors=None):
    """`read_huggingface`'s `Checkpoint` of `directory`; `tensors`: its
    ``model.safetensors``, when already read (`read_image_text`)."""
    source = f"Hugging Face checkpoint {directory}"
    hf = _image_config(directory)
    family, read_config, prefix, _, fixed = _MODEL_TYPES[hf["model_type"]]
    tensors = load_weights(directory) if tensors is None else tensors
    tensors = {k.removeprefix(prefix): v for k, v in tensors.items()}
    tensors = {k: v for k, v in tensors.items() if not k.startswith(_TEXT_TOWER)}
    size, patch = np.broadcast_to(hf.get("image_size", 224), (2,)), int(hf["patch_size"])
    config = {
        # the patch convolution drops what is left over (SigLIP So400m/14 at 384 px sees 378)
        "image_size": tuple(int(s) - int(s) % patch for s in size),
        "pooling": "token", "num_classes": 0,
        **r.read_settings(SETTINGS[family], hf, f"{source}: config.json"), **fixed}
    read_config(tensors, hf, config, source)
    names = class_names(hf.get("id2label"), config["num_classes"])
    if names:
        config["class_names"] = names
    config.update(processor_scaling(directory, config["num_channels"]))
    if family == "siglip2":
        config.update(naflex_config(directory, hf, config["patch_size"]))
    c = config_view(config)
    state = r.move(key_map(c, family), tensors, c, source)
    grid = c.grid_size
    patches = grid[0] * grid[1]  # rotary position embeddings (no table): any grid as it is
    if c.position_embedding != "rope":
        patches = state["position_embedding/embeddings"].shape[1] - c.num_prefix_tokens
    if grid[0] * grid[1] != patches:
        raise CheckpointError(
            f"{source}: config.json says {c.image_size[0]}x{c.image_size[1]} images "
            f"({grid[0]}x{grid[1]} patches) but the position embeddings hold {patches} patches.")
    method = "dinov2" if family == "dinov2" else "bilinear"
    return Checkpoint(config, state, source, grid, patches, resample_method=method)


def _image_config(directory):
    """``config.json`` of an image model (a two-tower model's image tower), its model type known and its sizes
    there, with transformers' defaults of the LayerNorm epsilon and ``hidden_act`` where it leaves them out."""
    hf = read_config_json(directory / "config.json")
    model_type = hf.get("model_type")
    if model_type in _TEXT_DEFAULTS:  # a two-tower model: its image tower
        hf = {**hf.get("vision_config", {}), "model_type": f"{model_type}_vision_model"}
        model_type = hf["model_type"]
    if model_type not in _MODEL_TYPES:
        raise CheckpointError(
            f"{directory}/config.json has model_type {model_type!r}; keras_vit reads Hugging Face "
            f"{', '.join(map(repr, _MODEL_TYPES))} checkpoints (the ViT family) and "
            f"{', '.join(map(repr, _TEXT_DEFAULTS))}.")
    hf = {"layer_norm_eps": _MODEL_TYPES[model_type][3], "hidden_act": "gelu", **hf}
    require(hf, r.required(_SHARED) + (("num_patches",) if model_type == "siglip2_vision_model" else ()),
            directory / "config.json")
    if hf["hidden_act"] not in _ACTIVATIONS and model_type not in ("dinov3_vit", "aimv2_vision_model"):  # own checks
        raise CheckpointError(
            f"Hugging Face checkpoint {directory}: hidden_act {hf['hidden_act']!r} is not supported; "
            f"keras_vit has {sorted(_ACTIVATIONS)}.")
    return hf


def load_weights(directory):
    """Every tensor of the folder's ``model.safetensors`` (float32 arrays);
    a folder without one is refused, pickles never read."""
    weights = pathlib.Path(directory) / "model.safetensors"
    if not weights.exists():
        raise CheckpointError(
            f"{directory} has no model.safetensors. Pickled weights (pytorch_model.bin) are not loaded for "
            "safety: re-save the model with `model.save_pretrained(directory, safe_serialization=True)`.")
    return load_safetensors(weights)


def image_processor_config(directory):
    """The folder's image processor settings: ``preprocessor_config.json`` (an image processor's
    ``save_pretrained``), else the ``"image_processor"`` of ``processor_config.json`` (a whole processor's, as
    transformers 5 saves it); None without either."""
    directory = pathlib.Path(directory)
    if (directory / "preprocessor_config.json").exists():
        return read_config_json(directory / "preprocessor_config.json")
    if (directory / "processor_config.json").exists():
        return read_config_json(directory / "processor_config.json").get("image_processor")
    return None


def processor_scaling(directory, channels):
    """The image processor's normalisation (`image_processor_config`: ``rescale_factor``, ``image_mean``,
    ``image_std``) as a `ViTConfig`'s ``pixel_scale`` and ``pixel_offset``
    (`keras_vit.config.scaling_of_normalization`); {} without one."""
    processor = image_processor_config(directory)
    if processor is None:
        return {}
    rescale = float(processor.get("rescale_factor", 1 / 255)) if processor.get("do_rescale", True) else 1.0
    if processor.get("do_normalize", True) and "image_mean" in processor:
        return scaling_of_normalization(processor["image_mean"], processor["image_std"], channels, rescale)
    return scaling_of_normalization(0.0, 1.0, channels, rescale)


def naflex_config(directory, hf, patch_size):
    """A SigLIP 2 NaFlex folder's `ViT` arguments beyond the ViT's: ``naflex``, ``max_num_patches`` (the image
    processor's, `image_processor_config`; without one, 256, transformers' default) and ``image_size``, the
    grid of the position table (config.json's ``num_patches`` rows, side x side patches) times `patch_size`.

    Raises:
        CheckpointError: a table that is not a square grid, or a processor whose patch size is not the
            model's; the message names the file.
    """
    num_patches = int(hf["num_patches"])
    grid = square_grid(num_patches)
    if grid is None:
        raise CheckpointError(
            f"{directory}/config.json: num_patches {num_patches} is not a square; Siglip2's "
            "position table is side x side patches. The file may be edited by hand: save the "
            "model again with `save_pretrained`.")
    processor = image_processor_config(directory) or {}
    if int(processor.get("patch_size", patch_size)) != patch_size:
        raise CheckpointError(
            f"{directory}: the image processor's patch_size is {processor['patch_size']} and config.json's "
            f"{patch_size}; the processor must cut the model's patches. Save the processor that belongs to "
            f"the model (`processor.save_pretrained(folder)`), or set its patch_size to {patch_size}.")
    return dict(naflex=True, max_num_patches=int(processor.get("max_num_patches", 256)),
                image_size=grid[0] * patch_size)


def _vit_config(tensors, hf, config, source):
    """ViT and DeiT: ViT's ``pooler`` (the pre-logits layer) and ``classifier`` (also DeiT's without its
    distillation head), or the distilled DeiT's ``cls_classifier`` and ``distillation_classifier`` (averaged)."""
    if config.get("distillation") and "distillation_classifier.weight" not in tensors:  # DeiT's: DeiTModel,
        config["distillation_head"] = False  # DeiTForImageClassification: the [class] token's head alone
    if config.get("distillation_head", True) and config.get("distillation"):
        config["num_classes"] = int(tensors["cls_classifier.weight"].shape[0])
        return
    if "pooler.dense.weight" in tensors:
        if hf.get("pooler_act", "tanh") != "tanh":
            raise CheckpointError(f"{source}: pooler_act {hf['pooler_act']!r} is not tanh.")
        config["representation_size"] = int(tensors["pooler.dense.weight"].shape[0])
    config["num_classes"] = int(tensors["classifier.weight"].shape[0]) if "classifier.weight" in tensors else 0


def _dinov2_config(tensors, hf, config, source):
    """DINOv2 (with registers): LayerScale in every block, SwiGLU for the
    giant; the features are the normalised [class] token (``pooler_output``)."""
    swiglu = bool(hf.get("use_swiglu_ffn", False))
    fc2 = "encoder.layer.0.mlp." + ("weights_out" if swiglu else "fc2") + ".weight"
    r.require_keys(tensors, (fc2,), source)
    config.update(mlp_dim=int(tensors[fc2].shape[1]), mlp_activation="swiglu" if swiglu else config["mlp_activation"])
    if "embeddings.register_tokens" in tensors:
        config["num_registers"] = int(tensors["embeddings.register_tokens"].shape[1])


def _dinov3_config(tensors, hf, config, source):
    """DINOv3: rotary position embeddings (no table), registers, LayerScale, a key projection without bias, a
    gated MLP (SwiGLU) in the largest; the features are the normalised [class] token (``pooler_output``)."""
    r.read_dinov3(source, hf, _DINOV3_NAMES, config)
    r.require_keys(tensors, ("layer.0.mlp.down_proj.weight",), source)
    config["mlp_dim"] = int(tensors["layer.0.mlp.down_proj.weight"].shape[1])


def _clip_config(tensors, hf, config, source):
    """CLIP's, SigLIP's and SigLIP 2's image towers: CLIP's class embedding, LayerNorm before the encoder
    (``pre_layrnorm``), patch embedding without bias and projection without bias (the head, bias zero);
    SigLIP's MAP head (SigLIP 2's beside a linear patch embedding: `naflex_config`)."""
    config["patch_bias"] = "embeddings.patch_embedding.bias" in tensors
    if "visual_projection.weight" in tensors:  # CLIPVisionModelWithProjection: image_embeds
        config["num_classes"] = int(tensors["visual_projection.weight"].shape[0])
    if config["pooling"] == "map" and "head.probe" not in tensors:  # SigLIP's
        name = "SigLIP 2" if hf["model_type"] == "siglip2_vision_model" else "SigLIP"
        raise CheckpointError(f"{source}: a {name} tower without its attention-pooling head "
                              "(vision_use_head=False); keras_vit reads it with the head.")


def _aimv2_config(tensors, hf, config, source):
    """AIMv2's image tower (``Aimv2VisionModel``): RMSNorms (one of the patch embeddings too), a SwiGLU MLP,
    no [class] token; its features the tokens' mean (of ``last_hidden_state``). Its attention-pooling head and
    its native-resolution variant (sin-cos embeddings of its own layout) are refused."""
    if hf.get("hidden_act") != "silu":
        raise CheckpointError(f"{source}: hidden_act {hf.get('hidden_act')!r}; AIMv2's MLP is SwiGLU "
                              "('silu'), and keras_vit reads that.")
    # each refused key, transformers' default where config.json leaves it out, and why
    for key, default, why in (
            ("use_head", True, "its attention-pooling head (Aimv2AttentionPoolingHead: a learned "
                               "query without projection or MLP), which keras_vit's ViT does not have"),
            ("is_native", False, "its native-resolution model (sin-cos position embeddings in "
                                 "AIMv2's own layout)")):
        if hf.get(key, default):
            raise CheckpointError(f"{source}: {key}=True, {why}. Nothing was read. keras_vit reads the tower "
                                  "without it (use_head=False, is_native=False), or timm's aimv2_* folders.")
    config["out_bias"] = config["qkv_bias"]


def _block(theirs, norms, attention, mlp, layer_scale=False, **biases):
    """A block's rows (`r.block_rows`) in transformers' layout: torch's
    ``(out, in)`` kernels, the LayerScales' ``lambda1`` where `layer_scale`."""
    return r.block_rows(theirs, norms, attention, mlp, r.TORCH, (r.HEADS_IN, r.HEADS_OUT),
                        (r.HEADS_BIAS, r.SAME), r.LINEAR, scale="layer_scale{j}.lambda1" if layer_scale else None,
                        **biases)


# Siglip2's nn.Linear (D, P_h * P_w * C) over patches flattened in (row, column, channel)
# order <-> our kernel (P_h, P_w, C, D), whose reshape to (P_h * P_w * C, D) is that order
_LINEAR_PATCHES = r.one(lambda c, w: w.T.reshape(*c.patch_size, c.num_channels, w.shape[0]),
                lambda c, k: k.reshape(-1, k.shape[-1]).T)
# an nn.Embedding's table (N, D) <-> our position embeddings (1, N, D)
_EMBEDDING_TABLE = r.one(lambda c, x: x[None], lambda c, x: x[0])


def _patch(theirs, has_bias=r.always):
    return r.dense_rows("patch_embedding/projection", "embeddings." + theirs, r.TORCH, r.CONV, has_bias=has_bias)


_VIT_ATTENTION = [*(f"attention.attention.{n}" for n in r.QKV), "attention.output.dense"]  # DINOv2's too
_VIT_BLOCK = _block("encoder.layer.{i}.", ("layernorm_before", "layernorm_after"), _VIT_ATTENTION,
                    ("intermediate.dense", "output.dense"), qkv_bias=lambda c: c.qkv_bias,
                    key_bias=lambda c: c.qkv_bias and c.key_bias)
_DINOV3 = [*(f"attention.{n}_proj" for n in "qkv"), "attention.o_proj"]
_SWIGLU = lambda c: c.mlp_activation == "swiglu"  # noqa: E731
_DISTILLED = lambda c: c.distills_by_head  # noqa: E731
_CLIP_BLOCK = _block("encoder.layers.{i}.", ("layer_norm1", "layer_norm2"),
                     [*(f"self_attn.{n}_proj" for n in "qkv"), "self_attn.out_proj"], ("mlp.fc1", "mlp.fc2"))
# CLIP's visual_projection: the head, its bias zero
_NO_BIAS = (lambda c, w: (w.T, np.zeros(w.shape[0], np.float32)), lambda c, k, b: (k.T,))
_SIGLIP_HEAD = [
    r.row("pooling/probe", "head.probe", when=r.MAP),
    r.row([f"pooling/attention/{n}/kernel" for n in r.QKV], "head.attention.in_proj_weight",
          r.fused(3, r.HEADS_IN), when=r.MAP),
    r.row([f"pooling/attention/{n}/bias" for n in r.QKV], "head.attention.in_proj_bias",
          r.fused(3, r.HEADS_BIAS), when=r.MAP),
    *r.dense_rows("pooling/attention/out", "head.attention.out_proj", r.TORCH, r.HEADS_OUT, when=r.MAP),
    *r.norm_rows("pooling/norm", "head.layernorm", r.TORCH, when=r.MAP),
    *r.dense_rows("pooling/mlp/fc1", "head.mlp.fc1", r.TORCH, r.LINEAR, when=r.MAP),
    *r.dense_rows("pooling/mlp/fc2", "head.mlp.fc2", r.TORCH, r.LINEAR, when=r.MAP),
]

# Each family's rows: (embeddings, one block, the top) of a ViTConfig
FAMILY_ROWS = {
    "vit": lambda c: (
        [*_patch("patch_embeddings.projection"), r.row("class_token/tokens", "embeddings.cls_token"),
         r.row("distillation_token/tokens", "embeddings.distillation_token", when=lambda c: c.distillation),
         r.row("position_embedding/embeddings", "embeddings.position_embeddings")],
        _VIT_BLOCK,
        [*r.norm_rows("encoder_norm", "layernorm", r.TORCH),
         *r.dense_rows("pre_logits", "pooler.dense", r.TORCH, r.LINEAR, when=lambda c: c.representation_size),
         *r.dense_rows("head", "classifier", r.TORCH, r.LINEAR,
                  when=lambda c: c.num_classes and not c.distills_by_head),
         *r.dense_rows("head", "cls_classifier", r.TORCH, r.LINEAR, when=_DISTILLED),
         *r.dense_rows("head_dist", "distillation_classifier", r.TORCH, r.LINEAR, when=_DISTILLED)]),
    "dinov2": lambda c: (
        [*_patch("patch_embeddings.projection"), r.row("class_token/tokens", "embeddings.cls_token"),
         r.row((), "?embeddings.mask_token", r.MASK_TOKEN),
         r.row("registers/tokens", "embeddings.register_tokens", when=lambda c: c.num_registers),
         r.row("position_embedding/embeddings", "embeddings.position_embeddings", r.REGISTER_ROWS)],
        _block("encoder.layer.{i}.", ("norm1", "norm2"), _VIT_ATTENTION,
               ("mlp.weights_in", "mlp.weights_out") if _SWIGLU(c) else ("mlp.fc1", "mlp.fc2"),
               layer_scale=True),
        r.norm_rows("encoder_norm", "layernorm", r.TORCH)),
    "dinov3": lambda c: (
        [*_patch("patch_embeddings"), r.row("class_token/tokens", "embeddings.cls_token"),
         r.row((), "embeddings.mask_token", r.MASK_TOKEN),
         r.row("registers/tokens", "embeddings.register_tokens", when=lambda c: c.num_registers),
         r.row((), "?embeddings.register_tokens", r.DROP, when=lambda c: not c.num_registers)],
        _block("layer.{i}.", ("norm1", "norm2"), _DINOV3,
               ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj") if _SWIGLU(c) else ("mlp.up_proj", "mlp.down_proj"),
               layer_scale=True, qkv_bias=lambda c: c.qkv_bias, key_bias=lambda c: c.qkv_bias and c.key_bias,
               mlp_bias=lambda c: c.mlp_bias),
        r.norm_rows("encoder_norm", "norm", r.TORCH)),
    "clip": lambda c: (
        [*_patch("patch_embedding", has_bias=lambda c: c.patch_bias),
         r.row("position_embedding/embeddings", "embeddings.position_embedding.weight", r.TOKENS),
         r.row("class_token/tokens", "embeddings.class_embedding", r.TOKENS, when=lambda c: c.uses_class_token),
         *r.norm_rows("norm_pre", "pre_layrnorm", r.TORCH, when=lambda c: c.norm_pre)],
        _CLIP_BLOCK,
        [*r.norm_rows("encoder_norm", "post_layernorm", r.TORCH),
         r.row(("head/kernel", "head/bias"), "visual_projection.weight", _NO_BIAS,
               when=lambda c: c.num_classes),
         *_SIGLIP_HEAD]),
    "aimv2": lambda c: (
        [*_patch("patch_embed"), *r.norm_rows("patch_norm", "embeddings.rms_norm", r.TORCH),
         r.row("position_embedding/embeddings", "embeddings.position_embedding.weight", _EMBEDDING_TABLE)],
        _block("encoder.layers.{i}.", ("rms_norm1", "rms_norm2"),
               [*(f"attention.{n}_proj" for n in "qkv"), "attention.out_proj"],
               ("ffn.gate_proj", "ffn.up_proj", "ffn.down_proj"), qkv_bias=lambda c: c.qkv_bias,
               out_bias=lambda c: c.out_bias, mlp_bias=lambda c: c.mlp_bias),
        r.norm_rows("encoder_norm", "rms_norm", r.TORCH)),
    "siglip2": lambda c: (
        [*r.dense_rows("patch_embedding/projection", "embeddings.patch_embedding", r.TORCH, _LINEAR_PATCHES),
         r.row("position_embedding/embeddings", "embeddings.position_embedding.weight", _EMBEDDING_TABLE)],
        _CLIP_BLOCK,
        [*r.norm_rows("encoder_norm", "post_layernorm", r.TORCH), *_SIGLIP_HEAD]),
}


def key_map(c, family):
    """The map of a `ViTConfig` `c`'s model as Hugging Face's `family` (``"vit"``: ViT and DeiT; ``"dinov2"``,
    ``"dinov3"``, ``"clip"``: CLIP and SigLIP; ``"siglip2"``: SigLIP 2's NaFlex tower, ``Siglip2VisionModel``;
    ``"aimv2"``: AIMv2's, ``Aimv2VisionModel``)."""
    embed, block, top = FAMILY_ROWS[family](c)
    return [*embed, *r.blocks(block, c.num_layers), *top]


# config.json <-> ViTConfig, each family's `r.Setting`s (the readers' and the writers'):
# the image size and hidden_act are read by `read_huggingface`, SigLIP 2's num_patches
# by `naflex_config`, DINOv3's biases and activation checked by `r.read_dinov3`
S = r.Setting
_TOWER = [S("hidden_size", "hidden_dim"), S("num_hidden_layers", "num_layers"),
          S("num_attention_heads", "num_heads"), S("layer_norm_eps", "layer_norm_epsilon", float)]
_SHARED = [*_TOWER, S("patch_size", "patch_size", write=lambda c: c.patch_size[0]),
           S("num_channels", "num_channels", default=3)]
_MLP_DIM = S("intermediate_size", "mlp_dim")
_QKV_BIAS = S("qkv_bias", "qkv_bias", bool, True)
_LAYER_SCALE = S("layerscale_value", "layer_scale_init", float, 1.0)
_ACT = r.activation("hidden_act", _ACTIVATIONS, "gelu")
_IMAGE_SIZE = S("image_size", None, write=lambda c: c.image_size[0] if c.image_size[0] == c.image_size[1]
                else list(c.image_size))
_DINOV3_NAMES = ("query_bias", "key_bias", "value_bias", "proj_bias", "use_gated_mlp", "hidden_act")
SETTINGS = {
    "vit": [*_SHARED, _MLP_DIM, _ACT, _IMAGE_SIZE, _QKV_BIAS,
            S("encoder_stride", None, write=lambda c: c.patch_size[0])],
    "dinov2": [*_SHARED, _ACT, _QKV_BIAS, _LAYER_SCALE],
    "dinov3": [*_SHARED, S("intermediate_size", None, write=lambda c: c.mlp_dim),  # read from the tensors
               _IMAGE_SIZE, S("rope_theta", "rope_theta", float, 100.0),
               *r.dinov3_settings(_DINOV3_NAMES, key_bias=False), S("mlp_bias", "mlp_bias", bool, True),
               _LAYER_SCALE, S("num_register_tokens", "num_registers", int, 0)],
    "clip": [*_SHARED, _MLP_DIM, _ACT, _QKV_BIAS],
    "aimv2": [*_TOWER[:3], S("rms_norm_eps", "layer_norm_epsilon", float, 1e-5), *_SHARED[4:], _MLP_DIM,
              S("qkv_bias", "qkv_bias", bool, False), S("mlp_bias", "mlp_bias", bool, False)],
    "siglip2": [*_SHARED, _MLP_DIM, _ACT, dataclasses.replace(_QKV_BIAS, when=r.never),
                S("num_patches", None, write=lambda c: c.grid_size[0] * c.grid_size[1])],
}

# a two-tower folder's keys of its text tower and logits, read by `read_huggingface_text`
_TEXT_TOWER = ("text_model.", "text_projection.", "logit_scale", "logit_bias")

# AIMv2's image tower: RMSNorms (one of the patch embeddings too), a SwiGLU MLP, the tokens' mean
_AIMV2 = dict(norm_type="rms_norm", norm_bias=False, patch_norm=True, mlp_activation="swiglu",
              gelu_approximate=False, pooling="gap")
# model_type -> (family, its config reader, its weights' prefix, transformers' LayerNorm
# epsilon where config.json leaves it out, the `ViT` arguments it fixes)
_MODEL_TYPES = {
    "vit": ("vit", _vit_config, "vit.", 1e-12, {}),
    "deit": ("vit", _vit_config, "deit.", 1e-12, dict(distillation=True)),
    "dinov2": ("dinov2", _dinov2_config, "dinov2.", 1e-6, {}),
    "dinov2_with_registers": ("dinov2", _dinov2_config, "dinov2_with_registers.", 1e-6, {}),
    "dinov3_vit": ("dinov3", _dinov3_config, "model.", 1e-5, dict(position_embedding="rope")),
    "clip_vision_model": ("clip", _clip_config, "vision_model.", 1e-5, dict(norm_pre=True)),
    "siglip_vision_model": ("clip", _clip_config, "vision_model.", 1e-6, dict(pooling="map")),
    "siglip2_vision_model": ("siglip2", _clip_config, "vision_model.", 1e-6, dict(pooling="map")),
    "aimv2_vision_model": ("aimv2", _aimv2_config, "vision_model.", 1e-5, _AIMV2)}


# `keras_vit.weights.formats.huggingface_column` -> (the family, `SETTINGS`'s and `key_map`'s), model class,
# model type and the constants of its config.json
_HUGGINGFACE = {
    "hf_vit": ("vit", "ViTModel", "vit", dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    "hf_dinov3": ("dinov3", "DINOv3ViTModel", "dinov3_vit", {}),
    "hf_siglip2": ("siglip2", "Siglip2VisionModel", "siglip2_vision_model",
                   dict(attention_dropout=0.0, vision_use_head=True))}


def write_huggingface(model, path):
    """`model` as transformers' ``ViTModel`` (with a head, ``ViTForImageClassification``), ``DINOv3ViTModel``
    (rotary position embeddings) or ``Siglip2VisionModel`` (NaFlex: a table of grid_h x grid_w rows), with its
    ``preprocessor_config.json`` (`_image_processor`)."""
    c = model.config
    family, hf_class, model_type, constants = _HUGGINGFACE[huggingface_column(c)]
    tensors = r.write_rows(key_map(c, family), model_state(model), c, model.name, "Hugging Face")
    if family == "vit":  # its labels (placeholders without names), pre-logits and head
        names = c.class_names or [f"LABEL_{i}" for i in range(c.num_classes)]
        constants = {**constants, "id2label": {str(i): name for i, name in enumerate(names)},
                     "label2id": {name: i for i, name in enumerate(names)}}
        if c.representation_size:
            constants.update(pooler_output_size=c.representation_size, pooler_act="tanh")
        if c.num_classes:  # ViTForImageClassification: the ViTModel under "vit.", its classifier
            hf_class = "ViTForImageClassification"
            tensors = {key if key.startswith("classifier.") else "vit." + key: value
                       for key, value in tensors.items()}
    config = {"architectures": [hf_class], "model_type": model_type,
              **r.write_settings(SETTINGS[family], c), **constants}
    write_files(path, tensors, config, {"preprocessor_config.json": _image_processor(c)})


def _image_processor(c):
    """The ``preprocessor_config.json`` of a ``ViTImageProcessor`` at the model's size (NaFlex: a
    ``Siglip2ImageProcessor`` at its budget), scaling pixels as the model does (``rescale / std`` =
    ``pixel_scale``, ``-mean / std`` = ``pixel_offset``; the paper's [-1, 1]: mean and std 0.5)."""
    mean, std = mean_and_std(c)
    own = ({"image_processor_type": "Siglip2ImageProcessor", "patch_size": c.patch_size[0],
            "max_num_patches": c.max_num_patches} if c.naflex else
           {"image_processor_type": "ViTImageProcessor",
            "size": dict(zip(("height", "width"), c.image_size))})
    return {**own, "do_resize": True, "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255,
            "do_normalize": True, "image_mean": mean, "image_std": std}


# transformers' CLIPTextConfig, SiglipTextConfig and Siglip2TextConfig defaults, where
# config.json leaves a key out
_TEXT_DEFAULTS = {
    "clip": dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu",
                 layer_norm_eps=1e-5, eos_token_id=49407),
    "siglip": dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                   num_attention_heads=12, max_position_embeddings=64,
                   hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
}
_TEXT_DEFAULTS["siglip2"] = _TEXT_DEFAULTS["siglip"]  # the same tower, a Gemma tokenizer
# each two-tower model type's name, and the prefix of transformers' classes of its towers
_TWO_TOWER_NAMES = {"clip": ("CLIP", "CLIP"), "siglip": ("SigLIP", "Siglip"), "siglip2": ("SigLIP 2", "Siglip2")}
# the text tower's config <-> `keras_vit.TextTransformer`'s arguments
_TEXT_SETTINGS = [S("vocab_size", "vocab_size"), S("max_position_embeddings", "context_length"), *_TOWER, _MLP_DIM]


@dataclasses.dataclass
class TextCheckpoint:
    """A two-tower folder's text tower in keras_vit's names (`read_huggingface_text`).

    Attributes:
        config: `keras_vit.TextTransformer`'s arguments.
        state: variable path -> float32 array.
        logit_scale: float, the log of the logits' scale.
        logit_bias: float or None (SigLIP's).
        source: the folder, for messages.
        name: ``"clip"``, ``"siglip"`` or ``"siglip2"``.
    """

    config: dict
    state: dict
    logit_scale: float
    logit_bias: float | None
    source: str
    name: str


def read_image_text(directory):
    """Both towers of a Hugging Face ``CLIPModel``, ``SiglipModel`` or ``Siglip2Model`` (NaFlex) folder, its
    weights read once: (`read_huggingface`'s image `Checkpoint`, `read_huggingface_text`'s `TextCheckpoint`).
    A folder of one tower is refused, naming it, before any weights are read."""
    directory = pathlib.Path(directory)
    _two_tower_config(directory)
    tensors = load_weights(directory)
    return _read_image_tower(directory, tensors), read_huggingface_text(directory, tensors)


def _two_tower_config(directory):
    """``config.json`` of a two-tower folder, and its ``"clip"``, ``"siglip"`` or ``"siglip2"``; any other
    model is refused, naming the tower it holds."""
    hf = read_config_json(directory / "config.json")
    model_type = hf.get("model_type")
    if model_type not in _TEXT_DEFAULTS:
        alone = {f"{kind}_{side}_model": f"{name}'s {words} tower alone ({prefix}{side.title()}Model)"
                 for kind, (name, prefix) in _TWO_TOWER_NAMES.items()
                 for side, words in (("vision", "image"), ("text", "text"))}
        tower = alone.get(model_type, "a timm checkpoint (an image tower)" if "architecture" in hf
                          else f"model_type {model_type!r}, not a two-tower model")
        raise CheckpointError(
            f"Hugging Face checkpoint {directory} holds {tower}; an ImageTextModel needs both "
            "towers: a CLIPModel, SiglipModel or Siglip2Model folder (config.json's model_type "
            "'clip', 'siglip' or 'siglip2')." + (" Read an image tower with keras_vit.ViT.from_checkpoint."
                            if "vision" in str(model_type) or "architecture" in hf else ""))
    return hf, model_type


def read_huggingface_text(directory, tensors=None):
    """The text tower, logit scale and bias of a Hugging Face ``CLIPModel``, ``SiglipModel`` or
    ``Siglip2Model`` folder (``text_model.*``, CLIP's ``text_projection``, ``logit_scale``, SigLIP's
    ``logit_bias``); the image tower is `read_huggingface`'s. A folder of one tower is refused, naming it.
    `tensors`: its ``model.safetensors``, when already read (`read_image_text`)."""
    directory = pathlib.Path(directory)
    hf, model_type = _two_tower_config(directory)
    source = f"Hugging Face checkpoint {directory}"
    text = {**_TEXT_DEFAULTS[model_type], **hf.get("text_config", {})}
    act = text["hidden_act"]
    if act not in _ACTIVATIONS:
        raise CheckpointError(f"{source}: the text tower's hidden_act {act!r} is not supported; "
                              f"keras_vit has {sorted(_ACTIVATIONS)}.")
    tensors = load_weights(directory) if tensors is None else tensors
    tensors = {k.removeprefix("text_model."): v for k, v in tensors.items() if k.startswith(_TEXT_TOWER)}
    config = r.read_settings([*_TEXT_SETTINGS, _ACT], text, source)
    if model_type == "clip":  # causal; the end-of-text token; a projection without bias
        eos = int(text["eos_token_id"])
        config.update(causal=True, pooling="argmax" if eos == 2 else "eos", eos_token_id=eos, projection_bias=False)
    else:  # full attention; the last token; the head, with bias
        config.update(causal=False, pooling="last", projection_bias=True)
    logits = ("logit_scale",) if model_type == "clip" else ("logit_scale", "logit_bias")
    r.require_keys(tensors, logits, source)
    scale, bias = (float(np.asarray(tensors.pop(key)).reshape(-1)[0]) if key in logits else None
                   for key in ("logit_scale", "logit_bias"))
    state = r.move(text_rows(config), tensors, types.SimpleNamespace(**config), source)
    config["projection_dim"] = int(state["projection/kernel"].shape[1])
    return TextCheckpoint(config, state, scale, bias, source, model_type)


def text_rows(config):
    """The map of a two-tower model's text tower (`keras_vit.TextTransformer`'s
    arguments `config`): CLIP's ``text_projection`` (no bias), SigLIP's ``head``."""
    projection = "head" if config["projection_bias"] else "text_projection"
    return [r.row("embedding/token_embedding", "embeddings.token_embedding.weight"),
            r.row("embedding/position_embedding", "embeddings.position_embedding.weight"),
            *r.blocks(_CLIP_BLOCK, config["num_layers"]),
            *r.norm_rows("final_norm", "final_layer_norm", r.TORCH),
            *r.dense_rows("projection", projection, r.TORCH, r.LINEAR, has_bias=None)]
