"""Google's Flax checkpoints: vit_jax / AugReg and big_vision ``.npz``.

Flax keeps kernels as ``(in, out)`` (dense), HWIO (conv) and
``(D, heads, d_head)`` / ``(heads, d_head, D)`` (attention), which are the
Keras layouts too, so the conversion is a renaming. Block submodules are
found by kind and order (``LayerNorm_0`` / ``_2``, ``MlpBlock_3`` / ``_0``
...), which covers both numberings of the original files and big_vision's.
"""

import re
import zipfile

import numpy as np

from keras_vit.config import resnet_stride
from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import square_grid

_PREFIXES = ("opt/target/", "params/")


def load_npz(path):
    """Every array of an ``.npz`` file, as float32, without unpickling."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: np.asarray(archive[key], dtype=np.float32) for key in archive.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} could not be read as an .npz checkpoint ({error}). The file "
            "may be truncated (download it again) or hold Python objects, which "
            "are not loaded for safety."
        ) from error


def _strip_prefix(arrays):
    for prefix in _PREFIXES:
        if arrays and all(key.startswith(prefix) for key in arrays):
            return {key[len(prefix):]: value for key, value in arrays.items()}
    return arrays


def _unscan(arrays):
    """big_vision's ``scan=True`` layout: one block with a depth axis."""
    scanned = {k: v for k, v in arrays.items() if k.startswith("Transformer/encoderblock/")}
    if not scanned:
        return arrays
    arrays = {k: v for k, v in arrays.items() if k not in scanned}
    depth = next(iter(scanned.values())).shape[0]
    for key, value in scanned.items():
        rest = key[len("Transformer/encoderblock/"):]
        for i in range(depth):
            arrays[f"Transformer/encoderblock_{i}/{rest}"] = value[i]
    return arrays


class _Reader:
    """Takes arrays out of a flat dict, so unused ones can be reported."""

    def __init__(self, arrays, source):
        self.arrays, self.source, self.state = dict(arrays), source, {}

    def has(self, key):
        return key in self.arrays

    def take(self, key, target, shape=None):
        if key not in self.arrays:
            raise CheckpointError(f"{self.source}: expected key '{key}' is missing.")
        value = self.arrays.pop(key)
        self.state[target] = value if shape is None else value.reshape(shape)
        return value

    def submodules(self, prefix, kind):
        pattern = re.compile(re.escape(prefix) + kind + r"_(\d+)/")
        found = {int(m.group(1)) for k in self.arrays if (m := pattern.match(k))}
        return [f"{prefix}{kind}_{i}/" for i in sorted(found)]

    def layer_norm(self, prefix, target):
        self.take(prefix + "scale", target + "/gamma", (-1,))
        self.take(prefix + "bias", target + "/beta", (-1,))

    def dense(self, prefix, target):
        self.take(prefix + "kernel", target + "/kernel")
        if self.has(prefix + "bias"):
            self.take(prefix + "bias", target + "/bias")

    def attention(self, prefix, target):
        for name in ("query", "key", "value", "out"):
            self.dense(f"{prefix}{name}/", f"{target}/{name}")

    def mlp(self, prefix, target):
        self.dense(prefix + "Dense_0/", target + "/fc1")
        self.dense(prefix + "Dense_1/", target + "/fc2")


def _one(reader, prefix, kind, expected):
    found = reader.submodules(prefix, kind)
    if len(found) != expected:
        raise CheckpointError(
            f"{reader.source}: expected {expected} '{kind}' under '{prefix}', found "
            f"{[f.rstrip('/') for f in found]}."
        )
    return found


def _read_resnet(reader):
    """The hybrid's ``conv_root``, ``gn_root`` and ``block{s}/unit{u}``."""
    reader.take("conv_root/kernel", "resnet/conv_root/kernel")
    reader.layer_norm("gn_root/", "resnet/gn_root")
    block_units = []
    stage = 1
    while any(k.startswith(f"block{stage}/") for k in reader.arrays):
        unit = 1
        while reader.has(f"block{stage}/unit{unit}/conv1/kernel"):
            prefix, target = f"block{stage}/unit{unit}/", f"resnet/block{stage}_unit{unit}"
            for name in ("conv1", "conv2", "conv3", "conv_proj"):
                if reader.has(f"{prefix}{name}/kernel"):
                    reader.take(f"{prefix}{name}/kernel", f"{target}/{name}/kernel")
            for name in ("gn1", "gn2", "gn3", "gn_proj"):
                if reader.has(f"{prefix}{name}/scale"):
                    reader.layer_norm(f"{prefix}{name}/", f"{target}/{name}")
            unit += 1
        block_units.append(unit - 1)
        stage += 1
    root_channels = reader.state["resnet/conv_root/kernel"].shape[-1]
    width_factor = root_channels / 64  # vit_jax: int(64 * width_factor) channels
    return tuple(block_units), int(width_factor) if width_factor.is_integer() else width_factor


def read_npz(path):
    """Reads a vit_jax / AugReg or big_vision ``.npz`` into a :class:`Checkpoint`."""
    arrays = load_npz(path)
    raw = _strip_prefix(arrays)
    big_vision = "pos_embedding" in raw or any(
        k.startswith(("MAPHead_", "Transformer/encoderblock/")) for k in raw
    )
    raw = _unscan(raw)
    source = f"{'big_vision' if big_vision else 'vit_jax'} checkpoint {path}"
    if "embedding/kernel" not in raw:
        raise CheckpointError(
            f"{path} is an .npz file but not a ViT checkpoint: it has no "
            f"'embedding/kernel' (keys start with {sorted(raw)[:5]})."
        )
    reader = _Reader(raw, source)
    config = dict(gelu_approximate=True, layer_norm_epsilon=1e-6)

    stride = 1
    if reader.has("conv_root/kernel"):
        block_units, width = _read_resnet(reader)
        config.update(resnet_block_units=block_units, resnet_width_factor=width)
        config["num_channels"] = reader.state["resnet/conv_root/kernel"].shape[2]
        stride = resnet_stride(block_units)
    kernel = reader.take("embedding/kernel", "patch_embedding/projection/kernel")
    reader.take("embedding/bias", "patch_embedding/projection/bias")
    config.setdefault("num_channels", kernel.shape[2])
    hidden_dim = kernel.shape[-1]
    config.update(patch_size=tuple(int(s) for s in kernel.shape[:2]), hidden_dim=hidden_dim)

    has_cls = reader.has("cls")
    if has_cls:
        reader.take("cls", "class_token/tokens", (1, 1, hidden_dim))

    blocks = []
    while any(k.startswith(f"Transformer/encoderblock_{len(blocks)}/") for k in reader.arrays):
        blocks.append(f"Transformer/encoderblock_{len(blocks)}/")
    if not blocks:
        raise CheckpointError(f"{source}: no 'Transformer/encoderblock_*' found.")
    for i, prefix in enumerate(blocks):
        target = f"encoder_block_{i}"
        norm1, norm2 = _one(reader, prefix, "LayerNorm", 2)
        (attention,) = _one(reader, prefix, "MultiHeadDotProductAttention", 1)
        (mlp,) = _one(reader, prefix, "MlpBlock", 1)
        if i == 0:
            query = reader.arrays[attention + "query/kernel"]
            config["num_heads"] = int(query.shape[1])
            config["qkv_bias"] = reader.has(attention + "query/bias")
            config["mlp_bias"] = reader.has(mlp + "Dense_0/bias")
            config["mlp_dim"] = int(reader.arrays[mlp + "Dense_0/kernel"].shape[1])
        reader.layer_norm(norm1, f"{target}/norm1")
        reader.attention(attention, f"{target}/attention")
        reader.layer_norm(norm2, f"{target}/norm2")
        reader.mlp(mlp, f"{target}/mlp")
    config["num_layers"] = len(blocks)
    reader.layer_norm("Transformer/encoder_norm/", "encoder_norm")

    if reader.has("MAPHead_0/probe"):
        config["pooling"] = "map"
        reader.take("MAPHead_0/probe", "pooling/probe")
        reader.attention("MAPHead_0/MultiHeadDotProductAttention_0/", "pooling/attention")
        reader.layer_norm("MAPHead_0/LayerNorm_0/", "pooling/norm")
        reader.mlp("MAPHead_0/MlpBlock_0/", "pooling/mlp")
    else:
        config["pooling"] = "token" if has_cls else "gap"

    grid = num_patches = None
    posemb_key = "pos_embedding" if big_vision else "Transformer/posembed_input/pos_embedding"
    if reader.has(posemb_key):
        posemb = reader.take(posemb_key, "position_embedding/embeddings")
        if big_vision and has_cls:
            # big_vision adds E_pos before prepending [class]: a zero row for
            # the class token is the same model in the paper's form.
            posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
            reader.state["position_embedding/embeddings"] = posemb
        num_patches = posemb.shape[1] - int(has_cls)
        grid = square_grid(num_patches)
        if grid:
            config["image_size"] = tuple(g * p * stride for g, p in zip(grid, config["patch_size"]))
    else:
        config["position_embedding"] = "sincos2d"

    if reader.has("pre_logits/kernel"):
        reader.dense("pre_logits/", "pre_logits")
        config["representation_size"] = int(reader.state["pre_logits/kernel"].shape[1])
    if reader.has("head/kernel"):
        reader.dense("head/", "head")
        config["num_classes"] = int(reader.state["head/kernel"].shape[1])
    else:
        config["num_classes"] = 0
    if reader.arrays:
        raise CheckpointError(
            f"{source} has keys keras_vit does not know, so it would load only "
            f"part of the model: {sorted(reader.arrays)[:12]}"
        )
    return Checkpoint(config, reader.state, source, grid, num_patches)
