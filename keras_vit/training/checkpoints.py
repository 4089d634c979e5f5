"""Checkpoints of a training run that survive being killed at any moment.

A checkpoint is the whole state a run needs to go on exactly: the model's
variables (weights and the random state of dropout and stochastic depth),
the optimizer's (moments, step counters, Polyak averages, loss scale) and
the step, from which the data stream's position follows. In
``checkpoints/``:

    ckpt-000000300.npz    the variables, in the order of `model.variables`
                          (a distiller's without its frozen teacher's)
                          then `model.optimizer.variables` (and, on torch,
                          its global random state)
    ckpt-000000300.json   its record: step, epoch, the variables' paths and
                          shapes, and the .npz's size and SHA-256

Each file is written to a temporary name, flushed to disk and renamed, the
record last: a checkpoint exists once its record does. Reading checks the
record, the size, the hash and every variable's shape; a damaged or partial
checkpoint is reported and skipped for the one before it. The newest `keep`
are kept.

Nothing non-finite is written: a state with a NaN or an infinity in any
float variable raises `NonFiniteState` instead of becoming a checkpoint, and
`Checkpointing` stops the run at the first non-finite loss, before the
interval's checkpoint; the newest checkpoint stays the last finite one.
"""

import hashlib
import json
import pathlib
import re
import warnings

import keras
import numpy as np

from keras_vit.distribution import to_numpy
from keras_vit.io.files import write_atomic
from keras_vit.weights import CheckpointError

_NAME = re.compile(r"ckpt-(\d{9})\.json$")


class NonFiniteState(CheckpointError):
    """A model or optimizer state with NaN or infinite values, which is
    never written as a checkpoint.

    Attributes:
        step: the update whose state it is.
        variable: the path of the first such variable.
    """

    def __init__(self, step, variable):
        super().__init__(f"the state after update {step} is not finite ({variable} holds NaN or "
                         "infinite values); it was not written")
        self.step = step
        self.variable = variable


def first_non_finite(variables, values):
    """The path of the first float variable with a NaN or an infinity, or None."""
    for variable, value in zip(variables, values):
        if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
            return variable.path
    return None


def _state(model):
    """What a checkpoint holds of `model`: its variables, but a distiller's
    frozen teacher's (read again from its own file), then the optimizer's."""
    teacher = {id(v) for v in getattr(getattr(model, "teacher", None), "variables", ())}
    return [v for v in model.variables if id(v) not in teacher] + list(model.optimizer.variables)


def _backend_rng():
    """Random state outside Keras variables: the torch backend's dropout
    without a seed draws from torch's global generators."""
    if keras.backend.backend() != "torch":
        return {}
    import torch

    states = {"torch_cpu": torch.get_rng_state().numpy()}
    if torch.cuda.is_available():
        states.update({f"torch_cuda{i}": s.numpy() for i, s in enumerate(torch.cuda.get_rng_state_all())})
    return states


def _set_backend_rng(states):
    if not states:
        return
    import torch

    torch.set_rng_state(torch.from_numpy(states.pop("torch_cpu")))
    if states:
        torch.cuda.set_rng_state_all([torch.from_numpy(states[f"torch_cuda{i}"]) for i in range(len(states))])


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _generic(path):
    """A variable path without Keras's numbering of repeated names
    ("seed_generator_3", "adam_1"), which depends on what else the process
    created; the order and shapes pin the variables down."""
    return re.sub(r"_\d+(?=/|$)", "", path)


class CheckpointManager:
    """Writes, lists and reads the checkpoints of one run.

    Args:
        directory: the run's ``checkpoints/`` folder.
        keep: int >= 1. How many of the newest checkpoints to keep.
        write: bool. Whether this process writes (the chief); the others
            only take part in gathering sharded values.
    """

    def __init__(self, directory, keep=3, write=True):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"`keep` must be an int >= 1 (checkpoints kept), got {keep!r}.")
        self.directory = pathlib.Path(directory)
        self.keep = keep
        self.write = write
        self.pending_rng = {}

    def steps(self):
        """Steps of the checkpoints whose record exists, oldest first."""
        if not self.directory.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := _NAME.match(p.name)))

    def _paths(self, step):
        stem = self.directory / f"ckpt-{step:09d}"
        return stem.with_suffix(".npz"), stem.with_suffix(".json")

    def save(self, model, step, epoch):
        """Writes the checkpoint of `step` (after `epoch` Keras epochs)."""
        variables = _state(model)
        values = [to_numpy(v) for v in variables]  # every process: sharded values are gathered
        bad = first_non_finite(variables, values)  # every process decides alike
        if bad is not None:
            raise NonFiniteState(step, bad)
        if not self.write:
            return
        data, record = self._paths(step)
        rng = _backend_rng()
        arrays = {**{f"v{i:05d}": v for i, v in enumerate(values)}, **{f"rng_{k}": v for k, v in rng.items()}}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(data, lambda f: np.savez(f, **arrays))
            meta = {
                "step": step, "epoch": epoch, "size": data.stat().st_size, "sha256": _sha256(data),
                "variables": [[v.path, list(value.shape)] for v, value in zip(variables, values)],
                "backend_rng": sorted(rng),
            }
            write_atomic(record, json.dumps(meta, indent=1) + "\n")
        except OSError as error:  # a full disk, a folder taken away: the older checkpoints stand
            data.unlink(missing_ok=True)
            kept = self.steps()
            raise CheckpointError(
                f"Could not write the checkpoint of update {step} in {self.directory} "
                f"({error.strerror or error}). "
                + (f"The checkpoint of update {kept[-1]} is kept; free space there and run the same "
                   "command again to resume from it." if kept else
                   "No checkpoint was written yet; free space there and run the same command again.")
            ) from None
        self._prune()

    def _prune(self):
        for step in self.steps()[:-self.keep]:
            data, record = self._paths(step)
            record.unlink(missing_ok=True)  # the record first: never a record without data
            data.unlink(missing_ok=True)

    def _read(self, step, variables):
        data, record = self._paths(step)
        meta = json.loads(record.read_text())
        if not data.exists():
            raise CheckpointError(f"{data.name} is missing")
        if data.stat().st_size != meta["size"] or _sha256(data) != meta["sha256"]:
            raise CheckpointError(f"{data.name} is damaged or partial (size or SHA-256 differs from its record)")
        expected = [[_generic(v.path), list(v.shape)] for v in variables]
        if [[_generic(p), shape] for p, shape in meta["variables"]] != expected:
            raise CheckpointError(f"{data.name} holds other variables than this model and optimizer")
        with np.load(data) as arrays:
            values = [arrays[f"v{i:05d}"] for i in range(len(variables))]
            rng = {k: arrays[f"rng_{k}"] for k in meta.get("backend_rng", [])}
        bad = first_non_finite(variables, values)
        if bad is not None:
            raise CheckpointError(f"{data.name} holds NaN or infinite values ({bad})")
        return meta, values, rng

    def restore(self, model):
        """Loads the newest usable checkpoint into `model` (built, with its
        optimizer built) and returns its record, or None when there is none.
        Each unusable one is reported with a warning and skipped."""
        variables = _state(model)
        for step in reversed(self.steps()):
            try:
                meta, values, rng = self._read(step, variables)
            except (CheckpointError, OSError, ValueError, KeyError) as error:
                warnings.warn(f"Skipping checkpoint of step {step} in {self.directory}: {error}. "
                              "Trying the one before it.", stacklevel=2)
                continue
            for variable, value in zip(variables, values):
                variable.assign(value)
            if sorted(rng) == sorted(_backend_rng()):  # the same backend and devices
                self.pending_rng = rng  # Checkpointing sets it before the first batch
            return meta
        return None


class Checkpointing(keras.callbacks.Callback):
    """Saves a checkpoint at the end of every Keras epoch (one checkpoint
    interval of `updates_per_epoch` optimizer updates of `accum_steps`
    micro-batches), and stops the run when it diverges.

    Divergence is a non-finite loss after a batch, or a non-finite state at
    a checkpoint (`NonFiniteState`). The run then stops at once and no
    checkpoint is written for the interval: `diverged_at` holds the update
    and `diverged_because` what was not finite.
    """

    def __init__(self, manager, updates_per_epoch, accum_steps=1):
        super().__init__()
        self.manager = manager
        self.updates_per_epoch = updates_per_epoch
        self.accum_steps = accum_steps
        self.diverged_at = None
        self.diverged_because = None
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        # Just before the first batch: fit's start-up (the torch data
        # loader's seed) draws from torch's global generator too.
        if self.manager.pending_rng:
            _set_backend_rng(self.manager.pending_rng)
            self.manager.pending_rng = {}

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if self.diverged_at is None and loss is not None and not np.isfinite(float(loss)):
            self._diverge(self._epoch * self.updates_per_epoch + batch // self.accum_steps + 1,
                               f"the loss is {float(loss)}")

    def on_epoch_end(self, epoch, logs=None):
        if self.diverged_at is not None:
            return
        try:
            self.manager.save(self.model, step=(epoch + 1) * self.updates_per_epoch, epoch=epoch + 1)
        except NonFiniteState as error:
            self._diverge(error.step, f"{error.variable} holds NaN or infinite values")

    def _diverge(self, update, because):
        """Records that the run diverged at `update` (`because` says how) and stops it."""
        self.diverged_at, self.diverged_because = update, because
        self.model.stop_training = True
