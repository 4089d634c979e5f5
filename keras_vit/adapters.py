"""Adapters saved apart from their base model: `save_adapters` writes what a
parameter-efficient fine-tuning trained (LoRA's or DoRA's weights, VPT's
prompts, the head, any layer left trainable) to one ``.safetensors`` file
with a record of the method, its settings and the base model's identity;
`load_adapters` puts them on the base again (docs/fine_tuning.md).

The base's identity is the sha256 of its frozen weights (every weight the
file does not hold, by path, shape and bytes), so a file loads on the very
weights it was trained on, wherever they came from.
"""

import hashlib
import json
import pathlib

import keras
import numpy as np

from keras_vit import variants
from keras_vit.kernels.projection import has_dora
from keras_vit.io import files

FORMAT = "keras_vit.adapters/1"  # the record's "format": what this module reads
METHODS = ("lora", "dora", "vpt-shallow", "vpt-deep")  # and "head": only weights unfrozen


def adapter_methods(model):
    """`model`'s adapters as ``{method: settings}``: ``"lora"`` or
    ``"dora"`` (``rank``, ``alpha``, ``target``: the projection names
    adapted), ``"vpt-shallow"`` or ``"vpt-deep"`` (``prompt_tokens``,
    ``prompt_dropout``); ``{}`` for a model with neither."""
    methods = {}
    for path, layer in variants.projections(model).items():
        if not layer.lora_enabled:
            continue
        method = "dora" if has_dora(layer) else "lora"
        settings = methods.setdefault(method, {"rank": layer.lora_rank, "alpha": layer.lora_alpha,
                                               "target": []})
        if path.split("/")[-1] not in settings["target"]:
            settings["target"].append(path.split("/")[-1])
    config = model.config
    if config.prompt_tokens:
        methods["vpt-deep" if config.deep_prompts else "vpt-shallow"] = {
            "prompt_tokens": config.prompt_tokens, "prompt_dropout": config.prompt_dropout}
    return methods


def method_name(methods):
    """One name for ``adapter_methods``' dict: ``"lora"``, ``"vpt-deep"``,
    ``"vpt-deep+lora"``, or ``"head"`` for none (trained weights alone)."""
    return "+".join(sorted(methods, key=METHODS.index, reverse=True)) if methods else "head"


def enable_projection_adapters(model, methods):
    """LoRA and DoRA of `methods` (`adapter_methods`' dict) enabled on
    `model`, with their rank, alpha and targets (prompts are in a model's
    config: `keras_vit.ViT.with_prompts` adds them)."""
    for method, enable in (("lora", variants.enable_lora), ("dora", variants.enable_dora)):
        if method in methods:
            settings = methods[method]
            enable(model, settings["rank"], tuple(settings["target"]), settings["alpha"])


def merged(model):
    """`model` with its LoRA and DoRA folded into the kernels
    (`keras_vit.ViT.merge_adapters`: the same logits, a plain ViT), or
    `model` itself when it has neither (prompts stay tokens)."""
    return model.merge_adapters() if {"lora", "dora"} & set(adapter_methods(model)) else model


def base_identity(model, trained_paths):
    """The sha256 (hex) of `model`'s weights whose paths are not in
    `trained_paths` and that no adapter added: each one's path, shape, dtype
    and bytes, in path order."""
    digest = hashlib.sha256()
    adapter = set(variants.ADAPTER_VARIABLES)
    for variable in sorted(model.weights, key=lambda v: v.path):
        if variable.path in trained_paths or variable.path.rsplit("/", 1)[-1] in adapter \
                or variable.path.startswith("prompts/"):
            continue
        value = np.ascontiguousarray(keras.ops.convert_to_numpy(variable))
        digest.update(f"{variable.path}|{value.shape}|{value.dtype}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def base_name(model):
    """What `model` was loaded from (its ``weights_source``: a released
    name, a checkpoint's path or URL, a ``.keras`` file), else its name."""
    return str(getattr(model, "weights_source", None) or model.name)


def save_adapters(model, path):
    """Writes what `model` trained to `path`, one ``.safetensors`` file.

    The tensors are `model`'s trainable weights by path (LoRA's
    ``lora_kernel_a`` and ``lora_kernel_b``, DoRA's and its
    ``dora_magnitude``, VPT's ``prompts/prompts``, the head, any layer the
    user left trainable); the metadata records ``format``, ``method``
    (`method_name`), ``settings`` (`adapter_methods`, as JSON), ``base``
    (`base_name`), ``base_sha256`` (`base_identity`) and ``class_names``
    (the model's, for a reader's information).

    Args:
        model: a `keras_vit.ViT` with some of its weights frozen.
        path: the file to write (``.safetensors``).

    Returns:
        The path written, a `pathlib.Path`.

    Example:
        ```python
        import keras_vit

        base = keras_vit.ViT(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=16, mlp_dim=32, num_classes=3)
        tuned = keras_vit.ViT.from_config(base.get_config())
        tuned.set_weights(base.get_weights())
        tuned.enable_dora(rank=2)
        tuned.save_adapters("dora.safetensors")
        again = keras_vit.load_adapters(base, "dora.safetensors")
        print(sorted(keras_vit.adapters.adapter_methods(again)))   # -> ['dora']
        ```
    """
    from safetensors.numpy import save

    trained = [v for v in model.weights if v.trainable]
    if len(trained) == len(model.weights):
        raise ValueError(
            f"Every weight of {model.name} is trainable, so it has no base apart from what it "
            "trained: save the whole model (`model.save('model.keras')`). Adapters are what a "
            "parameter-efficient method trains: `model.enable_lora(8)`, `model.enable_dora(8)`, "
            "`model.with_prompts(10)`, or the head alone with the rest frozen.")
    if not trained:
        raise ValueError(f"No weight of {model.name} is trainable: there is nothing to save apart "
                         "from its base.")
    paths = {v.path for v in trained}
    methods = adapter_methods(model)
    metadata = {"format": FORMAT, "method": method_name(methods), "settings": json.dumps(methods),
                "base": base_name(model), "base_sha256": base_identity(model, paths),
                "class_names": json.dumps(getattr(model, "class_names", None))}
    tensors = {v.path: np.ascontiguousarray(keras.ops.convert_to_numpy(v)) for v in trained}
    path = pathlib.Path(path)
    files.write_atomic(path, save(tensors, metadata=metadata))
    return path


def read_adapters(path):
    """``(tensors, metadata)`` of an adapter file: numpy arrays by path, and
    its record with ``settings`` parsed; a file that is not one is refused."""
    from safetensors import SafetensorError
    from safetensors import safe_open

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No adapter file at {path}: give the .safetensors file that "
                                "`model.save_adapters` (or `keras-vit finetune --adapter`) wrote.")
    try:
        with safe_open(str(path), framework="np") as file:
            metadata = dict(file.metadata() or {})
            tensors = {key: file.get_tensor(key) for key in file.keys()}
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path} is not a safetensors file ({error}): give the file that "
                         "`model.save_adapters` wrote.") from None
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path} is a safetensors file but not keras_vit's adapters (its record "
                         f"says format {metadata.get('format')!r}, not {FORMAT!r}); a whole "
                         "checkpoint loads with `keras_vit.ViT.from_checkpoint`.")
    metadata["settings"] = json.loads(metadata["settings"])
    return tensors, metadata


def load_adapters(base_model, path):
    """`base_model` with the adapters of `path` (`save_adapters`' file).

    The file's base identity (the sha256 of the frozen weights) must be
    `base_model`'s: another base is refused, the error naming both. Then the
    file's methods are applied to a copy of `base_model` (prompts added,
    LoRA or DoRA enabled) and its weights assigned by path, the rest
    frozen; `base_model` stays as it is.

    Args:
        base_model: a `keras_vit.ViT`, the model the adapters were trained on
            (e.g. ``ViT.from_preset(...)`` or ``keras_vit.load_model(...)``),
            without adapters of its own.
        path: an adapter file.

    Returns:
        The adapted model, a new one: the same logits as the model that saved it.
    """
    tensors, record = read_adapters(path)
    methods = record["settings"]
    own = adapter_methods(base_model)
    if own:
        raise ValueError(
            f"{path} holds {record['method']} adapters, and {base_model.name} already has "
            f"{method_name(own)}: load adapters on the base model they were trained on, without "
            "adapters (merge them first, `model.merge_adapters()`, to build on them).")
    identity = base_identity(base_model, set(tensors))
    if identity != record["base_sha256"]:
        raise ValueError(
            f"{path} was trained on the base {record['base']!r} (weights sha256 "
            f"{record['base_sha256'][:12]}...), and the model given is {base_name(base_model)!r} "
            f"(sha256 {identity[:12]}...): other weights. Load the adapters on the base they were "
            "trained on.")
    current = {v.path: v for v in base_model.weights}
    for key, value in tensors.items():
        if key in current and tuple(current[key].shape) != value.shape:
            raise ValueError(
                f"{path} holds {key} of shape {value.shape}, and {base_model.name}'s is "
                f"{tuple(current[key].shape)}: build the base with the classes the adapters were "
                f"trained for (num_classes={value.shape[-1]}), e.g. `keras_vit.load_model(base, "
                f"num_classes={value.shape[-1]})`.")
    prompts = methods.get("vpt-shallow") or methods.get("vpt-deep")
    if prompts:  # a copy with the prompts
        model = base_model.with_prompts(prompts["prompt_tokens"], deep="vpt-deep" in methods,
                                        dropout=prompts["prompt_dropout"])
    else:  # a copy: the base stays as it is
        model = variants.with_config(base_model)
    model.weights_source = getattr(base_model, "weights_source", None)
    enable_projection_adapters(model, methods)
    variables = {v.path: v for v in model.weights}
    missing = sorted(set(tensors) - set(variables))
    if missing:
        raise ValueError(f"{path} holds weights that {model.name} has not, even adapted as the "
                         f"file says ({record['method']}): {missing[:4]}.")
    for variable in model.weights:
        variable.trainable = variable.path in tensors
        if variable.path in tensors:
            variable.assign(tensors[variable.path])
    return model
