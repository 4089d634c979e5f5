"""A ViT written back to the formats keras_vit reads: a vit_jax ``.npz``, a
Hugging Face ``ViTForImageClassification`` / ``ViTModel`` directory, and a
timm ``VisionTransformer`` ``.safetensors`` (with its hub ``config.json``).

Each writer is the inverse of its reader (`read_npz`, `read_huggingface`,
`read_timm`), key by key: the reader, applied to what the writer wrote, gives
back the same model. A model the format cannot express is refused with the
option that stands in the way, before anything is written; an existing file
is never overwritten.
"""

import contextlib
import json
import pathlib
import shutil

import numpy as np

from keras_vit.weights.assign import CheckpointError
from keras_vit.arguments import WRITE_FORMATS
from keras_vit.weights.checkpoint import mean_and_std
from keras_vit.weights.huggingface import rows as huggingface_rows
from keras_vit.weights.npz import rows as npz_rows
from keras_vit.weights.rows import write_rows
from keras_vit.weights.timm import rows as timm_rows



def model_state(model):
    """path -> float32 NumPy array, every variable of `model`."""
    import keras

    return {v.path: np.asarray(keras.ops.convert_to_numpy(v), np.float32) for v in model.weights}


def save_checkpoint(model, path, format="npz"):
    """Writes `model` (a `keras_vit.ViT`) to `path` in `format`.

    Args:
        model: a `keras_vit.ViT`.
        path: where to write: a ``.npz`` file (``"npz"``); a directory, made
            here (``"huggingface"``: ``config.json`` + ``model.safetensors``;
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
            format cannot express (the message names the option).
    """
    path = check_output(path, format)
    writer = {"npz": _write_npz, "huggingface": _write_huggingface, "timm": _write_timm,
              "keras_hub": _write_keras_hub}[format]
    writer(model, path)
    return path


def check_output(path, format):
    """`path` as a place `save_checkpoint` may write `format` to: a known
    format, a path that does not exist in a folder that does (or, for a
    folder format, an empty folder), a ``.npz`` name for ``"npz"``.
    Creates nothing.

    Returns:
        `path` as a `pathlib.Path`.

    Raises:
        ValueError, FileNotFoundError: naming the problem and the fix.
    """
    if format not in WRITE_FORMATS:
        raise ValueError(f"Unknown checkpoint format {format!r}; use one of {', '.join(WRITE_FORMATS)}.")
    path = pathlib.Path(path).expanduser()
    if path.exists() and not (_is_folder_output(path, format) and not any(path.iterdir())):
        empty = " or an empty folder" if format != "npz" else ""
        raise ValueError(f"{path} exists; nothing was written. Choose a new path{empty}, or "
                         "remove it first.")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: the folder {path.parent} does not exist. Create it first.")
    if format == "npz" and path.suffix != ".npz":
        raise ValueError(f"{path} does not end in .npz, the format written there; nothing was "
                         "written. Name a .npz file.")
    return path


def _refuse(model, format, checks):
    """A ValueError for the first of `checks` ((bad, option, fix) triples)
    that holds."""
    for bad, option, fix in checks:
        if bad:
            raise ValueError(
                f"{model.name} cannot be written as {format}: {option}. Nothing was written. {fix}"
            )


def _family_options(model, reader, allow=()):
    """The refusals for the ViT family's options that `reader`'s format has
    no key or setting for (all but those in `allow`)."""
    c = model.config
    timm = "Write it with format='timm', which has it."
    checks = {
        "num_registers": (c.num_registers, f"it has {c.num_registers} register tokens, which "
                          f"{reader} has no key for", timm),
        "layer_scale_init": (c.layer_scale_init is not None, f"it has LayerScale "
                             f"(layer_scale_init), which {reader} has no key for", timm),
        "mlp_activation": (c.mlp_activation != "gelu", f"mlp_activation={c.mlp_activation!r}, "
                           f"which {reader} does not have", timm),
        "qk_norm": (c.qk_norm, f"qk_norm, which {reader} does not have", timm),
        "norm_pre": (c.norm_pre, f"norm_pre (CLIP's LayerNorm before the encoder), which {reader} "
                     "does not have", timm),
        "fc_norm": (c.fc_norm, f"fc_norm, which {reader} does not have", timm),
        "patch_bias": (not c.patch_bias, f"its patch embedding has no bias (patch_bias=False), "
                       f"which {reader} requires", timm),
        "distillation": (c.distillation, f"distillation (DeiT's second token and head), which "
                         f"{reader} does not have", timm),
        "class_token": (c.class_token is not None, f"class_token={c.class_token} with "
                        f"{c.pooling!r} pooling, which {reader} does not have", timm),
        "mlp_bias": (not c.mlp_bias, f"its MLP has no biases (mlp_bias=False), which {reader} "
                     "requires", "Write it with format='npz', which has it."),
        "rope": (c.position_embedding == "rope", f"rotary position embeddings "
                 f"(position_embedding='rope', DINOv3's), which {reader} does not have",
                 "Write it with format='huggingface' (a DINOv3ViTModel) or 'keras_hub' (a "
                 "DINOV3Backbone), which have them."),
        "key_bias": (not c.key_bias, f"its key projection has no bias (key_bias=False), which "
                     f"{reader} requires", "DINOv3's formats have it (with rotary position "
                     "embeddings); else keep it as a .keras file (`model.save`)."),
        **_image_text_options(c, reader),
    }
    return [check for name, check in checks.items() if name not in allow]


def _image_text_options(c, reader):
    """The refusals for an image-text model's options (`keras_vit.ImageTextModel`'s
    image tower, `keras_vit.zero_shot_classifier`), which no format written here has."""
    return {
        "projection_dim": (c.projection_dim, f"it has an image projection (projection_dim="
                           f"{c.projection_dim}, CLIP's), which {reader} has no key for",
                           "Keep it as a .keras file (`model.save`)."),
        "normalize_features": (c.normalize_features, f"it normalises its features before the head "
                               f"(normalize_features, a zero-shot classifier's), which {reader} "
                               "does not do", "Keep it as a .keras file (`model.save`)."),
    }


# -- vit_jax / big_vision .npz -------------------------------------------------

def _write_npz(model, path):
    c = model.config
    _refuse(model, "npz", [
        (not c.gelu_approximate, "it uses exact (erf) GELU, and vit_jax's code runs the tanh "
         "approximation", "Use format='timm' or 'huggingface', or accept slightly different "
         "numbers: `model.with_config(gelu_approximate=True).save_checkpoint(...)`."),
        (c.layer_norm_epsilon != 1e-6, f"its LayerNorm epsilon is {c.layer_norm_epsilon:g}, and "
         "vit_jax's is 1e-6", "Use format='huggingface' (it stores the epsilon)."),
        (c.pooling == "none", "pooling='none' (the token sequence) has no vit_jax classifier",
         "Use pooling 'token', 'gap' or 'map'."),
        *_family_options(model, "vit_jax", allow=("mlp_bias",)),
    ])
    out = write_rows(npz_rows(c, c.pooling == "map"), model_state(model), c, model.name, "npz")
    with open(path, "wb") as file:
        np.savez(file, **out)


# -- PyTorch state dicts -------------------------------------------------------------

def _save_safetensors(tensors, path):
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}, str(path),
              metadata={"format": "pt"})


def _is_folder_output(path, format):
    """Whether `format` writes a folder at `path` (Hugging Face's always,
    timm's unless `path` names a ``.safetensors`` file)."""
    return path.is_dir() and (format in ("huggingface", "keras_hub")
                              or (format == "timm" and path.suffix != ".safetensors"))


@contextlib.contextmanager
def _folder_as_it_was_on_failure(path):
    """Writing into `path`, a new folder or an empty one (`check_output`): a
    write that fails leaves it as it was, none or empty."""
    created = not path.exists()
    try:
        yield
    except BaseException:
        if created:
            shutil.rmtree(path, ignore_errors=True)
        else:
            for child in path.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise


def _write_folder(path, tensors, config, others=None):
    """``config.json`` and ``model.safetensors`` in `path` (and `others`,
    file name -> JSON), a new folder or an empty one; a failed write leaves
    the folder as it was."""
    with _folder_as_it_was_on_failure(path):
        path.mkdir(exist_ok=True)
        _save_safetensors(tensors, path / "model.safetensors")
        for name, content in {"config.json": config, **(others or {})}.items():
            (path / name).write_text(json.dumps(content, indent=2) + "\n")


def _image_size(config):
    height, width = config.image_size
    return height if height == width else [height, width]


# -- Hugging Face ViT -------------------------------------------------------------

def _write_huggingface(model, path):
    c = model.config
    if c.position_embedding == "rope":
        _write_huggingface_dinov3(model, path)
        return
    _refuse(model, "a Hugging Face ViT", [
        (c.pooling != "token", f"pooling {c.pooling!r}: Hugging Face's ViT classifies the "
         "[class] token", "Write it with format='timm' (gap, map) or 'npz'."),
        (c.resnet_block_units is not None, "it is a hybrid (ResNet stem), which Hugging Face's "
         "ViT does not have", "Write it with format='npz'."),
        (c.position_embedding == "sincos2d", "its position embeddings are sin-cos, not learned",
         "Write it with format='npz'."),
        (c.patch_size[0] != c.patch_size[1], f"its patches are {c.patch_size[0]}x"
         f"{c.patch_size[1]}, and Hugging Face's ViT has square patches", "Use format='timm'."),
        (c.representation_size and c.num_classes, "it has a pre-logits layer and a head: "
         "ViTForImageClassification classifies the [class] token without its pooler",
         "Drop the head (`model.with_config(num_classes=0)`) to write a ViTModel whose pooler "
         "is the pre-logits layer, or use format='npz'."),
        *_family_options(model, "Hugging Face's ViT", allow=("mlp_activation",)),
        (c.mlp_activation == "swiglu", "mlp_activation='swiglu', which Hugging Face's ViT does "
         "not have", "Write it with format='timm', which has it."),
    ])
    tensors = write_rows(huggingface_rows(c, "vit"), model_state(model), c, model.name, "Hugging Face")
    if c.num_classes:  # ViTForImageClassification: the ViTModel under "vit.", its classifier
        tensors = {key if key.startswith("classifier.") else "vit." + key: value
                   for key, value in tensors.items()}
    names = c.class_names or [f"LABEL_{i}" for i in range(c.num_classes)]
    config = {
        "architectures": ["ViTForImageClassification" if c.num_classes else "ViTModel"],
        "model_type": "vit",
        "hidden_size": c.hidden_dim,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "intermediate_size": c.mlp_dim,
        "hidden_act": ("quick_gelu" if c.mlp_activation == "quick_gelu"
                       else "gelu_pytorch_tanh" if c.gelu_approximate else "gelu"),
        "layer_norm_eps": c.layer_norm_epsilon,
        "image_size": _image_size(c),
        "patch_size": c.patch_size[0],
        "num_channels": c.num_channels,
        "qkv_bias": c.qkv_bias,
        "encoder_stride": c.patch_size[0],
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "id2label": {str(i): name for i, name in enumerate(names)},
        "label2id": {name: i for i, name in enumerate(names)},
    }
    if c.representation_size:
        config.update(pooler_output_size=c.representation_size, pooler_act="tanh")
    _write_folder(path, tensors, config, {"preprocessor_config.json": _image_processor(c)})


def _write_huggingface_dinov3(model, path):
    """A DINOv3 (rotary position embeddings) as transformers' ``DINOv3ViTModel``
    (``model_type`` ``dinov3_vit``): features, the normalised [class] token."""
    c = model.config
    gated = c.mlp_activation == "swiglu"
    _refuse(model, "a Hugging Face DINOv3ViTModel", [
        (c.num_classes or c.pooling != "token" or c.representation_size, "DINOv3ViTModel gives "
         "features (its normalised [class] token) and has no head", "Write it headless "
         "(`model.with_config(num_classes=0)`), or with format='keras_hub'."),
        (c.layer_scale_init is None, "it has no LayerScale, which DINOv3ViTModel has always",
         "Keep it as a .keras file (`model.save`)."),
        (c.mlp_activation == "quick_gelu" or (not gated and c.gelu_approximate),
         f"mlp_activation={c.mlp_activation!r}" + ("" if gated else f" with gelu_approximate="
                                                   f"{c.gelu_approximate}") + ", and DINOv3's MLP "
         "is exact GELU (or gated SiLU)", "Keep it as a .keras file (`model.save`)."),
        (c.patch_size[0] != c.patch_size[1], f"its patches are {c.patch_size[0]}x"
         f"{c.patch_size[1]}, and DINOv3's are square", "Keep it as a .keras file (`model.save`)."),
        *_family_options(model, "Hugging Face's DINOv3ViTModel", allow=(
            "num_registers", "layer_scale_init", "mlp_activation", "mlp_bias", "rope", "key_bias")),
    ])
    tensors = write_rows(huggingface_rows(c, "dinov3"), model_state(model), c, model.name, "Hugging Face")
    config = {
        "architectures": ["DINOv3ViTModel"], "model_type": "dinov3_vit",
        "hidden_size": c.hidden_dim, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "intermediate_size": c.mlp_dim,
        "hidden_act": "silu" if gated else "gelu", "use_gated_mlp": gated,
        "layer_norm_eps": c.layer_norm_epsilon, "rope_theta": c.rope_theta,
        "image_size": _image_size(c), "patch_size": c.patch_size[0], "num_channels": c.num_channels,
        "query_bias": c.qkv_bias, "key_bias": c.qkv_bias and c.key_bias, "value_bias": c.qkv_bias,
        "proj_bias": True, "mlp_bias": c.mlp_bias, "layerscale_value": c.layer_scale_init,
        "num_register_tokens": c.num_registers,
    }
    _write_folder(path, tensors, config, {"preprocessor_config.json": _image_processor(c)})


def _image_processor(c):
    """A ``ViTImageProcessor``'s ``preprocessor_config.json`` that resizes to
    the model's size and scales pixels as the model records (``rescale /
    std`` = ``pixel_scale``, ``-mean / std`` = ``pixel_offset``; the
    paper's [-1, 1]: mean and std 0.5)."""
    mean, std = mean_and_std(c)
    height, width = c.image_size
    return {"image_processor_type": "ViTImageProcessor", "do_resize": True,
            "size": {"height": height, "width": width}, "resample": 2, "do_rescale": True,
            "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": mean, "image_std": std}


# -- timm VisionTransformer --------------------------------------------------------

def _write_timm(model, path):
    c = model.config
    gated = 2 if c.mlp_activation == "swiglu" else 1  # SwiGLUPacked's fc1 holds both halves
    _refuse(model, "timm", [
        *_image_text_options(c, "timm's VisionTransformer").values(),
        (c.resnet_block_units is not None, "it is a hybrid (ResNet stem); timm keeps those in "
         "another model class (vision_transformer_hybrid)", "Write it with format='npz'."),
        (c.position_embedding == "sincos2d", "its position embeddings are sin-cos; timm's "
         "VisionTransformer learns them", "Write it with format='npz'."),
        (c.position_embedding == "rope", "rotary position embeddings (position_embedding='rope', "
         "DINOv3's), which timm keeps in another model class (eva)", "Write it with "
         "format='huggingface' (a DINOv3ViTModel) or 'keras_hub' (a DINOV3Backbone)."),
        (not c.key_bias, "its key projection has no bias (key_bias=False), which timm's "
         "VisionTransformer does not have", "DINOv3's formats have it (with rotary position "
         "embeddings); else keep it as a .keras file (`model.save`)."),
        (c.representation_size is not None, "it has a pre-logits layer, which timm's "
         "VisionTransformer no longer has", "Write it with format='npz' or 'huggingface'."),
        (c.pooling == "none", "pooling='none' has no timm classifier", "Use another pooling."),
        (c.distillation and not c.distillation_head, "its distillation token has no head "
         "(distillation_head=False), and timm's distilled ViT has both heads",
         "Keep it as a .keras file (`model.save`)."),
        (not c.mlp_bias, "its MLP has no biases (mlp_bias=False), and timm's proj_bias removes "
         "the attention output's bias with them", "Write it with format='npz'."),
        (c.layer_norm_epsilon != (1e-5 if c.norm_pre else 1e-6), f"its LayerNorm epsilon is "
         f"{c.layer_norm_epsilon:g}, and timm's " + ("CLIP uses 1e-5" if c.norm_pre else
                                                     "ViT uses 1e-6"),
         "Use format='huggingface' (it stores the epsilon)."),
        (c.norm_pre == c.patch_bias, "timm builds a LayerNorm before the encoder exactly when the "
         f"patch embedding has no bias (pre_norm), and this model has norm_pre={c.norm_pre}, "
         f"patch_bias={c.patch_bias}", "Use format='huggingface' or 'npz' where they apply."),
        (int(c.hidden_dim * (gated * c.mlp_dim / c.hidden_dim)) != gated * c.mlp_dim,
         f"timm makes the MLP width int(embed_dim * mlp_ratio), which does not give "
         f"{gated * c.mlp_dim} for width {c.hidden_dim}", "Use format='huggingface' or 'npz'."),
    ])
    tensors = write_rows(timm_rows(c), model_state(model), c, model.name, "timm")
    if path.suffix == ".safetensors":
        _save_safetensors(tensors, path)
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
    from keras_vit.weights.keras_hub import family_of
    from keras_vit.weights.keras_hub import write_keras_hub

    def is_dinov2(c):
        return family_of(c) == "DINOV2"

    def is_dinov3(c):
        return family_of(c) == "DINOV3"

    c = model.config
    state = model_state(model)
    fix = "Write it with format='timm' or 'npz', where they apply."
    _refuse(model, "a keras-hub ViT preset", [
        (c.gelu_approximate, "it uses tanh GELU (the paper's), and keras-hub's ViT the exact "
         "(erf) form", "Accept slightly different numbers with `model.with_config("
         "gelu_approximate=False).save_checkpoint(...)`, or use format='npz'."),
        (not c.qkv_bias and not is_dinov3(c), "qkv_bias=False, and keras-hub's "
         "use_mha_bias=False also drops the attention output's bias", fix),
        (c.pooling not in ("token", "gap") or (c.pooling == "gap" and c.uses_class_token),
         f"pooling {c.pooling!r}" + (" beside a [class] token" if c.uses_class_token else "")
         + ", which keras-hub's ViTImageClassifier does not have", fix),
        (c.mlp_activation not in ("gelu", "swiglu") or (c.mlp_activation == "swiglu"
                                                       and not is_dinov2(c) and not is_dinov3(c)),
         f"mlp_activation={c.mlp_activation!r}, which keras-hub's ViT does not have", fix),
        (c.representation_size and not c.num_classes, "it has a pre-logits layer and no head: "
         "a keras-hub ViTBackbone has no pre-logits layer", "Write it with a head, or with "
         "format='npz'."),
        (c.resnet_block_units is not None, "it is a hybrid (ResNet stem)", "Use format='npz'."),
        (c.position_embedding == "sincos2d", "its position embeddings are sin-cos",
         "Use format='npz'."),
        (c.data_format != "channels_last", "it takes channels-first images", fix),
        (c.distills_by_head, "DeiT's two heads averaged (distillation_head=True), and "
         "keras-hub's DeiT classifies the [class] token alone", "Write it with format='timm'."),
        (c.distillation and (not c.mlp_bias or not c.patch_bias or c.representation_size),
         "keras-hub's DeiT has neither unbiased MLPs or patches nor a pre-logits layer", fix),
        *(_dinov3_checks(c, fix) if is_dinov3(c) else
          _dinov2_checks(c, state, fix) if is_dinov2(c) else []),
        *_family_options(model, "keras-hub's ViT", allow=(
            "mlp_bias", "patch_bias", "distillation", "num_registers", "layer_scale_init",
            "mlp_activation", "rope", "key_bias")),
        (not c.key_bias and not is_dinov3(c), "its key projection has no bias (key_bias=False), "
         "which keras-hub has for DINOv3 (rotary position embeddings) only", fix),
    ])
    with _folder_as_it_was_on_failure(path):
        write_keras_hub(model, path, state)


def _dinov3_checks(c, fix):
    """What a keras-hub ``DINOV3Backbone``, which the writer makes of a
    DINOv3 (rotary position embeddings), cannot express."""
    return [
        (c.num_classes or c.pooling != "token" or not c.patch_bias or c.qk_norm or c.norm_pre
         or c.fc_norm or c.distillation or c.patch_size[0] != c.patch_size[1],
         "keras-hub's DINOV3Backbone is a headless DINOv3 ([class] token, patch bias, square "
         "patches)", fix),
        (c.layer_scale_init is None, "rotary position embeddings without LayerScale, which "
         "keras-hub's DINOV3Backbone has always", fix),
    ]


def _dinov2_checks(c, state, fix):
    """What a keras-hub ``DINOV2Backbone``, which the writer makes of a
    DINOv2 (registers or LayerScale), cannot express."""
    from keras_vit.weights.keras_hub import swiglu_intermediate_dim

    registers = state["position_embedding/embeddings"][0, 1:1 + c.num_registers]
    return [
        (c.num_classes or c.pooling != "token" or c.layer_norm_epsilon != 1e-6
         or not c.mlp_bias or not c.patch_bias or c.qk_norm or c.norm_pre or c.fc_norm
         or c.distillation or c.patch_size[0] != c.patch_size[1],
         "keras-hub's DINOV2Backbone is a headless DINOv2 ([class] token, LayerNorm epsilon "
         "1e-6, biases everywhere, square patches)", fix),
        (c.layer_scale_init is None, "registers without LayerScale, which keras-hub's "
         "DINOV2Backbone has always", fix),
        (c.mlp_activation == "swiglu" and swiglu_intermediate_dim(c.mlp_dim) is None,
         f"a SwiGLU width of {c.mlp_dim}, which keras-hub's rounding to multiples of 8 does not give",
         fix),
        (bool(np.any(registers)),
         "its register tokens have position embeddings (non-zero rows), which DINOv2 does not add",
         fix),
    ]
