"""The learning-rate schedule of the ViT paper's code: linear warm-up, then
cosine or linear decay (Dosovitskiy et al., ICLR 2021, Tables 3 and 4).

It is vit_jax's ``create_learning_rate_schedule`` (google-research/
vision_transformer, ``vit_jax/utils.py``), evaluated at the number of
optimizer updates made so far (0 for the first update).
"""

import math
import numbers

import keras

from keras_vit.arguments import DECAY_TYPES
from keras_vit.config import is_int


def _check_int(value, name, minimum):
    if not is_int(value, minimum):
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return int(value)


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0, then cosine or linear decay, as vit_jax.

    The vit_jax source (``create_learning_rate_schedule``), transcribed:

        progress = (step - warmup_steps) / float(total_steps - warmup_steps)
        progress = jnp.clip(progress, 0.0, 1.0)
        if decay_type == 'linear':
          lr = linear_end + (lr - linear_end) * (1.0 - progress)
        elif decay_type == 'cosine':
          lr = lr * 0.5 * (1. + jnp.cos(jnp.pi * progress))
        if warmup_steps:
          lr = lr * jnp.minimum(1., step / warmup_steps)

    with ``lr = base_lr``. ``step`` counts optimizer updates from 0 (optax's
    count), so with warm-up the first update has learning rate 0. The
    optimizers of `keras_vit.training.optimizers` call it with the update
    count also under gradient accumulation.

    Args:
        base_lr: float. The peak learning rate, reached at the end of warm-up.
        total_steps: int. Updates of the whole run (>= 1); the decay reaches
            its end (0 for cosine, ``linear_end`` for linear) here.
        warmup_steps: int. Updates of linear warm-up, ``0 <= warmup_steps <
            total_steps``.
        decay_type: ``"cosine"`` (fine-tuning, Table 4) or ``"linear"``
            (pre-training, Table 3).
        linear_end: float. The final learning rate of linear decay; vit_jax's
            default 1e-5. Not used by cosine decay.

    Input: the update count, a scalar int. Output: a float32 scalar.

    Examples:
        >>> schedule = WarmupDecaySchedule(0.03, total_steps=10, warmup_steps=2)
        >>> [round(float(schedule(step)), 4) for step in (0, 1, 2, 6, 10)]
        [0.0, 0.015, 0.03, 0.015, 0.0]
    """

    def __init__(self, base_lr, total_steps, warmup_steps, decay_type="cosine",
                 linear_end=1e-5):
        total_steps = _check_int(total_steps, "total_steps", 1)
        warmup_steps = _check_int(warmup_steps, "warmup_steps", 0)
        if warmup_steps >= total_steps:
            raise ValueError(
                f"`warmup_steps` ({warmup_steps}) must be smaller than `total_steps` "
                f"({total_steps}); shorten the warm-up or train for more steps."
            )
        if decay_type not in DECAY_TYPES:
            raise ValueError(f"Unknown decay_type {decay_type!r}; use one of {DECAY_TYPES}.")
        for name, value in (("base_lr", base_lr), ("linear_end", linear_end)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
                raise ValueError(f"`{name}` must be a number >= 0, got {value!r}.")
        self.base_lr = float(base_lr)
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.decay_type = decay_type
        self.linear_end = float(linear_end)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        progress = keras.ops.clip(
            (step - self.warmup_steps) / float(self.total_steps - self.warmup_steps), 0.0, 1.0
        )
        if self.decay_type == "linear":
            lr = self.linear_end + (self.base_lr - self.linear_end) * (1.0 - progress)
        else:
            lr = self.base_lr * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        if self.warmup_steps:
            lr = lr * keras.ops.minimum(1.0, step / self.warmup_steps)
        return lr

    def get_config(self):
        return {
            "base_lr": self.base_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay_type": self.decay_type,
            "linear_end": self.linear_end,
        }


def learning_rate_schedule(base_lr, total_steps, warmup_steps, decay_type="cosine",
                           linear_end=1e-5):
    """vit_jax's learning-rate schedule as a Keras `LearningRateSchedule`.

    Pre-training (Table 3): ``learning_rate_schedule(1e-3, steps, 10_000,
    "linear")``; fine-tuning (Table 4): ``learning_rate_schedule(0.03, steps,
    500, "cosine")``. See `WarmupDecaySchedule` for the formula and arguments.

    Returns:
        A `WarmupDecaySchedule`.

    Examples:
        ```python
        from keras_vit.training import learning_rate_schedule

        schedule = learning_rate_schedule(0.03, total_steps=10, warmup_steps=2)
        print([round(float(schedule(step)), 4) for step in (0, 1, 2, 6, 10)])
        # -> [0.0, 0.015, 0.03, 0.015, 0.0]
        linear = learning_rate_schedule(1e-3, total_steps=100, warmup_steps=10, decay_type="linear")
        print([round(float(linear(step)), 6) for step in (0, 5, 10, 55, 100)])
        # -> [0.0, 0.0005, 0.001, 0.000505, 1e-05]
        ```
    """
    return WarmupDecaySchedule(base_lr, total_steps, warmup_steps, decay_type, linear_end)
