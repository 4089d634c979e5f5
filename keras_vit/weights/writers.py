"""A ViT written back to the formats keras_vit reads: a vit_jax ``.npz``, a
Hugging Face ``ViTForImageClassification`` / ``ViTModel`` directory (a
``DINOv3ViTModel`` for rotary position embeddings, a SigLIP 2
``Siglip2VisionModel`` for a NaFlex model), and a timm ``VisionTransformer``
``.safetensors`` (with its hub ``config.json``).

Each writer is the inverse of its reader (`read_npz`, `read_huggingface`,
`read_timm`), key by key: the reader, applied to what the writer wrote, gives
back the same model. A model the format cannot express is refused with the
option that stands in the way, before anything is written; an existing file
is never overwritten.
"""

import json

import numpy as np

from keras_vit.arguments import WRITE_FORMATS
from keras_vit.assign import model_state
from keras_vit.config import mean_and_std
from keras_vit.io import files
from keras_vit.io.tensors import safetensors_bytes
from keras_vit.weights.capabilities import COLUMNS
from keras_vit.weights.capabilities import refusal
from keras_vit.weights.huggingface import SETTINGS as huggingface_settings
from keras_vit.weights.huggingface import rows as huggingface_rows
from keras_vit.weights.npz import rows as npz_rows
from keras_vit.weights.rows import write_rows
from keras_vit.weights.rows import write_settings
from keras_vit.weights.timm import rows as timm_rows


def save_checkpoint(model, path, format="npz"):
    """Writes `model` (a `keras_vit.ViT`) to `path` in `format`.

    Args:
        model: a `keras_vit.ViT`.
        path: where to write: a ``.npz`` file (``"npz"``); a directory, made
            here (``"huggingface"``: ``config.json`` + ``model.safetensors``,
            a ``Siglip2VisionModel`` with its ``preprocessor_config.json``
            for a NaFlex model;
            ``"timm"``: the same, timm's hub layout); or, for ``"timm"``, a
            ``.safetensors`` file alone.
        format: ``"npz"`` (vit_jax; big_vision's layout for MAP pooling),
            ``"huggingface"``, ``"timm"`` or ``"keras_hub"`` (a preset
            folder of keras-hub's ``ViTBackbone`` or, with a head,
            ``ViTImageClassifier``; written through keras-hub).

    Returns:
        The path written, a `pathlib.Path`.

    Raises:
        ValueError: an unknown format, a path that exists, or a model the
            format cannot express (the message names the option:
            `keras_vit.weights.capabilities.TABLE`).
    """
    path = check_output(path, format)
    column = _column(model.config, format)
    refuse(model, column)
    writer = {"npz": _write_npz, "huggingface": _write_huggingface, "dinov3": _write_huggingface,
              "siglip2": _write_huggingface, "timm": _write_timm, "keras_hub": _write_keras_hub}[column]
    if _is_folder(path, format):
        files.write_folder(path, lambda folder: writer(model, folder))
    else:
        writer(model, path)
    return path


def _column(c, format):
    """The `keras_vit.weights.capabilities.COLUMNS` key that `format` writes
    a model of config `c` as: ``"huggingface"`` is a ``Siglip2VisionModel``
    for a NaFlex model (``"siglip2"``), a ``DINOv3ViTModel`` for rotary
    position embeddings (``"dinov3"``), else a ViT."""
    if format != "huggingface":
        return format
    return "siglip2" if c.naflex else "dinov3" if c.position_embedding == "rope" else format


def _is_folder(path, format):
    """Whether `format` writes a folder at `path` (all but npz; timm's
    unless `path` names a ``.safetensors`` file)."""
    return format != "npz" and files.weights_folder(path) == path


def check_output(path, format):
    """`path` as a place `save_checkpoint` may write `format` to: a known
    format, a new path in a folder that exists (or, for a folder format,
    an empty folder; `keras_vit.io.files.output_file`), a ``.npz`` name for
    ``"npz"``. Creates nothing.

    Returns:
        `path` as a `pathlib.Path`.

    Raises:
        ValueError, FileNotFoundError: naming the problem and the fix.
    """
    if format not in WRITE_FORMATS:
        raise ValueError(f"Unknown checkpoint format {format!r}; use one of {', '.join(WRITE_FORMATS)}.")
    path = files.output_file(path, "", new="folder" if _is_folder(path, format) else "file")
    if format == "npz" and path.suffix != ".npz":
        raise ValueError(f"{path} does not end in .npz, the format written there; nothing was "
                         "written. Name a .npz file.")
    return path


def refuse(model, format):
    """Raises a ValueError naming what `format` (a
    `keras_vit.weights.capabilities.COLUMNS` key) cannot hold of `model`."""
    found = refusal(model.config, format)
    if found:
        why, instead = found
        raise ValueError(f"{model.name} cannot be written as {COLUMNS[format].writes}: {why}. "
                         f"Nothing was written. {instead}")


# -- vit_jax / big_vision .npz -------------------------------------------------

def _write_npz(model, path):
    c = model.config
    out = write_rows(npz_rows(c, c.pooling == "map"), model_state(model), c, model.name, "npz")
    files.write_atomic(path, lambda file: np.savez(file, **out))


# -- PyTorch state dicts -------------------------------------------------------------

def _write_folder(folder, tensors, config, others=None):
    """``config.json`` and ``model.safetensors`` in `folder` (and `others`,
    file name -> JSON)."""
    (folder / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    for name, content in {"config.json": config, **(others or {})}.items():
        (folder / name).write_text(json.dumps(content, indent=2) + "\n")


# -- Hugging Face ------------------------------------------------------------------

# `_column` -> (Hugging Face's family, `keras_vit.weights.huggingface.SETTINGS`), model class,
# model type and the constants of its config.json
_HUGGINGFACE = {
    "huggingface": ("vit", "ViTModel", "vit",
                    dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    "dinov3": ("dinov3", "DINOv3ViTModel", "dinov3_vit", {}),
    "siglip2": ("siglip2", "Siglip2VisionModel", "siglip2_vision_model",
                dict(attention_dropout=0.0, vision_use_head=True))}


def _write_huggingface(model, path):
    """A ViT as transformers' ``ViTModel`` (with a head,
    ``ViTForImageClassification``); a DINOv3 (rotary position embeddings) as
    its ``DINOv3ViTModel`` (features: the normalised [class] token); a NaFlex
    model as its ``Siglip2VisionModel`` (Tschannen et al., "SigLIP 2",
    arXiv:2502.14786: its position table of ``num_patches`` = grid_h x
    grid_w rows, its MAP head); each with its ``preprocessor_config.json``
    (`_image_processor`)."""
    c = model.config
    family, architecture, model_type, constants = _HUGGINGFACE[_column(c, "huggingface")]
    tensors = write_rows(huggingface_rows(c, family), model_state(model), c, model.name, "Hugging Face")
    if family == "vit":  # its labels (placeholders without names), pre-logits and head
        names = c.class_names or [f"LABEL_{i}" for i in range(c.num_classes)]
        constants = {**constants, "id2label": {str(i): name for i, name in enumerate(names)},
                     "label2id": {name: i for i, name in enumerate(names)}}
        if c.representation_size:
            constants.update(pooler_output_size=c.representation_size, pooler_act="tanh")
        if c.num_classes:  # ViTForImageClassification: the ViTModel under "vit.", its classifier
            architecture = "ViTForImageClassification"
            tensors = {key if key.startswith("classifier.") else "vit." + key: value
                       for key, value in tensors.items()}
    config = {"architectures": [architecture], "model_type": model_type,
              **write_settings(huggingface_settings[family], c), **constants}
    _write_folder(path, tensors, config, {"preprocessor_config.json": _image_processor(c)})


def _image_processor(c):
    """The ``preprocessor_config.json`` of a ``ViTImageProcessor`` that
    resizes to the model's size, for a NaFlex model a
    ``Siglip2ImageProcessor`` with its patch size and ``max_num_patches``;
    both scale pixels as the model records (``rescale / std`` =
    ``pixel_scale``, ``-mean / std`` = ``pixel_offset``; the paper's [-1, 1]:
    mean and std 0.5)."""
    mean, std = mean_and_std(c)
    own = ({"image_processor_type": "Siglip2ImageProcessor", "patch_size": c.patch_size[0],
            "max_num_patches": c.max_num_patches} if c.naflex else
           {"image_processor_type": "ViTImageProcessor",
            "size": dict(zip(("height", "width"), c.image_size))})
    return {**own, "do_resize": True, "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255,
            "do_normalize": True, "image_mean": mean, "image_std": std}


# -- timm VisionTransformer --------------------------------------------------------

def _write_timm(model, path):
    c = model.config
    gated = 2 if c.mlp_activation == "swiglu" else 1  # SwiGLUPacked's fc1 holds both halves
    tensors = write_rows(timm_rows(c), model_state(model), c, model.name, "timm")
    if path.suffix == ".safetensors":
        files.write_atomic(path, safetensors_bytes(tensors))
        return
    model_args = dict(
        img_size=list(c.image_size), patch_size=list(c.patch_size), in_chans=c.num_channels,
        embed_dim=c.hidden_dim, depth=c.num_layers, num_heads=c.num_heads,
        mlp_ratio=gated * c.mlp_dim / c.hidden_dim, qkv_bias=c.qkv_bias,
        num_classes=c.num_classes, class_token=c.uses_class_token, reg_tokens=c.num_registers,
        no_embed_class=False, global_pool={"token": "token", "gap": "avg", "map": "map"}[c.pooling],
        fc_norm=c.fc_norm, qk_norm=c.qk_norm, pre_norm=c.norm_pre,
    )
    if c.mlp_activation != "swiglu":  # timm's SwiGLUPacked model (DINOv2 giant) has its own SiLU
        model_args["act_layer"] = ("quick_gelu" if c.mlp_activation == "quick_gelu"
                                   else "gelu_tanh" if c.gelu_approximate else "gelu")
    if c.distillation:  # deit.py's VisionTransformerDistilled has no reg_tokens argument
        del model_args["reg_tokens"]
    if c.layer_scale_init is not None:
        model_args["init_values"] = c.layer_scale_init
    config = {
        # the model class and what model_args cannot say; model_args give every size
        "architecture": ("deit_base_distilled_patch16_224" if c.distillation
                         else "vit_giant_patch14_dinov2" if c.mlp_activation == "swiglu"
                         else "vit_base_patch16_clip_224" if c.norm_pre else "vit_base_patch16_224"),
        "num_classes": c.num_classes,
        "num_features": c.hidden_dim,
        "global_pool": model_args["global_pool"],
        "model_args": model_args,
        "pretrained_cfg": {
            "input_size": [c.num_channels, *c.image_size],
            "interpolation": "bicubic",
            # of pixels in [0, 1]: the model's scaling (the paper's [-1, 1]: 0.5 and 0.5)
            **dict(zip(("mean", "std"), mean_and_std(c))),
            "crop_pct": 1.0,
            "num_classes": c.num_classes,
            "classifier": "head",
        },
    }
    if c.class_names:
        config["label_names"] = list(c.class_names)
    _write_folder(path, tensors, config)


# -- keras-hub presets ---------------------------------------------------------

def _write_keras_hub(model, path):
    """A keras-hub preset (`keras_vit.weights.keras_hub.write_keras_hub`);
    DINOv2's register tokens take no position embeddings: non-zero rows
    are refused (the one check of weights, not of the config)."""
    from keras_vit.weights.keras_hub import family_of
    from keras_vit.weights.keras_hub import write_keras_hub

    c, state = model.config, model_state(model)
    if family_of(c) == "DINOV2" and np.any(state["position_embedding/embeddings"][0, 1:1 + c.num_registers]):
        raise ValueError(f"{model.name} cannot be written as {COLUMNS['keras_hub'].writes}: its register "
                         "tokens have position embeddings (non-zero rows), which DINOv2 does not add. "
                         "Nothing was written. Write it with format='timm' or 'npz', where they apply.")
    write_keras_hub(model, path, state)
