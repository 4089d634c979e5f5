"""What the command line's flags share, in a module that imports no Keras:
the dtype policies and the argparse types that turn a flag's text into its
value. `keras_vit.training.configs` builds the recipes' flags (`FLAGS`)
with them and `keras_vit.cli` its commands' own flags, whose ``--help``
then prints without starting a backend.
"""

import argparse

# The dtype policies a run computes in (the recipes' ``--dtype``, and that of
# predict, zero-shot, evaluate and explain).
DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")


def parse_ints(text):
    """``1,5,10`` -> [1, 5, 10]; empty for none."""
    try:
        return [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


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
