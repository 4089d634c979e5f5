"""timm ``VisionTransformer`` state dicts saved as ``.safetensors``: read and written."""

import dataclasses
import functools
import importlib.resources
import json
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

# OpenAI-trained CLIP weights (and these others) run QuickGELU; timm's plain
# `*_clip_*` entry points build erf GELU for them (their pretrained_cfg notes
# say so), its `*_clip_quickgelu_*` ones the weights' own.
_QUICKGELU_TAGS = ("openai", "metaclip_400m", "metaclip_2pt5b", "metaclip2_worldwide", "dfn2b",
                   "dfn5b")


@functools.cache
def architectures():
    """timm's table of its ViT architectures (``timm_architectures.json``,
    made by tests/data/make_timm_architectures.py): ``{"timm": version,
    "architectures": {name: {"module", "class", "args"}}}``, every
    architecture of timm's ``vision_transformer``, ``deit`` and ``eva``
    modules with the model class and arguments its entry point builds."""
    text = importlib.resources.files("keras_vit.weights").joinpath("timm_architectures.json").read_text("utf-8")
    return json.loads(text)


def _layer(value):
    """A layer argument of the table (a name, or ``{"partial": name, **keywords}``)
    as (its name in lower case without underscores, its keywords)."""
    if isinstance(value, dict):
        return str(value["partial"]).lower().replace("_", ""), {k: v for k, v in value.items() if k != "partial"}
    return str(value).lower().replace("_", ""), {}


# timm's act_layer <-> our (mlp_activation, gelu_approximate), both ways (`r.activation`):
# written as timm's names, read by them without case or underscores (`_layer`)
_ACT_LAYERS = {"gelu": ("gelu", False), "gelu_tanh": ("gelu", True), "quick_gelu": ("quick_gelu", False)}
_ACT_LAYER = r.activation("act_layer", _ACT_LAYERS)
# timm's global_pool <-> our pooling, both ways ("": the [class] token, as timm's default)
_POOLS = {"token": "token", "avg": "gap", "map": "map"}
_GLOBAL_POOL = r.Setting("global_pool", "pooling", lambda pool: _POOLS[pool or "token"], "token",
                         lambda c: {ours: theirs for theirs, ours in _POOLS.items()}[c.pooling])


# The arguments of timm's VisionTransformer that change a model's numbers, each
# with the values keras_vit reads (None: any; its meaning is read from the
# tensors or below). Another value is refused by name, and so is an argument
# in neither list.
_ARGUMENTS = {
    **dict.fromkeys(("img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth",
                     "num_heads", "mlp_ratio", "qkv_bias", "qk_norm", "init_values", "class_token",
                     "reg_tokens", "no_embed_class", "pre_norm", "fc_norm")),
    "global_pool": ("", *_POOLS), "pos_embed": ("learn",), "final_norm": (True, False),
    "scale_attn_norm": (False,), "scale_mlp_norm": (False,),
    "pool_include_prefix": (False,), "embed_layer": ("patchembed",),
    "block_fn": ("block",), "attn_layer": ("attention",), "proj_bias": None,
    "norm_layer": (None, "layernorm", "rmsnorm"), "embed_norm_layer": (None, "rmsnorm"),
    "act_layer": (None, *(name.replace("_", "") for name in _ACT_LAYERS), "silu"),
    # gated SiLU: fc1 holding both halves (the second and third), or fc1_g and fc1_x (SwiGLU, AIMv2's)
    "mlp_layer": ("mlp", "swiglupacked", "glumlp", "swiglu"),
}
# Arguments for training or for inputs of other sizes: a loaded model's numbers are the same.
_TRAINING_ARGUMENTS = ("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate",
                       "attn_drop_rate", "drop_path_rate", "weight_init", "fix_init",
                       "dynamic_img_size", "dynamic_img_pad", "device", "dtype")
# timm's Eva (eva.py) as EVA-02, the Perception Encoder and timm's rotary ViTs build it: its arguments keras_vit
# reads, as _ARGUMENTS, and the defaults of Eva's own that an entry point leaves as they are
_EVA_ARGUMENTS = {
    **dict.fromkeys(("img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads",
                     "mlp_ratio", "qkv_bias", "init_values", "class_token", "use_pre_transformer_norm",
                     "ref_feat_shape", "rope_grid_offset", "rope_temperature", "attn_pool_num_heads",
                     "attn_pool_mlp_ratio", "swiglu_mlp", "scale_mlp", "scale_attn_inner")),
    # attn_type "rope": timm's AttentionRope (PE's, fused q, k, v and their biases); "eva":
    # EvaAttention (EVA-02's, query and value biases alone, q, k, v fused or apart)
    "global_pool": ("token", "avg", "map"), "attn_type": ("rope", "eva"), "use_rot_pos_emb": (True,),
    "use_abs_pos_emb": (True, False), "rope_type": ("cat",), "rope_rotate_half": (False,),
    "rope_grid_indexing": ("ij", "xy"), "qkv_fused": None, "num_reg_tokens": None,
    "no_embed_class": (False, True), "use_fc_norm": (None, True, False), "use_post_transformer_norm": None,
    "norm_layer": (None, "layernorm"), "head_init_scale": None,
}
_EVA_DEFAULTS = dict(attn_type="eva", use_rot_pos_emb=False, global_pool="avg", use_abs_pos_emb=True,
                     rope_type="cat", rope_grid_offset=0.0,
                     rope_grid_indexing="ij", rope_temperature=10000.0, class_token=True)
_CLASSES = {"VisionTransformer": ({}, _ARGUMENTS), "VisionTransformerDistilled": ({}, _ARGUMENTS),
            "Eva": (_EVA_DEFAULTS, _EVA_ARGUMENTS)}


def architecture_args(meta, source):
    """The arguments timm builds a hub folder's model with: its
    architecture's entry point's (`architectures`), updated by config.json's
    ``model_args``; ``{}`` for a bare file. Each argument is checked against
    what keras_vit reads, so that a model of another kind is refused by its
    name, never read by matching key names.

    Raises:
        CheckpointError: an architecture not in timm's table, another model
            class, or an argument or value keras_vit's ViT does not have.
    """
    args = dict(meta.get("model_args") or {})
    who = "config.json's model_args"
    if "architecture" in meta:
        table = architectures()
        name = str(meta["architecture"]).split(".")[0]  # drop a ".tag"
        name = table["deprecated"].get(name, name).split(".")[0]  # an old name: the one it stands for
        who = f"timm's {name}"
        entry = table["architectures"].get(name)
        if entry is None:
            raise CheckpointError(
                f"{source}: config.json names timm's architecture {name!r}, which is not one of the "
                f"{len(table['architectures'])} ViT architectures of timm {table['timm']} that keras_vit "
                "knows (its vision_transformer, deit and eva modules), so it is not read: keras_vit "
                "reads a file as its architecture, never by matching key names. If it is a plain "
                "timm VisionTransformer, read its weights file alone with the head count: "
                "ViT.from_checkpoint('.../model.safetensors', num_heads=...).")
        if entry["class"] not in _CLASSES:
            raise CheckpointError(
                f"{source}: timm's {name} is a model of timm's {entry['class']} ({entry['module']}.py), "
                "which keras_vit does not read: its weights are not a ViT's of the paper's kind. "
                "Nothing was read.")
        defaults, table = _CLASSES[entry["class"]]
        args = {**defaults, **entry["args"], **args}
    else:
        table = _EVA_ARGUMENTS if "use_rot_pos_emb" in args else _ARGUMENTS
    refused = []
    for arg, value in args.items():
        allowed = table.get(arg, ())
        read, keywords = _layer(value) if arg.endswith(("_layer", "_fn")) and value is not None else (value, {})
        if arg not in _TRAINING_ARGUMENTS and (
                arg not in table or (allowed is not None and read not in allowed) or keywords.get("gate_last")):
            refused.append(f"{arg}={value!r}")
    if refused:
        raise CheckpointError(
            f"{source}: {who} builds it with {', '.join(refused)}, which keras_vit's ViT does not "
            "have. Nothing was read.")
    return args


def architecture_epsilon(args):
    """The LayerNorm epsilon timm builds with `args`: its ``norm_layer``'s, else VisionTransformer's 1e-6."""
    return float(_layer(args.get("norm_layer") or "layernorm")[1].get("eps", 1e-6))


# The sizes a hub folder's config.json sets that its weights fix too: timm's argument -> (the
# size in words, "{}" its value; its key in what the tensors say, `_sizes`, whose None is a size
# they do not fix; and how the argument's value reads as it, `read(value, sizes)`, where not
# int(value)). mlp_ratio is rounded: timm truncates int(embed_dim * mlp_ratio), and a ratio
# written as a quotient may fall a hair short of the width it stands for.
_SIZES = {
    "embed_dim": ("a width of {}", "hidden_dim"),
    "depth": ("{} blocks", "num_layers"),
    "num_heads": ("{} heads", "heads"),
    "patch_size": ("patches of {0[0]}x{0[1]}", "patch_size",
                   lambda value, sizes: tuple(np.broadcast_to(value, (2,)).tolist())),
    "in_chans": ("{} input channels", "num_channels"),
    "mlp_ratio": ("an MLP {} wide", "mlp_width", lambda value, sizes: round(value * sizes["hidden_dim"])),
    "num_classes": ("{} classes", "num_classes"),
    "reg_tokens": ("{} registers", "num_registers"),
    "num_reg_tokens": ("{} registers", "num_registers"),
}


def _sizes(config, mlp_width, tensors):
    """What the tensors say of `_SIZES`: the reader's `config` (`_read_config`'s), timm's MLP
    width ``int(embed_dim * mlp_ratio)`` as `_read_config` reads it off the weights, and the
    head count where the queries' norm gives the heads' width."""
    norm = tensors.get("blocks.0.attn.q_norm.weight")
    return dict(config, mlp_width=mlp_width, heads=None if norm is None else config["hidden_dim"] // norm.shape[0])


def _check_sizes(meta, args, sizes, source):
    """Refuses a hub folder whose config.json sets a size of `_SIZES` that the weights' `sizes`
    (`_sizes`) contradict, naming the argument and both values: in its ``model_args``, as its
    ``num_classes``, or as its architecture's width (whose head count `_heads` takes)."""
    top = {key: meta[key] for key in ("num_classes",) if key in meta}
    width = {"embed_dim": args["embed_dim"]} if "architecture" in meta and "embed_dim" in args else {}
    for who, values in (("config.json's model_args set", meta.get("model_args") or {}),
                        ("config.json sets", top),
                        (f"config.json names timm's {meta.get('architecture')!r}, built with", width)):
        for arg, value in values.items():
            if arg not in _SIZES or value is None:
                continue
            words, key, *read = _SIZES[arg]
            stated, theirs = read[0](value, sizes) if read else int(value), sizes[key]
            if theirs is not None and stated != theirs:
                raise CheckpointError(
                    f"{source}: {who} {arg}={value!r} ({words.format(stated)}), but the weights have "
                    f"{words.format(theirs)}: the folder mixes two models. Use the config.json saved with "
                    "these weights.")


def _heads(args, hidden_dim, num_heads, source):
    """The head count: given; else the architecture's arguments (`architecture_args`);
    else, for a bare file, timm's standard widths. Never a guess."""
    if num_heads is None:
        num_heads = args.get("num_heads") or _HEADS_BY_WIDTH.get(hidden_dim)
    if num_heads is None:
        raise CheckpointError(
            f"{source}: timm files do not store the number of attention heads, and width "
            f"{hidden_dim} is not one of timm's standard sizes {sorted(_HEADS_BY_WIDTH)}. Pass "
            "it: `ViT.from_checkpoint(path, num_heads=...)`, or load the timm hub folder with "
            "its config.json.")
    if int(num_heads) < 1 or hidden_dim % int(num_heads):
        raise CheckpointError(f"{source}: num_heads={num_heads} does not divide the width {hidden_dim}.")
    return int(num_heads)


def _numerics(meta, args):
    """A timm model's MLP activation (our ``mlp_activation`` and
    ``gelu_approximate``; ``"silu"``: a gated MLP's) and LayerNorm epsilon:
    from its architecture's arguments, where keras_vit reads released weights'
    own activation over timm's entry point (QuickGELU CLIPs, SigLIP's tanh GELU)."""
    architecture = str(meta.get("architecture", ""))
    pretrained_cfg = meta.get("pretrained_cfg") or {}
    tag = str(pretrained_cfg.get("tag", "")).split(".")[0]
    notes = " ".join(map(str, pretrained_cfg.get("notes") or ()))
    act = _layer(args["act_layer"])[0] if args.get("act_layer") else None
    if act is None:
        if "quickgelu" in architecture or "natively QuickGELU" in notes or (
                "_clip_" in architecture and tag in _QUICKGELU_TAGS):
            act = "quickgelu"
        elif "siglip" in architecture:
            act = "gelutanh"  # SigLIP's own (big_vision's); timm's first SigLIP entry points build erf GELU
        else:
            act = "gelu"
    if act == "silu":
        activation = {"mlp_activation": "silu", "gelu_approximate": False}
    else:
        name = {name.replace("_", ""): name for name in _ACT_LAYERS}[act]
        activation = r.read_settings([_ACT_LAYER], {"act_layer": name}, "timm's act_layer")
    return activation, architecture_epsilon(args)


_B = "blocks.{i}."
_QKV = ("query", "key", "value")


def _mlp_rows(unpacked):
    """A block's MLP: ``fc1`` and ``fc2``, or timm's SwiGLU (AIMv2's, `unpacked`):
    ``fc1_g`` and ``fc1_x``, our SwiGLU ``fc1`` in two halves, then ``fc2``. Biases
    where the file or model has them."""
    ours, theirs = "encoder_block_{i}/mlp/", _B + "mlp."
    fc1 = r.dense_rows(ours + "fc1", theirs + "fc1", r.TORCH, r.LINEAR, has_bias=None)
    if unpacked:
        fc1 = [r.row(ours + "fc1/kernel", (theirs + "fc1_g.weight", theirs + "fc1_x.weight"),
                     r.halves(r.LINEAR, -1)),
               r.row("?" + ours + "fc1/bias", ("?" + theirs + "fc1_g.bias", "?" + theirs + "fc1_x.bias"),
                     r.halves(r.SAME, 0))]
    return [*fc1, *r.norm_rows(ours + "norm", theirs + "norm", r.TORCH, when=lambda c: c.mlp_norm),
            *r.dense_rows(ours + "fc2", theirs + "fc2", r.TORCH, r.LINEAR, has_bias=None)]


def _qkv_rows(leaf, theirs, layout, when):
    """timm's fused query, key and value; Eva's rotary query and key turn each
    head's dimensions in interleaved pairs (`keras_vit.weights.rows.even_first`)."""
    ours, theirs = [f"encoder_block_{{i}}/attention/{n}/{leaf}" for n in _QKV], _B + "attn.qkv." + theirs
    return [r.row(ours, theirs, r.fused(3, layout), when=r.both(when, lambda c: not c.uses_rope)),
            r.row(ours, theirs, r.fused(3, [r.even_first(layout)] * 2 + [layout]),
                  when=r.both(when, lambda c: c.uses_rope))]


def _eva(c):
    """Whether `c` is timm's EvaAttention's (EVA-02's): rotary, a query and value bias, no key bias."""
    return c.uses_rope and not c.key_bias


def _eva_attention_rows(split):
    """EvaAttention's own q, k and v rows (`_eva`): beside the fused ``qkv`` kernel its
    ``q_bias`` and ``v_bias``, or, `split`, all apart (``q_proj``, ``k_proj`` without
    bias, ``v_proj``)."""
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
        *r.norm_rows("encoder_block_{i}/attention/query_norm", _B + "attn.q_norm", r.TORCH,
                     when=lambda c: c.qk_norm),
        *r.norm_rows("encoder_block_{i}/attention/key_norm", _B + "attn.k_norm", r.TORCH,
                     when=lambda c: c.qk_norm),
        *r.norm_rows("encoder_block_{i}/norm2", _B + "norm2", r.TORCH),
        *_mlp_rows(unpacked),
        *(r.row(f"encoder_block_{{i}}/layer_scale_{j}", _B + (f"gamma_{j}" if rope else f"ls{j}.gamma"),
                when=lambda c, rope=rope: c.layer_scale_init is not None and c.uses_rope == rope)
          for j in (1, 2) for rope in (False, True)),  # Eva's gamma_1, gamma_2
    ]


_MAP = (lambda c: c.pooling == "map")
_POOL_IN, _POOL_BIAS = r.pooling_heads(r.HEADS_IN), r.pooling_heads(r.HEADS_BIAS)
EMBED_ROWS = [
    *r.dense_rows("patch_embedding/projection", "patch_embed.proj", r.TORCH, r.CONV,
             has_bias=lambda c: c.patch_bias),
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
    r.row("pooling/probe", "attn_pool.latent", when=_MAP),
    *r.dense_rows("pooling/attention/query", "attn_pool.q", r.TORCH, _POOL_IN, _POOL_BIAS, _MAP),
    r.row(("pooling/attention/key/kernel", "pooling/attention/value/kernel"), "attn_pool.kv.weight",
          r.fused(2, _POOL_IN), when=_MAP),
    r.row(("pooling/attention/key/bias", "pooling/attention/value/bias"), "attn_pool.kv.bias",
          r.fused(2, _POOL_BIAS), when=_MAP),
    *r.dense_rows("pooling/attention/out", "attn_pool.proj", r.TORCH, r.pooling_heads(r.HEADS_OUT), when=_MAP),
    *r.norm_rows("pooling/norm", "attn_pool.norm", r.TORCH, when=_MAP),
    *r.dense_rows("pooling/mlp/fc1", "attn_pool.mlp.fc1", r.TORCH, r.LINEAR, when=_MAP),
    *r.dense_rows("pooling/mlp/fc2", "attn_pool.mlp.fc2", r.TORCH, r.LINEAR, when=_MAP),
    *r.dense_rows("pre_logits", "pre_logits.fc", r.TORCH, r.LINEAR, when=lambda c: c.representation_size),
    *r.dense_rows("head", "head", r.TORCH, r.LINEAR, when=lambda c: c.num_classes),
    *r.dense_rows("head_dist", "head_dist", r.TORCH, r.LINEAR, when=lambda c: c.distills_by_head),
]


def key_map(c, unpacked=False, split=False):
    """timm's ``VisionTransformer`` (and ``VisionTransformerDistilled``) map of a
    `ViTConfig` `c`'s model, and its ``Eva``'s where `c` is rotary; `unpacked`: a
    SwiGLU MLP in timm's ``SwiGLU`` (``fc1_g``, ``fc1_x``: AIMv2's, EVA-02 B and L's),
    not its ``SwiGLUPacked`` (one ``fc1``: DINOv2's, EVA-02 Ti and S's); `split`:
    EvaAttention's q, k and v apart (EVA-02 B and L's)."""
    return [*EMBED_ROWS, *r.blocks(_block_rows(unpacked, split), c.num_layers), *TOP_ROWS]


def unpacked_swiglu(c):
    """Whether `write_timm` writes `c`'s SwiGLU unpacked: as AIMv2's architecture
    (`written_architecture`) has it, and timm's Eva where the MLP has a norm (EVA-02 B's)."""
    return c.mlp_activation == "swiglu" and (written_architecture(c).startswith("aimv2")
                                             or (c.uses_rope and c.mlp_norm))


def split_qkv(c):
    """Whether `write_timm` writes `c`'s EvaAttention with q, k and v apart: EVA-02 B's."""
    return _eva(c) and written_architecture(c).startswith("eva02_base")


def mlp_ratio_factor(c):
    """``int(embed_dim * mlp_ratio)`` over ``mlp_dim`` in timm's model of `c`:
    2 where one ``fc1`` holds both halves of a packed SwiGLU (Eva's doubles it itself)."""
    return 2 if c.mlp_activation == "swiglu" and not unpacked_swiglu(c) and not c.uses_rope else 1


_PREFIX_TOKENS = ("cls_token", "dist_token", "reg_token")


def _pad_position_embeddings(tensors, no_embed_class):
    """timm's ``no_embed_class`` table (the patches' rows alone) with zero
    rows for the prefix tokens, which add none: the table keras_vit keeps.

    Returns:
        the number of patch rows.
    """
    prefix = sum(tensors[k].shape[1] for k in _PREFIX_TOKENS if k in tensors)
    posemb = tensors["pos_embed"]
    rows_ = posemb.shape[1]
    if no_embed_class is None:  # told by the shape: a table of the patches alone is square
        no_embed_class = rows_ <= prefix or (square_grid(rows_ - prefix) is None
                                             and square_grid(rows_) is not None)
    if no_embed_class and prefix:
        tensors["pos_embed"] = np.concatenate(
            [np.zeros((1, prefix, posemb.shape[-1]), posemb.dtype), posemb], 1)
    return tensors["pos_embed"].shape[1] - prefix


def _read_config(tensors, meta, args, num_heads, source):
    """The model's `ViT` arguments, from the hub config `meta`, the
    arguments its architecture is built with (`architecture_args`) and the
    tensors' names and shapes."""
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
        layer_norm_epsilon=epsilon,
        gelu_approximate=activation["gelu_approximate"], num_layers=num_layers, mlp_dim=fc2.shape[1],
        # timm's SwiGLUPacked (DINOv2 giant): fc1 holds [gate; value]; its SwiGLU (AIMv2) has both
        mlp_activation="swiglu" if unpacked or fc1.shape[0] == 2 * fc2.shape[1] else activation["mlp_activation"],
        qkv_bias=any(f"blocks.0.attn.{k}" in tensors for k in ("qkv.bias", "q_bias", "q_proj.bias")),
        mlp_norm="blocks.0.mlp.norm.weight" in tensors, qk_norm="blocks.0.attn.q_norm.weight" in tensors,
        attention_norm="blocks.0.attn.norm.weight" in tensors,
        patch_bias="patch_embed.proj.bias" in tensors, norm_pre="norm_pre.weight" in tensors,
        patch_norm="patch_embed.norm.weight" in tensors, out_bias="blocks.0.attn.proj.bias" in tensors,
        mlp_bias="blocks.0.mlp.fc2.bias" in tensors,
        fc_norm="fc_norm.weight" in tensors, final_norm="norm.weight" in tensors or "fc_norm.weight" in tensors,
        distillation="dist_token" in tensors,
        num_registers=tensors["reg_token"].shape[1] if "reg_token" in tensors else 0,
        num_classes=tensors["head.weight"].shape[0] if "head.weight" in tensors else 0,
    )
    # before the head count (the architecture's, taken where its width is the weights') and
    # Eva's pooling head are read
    # timm's MLP width: fc1's (fc1_g's) output; in Eva, which doubles a packed SwiGLU's itself, fc2's input
    mlp_width = fc2.shape[1] if args.get("use_rot_pos_emb") else fc1.shape[0]
    _check_sizes(meta, args, _sizes(config, mlp_width, tensors), source)
    config["num_heads"] = _heads(args, hidden_dim, num_heads, source)
    # timm's RmsNorm (its LayerNorms always have a bias): by the architecture, or a bare file's keys
    if _layer(args.get("norm_layer") or "layernorm")[0] == "rmsnorm" or "blocks.0.norm1.bias" not in tensors:
        config.update(norm_type="rms_norm", norm_bias=False)
    if config["mlp_activation"] == "silu":
        raise CheckpointError(f"{source}: act_layer 'silu' in an MLP that is not gated: keras_vit "
                              "runs SiLU in SwiGLU only ('gelu', 'gelu_tanh' and 'quick_gelu' otherwise).")
    if "blocks.0.ls1.gamma" in tensors:
        config["layer_scale_init"] = args.get("init_values") or 1e-5
    if "pre_logits.fc.weight" in tensors:
        config["representation_size"] = tensors["pre_logits.fc.weight"].shape[0]
    config["pooling"] = "map" if "attn_pool.latent" in tensors else "token" if "cls_token" in tensors else "gap"
    if "cls_token" in tensors and config["pooling"] != "map":
        pool = meta.get("global_pool", args.get("global_pool", "token"))
        if pool not in ("token", "", "avg"):
            raise CheckpointError(
                f"{source}: global_pool {pool!r} over a model with a [class] token; keras_vit "
                "reads 'token', 'avg' (the patch tokens' mean) and 'map'.")
        config.update(r.read_settings([_GLOBAL_POOL], {"global_pool": pool}, source))
    if "cls_token" in tensors and config["pooling"] != "token":
        config["class_token"] = True  # beside the pooling, which does not read it
    if args.get("use_rot_pos_emb"):
        config.update(_eva_config(args, tensors, config))
    pretrained_cfg = meta.get("pretrained_cfg") or {}
    if "mean" in pretrained_cfg and "std" in pretrained_cfg:  # timm's normalisation of [0, 1] pixels
        config.update(scaling_of_normalization(pretrained_cfg["mean"], pretrained_cfg["std"], config["num_channels"]))
    names = meta.get("label_names")
    if names and len(names) == config["num_classes"]:
        config["class_names"] = [str(n) for n in names]
    return config


def _eva_config(args, tensors, config):
    """EVA-02's, the Perception Encoder's and timm's rotary ViTs' options in
    timm's Eva `args`: rotary embeddings on the index grid (timm's
    ``RotaryEmbeddingCat``) beside the learned table or alone, EvaAttention's missing key bias, Eva's LayerScale
    (``gamma_1``, ``gamma_2``) and the MAP head's own size."""
    reference = args.get("ref_feat_shape")
    eva = dict(position_embedding="learned_rope" if args["use_abs_pos_emb"] else "rope", rope_grid="index",
               rope_theta=float(args["rope_temperature"]), rope_grid_offset=float(args["rope_grid_offset"]),
               rope_grid_indexing=args["rope_grid_indexing"],
               rope_reference_grid=None if reference is None else tuple(np.broadcast_to(reference, (2,)).tolist()),
               key_bias=args["attn_type"] != "eva" or not config["qkv_bias"])  # EvaAttention's: none
    if "blocks.0.gamma_1" in tensors:
        eva["layer_scale_init"] = args.get("init_values") or 1e-5
    if "attn_pool.latent" in tensors:
        heads = args.get("attn_pool_num_heads") or config["num_heads"]
        width = tensors["attn_pool.mlp.fc1.weight"].shape[0]
        eva.update(pooling_num_heads=None if heads == config["num_heads"] else heads,
                   pooling_mlp_dim=None if width == config["mlp_dim"] else width)
    return eva


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
        meta = read_config_json(path / "config.json")
        path = path / "model.safetensors"
    source = f"timm checkpoint {path}"
    tensors = load_safetensors(path)
    unpacked = "blocks.0.mlp.fc1_g.weight" in tensors  # timm's SwiGLU (AIMv2)
    args = architecture_args(meta, source)
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
    architecture = str(meta.get("architecture", ""))  # its own resampling: DINOv2's, RADIO's (CPE)
    method = "dinov2" if "dinov2" in architecture else "cpe" if "_radio_" in architecture else "bilinear"
    return Checkpoint(config, state, source, grid, patches, resample_method=method)


# What a bare ``.safetensors`` file cannot record and a reader infers: each option that changes
# the numbers, as a function of a config (None: the option does not apply; `_check_bare`).
_BARE = {
    "mlp_activation": lambda c: c.mlp_activation,
    "gelu_approximate": lambda c: c.gelu_approximate if c.mlp_activation == "gelu" else None,
    "layer_norm_epsilon": lambda c: c.layer_norm_epsilon,
    "pooling": lambda c: c.pooling,
}


def _check_bare(model, tensors):
    """Refuses to write `model` as a bare timm ``.safetensors`` file (its
    `tensors` alone) where reading the file back would build another model:
    the tensors do not record the activation's form, the LayerNorm epsilon
    or the pooling, and a reader takes timm's defaults (exact GELU, 1e-6,
    the [class] token)."""
    c = model.config
    read = config_view(_read_config(tensors, {}, {}, c.num_heads, "the file"))
    lost = [f"{name}={get(c)!r} (it would read as {get(read)!r})"
            for name, get in _BARE.items() if get(c) is not None and get(read) != get(c)]
    if lost:
        raise ValueError(
            f"{model.name} cannot be written as a bare timm .safetensors file: the file holds "
            f"the tensors alone, and reading it would not give back {', '.join(lost)}. Nothing "
            "was written. Write the timm hub folder instead (a path without .safetensors: its "
            "config.json records them).")


def written_architecture(c):
    """The timm architecture `write_timm` names for a `ViTConfig` `c`: the
    model class and what ``model_args`` cannot say (the LayerNorm epsilon,
    `written_epsilon`); ``model_args`` give every size."""
    return ("deit_base_distilled_patch16_224" if c.distillation
            else _eva_architecture(c) if c.uses_rope and c.rope_grid == "index"
            else "aimv2_large_patch14_224" if c.norm_type == "rms_norm"
            else "vit_giant_patch14_dinov2" if c.mlp_activation == "swiglu"
            else "vit_base_patch16_clip_224" if c.norm_pre else "vit_base_patch16_224")


def _eva_architecture(c):
    """The timm ``Eva`` architecture `write_timm` names for a rotary `c`: one whose
    defaults ``model_args`` need not take away: a reference grid (PE's, whose
    epsilon is 1e-5; EVA-02's, 1e-6, with q, k and v apart where its MLP has a
    norm; its CLIP towers' with the attention's norm too; with registers and LayerScale,
    timm's rotary ViTs of SBB's), or none (timm's rotary ViTs, Heo et al., 2024, with a
    table or none)."""
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
    """The LayerNorm epsilon of `written_architecture`: the only one a timm folder holds for `c`."""
    return architecture_epsilon(architectures()["architectures"][written_architecture(c)]["args"])


def _model_args(c):
    """timm's VisionTransformer (or VisionTransformerDistilled) arguments of `c`."""
    model_args = dict(
        img_size=list(c.image_size), patch_size=list(c.patch_size), in_chans=c.num_channels,
        embed_dim=c.hidden_dim, depth=c.num_layers, num_heads=c.num_heads,
        mlp_ratio=mlp_ratio_factor(c) * c.mlp_dim / c.hidden_dim, qkv_bias=c.qkv_bias, proj_bias=c.out_bias,
        num_classes=c.num_classes, class_token=c.uses_class_token, reg_tokens=c.num_registers,
        fc_norm=c.fc_norm, final_norm=c.final_norm, qk_norm=c.qk_norm,
        pre_norm=c.norm_pre, **r.write_settings([_GLOBAL_POOL], c),
        # the gated MLPs' SiLU is their architecture's (DINOv2 giant's, AIMv2's)
        **r.write_settings([dataclasses.replace(_ACT_LAYER, when=lambda c: c.mlp_activation != "swiglu")], c),
    )
    if c.distillation:  # deit.py's VisionTransformerDistilled has no reg_tokens argument
        del model_args["reg_tokens"]
    # No LayerScale: 0, which timm's Block reads as none (create_model drops a None, and the
    # architecture may have its own, as DINOv2's has)
    model_args["init_values"] = 0 if c.layer_scale_init is None else c.layer_scale_init
    if c.norm_type == "rms_norm" and not c.patch_norm:  # AIMv2's architecture has the patches' norm
        model_args["embed_norm_layer"] = None
    return model_args


def _eva_model_args(c):
    """timm's Eva arguments of a rotary `c`, over EVA-02's or the Perception
    Encoder's architecture (`written_architecture`): each one they set is written."""
    model_args = dict(
        img_size=list(c.image_size), patch_size=list(c.patch_size), in_chans=c.num_channels,
        embed_dim=c.hidden_dim, depth=c.num_layers, num_heads=c.num_heads, mlp_ratio=c.mlp_dim / c.hidden_dim,
        qkv_bias=c.qkv_bias, num_classes=c.num_classes, class_token=c.uses_class_token,
        num_reg_tokens=c.num_registers,
        attn_type="eva" if _eva(c) else "rope", qkv_fused=not split_qkv(c),
        swiglu_mlp=c.mlp_activation == "swiglu", scale_mlp=c.mlp_norm, scale_attn_inner=c.attention_norm,
        use_pre_transformer_norm=c.norm_pre, use_fc_norm=c.fc_norm,
        use_post_transformer_norm=c.final_norm and not c.fc_norm, **r.write_settings([_GLOBAL_POOL], c),
        use_abs_pos_emb=c.position_table == "learned",
        ref_feat_shape=c.rope_reference_grid and list(c.rope_reference_grid), rope_grid_offset=c.rope_grid_offset,
        rope_grid_indexing=c.rope_grid_indexing, rope_temperature=c.rope_theta,
        attn_pool_num_heads=c.pooling_num_heads or c.num_heads,
        attn_pool_mlp_ratio=(c.pooling_mlp_dim or c.mlp_dim) / c.hidden_dim)
    if c.layer_scale_init is not None:  # Eva's None (no gammas) is its default
        model_args["init_values"] = c.layer_scale_init
    return {k: v for k, v in model_args.items() if v is not None}  # None: the architecture's


def _table_of_the_patches(c, tensors):
    """A table whose prefix tokens' rows are all zero (read from timm's
    ``no_embed_class``, as DINOv2 with registers, RADIO and the ``_rope_ape``
    ViTs have it: `_pad_position_embeddings`) written as timm keeps it, the
    patches' rows alone, so that the folder is timm's own key for key.

    Returns:
        whether `tensors`' ``pos_embed`` became the patches' rows.
    """
    table, prefix = tensors.get("pos_embed"), c.num_prefix_tokens
    if table is None or not prefix or np.any(table[:, :prefix]):
        return False
    tensors["pos_embed"] = table[:, prefix:]
    return True


def write_timm(model, path):
    """`model` as a timm ``VisionTransformer`` state dict: a ``.safetensors``
    file, or a hub folder with its ``config.json`` (``model_args``)."""
    c = model.config
    tensors = r.write_rows(key_map(c, unpacked_swiglu(c), split_qkv(c)), model_state(model), c, model.name, "timm")
    if path.suffix == ".safetensors":
        _check_bare(model, tensors)
        files.write_atomic(path, safetensors_bytes(tensors))
        return
    model_args = _eva_model_args(c) if c.uses_rope else _model_args(c)
    model_args["no_embed_class"] = _table_of_the_patches(c, tensors)
    config = {
        "architecture": written_architecture(c),
        "num_classes": c.num_classes, "num_features": c.hidden_dim, "global_pool": model_args["global_pool"],
        "model_args": model_args,
        # mean and std of pixels in [0, 1]: the model's scaling (the paper's [-1, 1]: 0.5 and 0.5)
        "pretrained_cfg": {"input_size": [c.num_channels, *c.image_size], "interpolation": "bicubic",
                           **dict(zip(("mean", "std"), mean_and_std(c))), "crop_pct": 1.0,
                           "num_classes": c.num_classes, "classifier": "head"},
    }
    if c.class_names:
        config["label_names"] = list(c.class_names)
    write_files(path, tensors, config)
