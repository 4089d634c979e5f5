"""keras-hub presets: read without keras-hub, written through it.

A keras-hub preset is a folder: ``config.json`` (the backbone, with its
``registered_name`` such as ``keras_hub>ViTBackbone``), ``model.weights.h5``
(its variables, in Keras's HDF5 layout: ``layers/<attribute>/vars/<i>``),
``metadata.json``, and for a classifier ``task.json`` and
``task.weights.h5`` (the task's own layers) with ``preprocessor.json`` and
``image_converter.json``. Keras-hub's ViT is the paper's with exact (erf)
GELU, ``DINOV2Backbone`` DINOv2's and ``DINOV3Backbone`` DINOv3's; their
attention kernels have keras_vit's ``(D, heads, head_dim)`` layout (DINOv3's
``(D, D)``, reshaped), so every tensor maps by name, unchanged but for the
position table's batch axis (and DINOv2's register rows).
docs/checkpoints.md, "keras-hub presets".

A preset that cannot be read (a file missing, cut short or edited, a
setting missing from its config) raises a `CheckpointError` naming the
file, what is wrong in it and what to do.
"""

import pathlib

import numpy as np

from keras_vit.weights.assign import CheckpointError
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import check_dinov3
from keras_vit.weights.checkpoint import read_json
from keras_vit.weights.checkpoint import require
from keras_vit.weights.checkpoint import split_swiglu
from keras_vit.weights.checkpoint import square_grid

BACKBONES = ("ViTBackbone", "DeiTBackbone", "DINOV2Backbone", "DINOV3Backbone")
CLASSIFIERS = ("ViTImageClassifier", "DeiTImageClassifier")
# What to do about a preset whose files cannot be read
_SAVE_AGAIN = ("Copy or download the whole preset folder again, or save it again with keras-hub's "
               "`save_to_preset`.")
# The settings each backbone's reader needs from config.json's "config"
_SHARED = ("image_shape", "patch_size", "num_layers", "num_heads")
_SETTINGS = {"ViTBackbone": _SHARED + ("hidden_dim", "mlp_dim"),
             "DeiTBackbone": _SHARED + ("hidden_dim", "intermediate_dim"),
             "DINOV2Backbone": _SHARED,
             "DINOV3Backbone": _SHARED + ("hidden_dim", "intermediate_dim")}

# Where each backbone keeps its tensors in model.weights.h5: the embedding
# layer, the encoder, its blocks (``<block>``, ``<block>_1``, ...), and per
# block the two LayerNorms, the attention projections' prefix and the MLP's
# two layers.
_LAYOUTS = {
    "ViTBackbone": dict(
        embed="layers/vi_t_patching_and_embedding/", encoder="layers/vi_t_encoder/",
        block="encoder_layers/vi_t_encoder_block", norms=("layer_norm_1", "layer_norm_2"),
        attention="mha/", mlp=("mlp/dense_1", "mlp/dense_2"), intermediate="mlp_dim"),
    "DeiTBackbone": dict(
        embed="layers/dei_t_embeddings/", encoder="layers/dei_t_encoder/",
        block="encoder_layers/dei_t_encoder_block", norms=("layer_norm_1", "layer_norm_2"),
        attention="mha/", mlp=("mlp/dense", "output_layer/dense"), intermediate="intermediate_dim"),
}


def _read_blocks(reader, state, num_layers, block, norms, attention, mlp, num_heads=None):
    """Every encoder block's LayerNorms, attention projections, MLP and
    LayerScales (where the file has them) into `state`, biases where the
    file has them: the h5 blocks are `block`, `block` + ``_1``, ... An MLP
    layer given as a tuple of names is their kernels side by side (DINOv3's
    ``gate_proj`` and ``up_proj``: keras_vit's SwiGLU ``fc1``); with
    `num_heads`, ``(D, D)`` projections (DINOv3's Dense layers) are reshaped
    to keras_vit's per-head layout."""
    for i in range(num_layers):
        theirs_block = block + (f"_{i}" if i else "") + "/"
        ours = f"encoder_block_{i}/"
        for theirs, target in zip(norms, ("norm1", "norm2")):
            state[ours + target + "/gamma"] = reader.pop(f"{theirs_block}{theirs}/vars/0")
            state[ours + target + "/beta"] = reader.pop(f"{theirs_block}{theirs}/vars/1")
        for theirs, target in ((attention + "query_dense", "attention/query"),
                               (attention + "key_dense", "attention/key"),
                               (attention + "value_dense", "attention/value"),
                               (attention + "output_dense", "attention/out"),
                               (mlp[0], "mlp/fc1"), (mlp[1], "mlp/fc2")):
            names = [f"{theirs_block}{name}" for name in np.atleast_1d(theirs)]
            kernel = np.concatenate([reader.pop(f"{name}/vars/0") for name in names], axis=-1)
            bias = ([reader.pop(f"{name}/vars/1") for name in names]
                    if reader.has(f"{names[0]}/vars/1") else None)
            if num_heads and target.startswith("attention"):  # (D, D) Dense kernels
                out = target == "attention/out"
                kernel = kernel.reshape((num_heads, -1, kernel.shape[-1]) if out
                                        else (kernel.shape[0], num_heads, -1))
                if bias is not None and not out:
                    bias = [bias[0].reshape(num_heads, -1)]
            state[ours + target + "/kernel"] = kernel
            if bias is not None:
                state[ours + target + "/bias"] = np.concatenate(bias, axis=-1)
        for j in (1, 2):
            if reader.has(f"{theirs_block}layer_scale{j}/vars/0"):
                state[f"{ours}layer_scale_{j}"] = reader.pop(f"{theirs_block}layer_scale{j}/vars/0")


def is_keras_hub_preset(folder):
    """Whether `folder`'s config.json is a keras-hub backbone's."""
    config = read_json(pathlib.Path(folder) / "config.json")
    return str(config.get("registered_name", "")).startswith("keras_hub>")


class _H5Reader:
    """The arrays of a Keras ``.weights.h5`` file by path, taken one by one;
    `finish` names any left."""

    def __init__(self, path, source):
        import h5py

        self.source = source
        self.arrays = {}

        def keep(name, item):
            if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/"):
                self.arrays[name] = np.asarray(item)

        path = pathlib.Path(path)
        if not path.is_file():
            raise CheckpointError(f"{source}: no {path.name} in the folder, which holds the "
                                  f"weights. {_SAVE_AGAIN}")
        try:
            with h5py.File(path, "r") as file:
                file.visititems(keep)
        except OSError as error:
            raise CheckpointError(f"{source}: {path.name} is not a readable HDF5 weights file "
                                  f"({error}); it may be cut short or damaged. {_SAVE_AGAIN}") from None

    def has(self, key):
        return key in self.arrays

    def pop(self, key):
        if key not in self.arrays:
            raise CheckpointError(f"{self.source}: no '{key}'; the file holds "
                                  f"{sorted(self.arrays)[:8]} ...")
        return self.arrays.pop(key).astype("float32")

    def finish(self):
        if self.arrays:
            raise CheckpointError(f"{self.source}: variables keras_vit does not read: "
                                  f"{sorted(self.arrays)}.")


def read_keras_hub(path):
    """A keras-hub ViT, DeiT (backbone or classifier), DINOv2 or DINOv3 preset folder as
    a `Checkpoint`; h5py (Keras's own dependency) reads the weights, so
    keras-hub need not be installed. The image converter's scale and offset
    (``image_converter.json``) are recorded as the model's ``pixel_scale``
    and ``pixel_offset``. A folder or file that cannot be read raises a
    `CheckpointError` naming it and what to do."""
    folder = pathlib.Path(path)
    source = f"keras-hub preset {folder}"
    if not folder.is_dir():
        raise CheckpointError(f"{source}: no such folder. A keras-hub preset is a folder "
                              "(config.json, model.weights.h5, ...), as `save_to_preset` writes it.")
    config = folder / "config.json"
    if not config.is_file():
        raise CheckpointError(f"{source}: no config.json in the folder, which describes the "
                              f"backbone. {_SAVE_AGAIN}")
    spec = read_json(config, ("class_name", "config"))
    name = spec["class_name"]
    if name not in BACKBONES:
        raise CheckpointError(
            f"{source}: its backbone is keras-hub's {name}; keras_vit reads "
            f"{', '.join(BACKBONES)} presets.")
    hub = require(spec["config"], _SETTINGS[name], f"{config}'s \"config\"")
    read = {"DINOV2Backbone": _read_dinov2, "DINOV3Backbone": _read_dinov3}.get(name, _read_vit)
    checkpoint = read(folder, source, hub, name)
    _read_converter(folder, checkpoint.config)
    return checkpoint


def _read_vit(folder, source, hub, name):
    """A ``ViTBackbone`` or ``DeiTBackbone`` preset, with its classifier where
    the folder has one (task.json)."""
    if not hub.get("use_mha_bias", True):
        raise CheckpointError(
            f"{source}: use_mha_bias=False leaves out the attention output's bias too, and "
            "keras_vit's qkv_bias=False leaves out the query, key and value biases only.")
    layout = _LAYOUTS[name]
    deit = name == "DeiTBackbone"
    height, width, channels = hub["image_shape"]
    config = dict(
        image_size=(int(height), int(width)), num_channels=int(channels),
        patch_size=tuple(int(p) for p in np.broadcast_to(hub["patch_size"], (2,))),
        num_layers=int(hub["num_layers"]), num_heads=int(hub["num_heads"]),
        hidden_dim=int(hub["hidden_dim"]), mlp_dim=int(hub[layout["intermediate"]]),
        dropout_rate=float(hub.get("dropout_rate", 0.0)),
        attention_dropout_rate=float(hub.get("attention_dropout", 0.0)),
        layer_norm_epsilon=float(hub.get("layer_norm_epsilon", 1e-6)),
        gelu_approximate=False,  # keras-hub's MLP: Keras's "gelu", the exact form
        qkv_bias=True, mlp_bias=bool(hub.get("use_mlp_bias", True)),
        patch_bias=bool(hub.get("use_patch_bias", True)),
        pooling="token" if hub.get("use_class_token", True) else "gap",
        num_classes=0, data_format="channels_last",
    )
    if deit:  # its classifier reads the [class] token alone (no distillation head)
        config.update(distillation=True, distillation_head=False)
    reader = _H5Reader(folder / "model.weights.h5", source)
    state = {}
    embed = layout["embed"]
    if hub.get("use_class_token", True):
        state["class_token/tokens"] = reader.pop(embed + "vars/0")
    if deit:
        state["distillation_token/tokens"] = reader.pop(embed + "vars/1")
    state["patch_embedding/projection/kernel"] = reader.pop(embed + "patch_embedding/vars/0")
    if reader.has(embed + "patch_embedding/vars/1"):
        state["patch_embedding/projection/bias"] = reader.pop(embed + "patch_embedding/vars/1")
    table = reader.pop(embed + "vars/2") if deit else reader.pop(embed + "position_embedding/vars/0")
    state["position_embedding/embeddings"] = table.reshape(1, -1, table.shape[-1])
    _read_blocks(reader, state, config["num_layers"], layout["encoder"] + layout["block"],
                 layout["norms"], layout["attention"], layout["mlp"])
    state["encoder_norm/gamma"] = reader.pop(layout["encoder"] + "layer_norm/vars/0")
    state["encoder_norm/beta"] = reader.pop(layout["encoder"] + "layer_norm/vars/1")
    reader.finish()
    if (folder / "task.json").exists():
        _read_classifier(folder, source, config, state)
    prefix = int("class_token/tokens" in state) + int(deit)
    patches = state["position_embedding/embeddings"].shape[1] - prefix
    return Checkpoint(config, state, source, square_grid(patches), patches)


def _read_dinov2(folder, source, hub, name):
    """A ``DINOV2Backbone`` preset: DINOv2 (with registers, LayerScale and,
    for giant, SwiGLU). Its position table is the one keras-hub stores
    interpolated to the preset's ``image_shape`` (exactly its numbers
    there), with zero rows for the registers, which DINOv2 adds after the
    position embeddings; another ``image_size`` resamples it as DINOv2 does."""
    height, width, channels = hub["image_shape"]
    patch = int(hub["patch_size"])
    registers = int(hub.get("num_register_tokens", 0))
    reader = _H5Reader(folder / "model.weights.h5", source)
    embed = "layers/dinov2_embedding/"
    index = 0
    state = {"class_token/tokens": reader.pop(f"{embed}vars/{index}")}
    if hub.get("use_mask_token", True):  # masked-image pre-training's, not the image model's
        index += 1
        reader.pop(f"{embed}vars/{index}")
    if registers:
        index += 1
        state["registers/tokens"] = reader.pop(f"{embed}vars/{index}")
    table = reader.pop(f"{embed}vars/{index + 1}")  # interpolated to image_shape
    reader.pop(f"{embed}vars/{index + 2}")  # the table at position_embedding_shape
    hidden = table.shape[-1]
    state["position_embedding/embeddings"] = np.concatenate(
        [table[:, :1], np.zeros((1, registers, hidden), "float32"), table[:, 1:]], axis=1)
    state["patch_embedding/projection/kernel"] = reader.pop(embed + "patch_embeddings/projection/vars/0")
    state["patch_embedding/projection/bias"] = reader.pop(embed + "patch_embeddings/projection/vars/1")
    swiglu = bool(hub.get("use_swiglu_ffn", False))
    mlp = ("mlp/weights_in", "mlp/weights_out") if swiglu else ("mlp/fc1", "mlp/fc2")
    block = "layers/dinov2_encoder/layers/dinov2_layer"
    _read_blocks(reader, state, int(hub["num_layers"]), block, ("norm1", "norm2"),
                 "attention/attention/", mlp)
    state["encoder_norm/gamma"] = reader.pop("layers/layer_normalization/vars/0")
    state["encoder_norm/beta"] = reader.pop("layers/layer_normalization/vars/1")
    reader.finish()
    config = dict(
        image_size=(int(height), int(width)), num_channels=int(channels), patch_size=patch,
        num_layers=int(hub["num_layers"]), num_heads=int(hub["num_heads"]), hidden_dim=hidden,
        mlp_dim=int(state["encoder_block_0/mlp/fc2/kernel"].shape[0]),
        layer_scale_init=float(hub.get("layer_scale_init_value", 1.0)), num_registers=registers,
        mlp_activation="swiglu" if swiglu else "gelu", gelu_approximate=False,
        layer_norm_epsilon=1e-6, pooling="token", num_classes=0, data_format="channels_last",
        dropout_rate=float(hub.get("dropout_rate", 0.0)),
        drop_path_rate=float(hub.get("drop_path_rate", 0.0)),
    )
    grid = (int(height) // patch, int(width) // patch)
    return Checkpoint(config, state, source, grid, grid[0] * grid[1], resample_method="dinov2")


def _read_dinov3(folder, source, hub, name):
    """A ``DINOV3Backbone`` preset: DINOv3 (rotary position embeddings,
    registers, LayerScale, per-projection biases, a gated MLP in the
    largest). Nothing depends on the image size: any ``image_size`` reads
    it as it is."""
    gated = bool(hub.get("use_gated_mlp", False))
    check_dinov3(source, {name: bool(hub.get(name, True))
                          for name in ("use_query_bias", "use_value_bias", "use_proj_bias")},
                 ("use_gated_mlp", gated), ("hidden_activation", hub.get("hidden_activation", "gelu")))
    qv_bias = bool(hub.get("use_query_bias", True))
    height, width, channels = hub["image_shape"]
    heads, layers = int(hub["num_heads"]), int(hub["num_layers"])
    registers = int(hub.get("num_register_tokens", 0))
    reader = _H5Reader(folder / "model.weights.h5", source)
    embed = "layers/dinov3_embedding/"
    state = {"class_token/tokens": reader.pop(embed + "vars/0")}
    index = 0
    if hub.get("use_mask_token", True):  # masked-image pre-training's, not the image model's
        index += 1
        reader.pop(f"{embed}vars/{index}")
    if registers:
        state["registers/tokens"] = reader.pop(f"{embed}vars/{index + 1}")
    state["patch_embedding/projection/kernel"] = reader.pop(embed + "patch_embeddings/projection/vars/0")
    state["patch_embedding/projection/bias"] = reader.pop(embed + "patch_embeddings/projection/vars/1")
    fc1 = ("mlp/gate_proj", "mlp/up_proj") if gated else "mlp/up_proj"
    _read_blocks(reader, state, layers, "layers/dinov3_encoder/layers/dinov3_layer",
                 ("norm1", "norm2"), "attention/", (fc1, "mlp/down_proj"), num_heads=heads)
    state["encoder_norm/gamma"] = reader.pop("layers/layer_normalization/vars/0")
    state["encoder_norm/beta"] = reader.pop("layers/layer_normalization/vars/1")
    reader.finish()
    config = dict(
        image_size=(int(height), int(width)), num_channels=int(channels),
        patch_size=int(hub["patch_size"]), num_layers=layers, num_heads=heads,
        hidden_dim=int(hub["hidden_dim"]), mlp_dim=int(hub["intermediate_dim"]),
        layer_scale_init=float(hub.get("layer_scale_init_value", 1.0)), num_registers=registers,
        mlp_activation="swiglu" if gated else "gelu", gelu_approximate=False,
        layer_norm_epsilon=float(hub.get("layer_norm_eps", 1e-5)), pooling="token", num_classes=0,
        position_embedding="rope", rope_theta=float(hub.get("rope_theta", 100.0)),
        qkv_bias=qv_bias, key_bias=bool(hub.get("use_key_bias", True)) or not qv_bias,
        mlp_bias=bool(hub.get("use_mlp_bias", True)),
        attention_dropout_rate=float(hub.get("attention_dropout", 0.0)),
        drop_path_rate=float(hub.get("drop_path_rate", 0.0)), data_format="channels_last",
    )
    grid = (int(height) // config["patch_size"], int(width) // config["patch_size"])
    return Checkpoint(config, state, source, grid, grid[0] * grid[1])


def _read_classifier(folder, source, config, state):
    """A ``ViTImageClassifier``'s pooling, pre-logits and head (task.json,
    task.weights.h5), and its image converter's scaling."""
    task = read_json(folder / "task.json", ("class_name", "config"))
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
    reader = _H5Reader(folder / "task.weights.h5", source)
    dense = ["layers/dense"] + [f"layers/dense_{i}" for i in range(1, 3)]
    if options.get("intermediate_dim"):
        state["pre_logits/kernel"] = reader.pop(dense[0] + "/vars/0")
        state["pre_logits/bias"] = reader.pop(dense[0] + "/vars/1")
        config["representation_size"] = int(options["intermediate_dim"])
        dense = dense[1:]
    state["head/kernel"] = reader.pop(dense[0] + "/vars/0")
    state["head/bias"] = reader.pop(dense[0] + "/vars/1")
    config["num_classes"] = int(options["num_classes"])
    reader.finish()


def _read_converter(folder, config):
    """The image converter's pixel scaling (``image_converter.json``, beside
    a classifier's preprocessor or a backbone), recorded in `config` as
    ``pixel_scale`` and ``pixel_offset``: keras-hub's ``x * scale +
    offset`` of pixels in [0, 255], per channel where they are lists."""
    converter = folder / "image_converter.json"
    if not converter.exists():
        return
    scaling = read_json(converter).get("config", {})
    if scaling.get("scale") is not None:
        config["pixel_scale"] = scaling["scale"]
        config["pixel_offset"] = 0.0 if scaling.get("offset") is None else scaling["offset"]


def is_dinov3(config):
    """Whether a `ViTConfig` is DINOv3's (rotary position embeddings), which
    the keras-hub writer writes as a ``DINOV3Backbone``."""
    return config.position_embedding == "rope"


def is_dinov2(config):
    """Whether a `ViTConfig` is DINOv2's (registers or LayerScale, learned
    position embeddings), which the keras-hub writer writes as a
    ``DINOV2Backbone``."""
    return not is_dinov3(config) and (bool(config.num_registers)
                                      or config.layer_scale_init is not None)


def write_keras_hub(model, path, ours):
    """`model` (its variables `ours`, path -> array) as a keras-hub preset
    folder at `path` (new, or empty): a ``ViTBackbone`` (``num_classes=0``)
    or a ``ViTImageClassifier``, for DeiT without its distillation head a
    ``DeiTBackbone`` or ``DeiTImageClassifier``, for a headless DINOv2 a
    ``DINOV2Backbone``, for DINOv3 a ``DINOV3Backbone``, a classifier with
    its preprocessor, through keras-hub's own ``save_to_preset``; the image
    converter (a classifier's, or beside a backbone) scales pixels by the
    model's ``pixel_scale`` and ``pixel_offset``. The writers check
    first what keras-hub can express (`keras_vit.weights.save_checkpoint`)."""
    import keras

    try:
        import keras_hub
    except ImportError as error:
        raise ValueError(
            "Writing a keras-hub preset needs keras-hub (`pip install keras-hub`); nothing was "
            "written. Reading one does not.") from error
    c = model.config
    path = pathlib.Path(path)
    shared = dict(image_shape=(*c.image_size, c.num_channels), num_layers=c.num_layers,
                  num_heads=c.num_heads, hidden_dim=c.hidden_dim, dropout_rate=c.dropout_rate)
    mha = dict(patch_size=c.patch_size, attention_dropout=c.attention_dropout_rate,
               layer_norm_epsilon=c.layer_norm_epsilon, use_mha_bias=True)
    if is_dinov3(c):
        family = "DINOV3"
        backbone = keras_hub.models.DINOV3Backbone(
            patch_size=c.patch_size[0], num_layers=c.num_layers, hidden_dim=c.hidden_dim,
            num_heads=c.num_heads, intermediate_dim=c.mlp_dim,
            layer_scale_init_value=c.layer_scale_init, num_register_tokens=c.num_registers,
            hidden_activation="silu" if c.mlp_activation == "swiglu" else "gelu",
            use_gated_mlp=c.mlp_activation == "swiglu", use_query_bias=c.qkv_bias,
            use_key_bias=c.qkv_bias and c.key_bias, use_value_bias=c.qkv_bias,
            use_mlp_bias=c.mlp_bias, attention_dropout=c.attention_dropout_rate,
            drop_path_rate=c.drop_path_rate, layer_norm_eps=c.layer_norm_epsilon,
            image_shape=shared["image_shape"], rope_theta=c.rope_theta)
        if c.mlp_activation == "swiglu":  # keras-hub's gate_proj and up_proj
            split_swiglu(ours, c.num_layers)
    elif is_dinov2(c):
        family = "DINOV2"
        swiglu = c.mlp_activation == "swiglu"
        backbone = keras_hub.models.DINOV2Backbone(
            **shared, patch_size=c.patch_size[0],
            intermediate_dim=swiglu_intermediate_dim(c.mlp_dim) if swiglu else c.mlp_dim,
            layer_scale_init_value=c.layer_scale_init, num_register_tokens=c.num_registers,
            use_swiglu_ffn=swiglu, drop_path_rate=c.drop_path_rate,
            position_embedding_shape=shared["image_shape"])
        # one table at its own size (keras-hub's interpolated one the same), without
        # the register rows, zero in DINOv2 (the writers refuse others)
        table = ours["position_embedding/embeddings"]
        ours["position_embedding/embeddings"] = np.concatenate(
            [table[:, :1], table[:, 1 + c.num_registers:]], axis=1)
    elif c.distillation:
        family = "DeiT"
        backbone = keras_hub.models.DeiTBackbone(**shared, **mha, intermediate_dim=c.mlp_dim)
    else:
        family = "ViT"
        backbone = keras_hub.models.ViTBackbone(
            **shared, **mha, mlp_dim=c.mlp_dim, use_mlp_bias=c.mlp_bias,
            use_class_token=c.uses_class_token, use_patch_bias=c.patch_bias)
    paths = dict(_backbone_paths(c, family))
    for variable in backbone.weights:
        if variable.path != "embeddings/mask_token":  # DINOv2's masked-image pre-training's
            variable.assign(ours[paths.pop(variable.path)].reshape(variable.shape))
    scaling = {key: list(value) if isinstance(value, tuple) else value
               for key, value in (("scale", c.pixel_scale), ("offset", c.pixel_offset))}
    converter = getattr(keras_hub.layers, f"{family}ImageConverter")(
        image_size=c.image_size, **scaling)
    if not c.num_classes:  # the converter beside the backbone, for the pixel scaling
        backbone.save_to_preset(str(path))
        converter.save_to_preset(str(path))
        return path
    preprocessor = getattr(keras_hub.models, f"{family}ImageClassifierPreprocessor")(
        image_converter=converter)
    if c.distillation:
        task = keras_hub.models.DeiTImageClassifier(
            backbone=backbone, num_classes=c.num_classes, preprocessor=preprocessor)
    else:
        task = keras_hub.models.ViTImageClassifier(
            backbone=backbone, num_classes=c.num_classes, pooling=c.pooling,
            intermediate_dim=c.representation_size, preprocessor=preprocessor)
    head = [layer for layer in task.layers if isinstance(layer, keras.layers.Dense)]
    pairs = (["pre_logits"] if c.representation_size else []) + ["head"]
    for layer, name in zip(head, pairs, strict=True):
        layer.kernel.assign(ours[f"{name}/kernel"])
        layer.bias.assign(ours[f"{name}/bias"])
    task.save_to_preset(str(path))
    return path


def swiglu_intermediate_dim(mlp_dim):
    """keras-hub's ``intermediate_dim`` whose SwiGLU width is `mlp_dim`
    (``(int(intermediate_dim * 2 / 3) + 7) // 8 * 8``, DINOv2 giant's
    rule), or None when no integer gives it."""
    for candidate in range(max(mlp_dim * 3 // 2 - 12, 1), mlp_dim * 3 // 2 + 13):
        if (int(candidate * 2 / 3) + 7) // 8 * 8 == mlp_dim:
            return candidate
    return None


def _backbone_paths(c, family):
    """(keras-hub backbone variable path, keras_vit variable path) pairs for
    its ``ViTBackbone``, ``DeiTBackbone``, ``DINOV2Backbone`` or
    ``DINOV3Backbone`` (`family`)."""
    if family == "DINOV3":
        embed = "embeddings/"
        yield embed + "cls_token", "class_token/tokens"
        if c.num_registers:
            yield embed + "register_tokens", "registers/tokens"
        yield embed + "patch_embeddings/projection/kernel", "patch_embedding/projection/kernel"
        yield embed + "patch_embeddings/projection/bias", "patch_embedding/projection/bias"
        mlp = ((("mlp/gate_proj", "mlp/gate"), ("mlp/up_proj", "mlp/up"))
               if c.mlp_activation == "swiglu" else (("mlp/up_proj", "mlp/fc1"),))
        yield from _block_paths(c, "encoder/layers_{}/", ("norm1", "norm2"), "attention/",
                                (*mlp, ("mlp/down_proj", "mlp/fc2")),
                                projections=("q_proj", "k_proj", "v_proj", "o_proj"))
        yield "layernorm/gamma", "encoder_norm/gamma"
        yield "layernorm/beta", "encoder_norm/beta"
        return
    if family == "DINOV2":
        embed, encoder = "embeddings/", "encoder/"
        yield embed + "cls_token", "class_token/tokens"
        if c.num_registers:
            yield embed + "register_tokens", "registers/tokens"
        yield embed + "interpolated_position_embeddings", "position_embedding/embeddings"
        yield embed + "position_embeddings", "position_embedding/embeddings"
        yield embed + "patch_embeddings/projection/kernel", "patch_embedding/projection/kernel"
        yield embed + "patch_embeddings/projection/bias", "patch_embedding/projection/bias"
        mlp = ("mlp/weights_in", "mlp/weights_out") if c.mlp_activation == "swiglu" else (
            "mlp/fc1", "mlp/fc2")
        yield from _block_paths(c, "encoder/layers_{}/", ("norm1", "norm2"),
                                "attention/attention/", zip(mlp, ("mlp/fc1", "mlp/fc2")))
        yield "layernorm/gamma", "encoder_norm/gamma"
        yield "layernorm/beta", "encoder_norm/beta"
        return
    deit = family == "DeiT"
    embed = "deit_patching_and_embedding/" if deit else "vit_patching_and_embedding/"
    encoder = "deit_encoder/" if deit else "vit_encoder/"
    if c.uses_class_token:
        yield embed + "class_token", "class_token/tokens"
    if deit:
        yield embed + "distillation_token", "distillation_token/tokens"
    yield embed + "patch_embedding/kernel", "patch_embedding/projection/kernel"
    if c.patch_bias:
        yield embed + "patch_embedding/bias", "patch_embedding/projection/bias"
    yield embed + ("position_embedding" if deit else "position_embedding/embeddings"), \
        "position_embedding/embeddings"
    mlp = ("mlp/dense", "output_layer/output") if deit else ("mlp/dense_1", "mlp/dense_2")
    yield from _block_paths(c, encoder + "transformer_block_{}/", ("ln_1", "ln_2"), "mha/",
                            zip(mlp, ("mlp/fc1", "mlp/fc2")), first=1)
    yield encoder + "ln/gamma", "encoder_norm/gamma"
    yield encoder + "ln/beta", "encoder_norm/beta"


def _block_paths(c, block, norms, attention, mlp, first=0,
                 projections=("query", "key", "value", "attention_output")):
    """The pairs of every encoder block: `block` formatted with the block's
    number (counted from `first`), its two LayerNorms, the attention
    `projections` under `attention` (with the biases the config has), the
    MLP's layers `mlp` ((theirs, ours) pairs; DINOv3's gated MLP has three),
    and the LayerScales where the config has them."""
    mlp = tuple(mlp)
    targets = ("attention/query", "attention/key", "attention/value", "attention/out")
    biases = (c.qkv_bias, c.qkv_bias and c.key_bias, c.qkv_bias, True)
    for i in range(c.num_layers):
        theirs_block, ours = block.format(i + first), f"encoder_block_{i}/"
        for theirs, name in zip(norms, ("norm1", "norm2")):
            yield theirs_block + theirs + "/gamma", ours + name + "/gamma"
            yield theirs_block + theirs + "/beta", ours + name + "/beta"
        layers = [(attention + theirs, name, bias)
                  for theirs, name, bias in zip(projections, targets, biases)]
        layers += [(theirs, name, c.mlp_bias) for theirs, name in mlp]
        for theirs, name, bias in layers:
            yield theirs_block + theirs + "/kernel", ours + name + "/kernel"
            if bias:
                yield theirs_block + theirs + "/bias", ours + name + "/bias"
        if c.layer_scale_init is not None:
            for j in (1, 2):
                yield f"{theirs_block}layer_scale{j}/lambda1", f"{ours}layer_scale_{j}"
