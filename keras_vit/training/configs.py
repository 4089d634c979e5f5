"""The paper's training recipes as data: one named config per row of Table 3
(pre-training) and Table 4 (fine-tuning), masked patch prediction
(Appendix B.1.2), and small configs on the embedded digits.

A config is a `RunConfig`, a frozen dataclass of the recipes' flags, checked
on construction; command-line flags override it (`resolve_config`). Steps
count optimizer updates, as in the paper; the batch is the global batch,
which ``accum_steps`` micro-batches make up.
"""

import dataclasses
import json
import math
import numbers
import types
from collections.abc import Mapping

from keras_vit.config import FIELDS as MODEL_FIELDS
from keras_vit.config import is_int
from keras_vit.distribution import check_strategy
from keras_vit.presets import preset_config

# Training-set sizes used to turn the paper's epochs into steps.
DATASET_SIZES = {
    "jft300m": 303_000_000,
    "imagenet21k": 14_197_122,
    "imagenet2012": 1_281_167,
}

# Where and how a run executes, not what it computes: a run may resume with
# other values (on another slice or strategy after a preemption).
PLACEMENT_KEYS = ("strategy", "steps_per_execution", "keep_checkpoints")

KINDS = ("pretrain", "finetune", "masked_patch")

# ViT arguments a recipe sets from its own keys (flags); `model_args` may not.
RECIPE_MODEL_KEYS = {
    "image_size": "--image-size", "num_classes": "the dataset's classes",
    "class_names": "the dataset's class names", "dropout_rate": "--dropout-rate",
    "drop_path_rate": "--drop-path-rate", "representation_size": "the config's representation_size",
    "head_bias_init": "--head-bias-init",
}
DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One training run's settings: a row of Table 3 or 4 (or a digits
    config) with the command line's flags applied. Deeply immutable (its
    lists are tuples, `model_args` a read-only mapping) and checked on
    construction (`check_config`): a ValueError names the flag, what it got
    and what it takes.

    The fields are the recipes' flags (``--base-lr`` is `base_lr`; `keras-vit
    pretrain --help` describes each), plus `name`, `kind` (``"pretrain"``,
    ``"finetune"`` or ``"masked_patch"``), `paper` (the row it comes from)
    and `epochs` (the paper's, for pre-training rows). `model_args` holds
    `keras_vit.ViTConfig` fields that change the preset `model`.

    Example:
        ```python
        from keras_vit.training import resolve_config

        config = resolve_config("i21k-b16", {"steps": 20_000})
        print(config.batch_size, config.base_lr, config.steps)    # -> 4096 0.001 20000
        print(config.replace(seed=1).seed)                       # -> 1
        ```
    """

    name: str
    kind: str
    paper: str
    dataset: str = "digits"
    data_dir: str | None = None
    train_split: str = "train"
    eval_split: str = "test"
    model: str = "vit_b16"
    model_args: Mapping = dataclasses.field(default_factory=dict)
    image_size: int = 224
    batch_size: int = 512
    accum_steps: int = 1
    steps: int = 1000
    warmup_steps: int = 0
    base_lr: float = 1e-3
    lr_grid: tuple = ()
    decay_type: str = "cosine"
    weight_decay: float = 0.0
    grad_norm_clip: float | None = 1.0
    dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    loss: str = "softmax"
    label_smoothing: float = 0.0
    representation_size: int | None = None
    head_bias_init: float = 0.0
    polyak: float | None = None
    preprocess: str = "inception"
    area_range: tuple | None = None
    flip: bool = True
    randaugment: tuple | None = None
    mixup: float = 0.0
    cutmix: float = 0.0
    dtype: str = "float32"
    seed: int = 0
    init: str | None = None
    lora_rank: int | None = None
    strategy: str = "none"
    data_shards: int | None = None
    steps_per_execution: int = 1
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    few_shot: tuple = ()
    epochs: float | None = None

    def __post_init__(self):
        # Deeply immutable: lists become tuples and dicts read-only mappings
        # of their own (a caller's later edits do not reach the config).
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, _frozen(getattr(self, field.name)))
        check_config(self)

    @property
    def micro_batch_size(self):
        """``batch_size // accum_steps``: the images of one forward and
        backward pass (``batch_size`` when gradients are not accumulated)."""
        return self.batch_size // self.accum_steps

    def replace(self, **changes):
        """A copy with some fields changed, checked as on construction."""
        return type(self).from_dict({**self.to_dict(), **changes})

    def to_dict(self):
        """The fields as JSON data (what a run's config.json records): lists
        and dicts."""
        return json.loads(json.dumps({f.name: _thawed(getattr(self, f.name)) for f in dataclasses.fields(self)}))

    @classmethod
    def from_dict(cls, config):
        """A config from `to_dict`'s dict; an unknown key is refused with the
        known ones listed."""
        unknown = sorted(set(config) - set(FIELDS))
        if unknown:
            raise ValueError(f"Unknown config keys {unknown}; known: {sorted(FIELDS)}.")
        return cls(**config)


FIELDS = tuple(field.name for field in dataclasses.fields(RunConfig))


def _frozen(value):
    """`value` with every list a tuple and every dict a read-only mapping, deeply."""
    if isinstance(value, Mapping):
        return types.MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


def _thawed(value):
    """`_frozen`'s inverse: mappings as dicts and tuples as lists, for JSON."""
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thawed(item) for item in value]
    return value


def _number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_config(config):
    """Clear errors for settings that cannot run, before anything starts:
    every count a positive integer, every rate a finite number in its range,
    `model_args` only the ViT's own arguments. `RunConfig` runs it on
    construction."""
    if config.kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {config.kind!r}.")
    for key in ("steps", "batch_size", "accum_steps"):
        value = getattr(config, key)
        if not is_int(value, 1):
            raise ValueError(f"--{key.replace('_', '-')} must be a positive integer, got {value!r}.")
    if config.batch_size % config.accum_steps:
        raise ValueError(
            f"--batch-size {config.batch_size} is not divisible by --accum-steps "
            f"{config.accum_steps}: the global batch is split into accum_steps equal "
            f"micro-batches. Use a batch that is a multiple of {config.accum_steps}."
        )
    if not 0 <= config.warmup_steps < config.steps:
        raise ValueError(
            f"--warmup-steps {config.warmup_steps} must be at least 0 and below --steps "
            f"{config.steps}."
        )
    if not _number(config.base_lr) or config.base_lr <= 0:
        raise ValueError(f"--base-lr must be a positive number, got {config.base_lr}.")
    for key, low, high in (("weight_decay", 0, None), ("head_bias_init", None, None),
                           ("label_smoothing", 0, 1), ("mixup", 0, None), ("cutmix", 0, 1)):
        value = getattr(config, key)
        if not _number(value) or (low is not None and value < low) or (high is not None and value > high):
            bounds = ("" if low is None else f" at least {low}") + ("" if high is None else f" and at most {high}")
            raise ValueError(f"--{key.replace('_', '-')} must be a finite number{bounds}, got {value!r}.")
    clip = config.grad_norm_clip
    if clip is not None and (not _number(clip) or clip <= 0):
        raise ValueError(f"--grad-norm-clip must be a positive number (or None for no clipping), got {clip!r}.")
    polyak = config.polyak
    if polyak is not None and (not _number(polyak) or not 0 < polyak < 1):
        raise ValueError(f"--polyak is the averaging momentum, a number in (0, 1) such as 0.9999, "
                         f"got {polyak!r}.")
    if not is_int(config.seed):
        raise ValueError(f"--seed must be an integer, got {config.seed!r}.")
    few_shot = config.few_shot
    if not isinstance(few_shot, (list, tuple)) or not all(is_int(n, 1) for n in few_shot):
        raise ValueError(f"--few-shot must be positive integers (shots per class) such as 1,5,10, "
                         f"got {config.few_shot!r}.")
    if config.dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {config.dtype!r}.")
    if config.loss not in ("softmax", "sigmoid"):
        raise ValueError(f"loss must be 'softmax' or 'sigmoid', got {config.loss!r}.")
    if config.decay_type not in ("cosine", "linear"):
        raise ValueError(f"--decay-type must be 'cosine' or 'linear', got {config.decay_type!r}.")
    _check_model_args(config.model_args)
    if config.init and config.kind != "finetune":
        raise ValueError(
            f"--init is for fine-tuning; config {config.name!r} is a {config.kind} run, "
            "which starts from fresh weights. Use `keras-vit finetune --init ...`."
        )
    lora_rank = config.lora_rank
    if lora_rank is not None:
        if not is_int(lora_rank, 1):
            raise ValueError(f"--lora-rank must be a positive integer, got {lora_rank!r}.")
        if config.kind != "finetune":
            raise ValueError(
                f"--lora-rank adapts a trained model; config {config.name!r} is a "
                f"{config.kind} run from fresh weights. Use `keras-vit finetune --init ... "
                "--lora-rank R`."
            )
    for key in ("steps_per_execution", "checkpoint_every", "keep_checkpoints"):
        value = getattr(config, key)
        if not is_int(value, 1):
            raise ValueError(f"--{key.replace('_', '-')} must be a positive integer, got {value!r}.")
    if config.data_shards is not None and not is_int(config.data_shards, 1):
        raise ValueError(f"--data-shards must be a positive integer (or None: one part per input "
                         f"pipeline), got {config.data_shards!r}.")
    check_strategy(config.strategy)
    return config


def _check_model_args(model_args):
    """`model_args` holds ViT arguments (`keras_vit.ViTConfig` fields) that
    the recipe does not set itself."""
    if not isinstance(model_args, Mapping):
        raise ValueError(f"--model-args must be KEY=VALUE pairs (a dict), got {model_args!r}.")
    unknown = sorted(set(model_args) - set(MODEL_FIELDS))
    if unknown:
        valid = [key for key in MODEL_FIELDS if key not in RECIPE_MODEL_KEYS]
        raise ValueError(f"--model-args: unknown ViT argument(s) {', '.join(map(repr, unknown))}. "
                         f"Valid ones: {', '.join(valid)}.")
    clashes = sorted(set(model_args) & set(RECIPE_MODEL_KEYS))
    if clashes:
        key = clashes[0]
        raise ValueError(f"--model-args: {key} is set by {RECIPE_MODEL_KEYS[key]}, not --model-args; "
                         "remove it there" + (f" and pass {RECIPE_MODEL_KEYS[key]}."
                                              if RECIPE_MODEL_KEYS[key].startswith("--") else "."))


# -- the paper's rows ----------------------------------------------------------

def _pretrain(dataset, model, epochs, base_lr, decay_type, weight_decay, dropout, paper_row,
              loss="sigmoid", eval_split="validation"):
    steps = math.ceil(epochs * DATASET_SIZES[dataset] / 4096)
    multi_label = loss == "sigmoid"
    return dict(
        kind="pretrain", paper=f"Table 3: {paper_row}", dataset=dataset, model=model,
        image_size=224, batch_size=4096, steps=steps, warmup_steps=10_000, base_lr=base_lr,
        decay_type=decay_type, weight_decay=weight_decay, dropout_rate=dropout,
        grad_norm_clip=1.0, loss=loss,
        representation_size=preset_config(model).hidden_dim,  # the pre-training MLP head
        head_bias_init=-10.0 if multi_label else 0.0, preprocess="inception",
        eval_split=eval_split, epochs=epochs,
    )


def _finetune(dataset, steps, lr_grid, train_split, eval_split, paper_row, base_lr=None,
              warmup_steps=500):
    # vit_jax/configs/common.py: batch 512 as 8 accumulated micro-batches, 500 warm-up steps.
    return dict(
        kind="finetune", paper=f"Table 4: {paper_row}", dataset=dataset, model="vit_b16",
        image_size=384, batch_size=512, accum_steps=8, steps=steps, warmup_steps=warmup_steps,
        base_lr=base_lr or (0.03 if 0.03 in lr_grid else lr_grid[-1]), lr_grid=lr_grid,
        decay_type="cosine", weight_decay=0.0, grad_norm_clip=1.0, loss="softmax",
        preprocess="finetune", train_split=train_split, eval_split=eval_split,
    )


_GRID = [0.001, 0.003, 0.01, 0.03]

_DIGITS_MODEL = dict(patch_size=4, num_layers=4, num_heads=4, hidden_dim=64, mlp_dim=128)

_ROWS = {
    # -- Table 3: pre-training (batch 4096, 10k warm-up, Adam 0.9/0.999, clip 1) --
    "jft-b16": _pretrain("jft300m", "vit_b16", 7, 8e-4, "linear", 0.1, 0.0, "ViT-B/16, JFT-300M"),
    "jft-b32": _pretrain("jft300m", "vit_b32", 7, 8e-4, "linear", 0.1, 0.0, "ViT-B/32, JFT-300M"),
    "jft-l32": _pretrain("jft300m", "vit_l32", 7, 6e-4, "linear", 0.1, 0.0, "ViT-L/32, JFT-300M"),
    "jft-l16": _pretrain("jft300m", "vit_l16", 7, 4e-4, "linear", 0.1, 0.0, "ViT-L/16, JFT-300M (7 epochs)"),
    "jft-l16-14ep": _pretrain("jft300m", "vit_l16", 14, 4e-4, "linear", 0.1, 0.0,
                              "ViT-L/16, JFT-300M (14 epochs)"),
    "jft-h14": _pretrain("jft300m", "vit_h14", 14, 3e-4, "linear", 0.1, 0.0, "ViT-H/14, JFT-300M"),
    "jft-r50-b16": _pretrain("jft300m", "r50_vit_b16", 7, 8e-4, "linear", 0.1, 0.0,
                             "R50x1+ViT-B/16, JFT-300M"),
    "i21k-b16": _pretrain("imagenet21k", "vit_b16", 90, 1e-3, "linear", 0.03, 0.1, "ViT-B/16, ImageNet-21k"),
    "i21k-b32": _pretrain("imagenet21k", "vit_b32", 90, 1e-3, "linear", 0.03, 0.1, "ViT-B/32, ImageNet-21k"),
    "i21k-l16": _pretrain("imagenet21k", "vit_l16", 90, 1e-3, "linear", 0.03, 0.1,
                          "ViT-L/16, ImageNet-21k (90 epochs)"),
    "i21k-l32": _pretrain("imagenet21k", "vit_l32", 90, 1e-3, "linear", 0.03, 0.1,
                          "ViT-L/32, ImageNet-21k (90 epochs)"),
    "i21k-l16-30ep": _pretrain("imagenet21k", "vit_l16", 30, 1e-3, "linear", 0.03, 0.1,
                               "ViT-L/16, ImageNet-21k (30 epochs)"),
    "i1k-b16": _pretrain("imagenet2012", "vit_b16", 300, 3e-3, "cosine", 0.3, 0.1,
                         "ViT-B/16, ImageNet", loss="softmax"),
    "i1k-b32": _pretrain("imagenet2012", "vit_b32", 300, 3e-3, "cosine", 0.3, 0.1,
                         "ViT-B/32, ImageNet", loss="softmax"),
    "i1k-l16": _pretrain("imagenet2012", "vit_l16", 300, 3e-3, "cosine", 0.3, 0.1,
                         "ViT-L/16, ImageNet", loss="softmax"),
    "i1k-l32": _pretrain("imagenet2012", "vit_l32", 300, 3e-3, "cosine", 0.3, 0.1,
                         "ViT-L/32, ImageNet", loss="softmax"),
    # -- Table 4: fine-tuning (SGD momentum 0.9, batch 512, cosine, clip 1, 384 px) --
    "ft-imagenet": _finetune("imagenet2012", 20_000, [0.003, 0.01, 0.03, 0.06], "train[:99%]",
                             "validation", "ImageNet"),
    "ft-cifar100": _finetune("cifar100", 10_000, _GRID, "train[:98%]", "test", "CIFAR-100"),
    "ft-cifar10": _finetune("cifar10", 10_000, _GRID, "train[:98%]", "test", "CIFAR-10"),
    # vit_jax has no 500-step configs; its 500 warm-up steps would fill the whole run,
    # so these warm up over the first 10% (our choice).
    "ft-pets": _finetune("oxford_iiit_pet", 500, _GRID, "train[:90%]", "test", "Oxford-IIIT Pets",
                         warmup_steps=50),
    "ft-flowers": _finetune("oxford_flowers102", 500, _GRID, "train[:90%]", "test",
                            "Oxford Flowers-102", warmup_steps=50),
    # -- Appendix B.1.2: masked patch prediction (JFT, 1M steps, batch 4096, Adam 2e-4) --
    "mpp-jft-b16": dict(
        kind="masked_patch", paper="Appendix B.1.2: masked patch prediction, ViT-B/16, JFT",
        dataset="jft300m", model="vit_b16", image_size=224, batch_size=4096, steps=1_000_000,
        warmup_steps=10_000, base_lr=2e-4, decay_type="cosine", weight_decay=0.1,
        grad_norm_clip=1.0, preprocess="inception", eval_split="validation",
    ),
    # -- Small configs on the embedded digits (no download; minutes on a CPU) --
    "digits": dict(
        kind="pretrain", paper="Table 3's recipe (Adam, lr-multiplied weight decay, warm-up, "
        "clip 1) scaled down to the embedded digits", dataset="digits", model="vit_ti16",
        model_args=_DIGITS_MODEL, image_size=16, batch_size=128, steps=1500,
        warmup_steps=100, base_lr=3e-3, decay_type="cosine", weight_decay=0.1,
        dropout_rate=0.0, preprocess="inception", area_range=[0.7, 1.0], flip=False,
        checkpoint_every=500, few_shot=[1, 5, 10],
    ),
    "digits-finetune": dict(
        kind="finetune", paper="Table 4's recipe (SGD momentum, cosine, clip 1, higher "
        "resolution) scaled down to the embedded digits", dataset="digits", model="vit_ti16",
        model_args=_DIGITS_MODEL, image_size=32, batch_size=128, steps=500,
        warmup_steps=50, base_lr=0.01, lr_grid=[0.003, 0.01, 0.03], decay_type="cosine",
        preprocess="finetune", area_range=[0.9, 1.0], flip=False, train_split="train",
        checkpoint_every=250,
    ),
    "digits-mpp": dict(
        kind="masked_patch", paper="Appendix B.1.2 scaled down to the embedded digits",
        dataset="digits", model="vit_ti16", model_args=_DIGITS_MODEL, image_size=16,
        batch_size=128, steps=600, warmup_steps=50, base_lr=2e-3, decay_type="cosine",
        weight_decay=0.1, preprocess="resize", flip=False, checkpoint_every=300,
    ),
}

# name -> RunConfig, read-only.
CONFIGS = types.MappingProxyType({name: RunConfig(name=name, **row) for name, row in _ROWS.items()})


def get_config(name):
    """The named `RunConfig`; an unknown name lists the known ones."""
    if name not in CONFIGS:
        raise ValueError(
            f"Unknown config {name!r}. Known configs:\n"
            + "\n".join(f"  {n:14s} {c.kind:12s} {c.paper}" for n, c in CONFIGS.items())
            + "\nList them with `keras-vit configs`."
        )
    return CONFIGS[name]


def resolve_config(name, overrides, kind=None):
    """The named config with the non-None ``overrides`` applied and checked.

    `kind` (``"pretrain"``, ``"finetune"`` or ``"masked_patch"``) is the
    recipe that runs it: a config of another kind is refused.
    """
    config = get_config(name)
    if kind is not None and config.kind != kind:
        raise ValueError(
            f"Config {name!r} is a {config.kind} config, not {kind}. Configs for {kind}: "
            + ", ".join(n for n, c in CONFIGS.items() if c.kind == kind) + "."
        )
    unknown = set(overrides) - set(FIELDS)
    if unknown:
        raise ValueError(f"Unknown config keys {sorted(unknown)}; known: {sorted(FIELDS)}.")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    # Another preset: the config's changes to its own preset do not apply.
    model_args = {} if overrides.get("model", config.model) != config.model else config.model_args
    return config.replace(**{**overrides, "model_args": {**model_args, **overrides.get("model_args", {})}})
