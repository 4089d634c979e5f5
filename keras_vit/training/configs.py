"""The paper's training recipes as data: one named config per row of Table 3
(pre-training) and Table 4 (fine-tuning), masked patch prediction
(Appendix B.1.2), and small configs on the embedded digits.

A config is a `RunConfig`, a frozen dataclass of the recipes' flags, checked
on construction; command-line flags override it (`resolve_config`). Steps
count optimizer updates, as in the paper; the batch is the global batch,
which ``accum_steps`` micro-batches make up.
"""

import argparse
import copy
import dataclasses
import json
import math
import numbers
import types
from collections.abc import Callable
from collections.abc import Mapping

from keras_vit.arguments import ALL_STRATEGIES
from keras_vit.arguments import DECAY_TYPES
from keras_vit.arguments import ADAPTERS
from keras_vit.arguments import DISTILLATIONS
from keras_vit.arguments import DTYPES
from keras_vit.arguments import check_strategy
from keras_vit.arguments import int_at_least
from keras_vit.arguments import parse_ints
from keras_vit.arguments import parse_shots
from keras_vit.arguments import parse_key_values
from keras_vit.config import ALIASES as MODEL_ALIASES
from keras_vit.config import FIELDS as MODEL_FIELDS
from keras_vit.config import is_int
from keras_vit.presets import PRESETS

# Training-set sizes used to turn the paper's epochs into steps.
DATASET_SIZES = {
    "jft300m": 303_000_000,
    "imagenet21k": 14_197_122,
    "imagenet2012": 1_281_167,
}

# Where and how a run executes, not what it computes: a run may resume with
# other values (on another slice or strategy after a preemption).
PLACEMENT_KEYS = ("strategy", "steps_per_execution", "keep_checkpoints")

RUN_KINDS = ("pretrain", "finetune", "masked_patch")

# ViT arguments a recipe sets from its own keys (flags); `model_args` may not.
RECIPE_MODEL_KEYS = {
    "image_size": "--image-size", "num_classes": "the dataset's classes",
    "class_names": "the dataset's class names", "dropout_rate": "--dropout-rate",
    "drop_path_rate": "--drop-path-rate", "representation_size": "the config's representation_size",
    "head_bias_init": "--head-bias-init",
}
LOSSES = ("softmax", "sigmoid")


# -- the command line's flags, as data -----------------------------------------
# (DTYPES and the argparse types keras-vit's own flags share: keras_vit.arguments)

def _randaugment(text):
    values = parse_ints(text)
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected NUM_OPS,MAGNITUDE such as 2,10, got {text!r}")
    return values


def _finite(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


# The checks of one field's value: None, or what the value must be.

def _positive_int(value):
    return None if is_int(value, 1) else "must be a positive integer"


def _integer(value):
    return None if is_int(value) else "must be an integer"


def _positive_number(value):
    return None if _finite(value) and value > 0 else "must be a positive number"


def _number(low=None, high=None):
    bounds = ("" if low is None else f" at least {low}") + ("" if high is None else f" and at most {high}")

    def check(value):
        if _finite(value) and (low is None or value >= low) and (high is None or value <= high):
            return None
        return f"must be a finite number{bounds}"

    return check


def _momentum(value):
    return None if _finite(value) and 0 < value < 1 else (
        "is the averaging momentum, a number in (0, 1) such as 0.9999")


def _shots_per_class(value):
    if isinstance(value, (list, tuple)) and all(is_int(n, 1) for n in value):
        return None
    return "must be positive integers (shots per class) such as 1,5,10"


def _one_of(*values):
    def check(value):
        return None if value in values else f"must be one of {', '.join(values)}"

    return check


def _or_none(check, meaning=None):
    """`check`, with None allowed (`meaning`: what None means)."""

    def optional(value):
        problem = None if value is None else check(value)
        return problem and problem + (f" (or None: {meaning})" if meaning else "")

    return optional


@dataclasses.dataclass(frozen=True)
class Flag:
    """A `RunConfig` field on the command line: ``--base-lr`` for
    ``base_lr``. `parse` turns the flag's text into the value (argparse's
    ``type``), `choices` are the values it takes, `check` returns None for
    a good value or what it must be (``"must be a positive integer"``);
    `RunConfig` runs the choices and checks on construction, `keras_vit.cli`
    builds its flags from the same rows."""

    field: str
    help: str = ""
    parse: Callable = str
    choices: tuple | None = None
    check: Callable | None = None
    metavar: str | None = None
    group: str = "overrides of the config"

    @property
    def option(self):
        """The flag: ``--base-lr`` for the field ``base_lr``."""
        return "--" + self.field.replace("_", "-")

    def problem(self, value):
        """None, or the sentence saying what is wrong with `value`."""
        if self.choices is not None:
            wrong = value not in self.choices and f"must be one of {', '.join(self.choices)}"
        else:
            wrong = self.check(value) if self.check else None
        return f"{self.option} {wrong}, got {value!r}." if wrong else None


SCALE_OUT = "scale-out (docs/distributed.md)"
DISTILLATION = "distillation (docs/distillation.md)"
ADAPTING = "parameter-efficient fine-tuning (docs/fine_tuning.md)"


def _flag(default=dataclasses.MISSING, help="", parse=str, **options):
    """A `RunConfig` field with its `Flag` (defaults of lists and dicts are
    made per instance)."""
    spec = dict(help=help, parse=parse, **options)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.copy(default), metadata={"flag": spec})
    return dataclasses.field(default=default, metadata={"flag": spec})


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One training run's settings: a row of Table 3 or 4 (or a digits
    config) with the command line's flags applied. Deeply immutable (its
    lists are tuples, `model_args` a read-only mapping) and checked on
    construction (`check_config`): a ValueError names the flag, what it got
    and what it takes.

    The fields are the recipes' flags (``--base-lr`` is `base_lr`; each
    field's `Flag`, in `FLAGS`, holds its help, parser, choices and check),
    plus `name`, `kind` (``"pretrain"``, ``"finetune"`` or
    ``"masked_patch"``), `paper` (the row it comes from), `epochs` (the
    paper's, for pre-training rows) and the recipe's own settings
    (`lr_grid`, `representation_size`, `preprocess`, `area_range`, `flip`).
    `model_args` holds `keras_vit.ViTConfig` fields that change the preset
    `model`.

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
    dataset: str = _flag("digits", "digits (embedded), a TFDS name such as cifar10, or an image "
                         "folder with one sub-folder per class")
    data_dir: str | None = _flag(None, "TFDS data directory")
    train_split: str = _flag("train", "e.g. train[:98%] (TFDS split syntax)")
    eval_split: str = _flag("test", "e.g. test, validation, train[98%:]")
    model: str = _flag("vit_b16", "a preset name such as vit_b16 or ViT-B/16")
    model_args: Mapping = _flag({}, "ViT arguments over the preset, e.g. num_layers=4,hidden_dim=64",
                                parse_key_values, metavar="KEY=VALUE,...")
    image_size: int = _flag(224, "training resolution in pixels (with --max-num-patches: the "
                            "size the position table is learned at)", int, check=_positive_int)
    max_num_patches: int | None = _flag(
        None, "NaFlex: train and evaluate on images at their own sizes and aspect ratios, each "
        "resized to at most N patches (docs/naflex.md)", int,
        check=_or_none(_positive_int, "square images of --image-size"), metavar="N")
    batch_size: int = _flag(512, "the GLOBAL batch (the paper's 4096 or 512)", int,
                            check=_positive_int)
    accum_steps: int = _flag(1, "micro-batches per update: each is batch-size / accum-steps images",
                             int, check=_positive_int)
    steps: int = _flag(1000, "optimizer updates", int, check=_positive_int)
    warmup_steps: int = _flag(0, "linear warm-up updates", int, check=_integer)
    base_lr: float = _flag(1e-3, "peak learning rate", float, check=_positive_number)
    lr_grid: tuple = ()
    decay_type: str = _flag("cosine", "the learning rate's decay after warm-up", choices=DECAY_TYPES)
    weight_decay: float = _flag(0.0, "lr-multiplied weight decay (pre-training)", float,
                                check=_number(low=0))
    grad_norm_clip: float | None = _flag(1.0, "global gradient norm clip", float,
                                         check=_or_none(_positive_number, "no clipping"))
    dropout_rate: float = _flag(0.0, "dropout after the dense layers", float)
    drop_path_rate: float = _flag(0.0, "stochastic depth", float)
    loss: str = _flag("softmax", "sigmoid: multi-label pre-training (i21k, JFT); use it with "
                      "--head-bias-init -10, as the Table 3 configs do", choices=LOSSES)
    label_smoothing: float = _flag(0.0, "label smoothing", float, check=_number(low=0, high=1))
    representation_size: int | None = None
    head_bias_init: float = _flag(0.0, "initial head bias (-10 for i21k, JFT)", float,
                                  check=_number())
    polyak: float | None = _flag(None, "Polyak (EMA) averaging of the weights, e.g. 0.9999", float,
                                 check=_or_none(_momentum))
    preprocess: str = "inception"
    area_range: tuple | None = None
    flip: bool = True
    randaugment: tuple | None = _flag(None, "RandAugment with N ops of magnitude M (AugReg), e.g. 2,10",
                                      _randaugment, metavar="N,M")
    mixup: float = _flag(0.0, "MixUp alpha (AugReg), 0 for off", float, check=_number(low=0))
    cutmix: float = _flag(0.0, "CutMix factor, 0 for off", float, check=_number(low=0, high=1))
    dtype: str = _flag("float32", "the dtype policy", choices=DTYPES)
    seed: int = _flag(0, "data order, augmentation and initialisation", int, check=_integer)
    init: str | None = _flag(None, "fine-tuning: a .keras file or any checkpoint "
                             "ViT.from_checkpoint reads (.npz, HF directory, timm .safetensors, "
                             "a URL or a released name: keras-vit pretrained)")
    lora_rank: int | None = _flag(None, "fine-tuning: LoRA of rank R on every block's q, k, v, "
                                  "out, fc1 and fc2, the rest frozen but the head (docs/deploy.md)",
                                  int, check=_or_none(_positive_int), metavar="R")
    adapter: str | None = _flag(
        None, "fine-tuning: train adapters of the --init model, the rest frozen but the head: lora "
        "and dora (of --rank R, scaled by --alpha A / R) on every block's q, k, v, out, fc1 and fc2; "
        "vpt-shallow and vpt-deep (--prompts N learned tokens in the first block, or in every "
        "block); head: the head alone, a linear classifier of the frozen features. The run writes "
        "adapters.safetensors beside model.keras",
        check=_or_none(_one_of(*ADAPTERS), "full fine-tuning"), metavar="|".join(ADAPTERS),
        group=ADAPTING)
    rank: int | None = _flag(None, "lora, dora: the rank (default 8)", int,
                             check=_or_none(_positive_int), metavar="R", group=ADAPTING)
    alpha: float | None = _flag(None, "lora, dora: A · B is scaled by alpha / rank (default: the rank)",
                                float, check=_or_none(_positive_number), metavar="A", group=ADAPTING)
    prompts: int | None = _flag(None, "vpt-shallow, vpt-deep: prompt tokens per block (default 10)",
                                int, check=_or_none(_positive_int), metavar="N", group=ADAPTING)
    teacher: str | None = _flag(
        None, "distillation: the teacher, a .keras file, a checkpoint or a released name (keras-vit "
        "pretrained) over the dataset's classes, run frozen in inference mode (docs/distillation.md)",
        metavar="PATH_OR_NAME", group=DISTILLATION)
    distillation: str | None = _flag(
        None, "with --teacher: hard (DeiT: the distillation token's head learns the teacher's top "
        "class; the student needs distillation_token=True), soft (DeiT: the same head learns the "
        "teacher's probabilities softened by --distillation-tau), logits (any student's own logits "
        "learn the teacher's softened probabilities), features (the student's last patch tokens, "
        "through a learned projection, learn the teacher's, its map resampled to the student's grid)",
        check=_or_none(_one_of(*DISTILLATIONS), "no distillation"), metavar="|".join(DISTILLATIONS),
        group=DISTILLATION)
    distillation_alpha: float = _flag(0.5, "the distillation term's weight in [0, 1], the labels' "
                                      "1 - A (DeiT's 0.5)", float, check=_number(low=0, high=1),
                                      metavar="A", group=DISTILLATION)
    distillation_tau: float = _flag(1.0, "the temperature of soft and logits distillation (DeiT's 1.0)",
                                    float, check=_positive_number, metavar="T", group=DISTILLATION)
    strategy: str = _flag("none", "default none: one device", choices=ALL_STRATEGIES,
                          group=SCALE_OUT)
    data_shards: int | None = _flag(
        None, "read the data as N disjoint parts, each host (input pipeline) its share of them "
        "(default: one per host, kept on resume); the data order depends on N, so a run started "
        "with N resumes the same on any number of hosts that divides N",
        int_at_least(1, "a positive integer"),
        check=_or_none(_positive_int, "one part per input pipeline"), metavar="N", group=SCALE_OUT)
    steps_per_execution: int = _flag(1, "batches per compiled call (TPU: e.g. 50); must divide "
                                     "the batches between checkpoints", int, check=_positive_int,
                                     group=SCALE_OUT)
    checkpoint_every: int = _flag(1000, "updates between checkpoints", int, check=_positive_int)
    keep_checkpoints: int = _flag(3, "newest checkpoints kept (default 3)", int, check=_positive_int)
    few_shot: tuple = _flag([], "also report few-shot linear accuracy for these shots", parse_shots,
                            check=_shots_per_class, metavar="K,K")
    epochs: float | None = None

    def __post_init__(self):
        if isinstance(self.model_args, Mapping):  # a constructor's other name for a field
            object.__setattr__(self, "model_args", {MODEL_ALIASES.get(key, key): value
                                                    for key, value in self.model_args.items()})
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
        unknown = sorted(set(config) - set(RUN_FIELDS))
        if unknown:
            raise ValueError(f"Unknown config keys {unknown}; known: {sorted(RUN_FIELDS)}.")
        return cls(**config)


RUN_FIELDS = tuple(field.name for field in dataclasses.fields(RunConfig))

# field -> Flag: the fields the command line sets, in RunConfig's order.
FLAGS = types.MappingProxyType({
    field.name: Flag(field.name, **field.metadata["flag"])
    for field in dataclasses.fields(RunConfig) if "flag" in field.metadata
})


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


def check_config(config):
    """Clear errors for settings that cannot run, before anything starts:
    each flag's value by its `Flag` (`FLAGS`), then what holds between
    fields (the micro-batches divide the batch, warm-up is shorter than the
    run, `model_args` only the ViT's own arguments, fine-tuning's flags
    only for fine-tuning). `RunConfig` runs it on construction."""
    if config.kind not in RUN_KINDS:
        raise ValueError(f"kind must be one of {', '.join(RUN_KINDS)}, got {config.kind!r}.")
    for name, flag in FLAGS.items():
        problem = flag.problem(getattr(config, name))
        if problem:
            raise ValueError(problem)
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
    _check_model_args(config.model_args)
    if config.init and config.kind != "finetune":
        raise ValueError(
            f"--init is for fine-tuning; config {config.name!r} is a {config.kind} run, "
            "which starts from fresh weights. Use `keras-vit finetune --init ...`."
        )
    if config.lora_rank is not None and config.kind != "finetune":
        raise ValueError(
            f"--lora-rank adapts a trained model; config {config.name!r} is a "
            f"{config.kind} run from fresh weights. Use `keras-vit finetune --init ... "
            "--lora-rank R`."
        )
    _check_naflex(config)
    _check_adapter(config)
    _check_distillation(config)
    check_strategy(config.strategy)
    return config


# --adapter -> the size flags it takes, and what a run given another is told
_ADAPTER_SIZES = {
    **dict.fromkeys(("lora", "dora"), (("rank", "alpha"), "LoRA and DoRA take --rank R (and --alpha A).")),
    **dict.fromkeys(("vpt-shallow", "vpt-deep"), (("prompts",), "VPT learns --prompts N tokens.")),
    "head": ((), "it trains the head alone."),
}


def _check_adapter(config):
    """An adapter adapts a trained model, with the settings of its own
    kind: --rank and --alpha for LoRA and DoRA, --prompts for VPT;
    --lora-rank is --adapter lora --rank."""
    if config.adapter is None:
        given = [f"--{name}" for name in ("rank", "alpha", "prompts") if getattr(config, name) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} set(s) an adapter's size, and no --adapter is given: "
                             f"add --adapter {'/'.join(ADAPTERS)}.")
        return
    if config.kind != "finetune":
        raise ValueError(f"--adapter adapts a trained model; config {config.name!r} is a {config.kind} "
                         f"run from fresh weights. Use `keras-vit finetune --init ... --adapter {config.adapter}`.")
    if config.lora_rank is not None:
        raise ValueError(f"--lora-rank R is --adapter lora --rank R: give one of them, not both "
                         f"(here --adapter {config.adapter}).")
    takes, said = _ADAPTER_SIZES[config.adapter]
    wrong = [f"--{name}" for name in ("rank", "alpha", "prompts")
             if getattr(config, name) is not None and name not in takes]
    if wrong:
        raise ValueError(f"{' and '.join(wrong)} do(es) not apply to --adapter {config.adapter}: {said}")
    if config.max_num_patches is not None and config.adapter.startswith("vpt"):
        raise ValueError(f"--adapter {config.adapter} cannot go with NaFlex (--max-num-patches): its "
                         "padded sequences have no place for prompts. Use --adapter lora or dora.")


def adapter_settings(config):
    """``(method, settings)`` of a run's adapter: --adapter with its
    defaults filled in (rank 8, alpha the rank; 10 prompts; none for the
    head), or
    ``("lora", ...)`` for --lora-rank; ``(None, {})`` for none."""
    if config.adapter is None and config.lora_rank is None:
        return None, {}
    if config.adapter is None or config.adapter in ("lora", "dora"):
        rank = config.lora_rank or config.rank or 8
        return config.adapter or "lora", {"rank": rank, "alpha": config.alpha or rank}
    if config.adapter == "head":
        return "head", {}
    return config.adapter, {"prompt_tokens": config.prompts or 10}


def _check_distillation(config):
    """A teacher needs its kind of distillation, in a run that trains a
    classifier (a kind without its teacher is a named config's: the run
    asks for ``--teacher``, `keras_vit.training.run.plan`)."""
    if config.teacher is not None and config.distillation is None:
        raise ValueError(
            f"--teacher {config.teacher} needs --distillation: hard or soft (DeiT's token distillation, for "
            "a student with distillation_token=True), logits or features (any student).")
    if config.teacher is None:
        return
    if config.kind == "masked_patch":
        raise ValueError(f"--teacher: config {config.name!r} is masked patch prediction, which has no "
                         "classes to distill. Distill in `keras-vit pretrain` or `keras-vit finetune`.")
    if config.max_num_patches is not None:
        raise ValueError("--teacher with --max-num-patches: the teacher takes square images of its own size, "
                         "and NaFlex keeps each image's. Leave --max-num-patches out.")


def _check_naflex(config):
    """What `--max-num-patches` (NaFlex) does not combine with."""
    if config.max_num_patches is None:
        return
    if config.kind == "masked_patch":
        raise ValueError(
            f"--max-num-patches trains a NaFlex classifier; config {config.name!r} is masked patch "
            "prediction, which takes square images. Leave --max-num-patches out.")
    mixing = [flag for flag, on in (("--randaugment", config.randaugment), ("--mixup", config.mixup),
                                    ("--cutmix", config.cutmix)) if on]
    if mixing:
        raise ValueError(
            f"{', '.join(mixing)} with --max-num-patches: these augment batches of one image size, "
            "and NaFlex keeps each image's own. Leave them out.")


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
        representation_size=PRESETS[model]["config"]["hidden_dim"],  # the pre-training MLP head
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
# DeiT's student on the digits: smaller than the digits' model, with a distillation token.
_DIGITS_STUDENT = dict(patch_size=4, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, distillation=True)

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
    # Appendix B.1.1: every VTAB-1k task with one setting (lr 0.01, 2,500 steps),
    # trained on train800val200 and tested on test; the dataset is one task
    # (keras_vit.evaluation runs all 19, and the lr_grid sweep on request)
    "ft-vtab1k": _finetune("vtab/caltech101", 2500, _GRID, "train800val200", "test", "VTAB (19 tasks)",
                           base_lr=0.01),
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
    "digits-deit": dict(
        kind="pretrain", paper="DeiT's recipe (Touvron et al. 2021: AdamW, weight decay 0.05, warm-up, "
        "cosine, label smoothing 0.1, stochastic depth 0.1, hard distillation through the distillation "
        "token, alpha 0.5) scaled down to the embedded digits; give the teacher with --teacher",
        dataset="digits", model="vit_ti16", model_args=_DIGITS_STUDENT, image_size=16, batch_size=128,
        steps=300, warmup_steps=30, base_lr=2e-3, decay_type="cosine", weight_decay=0.05,
        drop_path_rate=0.1, label_smoothing=0.1, preprocess="inception", area_range=[0.7, 1.0], flip=False,
        checkpoint_every=150, distillation="hard",
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
    unknown = set(overrides) - set(RUN_FIELDS)
    if unknown:
        raise ValueError(f"Unknown config keys {sorted(unknown)}; known: {sorted(RUN_FIELDS)}.")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    # Another preset: the config's changes to its own preset do not apply.
    model_args = {} if overrides.get("model", config.model) != config.model else config.model_args
    return config.replace(**{**overrides, "model_args": {**model_args, **overrides.get("model_args", {})}})
