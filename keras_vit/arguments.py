"""What the command line's flags share, in a module that imports no Keras:
the values they offer (dtype policies, scale-out strategies, checkpoint
formats), the argparse types that turn a flag's text into its value, and
the check of a strategy against the backend. `keras_vit.training.configs`
builds the recipes' flags (`FLAGS`) with them and `keras_vit.cli` its
commands' own flags, whose ``--help`` then prints without starting a
backend.
"""

import argparse
import ast

# The dtype policies a run computes in (the recipes' ``--dtype``, and that of
# predict, zero-shot, evaluate and explain).
DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")
# The learning rate's decay after warm-up (`RunConfig.decay_type`, `warmup_then_decay`).
DECAY_TYPES = ("cosine", "linear")
# The kinds of distillation (keras_vit.distillation.Distiller; --distillation):
# DeiT's two token kinds, the logits of any student, its features.
DISTILLATIONS = ("hard", "soft", "logits", "features")
# The parameter-efficient fine-tunings (--adapter; keras_vit.adapters.METHODS):
# LoRA, DoRA, visual prompt tuning once (shallow) or in every block (deep),
# and the head alone (a linear classifier on the frozen features).
ADAPTERS = ("lora", "dora", "vpt-shallow", "vpt-deep", "head")

# Keras's backends, in the order the docs' tables list them.
BACKENDS = ("tensorflow", "jax", "torch")
# The scale-out strategies of each Keras backend (the recipes' ``--strategy``;
# `keras_vit.distribution.setup` sets them up), and all of them.
STRATEGIES = {
    "tensorflow": ("none", "tpu", "mirrored", "multi_worker"),
    "jax": ("none", "data_parallel", "model_parallel"),
    "torch": ("none",),
}
ALL_STRATEGIES = ("none", "tpu", "mirrored", "multi_worker", "data_parallel", "model_parallel")

class DistributionError(ValueError):
    """A strategy that cannot be set up here; raised before any training."""


def check_strategy(strategy, backend=None):
    """Raises `DistributionError` if `backend` (the Keras backend by
    default) has no `strategy`, naming the backends that do. Every backend
    has ``none``, which is checked without importing Keras."""
    if strategy not in ALL_STRATEGIES:
        raise DistributionError(f"--strategy {strategy!r}: unknown; choose one of {', '.join(ALL_STRATEGIES)}.")
    if strategy == "none":
        return
    if not backend:
        import keras

        backend = keras.backend.backend()
    offered_here = STRATEGIES.get(backend, ("none",))
    if strategy in offered_here:
        return
    offered = [b for b, names in STRATEGIES.items() if strategy in names]
    if backend == "torch":
        raise DistributionError(
            f"--strategy {strategy}: the torch backend trains on one device (--strategy none). "
            f"{strategy} is offered by KERAS_BACKEND={' or '.join(offered)}."
        )
    raise DistributionError(
        f"--strategy {strategy} is not available on the {backend} backend, which offers "
        f"{', '.join(offered_here)}; {strategy} needs KERAS_BACKEND={' or '.join(offered)}."
    )


def parse_ints(text):
    """``1,5,10`` -> [1, 5, 10]; empty for none."""
    try:
        return [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def merge_counts(text):
    """Token merging's r as the command line takes it: ``8`` -> 8 (every
    block), ``8,8,4`` -> [8, 8, 4] (one per block); each an int >= 0."""
    values = parse_ints(text)
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(
            f"expected ToMe's r: an integer >= 0, or one per block separated by commas "
            f"(8,8,4), got {text!r}")
    return values[0] if "," not in text else values


def int_at_least(minimum, words):
    """An argparse type: an int >= `minimum`, `words` naming it in errors."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {words}, got {text!r}")
        return value

    return parse


def parse_shots(text):
    """``1,5,10`` -> [1, 5, 10], shots per class; empty for none."""
    values = parse_ints(text)
    if values and min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive shots per class such as 1,5,10, got {text!r}")
    return values


def parse_key_values(text):
    """``num_layers=4,hidden_dim=64`` -> {"num_layers": 4, "hidden_dim": 64}:
    each value a Python literal where it reads as one, else the string."""
    arguments = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE pairs such as num_layers=4, got {item!r}")
        try:
            arguments[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            arguments[key.strip()] = value.strip()
    return arguments


def parse_floats(text):
    """``0.001,0.01`` -> [0.001, 0.01], each positive."""
    try:
        values = [float(part) for part in text.split(",") if part]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive numbers such as "
                                         f"0.001,0.01, got {text!r}")
    return values
