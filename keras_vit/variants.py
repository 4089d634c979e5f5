"""Copies of a `keras_vit.ViT` with another architecture (resolution, patch
size, any argument, VPT's prompts), its LoRA and DoRA adaptation and
merge, and the projections that Keras quantizes and adapts."""

import contextlib
import gc
import math
import warnings

import keras

from keras_vit import layers as vit_layers
from keras_vit.config import is_int
from keras_vit.config import pair
from keras_vit.kernels import backend_platform
from keras_vit.kernels.projection import dora_kernel
from keras_vit.kernels.projection import has_dora
from keras_vit.kernels.projection import kernel_norm
from keras_vit.kernels.routes import kernel_input_axes
from keras_vit.weights import transfer_weights

# The projections of each block (attention, MLP): what `ViT.enable_lora` adapts by default.
PROJECTION_NAMES = ("query", "key", "value", "out", "fc1", "fc2")
HEAD = ("head", "pre_logits", "head_dist")  # the layers LoRA, DoRA and VPT leave trainable
# The variables LoRA and DoRA add to a projection.
ADAPTER_VARIABLES = ("lora_kernel_a", "lora_kernel_b", "dora_magnitude")


def with_config(model, skip=(), method="bilinear", **changes):
    """A copy of `model` with some constructor arguments changed (`changes`)
    and the weights copied by name: learned position embeddings are 2-D
    interpolated to a new patch grid (``"bilinear"`` as vit_jax, or
    ``"bicubic"`` as timm), and the layers named in `skip` (e.g.
    ``("head",)`` for a new number of classes) keep their fresh initial
    values."""
    copy = type(model).from_config({**model.get_config(), **changes})
    transfer_weights(model, copy, method=method, skip=skip)
    return copy


def with_image_size(model, image_size, method="bilinear"):
    """A copy of `model` for another resolution: same weights, the position
    embeddings 2-D interpolated to the new patch grid (Sec. 3.2)."""
    return with_config(model, image_size=image_size, method=method)


def with_naflex(model, max_num_patches):
    """A copy of `model` that takes NaFlex's sequences (`keras_vit.naflex`):
    images of any size and aspect ratio, each resized to at most
    `max_num_patches` patches of the model's patch size, given as the dict
    of `keras_vit.naflex_inputs`. Every weight is copied as it is: the patch
    embedding's kernel serves the flattened patches reshaped, and the
    learned position table (of ``image_size``'s grid) is resized to each
    image's grid as it runs. A NaFlex model gives another sequence length.

    Example:
        ```python
        import numpy as np
        import keras_vit

        model = keras_vit.ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2,
                              hidden_dim=16, mlp_dim=32, num_classes=3)
        flex = model.with_naflex(24)
        images = [np.zeros((40, 90, 3), "uint8"), np.zeros((64, 64, 3), "uint8")]
        x = keras_vit.naflex_inputs(images, patch_size=8, max_num_patches=24)
        print(tuple(flex(x).shape))   # -> (2, 3)
        ```
    """
    if model.resnet_block_units is not None:
        raise ValueError(
            f"with_naflex does not apply to the hybrid model {model.name}: NaFlex cuts images "
            "into pixel patches, and a hybrid embeds ResNet features. Use `with_image_size`.")
    if not is_int(max_num_patches, 1):
        raise ValueError(f"`max_num_patches` must be an int >= 1 (the patches each image may "
                         f"have, e.g. 256), got {max_num_patches!r}.")
    return with_config(model, naflex=True, max_num_patches=int(max_num_patches))


def with_token_merging(model, r, proportional_attention=None):
    """`model` merging `r` tokens in each block (ToMe's r, Bolya et al.,
    "Token Merging: Your ViT But Faster", ICLR 2023; docs/token_merging.md):
    an int, or a list of ints, one per block. The weights are the same;
    `model` itself when nothing changes (``r=0`` on a model that merges
    nothing). `proportional_attention`: None keeps the model's (True unless
    set: ToMe's default for models trained without merging).

    Example:
        ```python
        import numpy as np
        import keras_vit

        model = keras_vit.ViT(image_size=32, patch_size=4, num_layers=2, num_heads=2,
                              hidden_dim=16, mlp_dim=32, num_classes=3)
        fast = model.with_token_merging(8)   # 65 tokens -> 57 -> 49
        print(tuple(fast(np.zeros((2, 32, 32, 3))).shape), fast.config.token_merging)  # -> (2, 3) 8
        print(model.with_token_merging(0) is model)   # -> True
        ```
    """
    changes = {"token_merging": r}
    if proportional_attention is not None:
        changes["proportional_attention"] = proportional_attention
    config = model.config.replace(**changes)
    if (config.merge_counts, config.proportional_attention) == (
            model.config.merge_counts, model.config.proportional_attention):
        return model
    return with_config(model, **changes)


def with_patch_size(model, patch_size, image_size=None, method="bilinear"):
    """A copy of `model` for another patch size, without retraining.

    The patch-embedding kernel is PI-resized as in FlexiViT (Beyer et al.,
    "FlexiViT: One Model for All Patch Sizes", CVPR 2023; see
    :func:`keras_vit.layers.resize_patch_kernel`): for a larger patch, the
    new kernel on a bilinearly upsampled patch gives the old kernel's
    embedding of the patch. Learned position embeddings are interpolated to
    the new patch grid with `method`, every other weight is copied.
    `image_size` defaults to the model's.
    """
    if model.resnet_block_units is not None:
        raise ValueError(
            f"with_patch_size does not apply to the hybrid model {model.name}: "
            "its patch embedding runs on ResNet features, not on pixels, so "
            "resizing it is not FlexiViT. Use `with_image_size` to change the "
            "resolution of a hybrid model."
        )
    try:
        patch_size = pair(patch_size, "patch_size")
    except ValueError as error:
        raise ValueError(f"{error} Pass e.g. `with_patch_size(16)`.") from None
    try:
        image_size = model.image_size if image_size is None else pair(image_size, "image_size")
    except ValueError:
        raise ValueError(
            f"`image_size` must be None (keep {model.image_size}), a positive "
            f"int or a pair of positive ints, got {image_size!r}."
        ) from None
    for size, patch, axis in zip(image_size, patch_size, ("height", "width")):
        if size % patch:
            raise ValueError(
                f"`patch_size` {patch} does not divide the image {axis} {size}. "
                f"Choose a patch size that divides {size}, or pass an "
                f"`image_size` that is a multiple of {patch}."
            )
    copy = type(model).from_config(
        {**model.get_config(), "patch_size": patch_size, "image_size": image_size}
    )
    transfer_weights(model, copy, method=method, skip=("patch_embedding",))
    old = model.parts.patch_embedding.projection
    new = copy.parts.patch_embedding.projection
    kernel = vit_layers.resize_patch_kernel(old.kernel, patch_size)
    new.kernel.assign(keras.ops.cast(kernel, new.kernel.dtype))
    new.bias.assign(old.bias)
    return copy


def adapted_layers(model, rank, target, method):
    """The projections of `model` named in `target` that `method`
    (``"LoRA"`` or ``"DoRA"``) of rank `rank` adapts, every argument checked
    before anything changes: a ValueError names the problem."""
    target = (target,) if isinstance(target, str) else tuple(target)
    unknown = sorted(set(target) - set(PROJECTION_NAMES))
    if unknown or not target:
        raise ValueError(
            f"{method} targets must be among {PROJECTION_NAMES}, got {target!r}: each block's "
            "attention (query, key, value, out) and MLP (fc1, fc2) projections.")
    if not is_int(rank, 1):
        raise ValueError(f"`rank` must be an int >= 1, got {rank!r}: LoRA's rank, e.g. 8.")
    layers = {path: layer for path, layer in projections(model).items()
              if path.split("/")[0] not in HEAD and path.split("/")[-1] in target}
    if not layers:
        raise ValueError(f"{model.name} has no projection named {target}.")
    for path, layer in layers.items():
        if layer.lora_enabled:
            done = "DoRA" if has_dora(layer) else "LoRA"
            raise ValueError(f"{path} already has {done}: adapt a model once (merge it first, "
                             "`model.merge_adapters()`, to adapt the merged model again).")
        if method == "DoRA" and layer.quantization_mode is not None:
            raise ValueError(
                f"DoRA cannot adapt {path}, which is quantized ({layer.quantization_mode}): its "
                "norm needs the float kernel. Enable DoRA on the float model, then merge and "
                "quantize (`model.merge_adapters().quantize('int8')`), or use LoRA (QLoRA).")
        width = min(math.prod(layer.kernel.shape[:-1]), layer.kernel.shape[-1])
        if rank > width:
            raise ValueError(f"rank {rank} is above the width of {path} ({width}: its kernel is "
                             f"{tuple(layer.kernel.shape)}): give a rank of at most {width}.")
    return list(layers.values())


def enable_lora(model, rank, target=PROJECTION_NAMES, lora_alpha=None):
    """`ViT.enable_lora`: Keras's ``enable_lora(rank)`` on the encoder's
    projections named in `target`, then every weight frozen but the LoRA
    weights and the head's (``head``, ``pre_logits``, ``head_dist``)."""
    adapted = adapted_layers(model, rank, target, "LoRA")
    for layer in adapted:
        layer.enable_lora(rank, lora_alpha=lora_alpha)
    freeze_all_but(model, [v for layer in adapted for v in (layer.lora_kernel_a, layer.lora_kernel_b)])


def enable_dora(model, rank, target=PROJECTION_NAMES, alpha=None):
    """`ViT.enable_dora`: DoRA (Liu et al., "DoRA: Weight-Decomposed
    Low-Rank Adaptation", ICML 2024) on the encoder's projections named in
    `target`: Keras's LoRA factors ``lora_kernel_a`` and ``lora_kernel_b``
    (``A · B`` scaled by ``alpha / rank``; `alpha` None: `rank`) and a
    magnitude ``dora_magnitude``, one value per output unit, starting at the
    norm of the kernel (so the model starts as it was); the layer then
    computes with `keras_vit.kernels.projection.dora_kernel`. Every weight
    is frozen but these and the head's.

    Keras adds LoRA's factors to the built layer with its tracker unlocked;
    the magnitude is added the same way (`keras_vit.compat.keras_private`
    lists the hook)."""
    adapted = adapted_layers(model, rank, target, "DoRA")
    for layer in adapted:
        add_dora(layer, rank, alpha)
    freeze_all_but(model, [v for layer in adapted
                           for v in (layer.lora_kernel_a, layer.lora_kernel_b, layer.dora_magnitude)])


def add_dora(layer, rank, alpha=None):
    """DoRA on one built ``Dense`` or ``EinsumDense`` `layer` (`enable_dora`
    checks the model's first): Keras's ``enable_lora(rank, alpha)``, then
    ``dora_magnitude`` (the kernel's shape after its input axes), the norm
    of the kernel per output unit."""
    if kernel_input_axes(layer) is None:
        raise ValueError(f"DoRA adapts a Dense or EinsumDense projection without activation, "
                         f"got {type(layer).__name__} {layer.name}.")
    layer.enable_lora(rank, lora_alpha=alpha)
    norm = keras.ops.convert_to_numpy(kernel_norm(layer))
    layer._tracker.unlock()
    try:
        layer.dora_magnitude = layer.add_weight(name="dora_magnitude", shape=norm.shape,
                                                initializer="ones")
    finally:
        layer._tracker.lock()
    layer.dora_magnitude.assign(norm)


def freeze_all_but(model, variables):
    """Every weight of `model` frozen but `variables` and the head's
    (`HEAD`): what a parameter-efficient method trains."""
    kept = {id(v) for v in variables}
    for variable in model.weights:
        if id(variable) not in kept and variable.path.split("/")[0] not in HEAD:
            variable.trainable = False


def with_prompts(model, num_tokens, deep=True, dropout=0.0):
    """`ViT.with_prompts`: a copy of `model` with VPT's `num_tokens` prompt
    tokens (Jia et al., "Visual Prompt Tuning", ECCV 2022), the same
    weights elsewhere, everything frozen but the prompts and the head
    (`HEAD`). `deep`: every block its own (VPT-deep), else the first only."""
    if not is_int(num_tokens, 1):
        raise ValueError(f"`num_tokens` must be an int >= 1 (VPT uses 1 to 200; e.g. 10), got "
                         f"{num_tokens!r}.")
    if not isinstance(deep, bool):
        raise ValueError(f"`deep` must be True (VPT-deep) or False (VPT-shallow), got {deep!r}.")
    if model.config.prompt_tokens:
        raise ValueError(f"{model.name} already has {model.config.prompt_tokens} prompt tokens: "
                         "prompt the model they were added to once.")
    if any(layer.lora_enabled for layer in projections(model).values()):
        raise ValueError(f"{model.name} has LoRA or DoRA: give prompts to the merged model "
                         "(`model.merge_adapters().with_prompts(...)`) or to the base model.")
    copy = with_config(model, skip=("prompts",), prompt_tokens=int(num_tokens), deep_prompts=deep,
                       prompt_dropout=dropout)
    freeze_all_but(copy, copy.parts.prompts.weights)
    return copy


def merged_copy(model):
    """A copy of `model` with each LoRA or DoRA projection's kernel replaced
    by the kernel it computes with (``kernel + (alpha / rank) A · B``, or
    `dora_kernel`) and no adapter weights: the same logits, a plain `ViT`
    (what a ``.keras`` file saved from a LoRA model holds). VPT's prompts
    are copied as they are."""
    copy = type(model).from_config(model.get_config())
    layers = projections(copy)
    for path, layer in projections(model).items():
        kernel = dora_kernel(layer) if has_dora(layer) else layer.kernel  # Keras's property merges LoRA
        layers[path].kernel.assign(keras.ops.convert_to_numpy(kernel))
    state = {variable.path: variable for variable in copy.weights}
    for variable in model.weights:
        owner = variable.path.rsplit("/", 1)[0]
        if variable.path.rsplit("/", 1)[-1] in ADAPTER_VARIABLES or (
                owner in layers and variable.path.endswith("/kernel")):
            continue
        state[variable.path].assign(keras.ops.convert_to_numpy(variable))  # a copy, not an alias
    return copy


def merge_lora(model):
    """`ViT.merge_lora`: `merged_copy` (the LoRA weights folded into the kernels)."""
    return merged_copy(model)


def merge_adapters(model, method=None):
    """`ViT.merge_adapters` (and `merge_dora`, with `method` ``"DoRA"``):
    `merged_copy` of a model with LoRA or DoRA; a model with prompts alone
    is refused (they stay tokens), as is one without what `method` names."""
    found = {"DoRA" if has_dora(layer) else "LoRA"
             for layer in projections(model).values() if layer.lora_enabled}
    if method is not None and method not in found:
        raise ValueError(f"{model.name} has no {method} to merge" + (
            f" (it has {', '.join(sorted(found))}: `model.merge_adapters()`)." if found else
            ": enable it first (`model.enable_dora(rank)`)."))
    if not found:
        if model.config.prompt_tokens:
            raise ValueError(
                f"{model.name}'s adapters are VPT's {model.config.prompt_tokens} prompt tokens, "
                "which stay as tokens: nothing merges into a kernel. The model exports, saves and "
                "runs as it is (`model.export(...)`, `model.save(...)`).")
        raise ValueError(f"{model.name} has no LoRA or DoRA to merge (`model.enable_lora(rank)`, "
                         "`model.enable_dora(rank)`).")
    return merged_copy(model)


def projections(model):
    """path -> layer, every ``Dense`` and ``EinsumDense`` of `model` (the
    layers Keras quantizes and adapts with LoRA): q, k, v and out of each
    attention, fc1 and fc2 of each MLP, ``pre_logits`` and ``head``."""
    found = {}
    for layer in model.layers:
        for inner in (layer, getattr(layer, "attention", None), getattr(layer, "mlp", None)):
            for name in PROJECTION_NAMES:
                sublayer = getattr(inner, name, None)
                if isinstance(sublayer, (keras.layers.Dense, keras.layers.EinsumDense)):
                    found[sublayer.path] = sublayer
        if isinstance(layer, keras.layers.Dense):
            found[layer.path] = layer
    return found


def with_policy(config):
    """A model's `get_config` dict ready for its constructor: the serialized
    dtype policy (``"dtype"``) deserialized (the ``from_config`` of `ViT`,
    `MaskedPatchPredictor` and `TextTransformer`)."""
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
        config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return config


# `model.quantize` modes with no int8 kernel route on a CPU (`keras_vit.kernels.int8_dense`
# serves "int8"): (mode, backend) -> ViT-B/16's speed against float32 there, as
# docs/deploy.md's table measures it. `warn_if_slow` names it once per process.
SLOW_ON_CPU = {("int4", "torch"): 0.91, ("int4", "tensorflow"): 0.89, ("int4", "jax"): 0.96,
               ("float8", "torch"): 0.67, ("float8", "tensorflow"): 0.69, ("float8", "jax"): 0.90}
WARNED_SLOW_MODES = set()


def warn_if_slow(model, mode):
    """Warns, the first time in the process, that `model` quantized to
    `mode` runs slower than float32 on this backend's CPU (`SLOW_ON_CPU`):
    the factor, and the fast route (an int8 export). Silent on an
    accelerator and for the modes with a fast kernel."""
    backend, platform = backend_platform()
    if platform is None:  # PyTorch: the weights' device
        platform = model.weights[0].value.device.type
    key = (mode, backend)
    if key not in SLOW_ON_CPU or platform != "cpu" or key in WARNED_SLOW_MODES:
        return
    WARNED_SLOW_MODES.add(key)
    warnings.warn(
        f"model.quantize({mode!r}) runs at about {SLOW_ON_CPU[key]:.2f}x float32's speed on "
        f"{key[1]}'s CPU kernels (ViT-B/16; docs/deploy.md): Keras has no fast {mode} kernel on a "
        "CPU, so it saves memory, not time. For a faster CPU model, quantize to int8 "
        "(`model.quantize('int8')`), or export it: `model.export(path, format='onnx', "
        "quantize='int8')`.", UserWarning, stacklevel=3)


@contextlib.contextmanager
def collections_deferred():
    """Quantizing with the garbage collector's objects frozen. Keras 3.15
    runs a full ``gc.collect()`` for each kernel it replaces
    (``Layer.__delattr__``), each over every object the process holds;
    frozen, each scans only what quantizing made, a small fraction of it
    (docs/deploy.md has the times). One collection at the end frees what the
    old kernels held. Objects a caller had frozen stay frozen."""
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()
    gc.collect()


def split_policy_map(dtype):
    """A model's `dtype` as (the policy its layers are built with, the
    ``DTypePolicyMap`` for `apply_policy_map` afterwards, or None)."""
    if isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
        return dtype.default_policy, dtype
    return dtype, None


def apply_policy_map(model, policy_map):
    """Gives each projection of `model` (`projections`) the policy that
    `policy_map` (a ``keras.dtype_policies.DTypePolicyMap``) holds for its
    path: a quantized policy quantizes it, ready for its weights. None: nothing.

    The layers keep policies of their own instead of sharing the map:
    Keras 3.15's ``Dense`` and ``EinsumDense`` read the map's default where
    they save an int8 or int4 kernel, so a model whose layers share a map
    cannot be saved."""
    if policy_map is None:
        return
    found = projections(model)
    unknown = sorted(set(policy_map.keys()) - set(found))
    if unknown:
        raise ValueError(
            f"The DTypePolicyMap names layers that {model.name} does not have or cannot "
            f"quantize: {unknown[:4]}. Its projections are {sorted(found)[:6]}... "
            "(`keras_vit.variants.projections(model)` lists them all).")
    with collections_deferred():
        for path in policy_map.keys():
            found[path].dtype_policy = policy_map[path]


def dtype_policy_config(model):
    """`model`'s dtype policy, serialized; with quantized layers a
    ``DTypePolicyMap`` of their policies by path (as keras-hub's backbones),
    so that a quantized model rebuilds quantized from its config."""
    policy_map = keras.dtype_policies.DTypePolicyMap(default_policy=model.dtype_policy)
    for path, layer in projections(model).items():
        if layer.quantization_mode is not None:
            policy_map[path] = layer.dtype_policy
    if not policy_map.keys():
        return keras.dtype_policies.serialize(model.dtype_policy)
    return keras.dtype_policies.serialize(policy_map)
