"""Hugging Face directories of the ViT family: ViT, DeiT, DINOv2, DINOv3, CLIP and SigLIP."""

import dataclasses
import pathlib
import re

import numpy as np

from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import check_dinov3
from keras_vit.weights.checkpoint import pixel_scaling
from keras_vit.weights.checkpoint import read_json
from keras_vit.weights.checkpoint import require
from keras_vit.weights.torch_layout import TorchReader
from keras_vit.weights.torch_layout import conv
from keras_vit.weights.torch_layout import load_safetensors

# HF activation names -> keras_vit's.
_ACTIVATIONS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_approximate",
                "gelu_pytorch_tanh": "gelu_approximate", "gelu_fast": "gelu_approximate",
                "quick_gelu": "quick_gelu"}


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


def read_huggingface(directory, tensors=None):
    """Reads a directory saved by ``save_pretrained`` of a Hugging Face
    ViT (``ViTModel``, ``ViTForImageClassification``), DeiT
    (``DeiTForImageClassificationWithTeacher``), DINOv2 (``Dinov2Model``,
    ``Dinov2WithRegistersModel``), DINOv3 (``DINOv3ViTModel``), CLIP (``CLIPVisionModel``,
    ``CLIPVisionModelWithProjection``, or a whole ``CLIPModel``'s image
    tower) or SigLIP (``SiglipVisionModel``, or a ``SiglipModel``'s image
    tower) model; a model type or key it does not know is refused by name.
    `tensors`: its ``model.safetensors``, when already read
    (`read_image_text`)."""
    directory = pathlib.Path(directory)
    if directory.suffix == ".safetensors":  # its model.safetensors: the folder
        directory = directory.parent
    source = f"Hugging Face checkpoint {directory}"
    hf = read_json(directory / "config.json")
    model_type = hf.get("model_type")
    if model_type in ("clip", "siglip"):  # a two-tower model: its image tower
        hf = {**hf.get("vision_config", {}), "model_type": f"{model_type}_vision_model",
              "architectures": hf.get("architectures", [])}
        model_type = hf["model_type"]
    if model_type not in _READERS:
        raise CheckpointError(
            f"{directory}/config.json has model_type {model_type!r}; keras_vit reads Hugging Face "
            f"{', '.join(map(repr, _READERS))} checkpoints (the ViT family) and 'clip', 'siglip'."
        )
    require(hf, ("hidden_size", "num_hidden_layers", "num_attention_heads", "patch_size"),
            directory / "config.json")
    act = hf.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS and model_type != "dinov3_vit":  # which checks its own
        raise CheckpointError(
            f"{source}: hidden_act {act!r} is not supported; keras_vit has {sorted(_ACTIVATIONS)}."
        )
    tensors = load_weights(directory) if tensors is None else tensors
    for prefix in _PREFIXES[model_type]:
        if any(k.startswith(prefix) for k in tensors):
            tensors = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in tensors.items()}
    reader = TorchReader(tensors, source)
    size = hf.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else tuple(size)
    # the patch convolution drops what is left over (SigLIP So400m/14 at 384 px sees 378)
    size = tuple(s - s % int(hf["patch_size"]) for s in size)
    config = dict(
        hidden_dim=int(hf["hidden_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=int(hf["num_attention_heads"]),
        patch_size=int(hf["patch_size"]),
        num_channels=int(hf.get("num_channels", 3)),
        image_size=size,
        layer_norm_epsilon=float(hf.get("layer_norm_eps", _EPSILON[model_type])),
        gelu_approximate=_ACTIVATIONS.get(act) == "gelu_approximate",
        mlp_activation="quick_gelu" if act == "quick_gelu" else "gelu",
        qkv_bias=bool(hf.get("qkv_bias", True)),
        pooling="token",
    )
    grid = tuple(s // config["patch_size"] for s in config["image_size"])
    _READERS[model_type](reader, hf, config)
    names = class_names(hf.get("id2label"), config.get("num_classes", 0))
    if names:
        config["class_names"] = names
    reader.finish()
    config.update(processor_scaling(directory, config["num_channels"]))
    if config.get("position_embedding") == "rope":  # no table: any grid as it is
        return Checkpoint(config, reader.state, source, grid, grid[0] * grid[1])
    patches = reader.state["position_embedding/embeddings"].shape[1] - _prefix_tokens(config)
    if grid[0] * grid[1] != patches:
        raise CheckpointError(
            f"{source}: config.json says {config['image_size'][0]}x{config['image_size'][1]} images "
            f"({grid[0]}x{grid[1]} patches) but the position embeddings hold {patches} patches."
        )
    method = "dinov2" if model_type.startswith("dinov2") else "bilinear"
    return Checkpoint(config, reader.state, source, grid, patches, resample_method=method)


def load_weights(directory):
    """Every tensor of the folder's ``model.safetensors`` (float32 arrays);
    a folder without one is refused, pickles never read."""
    weights = pathlib.Path(directory) / "model.safetensors"
    if not weights.exists():
        raise CheckpointError(
            f"{directory} has no model.safetensors. Pickled weights "
            "(pytorch_model.bin) are not loaded for safety: re-save the model "
            "with `model.save_pretrained(directory, safe_serialization=True)`."
        )
    return load_safetensors(weights)


def processor_scaling(directory, channels):
    """The image processor's normalisation (``preprocessor_config.json``:
    ``rescale_factor``, ``image_mean``, ``image_std``) as a `ViTConfig`'s
    ``pixel_scale`` and ``pixel_offset`` (`keras_vit.weights.checkpoint.pixel_scaling`);
    {} without the file."""
    path = pathlib.Path(directory) / "preprocessor_config.json"
    if not path.exists():
        return {}
    processor = read_json(path)
    rescale = float(processor.get("rescale_factor", 1 / 255)) if processor.get("do_rescale", True) else 1.0
    if processor.get("do_normalize", True) and "image_mean" in processor:
        return pixel_scaling(processor["image_mean"], processor["image_std"], channels, rescale)
    return pixel_scaling(0.0, 1.0, channels, rescale)


def _intermediate_size(reader, hf):
    return int(require(hf, ("intermediate_size",), f"{reader.source}: config.json")["intermediate_size"])


def _prefix_tokens(config):
    return (int(config["pooling"] == "token") + int(config.get("distillation", False))
            + config.get("num_registers", 0))


def _blocks(reader, config, names):
    """The encoder blocks, `names` giving each part's key under a block:
    norm1, q, k, v, out, norm2, fc1, fc2 (and the LayerScales)."""
    for i in range(config["num_layers"]):
        key, target = names["block"].format(i), f"encoder_block_{i}"
        reader.layer_norm(key + names["norm1"], target + "/norm1")
        qkv = []
        for name in names["qkv"]:
            base = key + name
            qkv.append((reader.pop(base + ".weight"),
                        reader.pop(base + ".bias") if reader.has(base + ".bias") else None))
        reader.attention(qkv, key + names["out"], target + "/attention", config["num_heads"])
        reader.layer_norm(key + names["norm2"], target + "/norm2")
        reader.linear(key + names["fc1"], target + "/mlp/fc1")
        reader.linear(key + names["fc2"], target + "/mlp/fc2")
        for j in (1, 2):
            scale = f"{key}layer_scale{j}.lambda1"
            if reader.has(scale):
                reader.put(f"{target}/layer_scale_{j}", reader.pop(scale))


_VIT_BLOCK = dict(block="encoder.layer.{}.", norm1="layernorm_before",
                  qkv=[f"attention.attention.{n}" for n in ("query", "key", "value")],
                  out="attention.output.dense", norm2="layernorm_after",
                  fc1="intermediate.dense", fc2="output.dense")


def _read_vit(reader, hf, config):
    """ViT and DeiT: ``embeddings``, ``encoder.layer.{i}``, ``layernorm``,
    then ViT's ``pooler`` (the pre-logits layer) and ``classifier`` (also
    DeiT's without its distillation head), or the distilled DeiT's
    ``cls_classifier`` and ``distillation_classifier`` (averaged)."""
    config["mlp_dim"] = _intermediate_size(reader, hf)
    embed = "embeddings."
    reader.put("patch_embedding/projection/kernel",
               conv(reader.pop(embed + "patch_embeddings.projection.weight")))
    reader.put("patch_embedding/projection/bias", reader.pop(embed + "patch_embeddings.projection.bias"))
    reader.put("class_token/tokens", reader.pop(embed + "cls_token"))
    if hf["model_type"] == "deit":
        reader.put("distillation_token/tokens", reader.pop(embed + "distillation_token"))
        config["distillation"] = True
        if not reader.has("distillation_classifier.weight"):  # DeiTForImageClassification, DeiTModel
            config["distillation_head"] = False  # the [class] token's head alone
    reader.put("position_embedding/embeddings", reader.pop(embed + "position_embeddings"))
    _blocks(reader, config, _VIT_BLOCK)
    reader.layer_norm("layernorm", "encoder_norm")
    if config.get("distillation") and config.get("distillation_head", True):
        reader.linear("cls_classifier", "head")
        reader.linear("distillation_classifier", "head_dist")
        config["num_classes"] = int(reader.state["head/kernel"].shape[1])
        return
    if reader.has("pooler.dense.weight") and hf.get("pooler_act", "tanh") != "tanh":
        raise CheckpointError(f"{reader.source}: pooler_act {hf['pooler_act']!r} is not tanh.")
    reader.read_top("pooler.dense", "classifier", config)


def _read_dinov2(reader, hf, config):
    """DINOv2 (with registers): LayerScale in every block, SwiGLU for the
    giant; the registers take no position embedding (a zero row here), and
    the features are the normalised [class] token (``pooler_output``)."""
    embed = "embeddings."
    reader.put("patch_embedding/projection/kernel",
               conv(reader.pop(embed + "patch_embeddings.projection.weight")))
    reader.put("patch_embedding/projection/bias", reader.pop(embed + "patch_embeddings.projection.bias"))
    reader.put("class_token/tokens", reader.pop(embed + "cls_token"))
    if reader.has(embed + "mask_token"):
        reader.pop(embed + "mask_token")  # the masked-image pre-training's; unused on images
    posemb = reader.pop(embed + "position_embeddings")
    if reader.has(embed + "register_tokens"):
        registers = reader.pop(embed + "register_tokens")
        reader.put("registers/tokens", registers)
        config["num_registers"] = int(registers.shape[1])
        posemb = np.concatenate([posemb[:, :1], np.zeros_like(posemb[:, :1]).repeat(
            registers.shape[1], axis=1), posemb[:, 1:]], axis=1)
    reader.put("position_embedding/embeddings", posemb)
    swiglu = bool(hf.get("use_swiglu_ffn", False))
    names = dict(block="encoder.layer.{}.", norm1="norm1",
                 qkv=[f"attention.attention.{n}" for n in ("query", "key", "value")],
                 out="attention.output.dense", norm2="norm2",
                 fc1="mlp.weights_in" if swiglu else "mlp.fc1",
                 fc2="mlp.weights_out" if swiglu else "mlp.fc2")
    config["layer_scale_init"] = float(hf.get("layerscale_value", 1.0))
    config["mlp_activation"] = "swiglu" if swiglu else config["mlp_activation"]
    _blocks(reader, config, names)
    config["mlp_dim"] = int(reader.state["encoder_block_0/mlp/fc2/kernel"].shape[0])
    reader.layer_norm("layernorm", "encoder_norm")
    config["num_classes"] = 0  # Dinov2Model: features; its classifier reads cls and mean patches


def _read_dinov3(reader, hf, config):
    """DINOv3: rotary position embeddings (no table), registers, LayerScale,
    a key projection without bias, a gated MLP (SwiGLU) in the largest; the
    features are the normalised [class] token (``pooler_output``)."""
    gated = bool(hf.get("use_gated_mlp", False))
    check_dinov3(reader.source, {name: bool(hf.get(name, True))
                                 for name in ("query_bias", "value_bias", "proj_bias")},
                 ("use_gated_mlp", gated), ("hidden_act", hf.get("hidden_act", "gelu")))
    qv_bias = bool(hf.get("query_bias", True))
    embed = "embeddings."
    reader.put("patch_embedding/projection/kernel",
               conv(reader.pop(embed + "patch_embeddings.weight")))
    reader.put("patch_embedding/projection/bias", reader.pop(embed + "patch_embeddings.bias"))
    reader.put("class_token/tokens", reader.pop(embed + "cls_token"))
    reader.pop(embed + "mask_token")  # the masked-image pre-training's; unused on images
    registers = int(hf.get("num_register_tokens", 0))
    if registers:
        reader.put("registers/tokens", reader.pop(embed + "register_tokens"))
    elif reader.has(embed + "register_tokens"):
        reader.pop(embed + "register_tokens")  # an empty (1, 0, D) parameter
    if gated:  # fc1 = [gate; up]: silu(gate) * up (keras_vit's SwiGLU)
        for i in range(config["num_layers"]):
            key = f"layer.{i}.mlp."
            for part in ("weight", "bias"):
                if reader.has(f"{key}gate_proj.{part}"):
                    reader.tensors[f"{key}fc1.{part}"] = np.concatenate(
                        [reader.pop(f"{key}gate_proj.{part}"), reader.pop(f"{key}up_proj.{part}")])
    names = dict(block="layer.{}.", norm1="norm1",
                 qkv=[f"attention.{n}_proj" for n in "qkv"], out="attention.o_proj", norm2="norm2",
                 fc1="mlp.fc1" if gated else "mlp.up_proj", fc2="mlp.down_proj")
    _blocks(reader, config, names)
    reader.layer_norm("norm", "encoder_norm")
    config.update(
        position_embedding="rope", rope_theta=float(hf.get("rope_theta", 100.0)),
        qkv_bias=qv_bias, key_bias=bool(hf.get("key_bias", False)) or not qv_bias,
        mlp_bias=bool(hf.get("mlp_bias", True)),
        num_registers=registers, layer_scale_init=float(hf.get("layerscale_value", 1.0)),
        mlp_activation="swiglu" if gated else "gelu", gelu_approximate=False,
        mlp_dim=int(reader.state["encoder_block_0/mlp/fc2/kernel"].shape[0]), num_classes=0)


_CLIP_BLOCK = dict(block="encoder.layers.{}.", norm1="layer_norm1",
                   qkv=[f"self_attn.{n}_proj" for n in "qkv"], out="self_attn.out_proj",
                   norm2="layer_norm2", fc1="mlp.fc1", fc2="mlp.fc2")


def _read_clip(reader, hf, config):
    """CLIP's and SigLIP's image towers: CLIP's class embedding, LayerNorm
    before the encoder (``pre_layrnorm``), patch embedding without bias and
    projection without bias (the head, bias zero); SigLIP's MAP head."""
    config["mlp_dim"] = _intermediate_size(reader, hf)
    embed = "embeddings."
    reader.put("patch_embedding/projection/kernel", conv(reader.pop(embed + "patch_embedding.weight")))
    if reader.has(embed + "patch_embedding.bias"):
        reader.put("patch_embedding/projection/bias", reader.pop(embed + "patch_embedding.bias"))
    else:
        config["patch_bias"] = False
    posemb = reader.pop(embed + "position_embedding.weight")[None]
    reader.put("position_embedding/embeddings", posemb)
    if hf["model_type"] == "clip_vision_model":
        reader.put("class_token/tokens", reader.pop(embed + "class_embedding").reshape(1, 1, -1))
        reader.layer_norm("pre_layrnorm", "norm_pre")
        config["norm_pre"] = True
    _blocks(reader, config, _CLIP_BLOCK)
    reader.layer_norm("post_layernorm", "encoder_norm")
    config["num_classes"] = 0
    if reader.has("visual_projection.weight"):  # CLIPVisionModelWithProjection: image_embeds
        reader.linear("visual_projection", "head")
        config["num_classes"] = int(reader.state["head/kernel"].shape[1])
        reader.put("head/bias", np.zeros(config["num_classes"], np.float32))
    if hf["model_type"] == "siglip_vision_model":
        if not reader.has("head.probe"):
            raise CheckpointError(f"{reader.source}: a SigLIP tower without its attention-pooling "
                                  "head (vision_use_head=False); keras_vit reads it with the head.")
        config["pooling"] = "map"
        reader.put("pooling/probe", reader.pop("head.probe"))
        weight = np.split(reader.pop("head.attention.in_proj_weight"), 3)
        bias = np.split(reader.pop("head.attention.in_proj_bias"), 3)
        reader.attention(list(zip(weight, bias)), "head.attention.out_proj", "pooling/attention",
                         config["num_heads"])
        reader.layer_norm("head.layernorm", "pooling/norm")
        reader.linear("head.mlp.fc1", "pooling/mlp/fc1")
        reader.linear("head.mlp.fc2", "pooling/mlp/fc2")
    for key in [k for k in reader.tensors if k.startswith(_OTHER_TOWER)]:
        reader.pop(key)  # a two-tower file: the text tower is not the image model


_OTHER_TOWER = ("text_model.", "text_projection.", "logit_scale", "logit_bias")

_READERS = {"vit": _read_vit, "deit": _read_vit, "dinov2": _read_dinov2,
            "dinov2_with_registers": _read_dinov2, "dinov3_vit": _read_dinov3,
            "clip_vision_model": _read_clip,
            "siglip_vision_model": _read_clip}
_PREFIXES = {"vit": ("vit.",), "deit": ("deit.",), "dinov2": ("dinov2.",),
             "dinov2_with_registers": ("dinov2_with_registers.",), "dinov3_vit": ("model.",),
             "clip_vision_model": ("vision_model.",), "siglip_vision_model": ("vision_model.",)}
# transformers' defaults where config.json leaves the epsilon out
_EPSILON = {"vit": 1e-12, "deit": 1e-12, "dinov2": 1e-6, "dinov2_with_registers": 1e-6,
            "dinov3_vit": 1e-5,
            "clip_vision_model": 1e-5, "siglip_vision_model": 1e-6}


# transformers' CLIPTextConfig and SiglipTextConfig defaults, where config.json leaves a key out
_TEXT_DEFAULTS = {
    "clip": dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu",
                 layer_norm_eps=1e-5, eos_token_id=49407),
    "siglip": dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                   num_attention_heads=12, max_position_embeddings=64,
                   hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
}


@dataclasses.dataclass
class TextCheckpoint:
    """A two-tower folder's text tower in keras_vit's names
    (`read_huggingface_text`).

    Attributes:
        config: `keras_vit.TextTransformer`'s arguments.
        state: variable path -> float32 array.
        logit_scale: float, the log of the logits' scale.
        logit_bias: float or None (SigLIP's).
        source: the folder, for messages.
        name: ``"clip"`` or ``"siglip"``.
    """

    config: dict
    state: dict
    logit_scale: float
    logit_bias: float | None
    source: str
    name: str


def read_image_text(directory):
    """Both towers of a Hugging Face ``CLIPModel`` or ``SiglipModel`` folder,
    its weights read once: (`read_huggingface`'s image `Checkpoint`,
    `read_huggingface_text`'s `TextCheckpoint`). A folder of one tower is
    refused, naming it, before any weights are read."""
    directory = pathlib.Path(directory)
    _two_tower_config(directory)
    tensors = load_weights(directory)
    return read_huggingface(directory, tensors), read_huggingface_text(directory, tensors)


def _two_tower_config(directory):
    """``config.json`` of a two-tower folder, and its ``"clip"`` or
    ``"siglip"``; any other model is refused, naming the tower it holds."""
    hf = read_json(directory / "config.json")
    model_type = hf.get("model_type")
    if model_type not in _TEXT_DEFAULTS:
        tower = {"clip_vision_model": "CLIP's image tower alone (CLIPVisionModel)",
                 "siglip_vision_model": "SigLIP's image tower alone (SiglipVisionModel)",
                 "clip_text_model": "CLIP's text tower alone (CLIPTextModel)",
                 "siglip_text_model": "SigLIP's text tower alone (SiglipTextModel)"}.get(
                     model_type, "a timm checkpoint (an image tower)" if "architecture" in hf
                     else f"model_type {model_type!r}, not a two-tower model")
        raise CheckpointError(
            f"Hugging Face checkpoint {directory} holds {tower}; an ImageTextModel needs both "
            "towers: a CLIPModel or SiglipModel folder (config.json's model_type 'clip' or "
            "'siglip')." + (" Read an image tower with keras_vit.ViT.from_checkpoint."
                            if "vision" in str(model_type) or "architecture" in hf else ""))
    return hf, model_type


def read_huggingface_text(directory, tensors=None):
    """The text tower, logit scale and bias of a Hugging Face ``CLIPModel``
    or ``SiglipModel`` folder (``text_model.*``, CLIP's ``text_projection``,
    ``logit_scale``, SigLIP's ``logit_bias``); the image tower is
    `read_huggingface`'s. A folder of one tower is refused, naming it.
    `tensors`: its ``model.safetensors``, when already read (`read_image_text`)."""
    directory = pathlib.Path(directory)
    hf, model_type = _two_tower_config(directory)
    source = f"Hugging Face checkpoint {directory}"
    text = {**_TEXT_DEFAULTS[model_type], **hf.get("text_config", {})}
    act = text["hidden_act"]
    if act not in _ACTIVATIONS or _ACTIVATIONS[act] not in ("gelu", "gelu_approximate", "quick_gelu"):
        raise CheckpointError(f"{source}: the text tower's hidden_act {act!r} is not supported; "
                              f"keras_vit has {sorted(_ACTIVATIONS)}.")
    tensors = load_weights(directory) if tensors is None else tensors
    tensors = {k: v for k, v in tensors.items()
               if k.startswith(("text_model.", "text_projection.", "logit_"))}
    tensors = {k[len("text_model."):] if k.startswith("text_model.") else k: v
               for k, v in tensors.items()}
    reader = TorchReader(tensors, source)
    config = dict(
        vocab_size=int(text["vocab_size"]), context_length=int(text["max_position_embeddings"]),
        hidden_dim=int(text["hidden_size"]), num_layers=int(text["num_hidden_layers"]),
        num_heads=int(text["num_attention_heads"]), mlp_dim=int(text["intermediate_size"]),
        layer_norm_epsilon=float(text["layer_norm_eps"]),
        mlp_activation="quick_gelu" if act == "quick_gelu" else "gelu",
        gelu_approximate=_ACTIVATIONS[act] == "gelu_approximate")
    reader.put("embedding/token_embedding", reader.pop("embeddings.token_embedding.weight"))
    reader.put("embedding/position_embedding", reader.pop("embeddings.position_embedding.weight"))
    _blocks(reader, config, _CLIP_BLOCK)
    reader.layer_norm("final_layer_norm", "final_norm")
    if model_type == "clip":  # causal; the end-of-text token; a projection without bias
        eos = int(text["eos_token_id"])
        config.update(causal=True, pooling="argmax" if eos == 2 else "eos", eos_token_id=eos,
                      projection_bias=False)
        reader.linear("text_projection", "projection")
    else:  # full attention; the last token; the head, with bias
        config.update(causal=False, pooling="last", projection_bias=True)
        reader.linear("head", "projection")
    config["projection_dim"] = int(reader.state["projection/kernel"].shape[1])
    scale = float(np.asarray(reader.pop("logit_scale")).reshape(-1)[0])
    bias = (float(np.asarray(reader.pop("logit_bias")).reshape(-1)[0])
            if model_type == "siglip" else None)
    reader.finish()
    return TextCheckpoint(config, reader.state, scale, bias, source, model_type)
