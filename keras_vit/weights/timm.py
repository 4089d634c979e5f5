"""timm ``VisionTransformer`` state dicts saved as ``.safetensors``."""

import pathlib
import re

import numpy as np

from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import pixel_scaling
from keras_vit.weights.checkpoint import read_json
from keras_vit.weights.checkpoint import square_grid
from keras_vit.weights.torch_layout import TorchReader
from keras_vit.weights.torch_layout import conv
from keras_vit.weights.torch_layout import load_safetensors

# timm state dicts do not store the head count. A timm hub config.json names
# the architecture: its size word (``vit_base_...``, ``deit3_small_...``)
# gives (width, heads) as timm's model functions define them
# (vision_transformer.py, deit.py), save for the few models listed by name
# whose width or heads differ from their size word. Bare files go by width.
_TIMM_SIZES = {
    "tiny": (192, 3), "xsmall": (256, 4), "wee": (256, 4), "pwee": (256, 4), "dwee": (256, 4),
    "dpwee": (256, 4), "little": (320, 5), "dlittle": (320, 5), "small": (384, 6),
    "medium": (512, 8), "mediumd": (512, 8), "betwixt": (640, 10), "base": (768, 12),
    "so150m2": (832, 13), "so150m": (896, 14), "large": (1024, 16), "intern300m": (1024, 16),
    "so400m": (1152, 16), "huge": (1280, 16), "giant": (1408, 16), "giantopt": (1536, 16),
    "gigantic": (1664, 16),
}
_TIMM_EXCEPTIONS = {
    "vit_base_patch16_gap_224": (768, 16),
    "vit_base_patch16_plus_240": (896, 14),
    "vit_base_patch32_plus_256": (896, 14),
    "vit_base_patch16_plus_clip_240": (896, 14),
    "vit_giant_patch14_dinov2": (1536, 24),
    "vit_giant_patch14_reg4_dinov2": (1536, 24),
    "vit_giant_patch14_reg1_tipsv2": (1536, 24),
}
_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}

# OpenAI-trained CLIP weights (and these others) run QuickGELU; timm's plain
# `*_clip_*` entry points build erf GELU for them (their pretrained_cfg notes
# say so), its `*_clip_quickgelu_*` ones the weights' own.
_QUICKGELU_TAGS = ("openai", "metaclip_400m", "metaclip_2pt5b", "metaclip2_worldwide", "dfn2b",
                   "dfn5b")


def _split(reader, key, parts):
    """A fused ``Linear`` (qkv or kv) -> `parts` (weight, bias-or-None) pairs."""
    weight = reader.pop(key + ".weight")
    bias = reader.pop(key + ".bias") if reader.has(key + ".bias") else None
    biases = np.split(bias, parts) if bias is not None else [None] * parts
    return list(zip(np.split(weight, parts, axis=0), biases))


def _architecture_size(architecture):
    """(width, heads) of a timm model name, or (None, None) when unknown."""
    if architecture in _TIMM_EXCEPTIONS:
        return _TIMM_EXCEPTIONS[architecture]
    size = re.match(r"(?:vit|deit3?)_([a-z0-9]+)_", architecture)
    return _TIMM_SIZES.get(size.group(1), (None, None)) if size else (None, None)


def _heads(meta, hidden_dim, num_heads, source):
    """The head count: given; else the hub config's ``model_args`` or
    architecture; else timm's standard widths. Never a guess."""
    meta = meta or {}
    architecture = str(meta.get("architecture", "")).split(".")[0]  # drop a ".tag"
    model_args = meta.get("model_args") or {}
    width, heads = _architecture_size(architecture)
    width, heads = model_args.get("embed_dim", width), model_args.get("num_heads", heads)
    if width is not None and width != hidden_dim:
        raise CheckpointError(
            f"{source}: config.json names {architecture!r} ({width} wide) but the weights are "
            f"{hidden_dim} wide: the folder mixes two models. Use the config.json saved with "
            "these weights.")
    if num_heads is None:
        num_heads = heads or _HEADS_BY_WIDTH.get(hidden_dim)
    if num_heads is None:
        raise CheckpointError(
            f"{source}: timm files do not store the number of attention heads, and width "
            f"{hidden_dim} is not one of timm's standard sizes {sorted(_HEADS_BY_WIDTH)}. Pass "
            "it: `ViT.from_checkpoint(path, num_heads=...)`, or load the timm hub folder with "
            "its config.json.")
    if int(num_heads) < 1 or hidden_dim % int(num_heads):
        raise CheckpointError(f"{source}: num_heads={num_heads} does not divide the width {hidden_dim}.")
    return int(num_heads)


def _numerics(meta, model_args, source):
    """(mlp activation, tanh GELU, LayerNorm epsilon) of a timm model: from
    its hub config's ``model_args``, else from its architecture's family."""
    architecture = str(meta.get("architecture", ""))
    pretrained_cfg = meta.get("pretrained_cfg") or {}
    tag = str(pretrained_cfg.get("tag", "")).split(".")[0]
    notes = " ".join(map(str, pretrained_cfg.get("notes") or ()))
    act = model_args.get("act_layer")
    if act is None:
        if "quickgelu" in architecture or "natively QuickGELU" in notes or (
                "_clip_" in architecture and tag in _QUICKGELU_TAGS):
            act = "quick_gelu"
        elif "siglip" in architecture:
            act = "gelu_tanh"  # SigLIP's own (big_vision's); timm's first SigLIP entry points build erf GELU
        else:
            act = "gelu"
    if act not in ("gelu", "gelu_tanh", "quick_gelu", "silu"):
        raise CheckpointError(f"{source}: act_layer {act!r} is not one keras_vit implements "
                              "('gelu', 'gelu_tanh', 'quick_gelu'; 'silu' in SwiGLU).")
    epsilon = 1e-5 if "_clip_" in architecture else 1e-6  # timm's CLIP models: nn.LayerNorm
    return ("quick_gelu" if act == "quick_gelu" else "gelu"), act == "gelu_tanh", epsilon


def read_timm(path, num_heads=None):
    """Reads a timm ViT ``.safetensors`` file (or a timm hub directory with
    ``config.json``, which gives the head count, numerics and class names):
    the paper's ViT and the family timm keeps in ``VisionTransformer``:
    DeiT (distilled), DINOv2 (registers, LayerScale, SwiGLU), CLIP (a
    LayerNorm before the encoder, no patch bias, QuickGELU), SigLIP (MAP),
    ``fc_norm`` and ``qk_norm``. A key it does not know is refused by name."""
    path = pathlib.Path(path)
    meta = {}
    if path.is_dir():
        meta = read_json(path / "config.json")
        path = path / "model.safetensors"
    source = f"timm checkpoint {path}"
    tensors = load_safetensors(path)
    reader = TorchReader(tensors, source)
    kernel = conv(reader.pop("patch_embed.proj.weight"))
    reader.put("patch_embedding/projection/kernel", kernel)
    hidden_dim = kernel.shape[-1]
    num_heads = _heads(meta, hidden_dim, num_heads, source)
    model_args = meta.get("model_args") or {}
    activation, approximate, epsilon = _numerics(meta, model_args, source)
    config = dict(
        hidden_dim=hidden_dim, num_heads=num_heads, patch_size=tuple(kernel.shape[:2]),
        num_channels=kernel.shape[2], layer_norm_epsilon=epsilon, gelu_approximate=approximate,
        mlp_activation=activation,
    )
    if reader.has("patch_embed.proj.bias"):
        reader.put("patch_embedding/projection/bias", reader.pop("patch_embed.proj.bias"))
    else:
        config["patch_bias"] = False  # timm's pre_norm (CLIP)
    prefix = 0
    for key, target in (("cls_token", "class_token"), ("dist_token", "distillation_token"),
                        ("reg_token", "registers")):
        if reader.has(key):
            tokens = reader.pop(key)
            reader.put(target + "/tokens", tokens)
            prefix += tokens.shape[1]
    if "distillation_token/tokens" in reader.state:
        config["distillation"] = True
    if "registers/tokens" in reader.state:
        config["num_registers"] = reader.state["registers/tokens"].shape[1]
    posemb = reader.pop("pos_embed")
    no_embed_class = model_args.get("no_embed_class")
    if no_embed_class is None:  # told by the shape: a table of the patches alone is square
        rows = posemb.shape[1]
        no_embed_class = rows <= prefix or (square_grid(rows - prefix) is None
                                            and square_grid(rows) is not None)
    patches = posemb.shape[1] - prefix
    if no_embed_class and prefix:
        # no_embed_class: E_pos covers the patches only; prefix rows add zero.
        posemb = np.concatenate([np.zeros((1, prefix, hidden_dim), posemb.dtype), posemb], 1)
        patches = posemb.shape[1] - prefix
    reader.put("position_embedding/embeddings", posemb)
    grid = square_grid(patches)
    if "img_size" in model_args:  # the hub config's size, for any grid
        size = model_args["img_size"]
        size = (size, size) if isinstance(size, int) else tuple(size)
        grid = tuple(s // p for s, p in zip(size, config["patch_size"]))
    if grid:
        config["image_size"] = tuple(g * p for g, p in zip(grid, config["patch_size"]))
    if reader.has("norm_pre.weight"):
        reader.layer_norm("norm_pre", "norm_pre")
        config["norm_pre"] = True

    num_layers = 0
    while reader.has(f"blocks.{num_layers}.norm1.weight"):
        key, target = f"blocks.{num_layers}.", f"encoder_block_{num_layers}"
        reader.layer_norm(key + "norm1", target + "/norm1")
        qkv = _split(reader, key + "attn.qkv", 3)
        if num_layers == 0:
            config["qkv_bias"] = qkv[0][1] is not None
        reader.attention(qkv, key + "attn.proj", target + "/attention", num_heads)
        if reader.has(key + "attn.q_norm.weight"):
            reader.layer_norm(key + "attn.q_norm", target + "/attention/query_norm")
            reader.layer_norm(key + "attn.k_norm", target + "/attention/key_norm")
            config["qk_norm"] = True
        reader.layer_norm(key + "norm2", target + "/norm2")
        reader.linear(key + "mlp.fc1", target + "/mlp/fc1")
        reader.linear(key + "mlp.fc2", target + "/mlp/fc2")
        for i in (1, 2):
            if reader.has(f"{key}ls{i}.gamma"):
                reader.put(f"{target}/layer_scale_{i}", reader.pop(f"{key}ls{i}.gamma"))
                config["layer_scale_init"] = model_args.get("init_values", 1e-5)
        num_layers += 1
    fc1, fc2 = reader.state["encoder_block_0/mlp/fc1/kernel"], reader.state["encoder_block_0/mlp/fc2/kernel"]
    if fc1.shape[1] == 2 * fc2.shape[0]:  # timm's SwiGLUPacked (DINOv2 giant): [gate; value]
        config["mlp_activation"] = "swiglu"
    config.update(num_layers=num_layers, mlp_dim=fc2.shape[0])
    if reader.has("fc_norm.weight"):
        reader.layer_norm("fc_norm", "fc_norm")
        config["fc_norm"] = True
    else:
        reader.layer_norm("norm", "encoder_norm")
    if reader.has("attn_pool.latent"):
        config["pooling"] = "map"
        reader.put("pooling/probe", reader.pop("attn_pool.latent"))
        query = (reader.pop("attn_pool.q.weight"), reader.pop("attn_pool.q.bias"))
        kv = _split(reader, "attn_pool.kv", 2)
        reader.attention([query, *kv], "attn_pool.proj", "pooling/attention", num_heads)
        reader.layer_norm("attn_pool.norm", "pooling/norm")
        reader.linear("attn_pool.mlp.fc1", "pooling/mlp/fc1")
        reader.linear("attn_pool.mlp.fc2", "pooling/mlp/fc2")
    elif "class_token/tokens" in reader.state:
        pool = meta.get("global_pool", model_args.get("global_pool", "token"))
        if pool not in ("token", "", "avg"):
            raise CheckpointError(
                f"{source}: global_pool {pool!r} over a model with a [class] token; keras_vit "
                "reads 'token', 'avg' (the patch tokens' mean) and 'map'.")
        config["pooling"] = "gap" if pool == "avg" else "token"
    else:
        config["pooling"] = "gap"
    if "class_token/tokens" in reader.state and config["pooling"] != "token":
        config["class_token"] = True  # beside the pooling, which does not read it
    reader.read_top("pre_logits.fc", "head", config)
    if reader.has("head_dist.weight"):
        reader.linear("head_dist", "head_dist")
    pretrained_cfg = meta.get("pretrained_cfg") or {}
    if "mean" in pretrained_cfg and "std" in pretrained_cfg:  # timm's normalisation of [0, 1] pixels
        config.update(pixel_scaling(pretrained_cfg["mean"], pretrained_cfg["std"],
                                    config["num_channels"]))
    names = meta.get("label_names")
    if names and len(names) == config.get("num_classes"):
        config["class_names"] = [str(n) for n in names]
    reader.finish()
    method = "dinov2" if "dinov2" in str(meta.get("architecture", "")) else "bilinear"
    return Checkpoint(config, reader.state, source, grid, patches, resample_method=method)
