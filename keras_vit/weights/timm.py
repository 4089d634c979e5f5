"""timm's ViT files, read and written: the ``.safetensors`` state dicts of its ``VisionTransformer`` (DeiT's
distilled one too) and its ``Eva`` (EVA-02, the Perception Encoder, its rotary ViTs), alone or in a hub folder
with config.json; timm's model arguments both ways by one table (`ARGS`)."""

import dataclasses
import functools
import importlib.resources
import json
import math
import pathlib

import numpy as np

from keras_vit.assign import model_state
from keras_vit.config import mean_and_std
from keras_vit.config import scaling_of_normalization
from keras_vit.io import files
from keras_vit.io.files import CheckpointError
from keras_vit.io.tensors import load_safetensors
from keras_vit.io.tensors import safetensors_bytes
from keras_vit.weights import rows as r
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import config_view
from keras_vit.weights.checkpoint import read_config_json
from keras_vit.weights.checkpoint import square_grid
from keras_vit.weights.checkpoint import write_files

_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}  # a bare file's, by width

# OpenAI-trained CLIP weights (and these others) run QuickGELU; timm's plain `*_clip_*` entry points build
# erf GELU for them (their pretrained_cfg notes say so), its `*_clip_quickgelu_*` ones the weights' own.
_QUICKGELU_TAGS = ("openai", "metaclip_400m", "metaclip_2pt5b", "metaclip2_worldwide", "dfn2b", "dfn5b")


@functools.cache
def architectures():
    """timm's table of its ViT architectures (``timm_architectures.json``, made by
    tests/data/make_timm_architectures.py): ``{"timm": version, "architectures": {name: {"module", "class",
    "args"}}}``, every architecture of timm's ``vision_transformer``, ``deit`` and ``eva`` modules with the
    model class and arguments its entry point builds."""
    text = importlib.resources.files("keras_vit.weights").joinpath("timm_architectures.json").read_text("utf-8")
    return json.loads(text)


def _layer(value):
    """A layer argument of the table (a name, or ``{"partial": name, **keywords}``) as (its name in lower
    case without underscores, its keywords)."""
    keywords = dict(value) if isinstance(value, dict) else {"partial": value}
    return str(keywords.pop("partial")).lower().replace("_", ""), keywords


# timm's act_layer <-> our (mlp_activation, gelu_approximate), both ways (`r.activation`):
# written as timm's names, read by them without case or underscores (`_layer`)
_ACT_LAYERS = {"gelu": ("gelu", False), "gelu_tanh": ("gelu", True), "quick_gelu": ("quick_gelu", False)}
_ACT_LAYER = r.activation("act_layer", _ACT_LAYERS)
# timm's global_pool <-> our pooling ("": the [class] token, as timm's default)
_POOLS = {"token": "token", "avg": "gap", "map": "map"}
_GLOBAL_POOL = {ours: theirs for theirs, ours in _POOLS.items()}
_VIT, _EVA = ("VisionTransformer", "VisionTransformerDistilled"), ("Eva",)


def _ratio(width, dim):
    """The ``mlp_ratio`` for which timm's ``int(dim * mlp_ratio)`` is `width`: ``width / dim``, or
    the next float above it where the quotient falls a hair short (``88 * (120 / 88)`` is 119.99...)."""
    ratio = width / dim
    while int(dim * ratio) < width:
        ratio = math.nextafter(ratio, math.inf)
    return ratio


def _pair(value, sizes=None):
    return tuple(np.broadcast_to(value, (2,)).tolist())


@dataclasses.dataclass(frozen=True)
class Arg(r.Setting):
    """One argument of timm's model `classes`, an `r.Setting` (read into `ours` where it has
    one; `default`: the class's own) with the values keras_vit `accepts` (a layer by `_layer`'s
    name; None: any) and, for a `size` the weights fix too (`_check_sizes`), its key in
    `_sizes`, its words (``{}``: the value) and ``read(value, sizes)``, the size the value gives."""

    classes: tuple = _VIT + _EVA
    accepts: tuple | None = None
    size: tuple = ()


def _arg(theirs, classes=_VIT + _EVA, accepts=None, write=None, ours=None, read=None, default=..., **more):
    return Arg(theirs, ours, read or (lambda value: value), default, write, classes=classes, accepts=accepts, **more)


def _sized(theirs, field, words, write, classes=_VIT + _EVA, read=lambda value, sizes: int(value), **more):
    return _arg(theirs, classes, write=write, size=(field, words, read), **more)


# timm's model arguments <-> `ViTConfig`, each declared once for both ways: what the reader
# accepts (`timm_architecture_args`), reads (`_eva_config`) and checks against the weights
# (`_check_sizes`), and what `write_timm` writes (`_written_args`). An argument in no row is
# refused by name, unless it only trains (`_TRAINING_ARGUMENTS`).
ARGS = [
    _arg("img_size", write=lambda c: list(c.image_size)),
    _sized("patch_size", "patch_size", "patches of {0[0]}x{0[1]}", lambda c: list(c.patch_size), read=_pair),
    _sized("in_chans", "num_channels", "{} input channels", lambda c: c.num_channels),
    _sized("embed_dim", "hidden_dim", "a width of {}", lambda c: c.hidden_dim),
    _sized("depth", "num_layers", "{} blocks", lambda c: c.num_layers),
    _sized("num_heads", "heads", "{} heads", lambda c: c.num_heads),
    # rounded: a ratio of timm's own written as a quotient may fall a hair short of its width
    _sized("mlp_ratio", "mlp_width", "an MLP {} wide", lambda c: _ratio(mlp_ratio_factor(c) * c.mlp_dim, c.hidden_dim),
           read=lambda value, sizes: round(value * sizes["hidden_dim"])),
    _sized("num_classes", "num_classes", "{} classes", lambda c: c.num_classes),
    _arg("qkv_bias", write=lambda c: c.qkv_bias),
    _arg("class_token", write=lambda c: c.uses_class_token, default=True),
    _arg("global_pool", _VIT, ("", *_POOLS), lambda c: _GLOBAL_POOL[c.pooling]),
    _arg("global_pool", _EVA, tuple(_POOLS), lambda c: _GLOBAL_POOL[c.pooling], default="avg"),
    _arg("no_embed_class", _VIT, None), _arg("no_embed_class", _EVA, (False, True)),  # `_table_of_the_patches`
    # No LayerScale: VisionTransformer's 0 (its Block reads it as none; the architecture may have its own,
    # as DINOv2's has), Eva's None, its default
    _arg("init_values", _VIT, write=lambda c: 0 if c.layer_scale_init is None else c.layer_scale_init),
    _arg("init_values", _EVA, write=lambda c: c.layer_scale_init, when=lambda c: c.layer_scale_init is not None),
    # VisionTransformer's (deit.py's VisionTransformerDistilled has no reg_tokens argument)
    _sized("reg_tokens", "num_registers", "{} registers", lambda c: c.num_registers, _VIT,
           when=lambda c: not c.distillation),
    _arg("proj_bias", _VIT, write=lambda c: c.out_bias),
    *(_arg(theirs, _VIT, write=lambda c, ours=ours: getattr(c, ours))
      for theirs, ours in (("fc_norm", "fc_norm"), ("qk_norm", "qk_norm"), ("pre_norm", "norm_pre"))),
    _arg("final_norm", _VIT, (True, False), lambda c: c.final_norm),
    # the gated MLPs' SiLU is their architecture's (DINOv2 giant's, AIMv2's)
    _arg("act_layer", _VIT, (None, *(name.replace("_", "") for name in _ACT_LAYERS), "silu"), _ACT_LAYER.write,
         when=lambda c: c.mlp_activation != "swiglu"),
    # AIMv2's architecture has the patches' norm
    _arg("embed_norm_layer", _VIT, (None, "rmsnorm"), lambda c: None,
         when=lambda c: c.norm_type == "rms_norm" and not c.patch_norm),
    # timm's VisionTransformer pools the patches alone unless told; keras_vit's attention pool every token
    _arg("pool_include_prefix", _VIT, (False, True), lambda c: True,
         when=lambda c: c.pooling == "map" and c.num_prefix_tokens > 0),
    _arg("norm_layer", _VIT, (None, "layernorm", "rmsnorm")),
    # gated SiLU: fc1 holding both halves (the second and third), or fc1_g and fc1_x (SwiGLU, AIMv2's)
    _arg("mlp_layer", _VIT, ("mlp", "swiglupacked", "glumlp", "swiglu")),
    *(_arg(theirs, _VIT, accepts) for theirs, accepts in (
        ("pos_embed", ("learn",)), ("scale_attn_norm", (False,)), ("scale_mlp_norm", (False,)),
        ("embed_layer", ("patchembed",)), ("block_fn", ("block",)), ("attn_layer", ("attention",)))),
    # timm's Eva, as EVA-02, the Perception Encoder and timm's rotary ViTs build it; attn_type "rope":
    # timm's AttentionRope (PE's, fused q, k, v and their biases); "eva": EvaAttention (EVA-02's, query and
    # value biases alone, q, k, v fused or apart)
    _sized("num_reg_tokens", "num_registers", "{} registers", lambda c: c.num_registers, _EVA),
    _arg("attn_type", _EVA, ("rope", "eva"), lambda c: "eva" if _eva(c) else "rope", default="eva"),
    _arg("qkv_fused", _EVA, write=lambda c: not split_qkv(c)),
    _arg("swiglu_mlp", _EVA, write=lambda c: c.mlp_activation == "swiglu"),
    *(_arg(theirs, _EVA, write=lambda c, ours=ours: getattr(c, ours))
      for theirs, ours in (("scale_mlp", "mlp_norm"), ("scale_attn_inner", "attention_norm"),
                           ("use_pre_transformer_norm", "norm_pre"), ("use_fc_norm", "fc_norm"))),
    _arg("use_post_transformer_norm", _EVA, write=lambda c: c.final_norm and not c.fc_norm),
    _arg("use_rot_pos_emb", _EVA, (True,), default=False),
    _arg("use_abs_pos_emb", _EVA, (True, False), lambda c: c.position_table == "learned", "position_embedding",
         lambda value: "learned_rope" if value else "rope", True),
    _arg("ref_feat_shape", _EVA, None, lambda c: list(c.rope_reference_grid), "rope_reference_grid",
         lambda value: None if value is None else _pair(value), None, when=lambda c: c.rope_reference_grid),
    _arg("rope_grid_offset", _EVA, None, lambda c: c.rope_grid_offset, "rope_grid_offset", float, 0.0),
    _arg("rope_grid_indexing", _EVA, ("ij", "xy"), lambda c: c.rope_grid_indexing, "rope_grid_indexing",
         str, "ij"),
    _arg("rope_temperature", _EVA, None, lambda c: c.rope_theta, "rope_theta", float, 10000.0),
    _arg("rope_type", _EVA, ("cat",), default="cat"), _arg("rope_rotate_half", _EVA, (False,)),
    # the attention pool's own size (PE's): never checked by the blocks' rules (`r.POOL_IN`)
    _arg("attn_pool_num_heads", _EVA, write=lambda c: c.pooling_num_heads or c.num_heads),
    _sized("attn_pool_mlp_ratio", "pool_mlp_width", "an attention-pool MLP {} wide",
           lambda c: _ratio(c.pooling_mlp_dim or c.mlp_dim, c.hidden_dim), _EVA,
           read=lambda value, sizes: round(value * sizes["hidden_dim"])),
    _arg("norm_layer", _EVA, (None, "layernorm")), _arg("head_init_scale", _EVA),
]
# Arguments for training or for inputs of other sizes: a loaded model's numbers are the same.
_TRAINING_ARGUMENTS = ("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate",
                       "attn_drop_rate", "drop_path_rate", "weight_init", "fix_init",
                       "dynamic_img_size", "dynamic_img_pad", "device", "dtype")


def _of(timm_class):
    """`ARGS`' rows of `timm_class`, by their key."""
    return {arg.theirs: arg for arg in ARGS if timm_class in arg.classes}


def timm_architecture_args(meta, source):
    """The arguments timm builds a hub folder's model with: its timm architecture's entry point's
    (`architectures`) over its class's defaults (`ARGS`), updated by config.json's ``model_args``; ``{}``
    for a bare file. Each argument is checked against what keras_vit reads (`ARGS`), so that a model of
    another kind is refused by its name, never read by matching key names.

    Raises:
        CheckpointError: a timm architecture not in timm's table, another model class, or an argument or
            value keras_vit's ViT does not have.
    """
    args = dict(meta.get("model_args") or {})
    who, timm_class = "config.json's model_args", "Eva" if "use_rot_pos_emb" in args else "VisionTransformer"
    if "architecture" in meta:
        timm_class, entry_args, who = _timm_entry(meta["architecture"], source)
        defaults = {a.theirs: a.default for a in _of(timm_class).values() if a.default is not ...}
        args = {**(defaults if timm_class in _EVA else {}), **entry_args, **args}
    accepted = _of(timm_class)
    refused = []
    for arg, value in args.items():
        read, keywords = _layer(value) if arg.endswith(("_layer", "_fn")) and value is not None else (value, {})
        if arg not in _TRAINING_ARGUMENTS and (arg not in accepted or keywords.get("gate_last") or (
                accepted[arg].accepts is not None and read not in accepted[arg].accepts)):
            refused.append(f"{arg}={value!r}")
    if refused:
        raise CheckpointError(
            f"{source}: {who} builds it with {', '.join(refused)}, which keras_vit's ViT does not "
            "have. Nothing was read.")
    return args


def _timm_entry(timm_architecture, source):
    """(model class, arguments, who builds it) of the timm architecture a config.json names, by
    timm's table (`architectures`; an old name as the one it stands for, a ``.tag`` dropped).

    Raises:
        CheckpointError: a timm architecture not in the table, or of a model class keras_vit does not read.
    """
    table = architectures()
    name = str(timm_architecture).split(".")[0]
    name = table["deprecated"].get(name, name).split(".")[0]
    entry = table["architectures"].get(name)
    if entry is None:
        raise CheckpointError(
            f"{source}: config.json names timm's architecture {name!r}, which is not one of the "
            f"{len(table['architectures'])} ViT architectures of timm {table['timm']} that keras_vit "
            "knows (its vision_transformer, deit and eva modules), so it is not read: keras_vit "
            "reads a file as its architecture, never by matching key names. If it is a plain "
            "timm VisionTransformer, read its weights file alone with the head count: "
            "ViT.from_checkpoint('.../model.safetensors', num_heads=...).")
    if entry["class"] not in _VIT + _EVA:
        raise CheckpointError(
            f"{source}: timm's {name} is a model of timm's {entry['class']} ({entry['module']}.py), which "
            "keras_vit does not read: its weights are not a ViT's of the paper's kind. Nothing was read.")
    return entry["class"], entry["args"], f"timm's {name}"


def timm_epsilon(args):
    """The LayerNorm epsilon timm builds with `args`: its ``norm_layer``'s, else VisionTransformer's 1e-6."""
    return float(_layer(args.get("norm_layer") or "layernorm")[1].get("eps", 1e-6))


def _check_sizes(meta, args, config, mlp_width, tensors, source):
    """Refuses a hub folder whose config.json sets a size of `ARGS` that the weights contradict, naming the
    argument and both values: in its ``model_args``, as its ``num_classes``, or as its timm architecture's
    width (whose head count `_heads` takes). The weights' sizes: the reader's `config` (`_read_config`'s),
    timm's MLP width ``int(embed_dim * mlp_ratio)`` as `_read_config` reads it off the weights (`mlp_width`),
    the head count where the queries' norm gives the heads' width, and the attention pool's MLP width."""
    norm, pool = tensors.get("blocks.0.attn.q_norm.weight"), tensors.get("attn_pool.mlp.fc1.weight")
    sizes = dict(config, mlp_width=mlp_width, heads=None if norm is None else config["hidden_dim"] // norm.shape[0],
                 pool_mlp_width=None if pool is None else pool.shape[0])
    sized = {arg.theirs: arg.size for arg in ARGS if arg.size}
    top = {key: meta[key] for key in ("num_classes",) if key in meta}
    width = {"embed_dim": args["embed_dim"]} if "architecture" in meta and "embed_dim" in args else {}
    for who, values in (("config.json's model_args set", meta.get("model_args") or {}),
                        ("config.json sets", top),
                        (f"config.json names timm's {meta.get('architecture')!r}, built with", width)):
        for arg, value in values.items():
            if arg not in sized or value is None:
                continue
            key, words, read = sized[arg]
            stated, theirs = read(value, sizes), sizes[key]
            if theirs is not None and stated != theirs:
                raise CheckpointError(
                    f"{source}: {who} {arg}={value!r} ({words.format(stated)}), but the weights have "
                    f"{words.format(theirs)}: the folder mixes two models. Use the config.json saved with "
                    "these weights.")


def _heads(args, hidden_dim, num_heads, source):
    """The head count: given; else its timm architecture's arguments (`timm_architecture_args`);
    else, for a bare file, timm's standard widths. Never a guess."""
    if num_heads is None:
        num_heads = args.get("num_heads") or _HEADS_BY_WIDTH.get(hidden_dim)
    if num_heads is None:
        raise CheckpointError(
            f"{source}: timm files do not store the number of attention heads, and width {hidden_dim} is not "
            f"one of timm's standard sizes {sorted(_HEADS_BY_WIDTH)}. Pass it: `ViT.from_checkpoint(path, "
            "num_heads=...)`, or load the timm hub folder with its config.json.")
    if int(num_heads) < 1 or hidden_dim % int(num_heads):
        raise CheckpointError(f"{source}: num_heads={num_heads} does not divide the width {hidden_dim}.")
    return int(num_heads)


def _numerics(meta, args):
    """A timm model's MLP activation (our ``mlp_activation`` and ``gelu_approximate``; ``"silu"``: a gated
    MLP's) and LayerNorm epsilon: from its timm architecture's arguments, where keras_vit reads released
    weights' own activation over timm's entry point (QuickGELU CLIPs, SigLIP's tanh GELU)."""
    timm_architecture = str(meta.get("architecture", ""))
    pretrained_cfg = meta.get("pretrained_cfg") or {}
    tag = str(pretrained_cfg.get("tag", "")).split(".")[0]
    notes = " ".join(map(str, pretrained_cfg.get("notes") or ()))
    if args.get("act_layer"):
        act = _layer(args["act_layer"])[0]
    elif "quickgelu" in timm_architecture or "natively QuickGELU" in notes or (
            "_clip_" in timm_architecture and tag in _QUICKGELU_TAGS):
        act = "quickgelu"
    elif "siglip" in timm_architecture:
        act = "gelutanh"  # SigLIP's own (big_vision's); timm's first SigLIP entry points build erf GELU
    else:
        act = "gelu"
    read = {name.replace("_", ""): pair for name, pair in _ACT_LAYERS.items()}.get(act, ("silu", False))
    return dict(zip(_ACT_LAYER.ours, read)), timm_epsilon(args)


_B = "blocks.{i}."


def _mlp_rows(unpacked):
    """A block's MLP: ``fc1`` and ``fc2``, or timm's SwiGLU (AIMv2's, `unpacked`): ``fc1_g`` and ``fc1_x``,
    our SwiGLU ``fc1`` in two halves, then ``fc2``. Biases where the file or model has them."""
    ours, theirs = "encoder_block_{i}/mlp/", _B + "mlp."
    fc1 = [theirs + "fc1_g", theirs + "fc1_x"] if unpacked else theirs + "fc1"
    return [*r.dense_rows(ours + "fc1", fc1, r.TORCH, r.LINEAR, has_bias=None),
            *r.norm_rows(ours + "norm", theirs + "norm", r.TORCH, when=lambda c: c.mlp_norm),
            *r.dense_rows(ours + "fc2", theirs + "fc2", r.TORCH, r.LINEAR, has_bias=None)]


def _qkv_rows(leaf, theirs, layout, when):
    """timm's fused query, key and value; Eva's rotary query and key turn each
    head's dimensions in interleaved pairs (`keras_vit.weights.rows.even_first`)."""
    ours, theirs = [f"encoder_block_{{i}}/attention/{n}/{leaf}" for n in r.QKV], _B + "attn.qkv." + theirs
    return [r.row(ours, theirs, r.fused(3, layout), when=r.both(when, lambda c: not c.uses_rope)),
            r.row(ours, theirs, r.fused(3, [r.even_first(layout)] * 2 + [layout]),
                  when=r.both(when, lambda c: c.uses_rope))]


def _eva(c):
    """Whether `c` is timm's EvaAttention's (EVA-02's): rotary, a query and value bias, no key bias."""
    return c.uses_rope and not c.key_bias


def _eva_attention_rows(split):
    """EvaAttention's own q, k and v rows (`_eva`): beside the fused ``qkv`` kernel its ``q_bias`` and
    ``v_bias``, or, `split`, all apart (``q_proj``, ``k_proj`` without bias, ``v_proj``)."""
    ours, rotary = "encoder_block_{i}/attention/", r.even_first
    if split:
        return [*r.dense_rows(ours + "query", _B + "attn.q_proj", r.TORCH, rotary(r.HEADS_IN),
                              rotary(r.HEADS_BIAS), _eva),
                r.row(ours + "key/kernel", _B + "attn.k_proj.weight", rotary(r.HEADS_IN), _eva),
                *r.dense_rows(ours + "value", _B + "attn.v_proj", r.TORCH, r.HEADS_IN, r.HEADS_BIAS, _eva)]
    return [r.row(ours + "query/bias", _B + "attn.q_bias", rotary(r.HEADS_BIAS), _eva),
            r.row(ours + "value/bias", _B + "attn.v_bias", r.HEADS_BIAS, _eva)]


def _block_rows(unpacked, split=False):
    return [
        *r.norm_rows("encoder_block_{i}/norm1", _B + "norm1", r.TORCH),
        *([] if split else _qkv_rows("kernel", "weight", r.HEADS_IN, r.always)),  # fused q, k, v
        *_qkv_rows("bias", "bias", r.HEADS_BIAS, lambda c: c.qkv_bias and not _eva(c)),
        *_eva_attention_rows(split),
        *r.norm_rows("encoder_block_{i}/attention/out_norm", _B + "attn.norm", r.TORCH, r.HEADS_BIAS,
                     when=lambda c: c.attention_norm),  # Eva's scale_attn_inner: (D,) as (heads, head_dim)
        *r.dense_rows("encoder_block_{i}/attention/out", _B + "attn.proj", r.TORCH, r.HEADS_OUT,
                      has_bias=lambda c: c.out_bias),
        *r.norm_rows("encoder_block_{i}/attention/query_norm", _B + "attn.q_norm", r.TORCH, when=lambda c: c.qk_norm),
        *r.norm_rows("encoder_block_{i}/attention/key_norm", _B + "attn.k_norm", r.TORCH, when=lambda c: c.qk_norm),
        *r.norm_rows("encoder_block_{i}/norm2", _B + "norm2", r.TORCH),
        *_mlp_rows(unpacked),
        *(r.row(f"encoder_block_{{i}}/layer_scale_{j}", _B + (f"gamma_{j}" if rope else f"ls{j}.gamma"),
                when=lambda c, rope=rope: c.layer_scale_init is not None and c.uses_rope == rope)
          for j in (1, 2) for rope in (False, True)),  # Eva's gamma_1, gamma_2
    ]


EMBED_ROWS = [
    *r.dense_rows("patch_embedding/projection", "patch_embed.proj", r.TORCH, r.CONV, has_bias=lambda c: c.patch_bias),
    *r.norm_rows("patch_norm", "patch_embed.norm", r.TORCH, when=lambda c: c.patch_norm),
    r.row("class_token/tokens", "cls_token", when=lambda c: c.uses_class_token),
    r.row("distillation_token/tokens", "dist_token", when=lambda c: c.distillation),
    r.row("registers/tokens", "reg_token", when=lambda c: c.num_registers),
    r.row("position_embedding/embeddings", "pos_embed", when=lambda c: c.position_table == "learned"),
    *r.norm_rows("norm_pre", "norm_pre", r.TORCH, when=lambda c: c.norm_pre),
]
TOP_ROWS = [
    *r.norm_rows("encoder_norm", "norm", r.TORCH, when=lambda c: c.final_norm and not c.fc_norm),
    *r.norm_rows("fc_norm", "fc_norm", r.TORCH, when=lambda c: c.fc_norm),
    r.row("pooling/probe", "attn_pool.latent", when=r.MAP),
    *r.dense_rows("pooling/attention/query", "attn_pool.q", r.TORCH, r.POOL_IN, r.POOL_BIAS, r.MAP),
    r.row(("pooling/attention/key/kernel", "pooling/attention/value/kernel"), "attn_pool.kv.weight",
          r.fused(2, r.POOL_IN), when=r.MAP),
    r.row(("pooling/attention/key/bias", "pooling/attention/value/bias"), "attn_pool.kv.bias",
          r.fused(2, r.POOL_BIAS), when=r.MAP),
    *r.dense_rows("pooling/attention/out", "attn_pool.proj", r.TORCH, r.POOL_OUT, when=r.MAP),
    *r.norm_rows("pooling/norm", "attn_pool.norm", r.TORCH, when=r.MAP),
    *r.dense_rows("pooling/mlp/fc1", "attn_pool.mlp.fc1", r.TORCH, r.LINEAR, when=r.MAP),
    *r.dense_rows("pooling/mlp/fc2", "attn_pool.mlp.fc2", r.TORCH, r.LINEAR, when=r.MAP),
    *r.dense_rows("pre_logits", "pre_logits.fc", r.TORCH, r.LINEAR, when=lambda c: c.representation_size),
    *r.dense_rows("head", "head", r.TORCH, r.LINEAR, when=lambda c: c.num_classes),
    *r.dense_rows("head_dist", "head_dist", r.TORCH, r.LINEAR, when=lambda c: c.distills_by_head),
]


def key_map(c, unpacked=False, split=False):
    """timm's ``VisionTransformer`` (and ``VisionTransformerDistilled``) map of a `ViTConfig` `c`'s model,
    and its ``Eva``'s where `c` is rotary; `unpacked`: a SwiGLU MLP in timm's ``SwiGLU`` (``fc1_g``,
    ``fc1_x``: AIMv2's, EVA-02 B and L's), not its ``SwiGLUPacked`` (one ``fc1``: DINOv2's, EVA-02 Ti and
    S's); `split`: EvaAttention's q, k and v apart (EVA-02 B and L's)."""
    return [*EMBED_ROWS, *r.blocks(_block_rows(unpacked, split), c.num_layers), *TOP_ROWS]


def unpacked_swiglu(c):
    """Whether `write_timm` writes `c`'s SwiGLU unpacked: as AIMv2's architecture (`written_timm_architecture`)
    has it, and timm's Eva where the MLP has a norm (EVA-02 B's)."""
    return c.mlp_activation == "swiglu" and (written_timm_architecture(c).startswith("aimv2")
                                             or (c.uses_rope and c.mlp_norm))


def split_qkv(c):
    """Whether `write_timm` writes `c`'s EvaAttention with q, k and v apart: EVA-02 B's."""
    return _eva(c) and written_timm_architecture(c).startswith("eva02_base")


def mlp_ratio_factor(c):
    """``int(embed_dim * mlp_ratio)`` over ``mlp_dim`` in timm's model of `c`: 2 where one ``fc1`` holds both
    halves of a packed SwiGLU (Eva's doubles it itself)."""
    return 2 if c.mlp_activation == "swiglu" and not unpacked_swiglu(c) and not c.uses_rope else 1


_PREFIX_TOKENS = ("cls_token", "dist_token", "reg_token")


def _pad_position_embeddings(tensors, no_embed_class):
    """timm's ``no_embed_class`` table (the patches' rows alone) with zero rows for the prefix tokens, which
    add none: the table keras_vit keeps.

    Returns:
        the number of patch rows.
    """
    prefix = sum(tensors[k].shape[1] for k in _PREFIX_TOKENS if k in tensors)
    posemb = tensors["pos_embed"]
    rows_ = posemb.shape[1]
    if no_embed_class is None:  # told by the shape: a table of the patches alone is square
        no_embed_class = rows_ <= prefix or (square_grid(rows_ - prefix) is None and square_grid(rows_) is not None)
    if no_embed_class and prefix:
        tensors["pos_embed"] = np.concatenate([np.zeros((1, prefix, posemb.shape[-1]), posemb.dtype), posemb], 1)
    return tensors["pos_embed"].shape[1] - prefix


def _read_config(tensors, meta, args, num_heads, source):
    """The model's `ViT` arguments, from the hub config `meta`, the arguments its timm architecture is built
    with (`timm_architecture_args`) and the tensors' names and shapes."""
    kernel = tensors["patch_embed.proj.weight"]
    hidden_dim = kernel.shape[0]
    activation, epsilon = _numerics(meta, args)
    unpacked = "blocks.0.mlp.fc1_g.weight" in tensors  # timm's SwiGLU (AIMv2)
    fc1, fc2 = tensors["blocks.0.mlp.fc1_g.weight" if unpacked else "blocks.0.mlp.fc1.weight"], \
        tensors["blocks.0.mlp.fc2.weight"]
    num_layers = 0
    while f"blocks.{num_layers}.norm1.weight" in tensors:
        num_layers += 1
    config = dict(
        hidden_dim=hidden_dim, patch_size=tuple(kernel.shape[2:]), num_channels=kernel.shape[1],
        layer_norm_epsilon=epsilon, gelu_approximate=activation["gelu_approximate"], num_layers=num_layers,
        mlp_dim=fc2.shape[1],
        # timm's SwiGLUPacked (DINOv2 giant): fc1 holds [gate; value]; its SwiGLU (AIMv2) has both
        mlp_activation="swiglu" if unpacked or fc1.shape[0] == 2 * fc2.shape[1] else activation["mlp_activation"],
        qkv_bias=any(f"blocks.0.attn.{k}" in tensors for k in ("qkv.bias", "q_bias", "q_proj.bias")),
        mlp_norm="blocks.0.mlp.norm.weight" in tensors, qk_norm="blocks.0.attn.q_norm.weight" in tensors,
        attention_norm="blocks.0.attn.norm.weight" in tensors, patch_bias="patch_embed.proj.bias" in tensors,
        norm_pre="norm_pre.weight" in tensors, patch_norm="patch_embed.norm.weight" in tensors,
        out_bias="blocks.0.attn.proj.bias" in tensors, mlp_bias="blocks.0.mlp.fc2.bias" in tensors,
        fc_norm="fc_norm.weight" in tensors, final_norm="norm.weight" in tensors or "fc_norm.weight" in tensors,
        distillation="dist_token" in tensors,
        num_registers=tensors["reg_token"].shape[1] if "reg_token" in tensors else 0,
        num_classes=tensors["head.weight"].shape[0] if "head.weight" in tensors else 0)
    # before the head count (the architecture's, taken where its width is the weights') and
    # Eva's pooling head are read
    # timm's MLP width: fc1's (fc1_g's) output; in Eva, which doubles a packed SwiGLU's itself, fc2's input
    mlp_width = fc2.shape[1] if args.get("use_rot_pos_emb") else fc1.shape[0]
    _check_sizes(meta, args, config, mlp_width, tensors, source)
    config["num_heads"] = _heads(args, hidden_dim, num_heads, source)
    # timm's RmsNorm (its LayerNorms always have a bias): by the timm architecture, or a bare file's keys
    if _layer(args.get("norm_layer") or "layernorm")[0] == "rmsnorm" or "blocks.0.norm1.bias" not in tensors:
        config.update(norm_type="rms_norm", norm_bias=False)
    if config["mlp_activation"] == "silu":
        raise CheckpointError(f"{source}: act_layer 'silu' in an MLP that is not gated: keras_vit "
                              "runs SiLU in SwiGLU only ('gelu', 'gelu_tanh' and 'quick_gelu' otherwise).")
    if "blocks.0.ls1.gamma" in tensors:
        config["layer_scale_init"] = args.get("init_values") or 1e-5
    if "pre_logits.fc.weight" in tensors:
        config["representation_size"] = tensors["pre_logits.fc.weight"].shape[0]
    config.update(_pooling(meta, args, tensors, source))
    if args.get("use_rot_pos_emb"):
        config.update(_eva_config(args, tensors, config, source))
    pretrained_cfg = meta.get("pretrained_cfg") or {}
    if "mean" in pretrained_cfg and "std" in pretrained_cfg:  # timm's normalisation of [0, 1] pixels
        config.update(scaling_of_normalization(pretrained_cfg["mean"], pretrained_cfg["std"], config["num_channels"]))
    names = meta.get("label_names")
    if names and len(names) == config["num_classes"]:
        config["class_names"] = [str(n) for n in names]
    return config


def _pooling(meta, args, tensors, source):
    """The pooling (and a [class] token beside one that does not read it): the attention pool's
    where its keys are there, else, beside a [class] token, config.json's ``global_pool``."""
    pooling = "map" if "attn_pool.latent" in tensors else "token" if "cls_token" in tensors else "gap"
    if "cls_token" in tensors and pooling != "map":
        pool = meta.get("global_pool", args.get("global_pool", "token"))
        if pool not in ("token", "", "avg"):
            raise CheckpointError(
                f"{source}: global_pool {pool!r} over a model with a [class] token; keras_vit "
                "reads 'token', 'avg' (the patch tokens' mean) and 'map'.")
        pooling = _POOLS[pool or "token"]
    return dict(pooling=pooling, **({"class_token": True} if "cls_token" in tensors and pooling != "token" else {}))


def _eva_config(args, tensors, config, source):
    """EVA-02's, the Perception Encoder's and timm's rotary ViTs' options in timm's Eva `args`: rotary
    embeddings on the index grid (timm's ``RotaryEmbeddingCat``) beside the learned table or alone (`ARGS`'
    rows of their fields), EvaAttention's missing key bias, Eva's LayerScale (``gamma_1``, ``gamma_2``) and
    the attention pool's own size, never held to the blocks' rules (`r.POOL_IN`). Its pool's MLP is GELU
    whatever the blocks' MLP: beside SwiGLU blocks, which keras_vit's pool follows, it is refused."""
    eva = dict(r.read_settings([arg for arg in _of("Eva").values() if arg.ours], args, source), rope_grid="index",
               key_bias=args.get("attn_type", "eva") != "eva" or not config["qkv_bias"])  # EvaAttention's: none
    if "blocks.0.gamma_1" in tensors:
        eva["layer_scale_init"] = args.get("init_values") or 1e-5
    if "attn_pool.latent" in tensors:
        if config["mlp_activation"] == "swiglu":
            raise CheckpointError(
                f"{source}: timm's Eva builds its attention pool with a GELU MLP beside SwiGLU blocks "
                "(swiglu_mlp with global_pool='map'), and keras_vit's attention pool runs the blocks' "
                "MLP activation. Nothing was read.")
        heads = args.get("attn_pool_num_heads") or config["num_heads"]
        width = tensors["attn_pool.mlp.fc1.weight"].shape[0]
        eva.update(pooling_num_heads=None if heads == config["num_heads"] else heads,
                   pooling_mlp_dim=None if width == config["mlp_dim"] else width)
    return eva


def _pool_refusal(meta, args, tensors):
    """Why a file whose attention pool sits beside prefix tokens is not read, or None. keras_vit's attention
    pool takes every token, as timm's Eva does and its VisionTransformer with ``pool_include_prefix``; a bare
    file of such keys (no config.json) is the Perception Encoder's kind, whose rotary embeddings and
    LayerNorm epsilon no tensor records."""
    if ("attn_pool.latent" not in tensors or not any(k in tensors for k in _PREFIX_TOKENS)
            or args.get("use_rot_pos_emb") or args.get("pool_include_prefix")):
        return None
    if "architecture" not in meta and not meta.get("model_args"):
        return ("its keys show an attention-pooling head beside a [class] token or registers, as timm's "
                "Eva of the Perception Encoder (vit_pe_core_*) has them, whose rotary embeddings and "
                "LayerNorm epsilon are in no tensor: keras_vit reads a file as its timm architecture, "
                "never by matching key names. Read the timm hub folder: this model.safetensors beside the "
                "config.json timm saved with it (save_for_hf; the Hub's timm/<architecture> folders have "
                "it), which names its architecture and model_args")
    return ("its attention pool takes the patch tokens alone (timm's VisionTransformer without "
            "pool_include_prefix), and keras_vit's takes every token, the [class] token and registers too")


def read_timm(path, num_heads=None):
    """Reads a timm ViT ``.safetensors`` file (or a timm hub directory with ``config.json``, which gives the
    head count, numerics and class names): the paper's ViT and the family timm keeps in
    ``VisionTransformer``: DeiT (distilled), DINOv2 (registers, LayerScale, SwiGLU), CLIP (a LayerNorm before
    the encoder, no patch bias, QuickGELU), SigLIP (MAP), AIMv2, RADIO, ``fc_norm`` and ``qk_norm``; and, by
    its config.json alone, the rotary models timm keeps in ``Eva``: EVA-02 and its CLIP towers, the
    Perception Encoder, timm's rotary ViTs. A key it does not know is refused by name, and a file is read as
    its timm architecture, never by its keys."""
    path = pathlib.Path(path)
    meta = {}
    if path.is_dir():
        meta = read_config_json(path / "config.json")
        path = path / "model.safetensors"
    source = f"timm checkpoint {path}"
    tensors = load_safetensors(path)
    unpacked = "blocks.0.mlp.fc1_g.weight" in tensors  # timm's SwiGLU (AIMv2)
    args = timm_architecture_args(meta, source)
    refusal = _pool_refusal(meta, args, tensors)
    if refusal:
        raise CheckpointError(f"{source}: {refusal}. Nothing was read.")
    table = args.get("use_abs_pos_emb", True)  # Eva's rotary ViTs may have no position table
    r.require_keys(tensors, ("patch_embed.proj.weight", *["pos_embed"] * table, "blocks.0.mlp.fc1_x.weight"
                             if unpacked else "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc2.weight"), source)
    patches = _pad_position_embeddings(tensors, args.get("no_embed_class")) if table else None
    config = _read_config(tensors, meta, args, num_heads, source)
    grid = square_grid(patches) if table else None
    size = args.get("img_size") or (None if table else (meta.get("pretrained_cfg") or {}).get("input_size", [])[1:])
    if size:  # the architecture's size, for any grid
        grid = tuple(int(s) // p for s, p in zip(np.broadcast_to(size, (2,)), config["patch_size"]))
    patches = patches or (grid[0] * grid[1] if grid else None)
    if grid:
        config["image_size"] = tuple(g * p for g, p in zip(grid, config["patch_size"]))
    c = config_view(config)
    state = r.move(key_map(c, unpacked, "blocks.0.attn.q_proj.weight" in tensors), tensors, c, source)
    timm_architecture = str(meta.get("architecture", ""))  # its own resampling: DINOv2's, RADIO's (CPE)
    method = "dinov2" if "dinov2" in timm_architecture else "cpe" if "_radio_" in timm_architecture else "bilinear"
    return Checkpoint(config, state, source, grid, patches, resample_method=method)


# What a bare ``.safetensors`` file cannot record and a reader infers: each option that changes
# the numbers, as a function of a config (None: the option does not apply; `_check_bare`).
_BARE = {
    "mlp_activation": lambda c: c.mlp_activation,
    "gelu_approximate": lambda c: c.gelu_approximate if c.mlp_activation == "gelu" else None,
    "layer_norm_epsilon": lambda c: c.layer_norm_epsilon,
    "pooling": lambda c: c.pooling,
    "position_embedding": lambda c: c.position_embedding,
}


def _check_bare(model, tensors):
    """Refuses to write `model` as a bare timm ``.safetensors`` file (its `tensors` alone) where reading the
    file back would build another model: the tensors do not record the activation's form, the LayerNorm
    epsilon, the pooling or rotary embeddings, and a reader takes timm's defaults (exact GELU, 1e-6, the
    [class] token, a learned table); nor is an attention pool beside prefix tokens read without config.json
    (`_pool_refusal`)."""
    c = model.config
    read = config_view(_read_config(tensors, {}, {}, c.num_heads, "the file"))
    lost = [f"{name}={get(c)!r} (it would read as {get(read)!r})"
            for name, get in _BARE.items() if get(c) is not None and get(read) != get(c)]
    if _pool_refusal({}, {}, tensors):
        lost.append("its attention pool beside prefix tokens (refused without config.json)")
    if lost:
        raise ValueError(
            f"{model.name} cannot be written as a bare timm .safetensors file: the file holds the tensors "
            f"alone, and reading it would not give back {', '.join(lost)}. Nothing was written. Write the "
            "timm hub folder instead (a path without .safetensors: its config.json records them).")


def written_timm_architecture(c):
    """The timm architecture `write_timm` names for a `ViTConfig` `c`: the model class and what
    ``model_args`` cannot say (the LayerNorm epsilon, `written_epsilon`); ``model_args`` give every size."""
    return ("deit_base_distilled_patch16_224" if c.distillation
            else _written_eva_architecture(c) if c.uses_rope and c.rope_grid == "index"
            else "aimv2_large_patch14_224" if c.norm_type == "rms_norm"
            else "vit_giant_patch14_dinov2" if c.mlp_activation == "swiglu"
            else "vit_base_patch16_clip_224" if c.norm_pre else "vit_base_patch16_224")


def _written_eva_architecture(c):
    """The timm ``Eva`` architecture `write_timm` names for a rotary `c`: one whose defaults ``model_args``
    need not take away: a reference grid (PE's, whose epsilon is 1e-5; EVA-02's, 1e-6, with q, k and v apart
    where its MLP has a norm; its CLIP towers' with the attention's norm too; with registers and LayerScale,
    timm's rotary ViTs of SBB's), or none (timm's rotary ViTs, Heo et al., 2024, with a table or none)."""
    if c.rope_reference_grid is None:
        return "vit_base_patch16_rope_ape_224" if c.position_embedding == "learned_rope" else "vit_base_patch16_rope_224"
    if c.layer_norm_epsilon == 1e-5:
        return "vit_pe_core_tiny_patch16_384"
    if c.num_registers and c.layer_scale_init is not None:  # timm's rotary ViTs with registers (SBB's)
        return "vit_base_patch16_rope_reg1_gap_256"
    if c.attention_norm:  # EVA-02's CLIP towers
        return "eva02_base_patch16_clip_224"
    return "eva02_base_patch14_224" if c.mlp_norm else "eva02_tiny_patch14_224"


def written_epsilon(c):
    """The LayerNorm epsilon of `written_timm_architecture`: the only one a timm folder holds for `c`."""
    return timm_epsilon(architectures()["architectures"][written_timm_architecture(c)]["args"])


def _written_args(c):
    """timm's arguments of a `ViTConfig` `c` (`ARGS`), for the model class of its timm architecture
    (`written_timm_architecture`): each one that architecture sets, written."""
    timm_class = "Eva" if c.uses_rope else "VisionTransformerDistilled" if c.distillation else "VisionTransformer"
    return r.write_settings([arg for arg in _of(timm_class).values() if arg.write], c)


def _table_of_the_patches(c, tensors):
    """A table whose prefix tokens' rows are all zero (read from timm's ``no_embed_class``, as DINOv2 with
    registers, RADIO and the ``_rope_ape`` ViTs have it: `_pad_position_embeddings`) written as timm keeps
    it, the patches' rows alone, so that the folder is timm's own key for key.

    Returns:
        whether `tensors`' ``pos_embed`` became the patches' rows.
    """
    table, prefix = tensors.get("pos_embed"), c.num_prefix_tokens
    if table is None or not prefix or np.any(table[:, :prefix]):
        return False
    tensors["pos_embed"] = table[:, prefix:]
    return True


def write_timm(model, path):
    """`model` as a timm ``VisionTransformer`` state dict (``Eva``'s, where its position embeddings are
    rotary): a ``.safetensors`` file, or a hub folder with its ``config.json`` (``model_args``,
    `_written_args`)."""
    c = model.config
    tensors = r.write_rows(key_map(c, unpacked_swiglu(c), split_qkv(c)), model_state(model), c, model.name, "timm")
    if path.suffix == ".safetensors":
        _check_bare(model, tensors)
        files.write_atomic(path, safetensors_bytes(tensors))
        return
    model_args = _written_args(c)
    model_args["no_embed_class"] = _table_of_the_patches(c, tensors)
    config = {
        "architecture": written_timm_architecture(c), "num_classes": c.num_classes, "num_features": c.hidden_dim,
        "global_pool": model_args["global_pool"], "model_args": model_args,
        # mean and std of pixels in [0, 1]: the model's scaling (the paper's [-1, 1]: 0.5 and 0.5)
        "pretrained_cfg": {"input_size": [c.num_channels, *c.image_size], "interpolation": "bicubic",
                           **dict(zip(("mean", "std"), mean_and_std(c))), "crop_pct": 1.0,
                           "num_classes": c.num_classes, "classifier": "head"},
    }
    if c.class_names:
        config["label_names"] = list(c.class_names)
    write_files(path, tensors, config)
