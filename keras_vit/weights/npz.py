"""Google's Flax checkpoints: vit_jax / AugReg and big_vision ``.npz``.

Flax keeps kernels as ``(in, out)`` (dense), HWIO (conv) and ``(D, heads, d_head)`` / ``(heads, d_head, D)``
(attention), which are the Keras layouts too, so the conversion is a renaming (`key_map`). Old layouts are
made the vit_jax one in one place (`_canonical`): the ``opt/target/`` and ``params/`` prefixes, big_vision's
``scan`` and its block numbering (``LayerNorm_0`` / ``_1``, ``MlpBlock_0``: found by kind and order).
"""

import re

import numpy as np

from keras_vit.assign import model_state
from keras_vit.io import files
from keras_vit.io.files import CheckpointError
from keras_vit.io.tensors import load_npz
from keras_vit.weights import rows as r
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import config_view
from keras_vit.weights.checkpoint import square_grid
from keras_vit.weights.checkpoint import stored_heads

_PREFIXES = ("opt/target/", "params/")
_BLOCK = "Transformer/encoderblock_{i}/"
# vit_jax's block submodules (the 2020 code's numbering), in the order the
# reader finds them by kind: (kind, count, vit_jax's names)
_SUBMODULES = (("LayerNorm", 2, ("LayerNorm_0", "LayerNorm_2")),
               ("MultiHeadDotProductAttention", 1, ("MultiHeadDotProductAttention_1",)),
               ("MlpBlock", 1, ("MlpBlock_3",)))
_QKVO = ("query", "key", "value", "out")


def _mlp(ours, theirs, when=r.always, has_bias=None):
    return [*r.dense_rows(ours + "/fc1", theirs + "Dense_0", r.FLAX, when=when, has_bias=has_bias),
            *r.dense_rows(ours + "/fc2", theirs + "Dense_1", r.FLAX, when=when, has_bias=has_bias)]


def _attention(ours, theirs, when=r.always):
    return r.attention_rows(ours, theirs, _QKVO, r.FLAX, when=when, qkv_bias=None, key_bias=None, out_bias=None)


_NORM_BIAS = (lambda c: c.norm_bias)


def _norm(ours, theirs, when=r.always, has_bias=_NORM_BIAS):
    """A LayerNorm's scale row and, where `has_bias` too (``norm_bias``), its bias row."""
    return [r.row(ours + "/gamma", theirs + "/scale", r.FLAT, when),
            r.row(ours + "/beta", theirs + "/bias", r.FLAT, r.both(when, has_bias))]


# One block (biases where the file or model has them: qkv_bias, mlp_bias, norm_bias).
BLOCK_ROWS = [
    *_norm("encoder_block_{i}/norm1", _BLOCK + "LayerNorm_0"),
    *_attention("encoder_block_{i}/attention", _BLOCK + "MultiHeadDotProductAttention_1/"),
    *_norm("encoder_block_{i}/norm2", _BLOCK + "LayerNorm_2"),
    *_mlp("encoder_block_{i}/mlp", _BLOCK + "MlpBlock_3/"),
]
# The hybrid's ResNet unit u of stage s; a unit that changes the shape projects.
_UNIT, _OURS_UNIT = "block{s}/unit{u}/", "resnet/block{s}_unit{u}/"
UNIT_ROWS = [
    *(r.row(f"{opt}{_OURS_UNIT}{conv}/kernel", f"{opt}{_UNIT}{conv}/kernel")
      for conv, opt in (("conv1", ""), ("conv2", ""), ("conv3", ""), ("conv_proj", "?"))),
    *(row for gn in ("gn1", "gn2", "gn3")
      for row in _norm(_OURS_UNIT + gn, _UNIT + gn, has_bias=r.always)),  # GroupNorms
    *(r.row(f"?{_OURS_UNIT}gn_proj/{ours}", f"?{_UNIT}gn_proj/{theirs}", r.FLAT)
      for ours, theirs in (("gamma", "scale"), ("beta", "bias"))),
]
_CLS = (lambda c: c.uses_class_token)
_LEARNED = (lambda c: c.position_embedding == "learned")
# big_vision adds E_pos before prepending [class]: a zero row for the class
# token is the same model in the paper's form (`fix_old_checkpoints`).
CLASS_FIRST = (lambda c, cls, pe: (cls.reshape(1, 1, -1), np.concatenate([np.zeros_like(pe[:, :1]), pe], 1)),
               lambda c, cls, pe: (cls + pe[:, :1], pe[:, 1:]))
TOP_ROWS = [
    *_norm("encoder_norm", "Transformer/encoder_norm"),
    *r.dense_rows("pre_logits", "pre_logits", r.FLAX, when=lambda c: c.representation_size, has_bias=None),
    *r.dense_rows("head", "head", r.FLAX, when=lambda c: c.num_classes, has_bias=None),
]
MAP_ROWS = [  # big_vision's MAP head
    r.row("pooling/probe", "MAPHead_0/probe", when=r.MAP),
    *_attention("pooling/attention", "MAPHead_0/MultiHeadDotProductAttention_0/", r.MAP),
    *_norm("pooling/norm", "MAPHead_0/LayerNorm_0", r.MAP),
    *_mlp("pooling/mlp", "MAPHead_0/MlpBlock_0/", r.MAP),
]


def key_map(c, big_vision):
    """The map of a `ViTConfig` `c`'s model: vit_jax's layout, or with
    `big_vision` its top-level position embeddings (and MAP head)."""
    if big_vision:
        embed = [r.row(("class_token/tokens", "position_embedding/embeddings"), ("cls", "pos_embedding"),
                       CLASS_FIRST, when=lambda c: _CLS(c) and _LEARNED(c)),
                 r.row("class_token/tokens", "cls", r.TOKENS, when=lambda c: _CLS(c) and not _LEARNED(c)),
                 r.row("position_embedding/embeddings", "pos_embedding",
                       when=lambda c: _LEARNED(c) and not _CLS(c))]
    else:
        embed = [r.row("class_token/tokens", "cls", r.TOKENS, when=_CLS),
                 r.row("position_embedding/embeddings", "Transformer/posembed_input/pos_embedding",
                       when=_LEARNED)]
    resnet = []
    if c.resnet_block_units is not None:
        resnet = [r.row("resnet/conv_root/kernel", "conv_root/kernel"),
                  *r.norm_rows("resnet/gn_root", "gn_root", r.FLAX, r.FLAT),
                  *(row.at(s=s, u=u) for s, units in enumerate(c.resnet_block_units, 1)
                    for u in range(1, units + 1) for row in UNIT_ROWS)]
    patch = r.dense_rows("patch_embedding/projection", "embedding", r.FLAX)
    body = r.blocks(BLOCK_ROWS, c.num_layers)
    return [*resnet, *patch, *embed, *body, *(MAP_ROWS if big_vision else []), *TOP_ROWS]


def _canonical(arrays, source):
    """`arrays` (their prefix removed) in vit_jax's layout: one entry per block, vit_jax's
    block numbering (submodules found by kind and order)."""
    scan = "Transformer/encoderblock/"  # big_vision's scan=True: one block with a depth axis
    for key in [k for k in arrays if k.startswith(scan)]:
        for i, value in enumerate(arrays.pop(key)):
            arrays[f"Transformer/encoderblock_{i}/{key[len(scan):]}"] = value
    out = {}
    for i in range(_num_blocks(arrays)):
        prefix = _BLOCK.format(i=i)
        names = {}
        for kind, count, ours in _SUBMODULES:
            pattern = re.compile(re.escape(prefix) + kind + r"_(\d+)/")
            found = sorted({int(m.group(1)) for k in arrays if (m := pattern.match(k))})
            if len(found) != count:
                raise CheckpointError(f"{source}: expected {count} '{kind}' under '{prefix}', found "
                                      f"{[f'{prefix}{kind}_{n}' for n in found]}.")
            names.update({f"{prefix}{kind}_{n}/": f"{prefix}{name}/" for n, name in zip(found, ours)})
        for key in [k for k in arrays if k.startswith(prefix)]:
            head = next((n for n in names if key.startswith(n)), None)
            out[key if head is None else names[head] + key[len(head):]] = arrays.pop(key)
    return {**arrays, **out}


def _num_blocks(arrays):
    n = 0
    while any(k.startswith(_BLOCK.format(i=n)) for k in arrays):
        n += 1
    return n


def _read_config(arrays, source):
    """The model's `ViT` arguments, from the arrays' names and shapes."""
    config = dict(gelu_approximate=True, layer_norm_epsilon=1e-6)
    kernel = arrays["embedding/kernel"]
    if "conv_root/kernel" in arrays:
        units, stage = [], 1
        while any(k.startswith(f"block{stage}/") for k in arrays):
            units.append(sum(1 for k in arrays if re.fullmatch(f"block{stage}/unit\\d+/conv1/kernel", k)))
            stage += 1
        width = arrays["conv_root/kernel"].shape[-1] / 64  # vit_jax: int(64 * width_factor) channels
        config.update(resnet_block_units=tuple(units), num_channels=arrays["conv_root/kernel"].shape[2],
                      resnet_width_factor=int(width) if width.is_integer() else width)
    config.setdefault("num_channels", kernel.shape[2])
    config.update(patch_size=tuple(int(s) for s in kernel.shape[:2]), hidden_dim=kernel.shape[-1])
    config["num_layers"] = _num_blocks(arrays)
    if not config["num_layers"]:
        raise CheckpointError(f"{source}: no 'Transformer/encoderblock_*' found.")
    block = _BLOCK.format(i=0)
    attention, mlp = block + "MultiHeadDotProductAttention_1/", block + "MlpBlock_3/"
    config.update(num_heads=int(arrays[attention + "query/kernel"].shape[1]),
                  qkv_bias=attention + "query/bias" in arrays, mlp_bias=mlp + "Dense_0/bias" in arrays,
                  norm_bias=block + "LayerNorm_0/bias" in arrays,
                  mlp_dim=int(arrays[mlp + "Dense_0/kernel"].shape[1]))
    config["pooling"] = ("map" if "MAPHead_0/probe" in arrays else "token" if "cls" in arrays else "gap")
    if "pos_embedding" not in arrays and "Transformer/posembed_input/pos_embedding" not in arrays:
        config["position_embedding"] = "sincos2d"
    if "pre_logits/kernel" in arrays:
        config["representation_size"] = int(arrays["pre_logits/kernel"].shape[1])
    config["num_classes"] = int(arrays["head/kernel"].shape[1]) if "head/kernel" in arrays else 0
    return config


def read_npz(path, num_heads=None):
    """Reads a vit_jax / AugReg or big_vision ``.npz`` into a :class:`Checkpoint`;
    `num_heads`: the file's own count or None (`stored_heads`)."""
    arrays = load_npz(path)
    for prefix in _PREFIXES:
        if arrays and all(key.startswith(prefix) for key in arrays):
            arrays = {key[len(prefix):]: value for key, value in arrays.items()}
    big_vision = "pos_embedding" in arrays or any(
        k.startswith(("MAPHead_", "Transformer/encoderblock/")) for k in arrays)
    source = f"{'big_vision' if big_vision else 'vit_jax'} checkpoint {path}"
    if "embedding/kernel" not in arrays:
        raise CheckpointError(
            f"{path} is an .npz file but not a ViT checkpoint: it has no "
            f"'embedding/kernel' (keys start with {sorted(arrays)[:5]}).")
    arrays = _canonical(arrays, source)
    config = _read_config(arrays, source)
    c = config_view(config)
    state = r.move(key_map(c, big_vision), arrays, c, source)
    grid = num_patches = None
    if "position_embedding/embeddings" in state:
        num_patches = state["position_embedding/embeddings"].shape[1] - int(c.uses_class_token)
        grid = square_grid(num_patches)
        if grid:
            config["image_size"] = tuple(g * p * c.stem_stride for g, p in zip(grid, c.patch_size))
    checkpoint = Checkpoint(config, state, source, grid, num_patches)
    stored_heads(checkpoint, num_heads)
    return checkpoint


def write_npz(model, path):
    """`model` as a vit_jax ``.npz`` (big_vision's layout for MAP pooling): `key_map` the other way."""
    c = model.config
    out = r.write_rows(key_map(c, c.pooling == "map"), model_state(model), c, model.name, "npz")
    files.write_atomic(path, lambda file: np.savez(file, **out))
