"""Writing the same random weights in each checkpoint format, as the code
they come from lays them out (conversion formulas of timm and transformers)."""

import re

import numpy as np
from safetensors.numpy import save_file


def save_npz(params, path):
    np.savez(path, **params)
    return path


def renumber_new(params):
    """vit_jax's newer numbering: LayerNorm_0/_1, MultiHeadDotProductAttention_0, MlpBlock_0."""
    table = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
             "LayerNorm_2": "LayerNorm_1", "MlpBlock_3": "MlpBlock_0"}
    return {re.sub("|".join(table), lambda m: table[m.group(0)], k) if "encoderblock" in k else k: v
            for k, v in params.items()}


def to_big_vision(params, scan=False):
    """big_vision: `params/` prefix, new numbering, top-level pos_embedding
    without the class row (folded into `cls`, as `fix_old_checkpoints`)."""
    params = renumber_new(params)
    posemb = params.pop("Transformer/posembed_input/pos_embedding")
    if "cls" in params:
        params["cls"] = params["cls"] + posemb[:, :1]
        posemb = posemb[:, 1:]
    params["pos_embedding"] = posemb
    if scan:
        blocks = sorted({k.split("/")[1] for k in params if k.startswith("Transformer/encoderblock_")},
                        key=lambda b: int(b.split("_")[1]))
        leaves = {k.split("/", 2)[2] for k in params if k.startswith("Transformer/encoderblock_0/")}
        for leaf in leaves:
            params[f"Transformer/encoderblock/{leaf}"] = np.stack(
                [params.pop(f"Transformer/{b}/{leaf}") for b in blocks])
    return {f"params/{k}": v for k, v in params.items()}


def _torch_attention(p, prefix, hidden):
    q, k, v = (p[f"{prefix}{n}/kernel"].reshape(hidden, hidden).T for n in ("query", "key", "value"))
    qb, kb, vb = (p[f"{prefix}{n}/bias"].reshape(-1) for n in ("query", "key", "value"))
    out = p[f"{prefix}out/kernel"].reshape(hidden, hidden).T
    return (q, k, v), (qb, kb, vb), out, p[f"{prefix}out/bias"]


def to_timm(params):
    """A timm VisionTransformer state dict, as timm's `_load_weights` makes it."""
    p = params
    hidden = p["embedding/bias"].shape[0]
    sd = {
        "patch_embed.proj.weight": p["embedding/kernel"].transpose(3, 2, 0, 1),
        "patch_embed.proj.bias": p["embedding/bias"],
        "pos_embed": p["Transformer/posembed_input/pos_embedding"],
        "norm.weight": p["Transformer/encoder_norm/scale"],
        "norm.bias": p["Transformer/encoder_norm/bias"],
    }
    if "cls" in p:
        sd["cls_token"] = p["cls"]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in p:
        blk, t = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        (q, k, v), (qb, kb, vb), out, out_b = _torch_attention(p, blk + "MultiHeadDotProductAttention_1/", hidden)
        sd.update({
            t + "norm1.weight": p[blk + "LayerNorm_0/scale"], t + "norm1.bias": p[blk + "LayerNorm_0/bias"],
            t + "attn.qkv.weight": np.concatenate([q, k, v]), t + "attn.qkv.bias": np.concatenate([qb, kb, vb]),
            t + "attn.proj.weight": out, t + "attn.proj.bias": out_b,
            t + "norm2.weight": p[blk + "LayerNorm_2/scale"], t + "norm2.bias": p[blk + "LayerNorm_2/bias"],
            t + "mlp.fc1.weight": p[blk + "MlpBlock_3/Dense_0/kernel"].T, t + "mlp.fc1.bias": p[blk + "MlpBlock_3/Dense_0/bias"],
            t + "mlp.fc2.weight": p[blk + "MlpBlock_3/Dense_1/kernel"].T, t + "mlp.fc2.bias": p[blk + "MlpBlock_3/Dense_1/bias"],
        })
        i += 1
    if "head/kernel" in p:
        sd["head.weight"], sd["head.bias"] = p["head/kernel"].T, p["head/bias"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def save_safetensors(state, path):
    save_file(state, str(path))
    return path
