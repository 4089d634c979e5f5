"""keras-hub presets: read without keras-hub, written through it.

A preset folder holds ``config.json`` (the backbone, ``registered_name`` ``keras_hub>ViTBackbone``, ...),
``model.weights.h5`` (its variables in Keras's HDF5 layout: ``layers/<attribute>/vars/<i>``),
``metadata.json``, and for a classifier ``task.json``, ``task.weights.h5``, ``preprocessor.json`` and
``image_converter.json``. keras-hub's attention kernels have keras_vit's ``(D, heads, head_dim)`` layout
(DINOv3's ``(D, D)``), so every tensor maps by name (docs/checkpoints.md, "keras-hub presets"). A preset
that cannot be read raises a `CheckpointError` naming the file, what is wrong and what to do.
"""

import dataclasses
import pathlib

import numpy as np

from keras_vit import extras
from keras_vit.assign import model_state
from keras_vit.io.files import CheckpointError
from keras_vit.io.tensors import load_h5
from keras_vit.weights import rows as r
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import config_view
from keras_vit.weights.checkpoint import read_config_json
from keras_vit.weights.checkpoint import require
from keras_vit.weights.checkpoint import square_grid
from keras_vit.weights.checkpoint import stored_heads

BACKBONES = ("ViTBackbone", "DeiTBackbone", "DINOV2Backbone", "DINOV3Backbone")
CLASSIFIERS = ("ViTImageClassifier", "DeiTImageClassifier")
# What to do about a preset whose files cannot be read
_SAVE_AGAIN = ("Copy or download the whole preset folder again, or save it again with keras-hub's "
               "`save_to_preset`.")

# Each backbone's arguments (its config.json's "config") <-> ViTConfig, `r.Setting`s that
# `read_keras_hub` reads and `write_keras_hub` passes; the image shape's channels,
# use_mha_bias=False (refused), DINOv2's widths (the tensors') and DINOv3's biases and
# activation (`r.read_dinov3`) are the reader's own code, and `_FIXED`.
S = r.Setting
_VIT = (lambda c: not c.distillation)  # DeiTBackbone has no such argument: its reader takes the default
_SHAPE = [S("image_shape", "image_size", lambda shape: (int(shape[0]), int(shape[1])),
            write=lambda c: (*c.image_size, c.num_channels)),
          S("patch_size", "patch_size", lambda p: tuple(int(n) for n in np.broadcast_to(p, (2,)))),
          S("num_layers", "num_layers"), S("num_heads", "num_heads")]
_DINO_SHAPE = [_SHAPE[0], dataclasses.replace(_SHAPE[1], write=lambda c: c.patch_size[0]), *_SHAPE[2:]]
_MHA = [S("dropout_rate", "dropout_rate", float, 0.0),
        S("attention_dropout", "attention_dropout_rate", float, 0.0),
        S("layer_norm_epsilon", "layer_norm_epsilon", float, 1e-6),
        S("use_mha_bias", None, write=lambda c: True),
        S("use_mlp_bias", "mlp_bias", bool, True, when=_VIT),
        S("use_class_token", "pooling", lambda token: "token" if token else "gap", True,
          lambda c: c.uses_class_token, _VIT),
        S("use_patch_bias", "patch_bias", bool, True, when=_VIT)]
_DINOV3_NAMES = ("use_query_bias", "use_key_bias", "use_value_bias", "use_proj_bias", "use_gated_mlp",
                 "hidden_activation")
_DINO = [S("layer_scale_init_value", "layer_scale_init", float, 1.0),
         S("num_register_tokens", "num_registers", int, 0),
         S("drop_path_rate", "drop_path_rate", float, 0.0)]
SETTINGS = {
    "ViT": [*_SHAPE, S("hidden_dim", "hidden_dim"), S("mlp_dim", "mlp_dim"), *_MHA],
    "DeiT": [*_SHAPE, S("hidden_dim", "hidden_dim"), S("intermediate_dim", "mlp_dim"), *_MHA],
    "DINOV2": [*_DINO_SHAPE, *_DINO, S("hidden_dim", None, write=lambda c: c.hidden_dim),
               S("intermediate_dim", None, write=lambda c: swiglu_intermediate_dim(c.mlp_dim)
                 if c.mlp_activation == "swiglu" else c.mlp_dim),
               r.gated_mlp("use_swiglu_ffn"), S("dropout_rate", "dropout_rate", float, 0.0),
               S("position_embedding_shape", None, write=lambda c: (*c.image_size, c.num_channels))],
    "DINOV3": [*_DINO_SHAPE, S("hidden_dim", "hidden_dim"), S("intermediate_dim", "mlp_dim"), *_DINO,
               *r.dinov3_settings(_DINOV3_NAMES, key_bias=True), S("use_mlp_bias", "mlp_bias", bool, True),
               S("attention_dropout", "attention_dropout_rate", float, 0.0),
               S("layer_norm_eps", "layer_norm_epsilon", float, 1e-5),
               S("rope_theta", "rope_theta", float, 100.0),
               S("dropout_rate", "dropout_rate", float, 0.0, when=r.never)],
}
# What each backbone's reader sets beyond its `SETTINGS`: ViT's and DeiT's
# attention biases (DeiT's classifier reads the [class] token alone, no
# distillation head), DINOv2's LayerNorm epsilon, DINOv3's rotary position embeddings
_FIXED = {"ViT": dict(qkv_bias=True), "DeiT": dict(qkv_bias=True, distillation=True, distillation_head=False),
          "DINOV2": dict(layer_norm_epsilon=1e-6, pooling="token"),
          "DINOV3": dict(pooling="token", position_embedding="rope")}

_ENCODERS = {"ViT": "layers/vi_t_encoder/encoder_layers/vi_t_encoder_block{n}/",
             "DeiT": "layers/dei_t_encoder/encoder_layers/dei_t_encoder_block{n}/",
             "DINOV2": "layers/dinov2_encoder/layers/dinov2_layer{n}/",
             "DINOV3": "layers/dinov3_encoder/layers/dinov3_layer{n}/"}
_QKVO = ("query_dense", "key_dense", "value_dense", "output_dense")


def _block(backbone, c):
    """One block's rows in `backbone`'s h5 layout (`r.block_rows`; ``{n}``: the block's suffix, none for the
    first): DINOv3's Dense ``(D, D)`` attention kernels and gated MLP halves, LayerScales where the model has
    them."""
    vit, dense, gated = backbone in ("ViT", "DeiT"), backbone == "DINOV3", c.mlp_activation == "swiglu"
    attention = {"ViT": "mha/", "DeiT": "mha/", "DINOV2": "attention/attention/", "DINOV3": "attention/"}[backbone]
    mlp = {"ViT": ("mlp/dense_1", "mlp/dense_2"), "DeiT": ("mlp/dense", "output_layer/dense"),
           "DINOV2": ("mlp/weights_in", "mlp/weights_out") if gated else ("mlp/fc1", "mlp/fc2"),
           "DINOV3": ("mlp/gate_proj", "mlp/up_proj", "mlp/down_proj") if gated
           else ("mlp/up_proj", "mlp/down_proj")}[backbone]
    return r.block_rows(_ENCODERS[backbone], ("layer_norm_1", "layer_norm_2") if vit else ("norm1", "norm2"),
                        [attention + name for name in _QKVO], mlp, r.H5,
                        (r.DENSE_IN, r.DENSE_OUT) if dense else (r.SAME, r.SAME),
                        (r.HEADS_BIAS, r.SAME) if dense else (r.SAME, r.SAME), r.SAME,
                        qkv_bias=lambda c: c.qkv_bias, key_bias=lambda c: c.qkv_bias and c.key_bias,
                        mlp_bias=lambda c: c.mlp_bias, scale="layer_scale{j}/vars/0",
                        scale_when=lambda c: c.layer_scale_init is not None)


def _embedding(backbone, c, mask_token):
    """The embedding layer's rows: its own variables are numbered (``vars/0``, ...) in the order the layer
    makes them (DINO's mask token where the preset has one, registers where the model has them)."""
    if backbone in ("ViT", "DeiT"):
        embed = "layers/vi_t_patching_and_embedding/" if backbone == "ViT" else "layers/dei_t_embeddings/"
        posemb = embed + ("position_embedding/vars/0" if backbone == "ViT" else "vars/2")
        return [r.row("class_token/tokens", embed + "vars/0", when=lambda c: c.uses_class_token),
                r.row("distillation_token/tokens", embed + "vars/1", when=lambda c: c.distillation),
                *r.dense_rows("patch_embedding/projection", embed + "patch_embedding", r.H5,
                              has_bias=lambda c: c.patch_bias),
                r.row("position_embedding/embeddings", posemb, r.TOKENS)]
    embed = f"layers/{backbone.lower()}_embedding/"
    names = ["class_token", *(["mask_token"] if mask_token else []),
             *(["registers"] if c.num_registers else []), "table", "stored_table"]
    var = {name: f"{embed}vars/{k}" for k, name in enumerate(names)}
    rows = [r.row("class_token/tokens", var["class_token"]),
            *r.dense_rows("patch_embedding/projection", embed + "patch_embeddings/projection", r.H5)]
    if mask_token:
        rows.append(r.row((), var["mask_token"], r.MASK_TOKEN))
    if c.num_registers:
        rows.append(r.row("registers/tokens", var["registers"]))
    if backbone == "DINOV2":  # the table interpolated to the image size, then the stored one
        rows.append(r.row("position_embedding/embeddings", (var["table"], var["stored_table"]), _DINOV2_TABLES))
    return rows


# keras-hub's DINOv2 keeps its table twice (at the image size, and as stored), neither with register rows
# (`rows.REGISTER_ROWS`).
_DINOV2_TABLES = (lambda c, table, stored: r.REGISTER_ROWS[0](c, table),
                  lambda c, table: r.REGISTER_ROWS[1](c, table) * 2)


def key_map(c, backbone, mask_token=True):
    """The map of a `ViTConfig` `c`'s model as keras-hub's `backbone` (``"ViT"``, ``"DeiT"``, ``"DINOV2"``,
    ``"DINOV3"``) in ``model.weights.h5``; `mask_token`: whether a DINO preset has one."""
    encoder = "layers/layer_normalization/" if backbone.startswith("DINO") else \
        _ENCODERS[backbone].split("encoder_layers")[0] + "layer_norm/"
    return [*_embedding(backbone, c, mask_token),
            *r.blocks(_block(backbone, c), c.num_layers, lambda i: {"i": i, "n": f"_{i}" if i else ""}),
            *r.norm_rows("encoder_norm", encoder[:-1], r.H5)]


# A classifier's task.weights.h5: its Dense layers in order
TASK_ROWS = [
    *r.dense_rows("pre_logits", "layers/dense", r.H5, when=lambda c: c.num_classes and c.representation_size),
    *r.dense_rows("head", "layers/dense_1", r.H5, when=lambda c: c.num_classes and c.representation_size),
    *r.dense_rows("head", "layers/dense", r.H5, when=lambda c: c.num_classes and not c.representation_size),
]


def read_keras_hub(path, num_heads=None):
    """A keras-hub ViT, DeiT (backbone or classifier), DINOv2 or DINOv3 preset folder as a `Checkpoint`, read
    with h5py (Keras's own dependency), without keras-hub. The image converter's scale and offset are the
    model's ``pixel_scale`` and ``pixel_offset``; DINOv2's position table is the one stored at the preset's
    ``image_shape``, resampled as DINOv2 does. `num_heads`: the preset's own count or None (`stored_heads`)."""
    folder = pathlib.Path(path)
    source = f"keras-hub preset {folder}"
    if not folder.is_dir():
        raise CheckpointError(f"{source}: no such folder. A keras-hub preset is a folder "
                              "(config.json, model.weights.h5, ...), as `save_to_preset` writes it.")
    config_json = folder / "config.json"
    if not config_json.is_file():
        raise CheckpointError(f"{source}: no config.json in the folder, which describes the "
                              f"backbone. {_SAVE_AGAIN}")
    spec = read_config_json(config_json, ("class_name", "config"))
    name = spec["class_name"]
    if name not in BACKBONES:
        raise CheckpointError(
            f"{source}: its backbone is keras-hub's {name}; keras_vit reads {', '.join(BACKBONES)} presets.")
    hub, backbone = spec["config"], name[:-len("Backbone")]
    config = r.read_settings(SETTINGS[backbone], hub, f"{config_json}'s \"config\"")
    if not hub.get("use_mha_bias", True):
        raise CheckpointError(
            f"{source}: use_mha_bias=False leaves out the attention output's bias too, and "
            "keras_vit's qkv_bias=False leaves out the query, key and value biases only.")
    if backbone == "DINOV3":
        r.read_dinov3(source, hub, _DINOV3_NAMES, config)
    config.update(_FIXED[backbone], num_channels=int(hub["image_shape"][2]), gelu_approximate=False,
                  data_format="channels_last", num_classes=0)
    arrays = load_h5(folder / "model.weights.h5", source, _SAVE_AGAIN)
    if backbone == "DINOV2":  # the width and the SwiGLU width: the tensors'
        config["hidden_dim"] = int(arrays["layers/dinov2_embedding/vars/0"].shape[-1])
        fc2 = "mlp/weights_out" if config["mlp_activation"] == "swiglu" else "mlp/fc2"
        config["mlp_dim"] = int(arrays[_ENCODERS[backbone].format(n="") + fc2 + "/vars/0"].shape[0])
    if (folder / "task.json").exists():
        _classifier_config(folder, source, config)
    c = config_view(config)
    state = r.move(key_map(c, backbone, hub.get("use_mask_token", True)), arrays, c, source)
    if (folder / "task.json").exists():
        state.update(r.move(TASK_ROWS, load_h5(folder / "task.weights.h5", source, _SAVE_AGAIN), c, source))
    _read_converter(folder, config)
    if c.position_embedding == "rope" or backbone == "DINOV2":  # the table at the image size
        grid, patches = c.grid_size, c.grid_size[0] * c.grid_size[1]
    else:
        patches = state["position_embedding/embeddings"].shape[1] - c.num_prefix_tokens
        grid = square_grid(patches)
    checkpoint = Checkpoint(config, state, source, grid, patches,
                            resample_method="dinov2" if backbone == "DINOV2" else "bilinear")
    stored_heads(checkpoint, num_heads)
    return checkpoint


def _classifier_config(folder, source, config):
    """A ``ViTImageClassifier``'s pooling, pre-logits and head sizes (task.json)."""
    task = read_config_json(folder / "task.json", ("class_name", "config"))
    if task["class_name"] not in CLASSIFIERS:
        raise CheckpointError(f"{source}: its task is keras-hub's {task['class_name']}; "
                              f"keras_vit reads {', '.join(CLASSIFIERS)}.")
    options = require(task["config"], ("num_classes",), f"{folder / 'task.json'}'s \"config\"")
    if options.get("activation") not in (None, "linear"):
        raise CheckpointError(
            f"{source}: the classifier applies activation={options['activation']!r} to its "
            "logits, and a keras_vit ViT returns logits. Read its backbone alone with "
            "num_classes=0, or re-save the classifier with activation=None.")
    config["pooling"] = options.get("pooling", "token")
    if options.get("intermediate_dim"):
        config["representation_size"] = int(options["intermediate_dim"])
    config["num_classes"] = int(options["num_classes"])


def _read_converter(folder, config):
    """The image converter's pixel scaling (``image_converter.json``, beside a classifier's preprocessor or a
    backbone), recorded in `config` as ``pixel_scale`` and ``pixel_offset``: keras-hub's ``x * scale +
    offset`` of pixels in [0, 255], per channel where they are lists."""
    converter = folder / "image_converter.json"
    if not converter.exists():
        return
    scaling = read_config_json(converter).get("config", {})
    if scaling.get("scale") is not None:
        config["pixel_scale"] = scaling["scale"]
        config["pixel_offset"] = 0.0 if scaling.get("offset") is None else scaling["offset"]


def backbone_of(config):
    """The keras-hub backbone the writer makes of a `ViTConfig`: ``"DINOV3"`` (rotary position embeddings),
    ``"DINOV2"`` (registers or LayerScale), ``"DeiT"`` (distillation) or ``"ViT"``."""
    if config.position_embedding == "rope":
        return "DINOV3"
    if config.num_registers or config.layer_scale_init is not None:
        return "DINOV2"
    return "DeiT" if config.distillation else "ViT"


def write_keras_hub(model, path):
    """`model` as a keras-hub preset folder at `path` (new), through keras-hub's own ``save_to_preset``, its
    weights files then filled in by `key_map` (the keys the reader reads): the backbone `backbone_of` names
    (``num_classes=0``), else a ``ViTImageClassifier`` (DeiT without its distillation head:
    ``DeiTImageClassifier``) with its preprocessor. The image converter scales pixels by the model's
    ``pixel_scale`` and ``pixel_offset``. `keras_vit.weights.save_checkpoint` checks first what keras-hub
    can express; DINOv2's register tokens take no position embeddings, so non-zero rows are refused here (a
    check of weights)."""
    c, ours = model.config, model_state(model)
    if backbone_of(c) == "DINOV2" and np.any(ours["position_embedding/embeddings"][0, 1:1 + c.num_registers]):
        raise ValueError(f"{model.name} cannot be written as a keras-hub ViT preset: its register "
                         "tokens have position embeddings (non-zero rows), which DINOv2 does not add. "
                         "Nothing was written. Write it with format='timm' or 'npz', where they apply.")
    keras_hub = extras.require("keras_hub", "Writing a keras-hub preset (reading one does not)")
    path, name = pathlib.Path(path), backbone_of(c)
    backbone = getattr(keras_hub.models, f"{name}Backbone")(**r.write_settings(SETTINGS[name], c))
    scaling = {key: list(value) if isinstance(value, tuple) else value
               for key, value in (("scale", c.pixel_scale), ("offset", c.pixel_offset))}
    converter = getattr(keras_hub.layers, f"{name}ImageConverter")(image_size=c.image_size, **scaling)
    head = {key: ours.pop(key) for key in list(ours) if key.split("/")[0] in ("head", "pre_logits")}
    weights = r.write_rows(key_map(c, name), ours, c, model.name, "keras-hub")
    task_weights = r.write_rows(TASK_ROWS, head, c, model.name, "keras-hub")
    if c.num_classes:
        preprocessor = getattr(keras_hub.models, f"{name}ImageClassifierPreprocessor")(image_converter=converter)
        # DeiT's classifies the [class] token, without a pre-logits layer
        vit = {} if c.distillation else dict(pooling=c.pooling, intermediate_dim=c.representation_size)
        task = getattr(keras_hub.models, "DeiTImageClassifier" if c.distillation else "ViTImageClassifier")(
            backbone=backbone, num_classes=c.num_classes, preprocessor=preprocessor, **vit)
        task.save_to_preset(str(path))
    else:  # the converter beside the backbone, for the pixel scaling
        backbone.save_to_preset(str(path))
        converter.save_to_preset(str(path))
    _fill_h5(path / "model.weights.h5", weights)
    if c.num_classes:
        _fill_h5(path / "task.weights.h5", task_weights)
    return path


def _fill_h5(path, tensors):
    """Writes `tensors` (h5 path -> array) into the weights file at `path` that keras-hub's
    ``save_to_preset`` wrote: every variable gets one, in its shape.

    Raises:
        CheckpointError: a variable without a tensor, or a tensor without a variable.
    """
    import h5py

    with h5py.File(path, "r+") as file:
        datasets = []
        file.visititems(lambda key, item: datasets.append(key) if isinstance(item, h5py.Dataset)
                        and not key.startswith("optimizer/") else None)
        missing, extra = sorted(set(datasets) - set(tensors)), sorted(set(tensors) - set(datasets))
        if missing or extra:
            raise CheckpointError(f"{path}: the keras-hub writer has no tensor for {missing[:8]} "
                                  f"and no variable for {extra[:8]}.")
        for key in datasets:
            file[key][...] = tensors[key].reshape(file[key].shape)


def swiglu_intermediate_dim(mlp_dim):
    """keras-hub's ``intermediate_dim`` whose SwiGLU width is `mlp_dim` (``(int(intermediate_dim * 2 / 3) + 7)
    // 8 * 8``, DINOv2 giant's rule), or None when no integer gives it."""
    for candidate in range(max(mlp_dim * 3 // 2 - 12, 1), mlp_dim * 3 // 2 + 13):
        if (int(candidate * 2 / 3) + 7) // 8 * 8 == mlp_dim:
            return candidate
    return None
