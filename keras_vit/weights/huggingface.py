"""Hugging Face ``ViTModel`` / ``ViTForImageClassification`` directories."""

import pathlib
import re

from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import read_json
from keras_vit.weights.torch_layout import TorchReader
from keras_vit.weights.torch_layout import conv
from keras_vit.weights.torch_layout import load_safetensors

# HF activation names -> tanh approximation or not.
_GELU = {"gelu": False, "gelu_python": False, "gelu_new": True,
         "gelu_pytorch_tanh": True, "gelu_fast": True}


def class_names(id2label, num_classes):
    """The head's class names from an ``id2label`` mapping, or None when it
    holds only ``transformers``' placeholders (``LABEL_0``, ...) or does not
    cover the head's `num_classes` classes."""
    if not id2label or not num_classes:
        return None
    names = [id2label.get(str(i), id2label.get(i)) for i in range(num_classes)]
    if len(id2label) != num_classes or any(n is None for n in names):
        return None
    if all(re.fullmatch(r"LABEL_\d+", str(n)) for n in names):
        return None
    return [str(n) for n in names]


def read_huggingface(directory):
    """Reads a directory saved by ``ViTForImageClassification.save_pretrained``."""
    directory = pathlib.Path(directory)
    if directory.suffix == ".safetensors":  # its model.safetensors: the folder
        directory = directory.parent
    source = f"Hugging Face checkpoint {directory}"
    hf = read_json(directory / "config.json", required=(
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "patch_size"))
    if hf.get("model_type") != "vit":
        raise CheckpointError(
            f"{directory}/config.json has model_type {hf.get('model_type')!r}; "
            "keras_vit reads Hugging Face ViT checkpoints (model_type 'vit')."
        )
    act = hf.get("hidden_act", "gelu")
    if act not in _GELU:
        raise CheckpointError(
            f"{source}: hidden_act {act!r} is not supported; keras_vit has "
            f"{sorted(_GELU)}."
        )
    weights = directory / "model.safetensors"
    if not weights.exists():
        raise CheckpointError(
            f"{directory} has no model.safetensors. Pickled weights "
            "(pytorch_model.bin) are not loaded for safety: re-save the model "
            "with `model.save_pretrained(directory, safe_serialization=True)`."
        )
    tensors = load_safetensors(weights)
    prefix = "vit." if any(k.startswith("vit.") for k in tensors) else ""
    tensors = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in tensors.items()}
    reader = TorchReader(tensors, source)
    heads = int(hf["num_attention_heads"])
    config = dict(
        hidden_dim=int(hf["hidden_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        mlp_dim=int(hf["intermediate_size"]),
        patch_size=int(hf["patch_size"]),
        num_channels=int(hf.get("num_channels", 3)),
        layer_norm_epsilon=float(hf.get("layer_norm_eps", 1e-12)),
        gelu_approximate=_GELU[act],
        qkv_bias=bool(hf.get("qkv_bias", True)),
        dropout_rate=float(hf.get("hidden_dropout_prob", 0.0)),
        attention_dropout_rate=float(hf.get("attention_probs_dropout_prob", 0.0)),
        pooling="token",
    )
    embed = "embeddings."
    reader.put("patch_embedding/projection/kernel", conv(reader.pop(embed + "patch_embeddings.projection.weight")))
    reader.put("patch_embedding/projection/bias", reader.pop(embed + "patch_embeddings.projection.bias"))
    reader.put("class_token/tokens", reader.pop(embed + "cls_token"))
    posemb = reader.pop(embed + "position_embeddings")
    reader.put("position_embedding/embeddings", posemb)
    size = hf.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else tuple(size)
    grid = tuple(s // config["patch_size"] for s in size)
    if grid[0] * grid[1] != posemb.shape[1] - 1:
        raise CheckpointError(
            f"{source}: config.json says {size[0]}x{size[1]} images "
            f"({grid[0]}x{grid[1]} patches) but the position embeddings hold "
            f"{posemb.shape[1] - 1} patches."
        )
    config["image_size"] = size
    for i in range(config["num_layers"]):
        key, target = f"encoder.layer.{i}.", f"encoder_block_{i}"
        reader.layer_norm(key + "layernorm_before", target + "/norm1")
        qkv = []
        for name in ("query", "key", "value"):
            base = f"{key}attention.attention.{name}"
            bias = reader.pop(base + ".bias") if reader.has(base + ".bias") else None
            qkv.append((reader.pop(base + ".weight"), bias))
        reader.attention(qkv, key + "attention.output.dense", target + "/attention", heads)
        reader.layer_norm(key + "layernorm_after", target + "/norm2")
        reader.linear(key + "intermediate.dense", target + "/mlp/fc1")
        reader.linear(key + "output.dense", target + "/mlp/fc2")
    reader.layer_norm("layernorm", "encoder_norm")
    if reader.has("pooler.dense.weight") and hf.get("pooler_act", "tanh") != "tanh":
        raise CheckpointError(f"{source}: pooler_act {hf['pooler_act']!r} is not tanh.")
    reader.read_top("pooler.dense", "classifier", config)
    names = class_names(hf.get("id2label"), config.get("num_classes", 0))
    if names:
        config["class_names"] = names
    reader.finish()
    return Checkpoint(config, reader.state, source, grid, posemb.shape[1] - 1)
