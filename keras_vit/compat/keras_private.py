"""The private parts of Keras that keras_vit relies on, in one list.

keras_vit uses public Keras API wherever one exists. Where none gives what
the paper's training needs, it overrides or reads a private hook of the
Keras minor version it is written against, which ``pyproject.toml`` pins
(`KERAS_REQUIREMENT`). Each hook is listed here with the code that needs it;
`missing_hooks()` names those an installed Keras lacks, and the test suite
runs it on every backend, so a Keras release that moves one fails by name
instead of training differently.
"""

import dataclasses
import importlib

import keras

# The Keras versions the hooks below are written against (pyproject.toml's
# dependency says the same; tests/test_keras_private.py checks both).
KERAS_REQUIREMENT = "keras>=3.15,<3.16"


@dataclasses.dataclass(frozen=True)
class Hook:
    """One private Keras name keras_vit uses.

    Attributes:
        owner: the dotted path of the module or class that defines it, or
            ``"optimizer instance"`` (``"layer instance"``) for an attribute
            set on a built optimizer (layer).
        name: the attribute.
        user: the keras_vit code that needs it, and why.
    """

    owner: str
    name: str
    user: str


_OPTIMIZER = "training.optimizers.UpdateCountedOptimizer"
_TF_TRAINER = "keras.src.backend.tensorflow.trainer"

HOOKS = (
    Hook("keras.optimizers.Optimizer", "_backend_apply_gradients",
         f"{_OPTIMIZER}: replicas' gradients summed before clipping"),
    Hook("keras.optimizers.Optimizer", "_backend_update_step",
         f"{_OPTIMIZER}: the fused torch update"),
    Hook("keras.optimizers.Optimizer", "_get_current_learning_rate",
         f"{_OPTIMIZER}: the schedule counts updates, not micro-batches"),
    Hook("keras.optimizers.Optimizer", "_update_model_variables_moving_average",
         f"{_OPTIMIZER}: the weight average moves once per update"),
    Hook("keras.optimizers.Optimizer", "_overwrite_model_variables_with_average_value",
         f"{_OPTIMIZER}: JAX weights get a copy of the average"),
    Hook("keras.optimizers.Optimizer", "_get_variable_index",
         "training.optimizers: the fused torch update finds each variable's slots"),
    Hook("keras.src.backend.tensorflow.optimizer.TFOptimizer", "_all_reduce_sum_gradients",
         f"{_OPTIMIZER}: TensorFlow's replica sum, done before clipping instead"),
    Hook("optimizer instance", "_learning_rate", f"{_OPTIMIZER}: the schedule object"),
    Hook("optimizer instance", "_iterations", f"{_OPTIMIZER}: the micro-batch count"),
    Hook("optimizer instance", "_model_variables_moving_average", f"{_OPTIMIZER}: the weight average"),
    Hook("keras.src.backend.tensorflow.trainer.TensorFlowTrainer", "_maybe_symbolic_build",
         "multi_worker.fix_symbolic_build: MultiWorkerMirroredStrategy's first batch"),
    Hook("keras.src.trainers.trainer.Trainer", "_symbolic_build",
         "multi_worker.fix_symbolic_build: builds from this replica's part of the batch"),
    Hook(_TF_TRAINER, "reduce_per_replica", "multi_worker.fix_scalar_reduction: scalar metrics"),
    Hook(_TF_TRAINER, "_collective_all_reduce_multi_worker", "multi_worker.fix_scalar_reduction"),
    Hook("layer instance", "_tracker",
         "variants.add_dora: dora_magnitude added to a built projection, as Keras's own "
         "enable_lora adds its factors (no public API adds a variable to a built layer)"),
    Hook("keras.src.utils.tracking.Tracker", "unlock", "variants.add_dora, as above"),
    Hook("keras.src.utils.tracking.Tracker", "lock", "variants.add_dora, as above"),
)


def _resolve(path):
    """The module or class at a dotted `path`, or None."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            found = getattr(found, part, None)
            if found is None:
                return None
        return found
    return None


def _built_optimizer():
    """A built optimizer with a schedule and a weight average: every
    instance attribute of `HOOKS` exists on it."""
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.9)
    optimizer = keras.optimizers.SGD(schedule, use_ema=True)
    optimizer.build([keras.Variable(keras.ops.zeros((2,)))])
    return optimizer


def missing_hooks(hooks=HOOKS):
    """The `hooks` the installed Keras lacks, as lines naming each, its owner,
    the keras_vit code that needs it and the Keras version; empty if none."""
    optimizer = None
    lines = []
    for hook in hooks:
        if hook.owner == "optimizer instance":
            optimizer = optimizer or _built_optimizer()
            found = hasattr(optimizer, hook.name)
        elif hook.owner == "layer instance":
            layer = keras.layers.Dense(1)
            layer.build((None, 1))
            found = hasattr(layer, hook.name)
        else:
            owner = _resolve(hook.owner)
            found = owner is not None and hasattr(owner, hook.name)
        if not found:
            lines.append(f"{hook.owner}.{hook.name} (used by {hook.user}) is not in the installed "
                         f"Keras {keras.__version__}; keras_vit is written against {KERAS_REQUIREMENT}")
    return lines
