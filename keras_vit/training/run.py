"""One training run in one work directory: pre-training, fine-tuning or
masked patch prediction, through ``model.fit``.

The work directory holds everything of the run:

    config.json          the resolved config (flags applied), and the backend
    checkpoints/         the newest few checkpoints: every variable of the model
                         (with dropout's random state) and optimizer, and the
                         step, every `checkpoint_every` updates and at the end
                         (`keras_vit.training.checkpoints`)
    tensorboard/         TensorBoard logs (loss, accuracy, learning rate)
    log.csv              the same numbers, one row per checkpoint interval
    model.keras          the trained model (Polyak-averaged weights if asked;
                         with --adapter lora or dora, merged into the kernels)
    adapters.safetensors with --adapter (or --lora-rank): what was trained, apart
                         from the --init model (`keras_vit.load_adapters`)
    results.json         held-out accuracy (and few-shot accuracies)

Starting the same command again in the same directory continues from the
newest usable checkpoint, with the data stream at the same position, and ends
with the weights of a run never interrupted; a different config there is
refused and nothing is overwritten (a directory with a config but no
checkpoint and no model is not a run yet: the next command takes it, and
keeps the files of another config beside as ``replaced-{n}-config.json`` and
``replaced-{n}-log.csv``).
Under a distribution strategy only the chief process writes the directory.

A run that fails leaves nothing broken:

- every check (the config, the model's arguments, the augmentation, the
  data, the work directory) runs before the first write;
- nothing non-finite is written: at the first NaN or infinite loss the run
  stops with a `DivergenceError`, its newest checkpoint is the last finite
  one, and the same command resumes from it;
- a file the data pipeline cannot decode stops the run with a `RunError`
  naming it, the checkpoints kept;
- the reports are strict JSON (`keras_vit.io.files.write_json`).
"""

import dataclasses
import pathlib
import sys
import time

import keras

from keras_vit import adapters
from keras_vit import variants
from keras_vit.config import ViTConfig
from keras_vit.distillation import Distiller
from keras_vit.distillation.losses import check_class_names
from keras_vit.distillation.losses import check_classes
from keras_vit.distribution import Topology
from keras_vit.distribution import to_numpy
from keras_vit.io import files
from keras_vit.loading import Pretrained
from keras_vit.loading import load_pretrained
from keras_vit.loading import read_pretrained
from keras_vit.model import ViT
from keras_vit.presets import PRESETS
from keras_vit.presets import preset_name
from keras_vit.training import scoring
from keras_vit.training import losses
from keras_vit.training import masked_patch
from keras_vit.training.checkpoints import CheckpointManager
from keras_vit.training.checkpoints import Checkpointing
from keras_vit.training.checkpoints import first_non_finite
from keras_vit.training.configs import PLACEMENT_KEYS
from keras_vit.training.configs import RunConfig
from keras_vit.training.configs import adapter_settings
from keras_vit.training.optimizers import finetune_optimizer
from keras_vit.training.optimizers import pretrain_optimizer
from keras_vit.weights import CheckpointError

class RunError(ValueError):
    """A run that cannot start (raised before anything is written), or one
    that cannot go on (its checkpoints kept)."""


class DivergenceError(RunError):
    """A run whose loss or weights became NaN or infinite. Nothing
    non-finite was written: the newest checkpoint is the last finite one.

    Attributes:
        update: int. The optimizer update at which it was seen.
        checkpoint: int or None. The update of the newest checkpoint kept.
    """

    def __init__(self, message, update, checkpoint):
        super().__init__(message)
        self.update = update
        self.checkpoint = checkpoint


# -- the model ----------------------------------------------------------------

def run_vit_config(fields, config, num_classes, class_names=None):
    """The one `keras_vit.ViTConfig` a run builds (`plan`): `fields` (ViT
    arguments: the preset's with the config's `model_args`, or the
    ``--init`` file's), then the recipe's settings: resolution, classes,
    regularisation, NaFlex's patch budget; a masked patch model's own
    settings (its ResNet stem, if any, left for it to refuse); no pre-logits
    layer when fine-tuning from a file (as vit_jax fine-tunes)."""
    settings = dict(image_size=config.image_size, num_classes=num_classes, class_names=class_names,
                    dropout_rate=config.dropout_rate, drop_path_rate=config.drop_path_rate)
    if config.max_num_patches is not None:
        settings.update(naflex=True, max_num_patches=config.max_num_patches)
    if config.kind == "masked_patch":
        settings.update({k: v for k, v in masked_patch.OWN_SETTINGS.items() if k != "resnet_block_units"})
    elif config.init:
        settings.update(representation_size=None)
    else:
        settings.update(representation_size=config.representation_size, head_bias_init=config.head_bias_init)
    return ViTConfig.from_dict({**fields, **settings})


def read_model_file(path, flag):
    """A run's model file, read once (`keras_vit.loading.read_pretrained`):
    fine-tuning's ``--init`` or distillation's ``--teacher`` (`flag`), a
    ``.keras`` ViT or masked patch model, or any checkpoint
    `keras_vit.ViT.from_checkpoint` reads, by path, URL or released name."""
    try:
        return read_pretrained(path, flag)
    except CheckpointError as error:
        raise RunError(f"{flag} {path}: {error}") from error
    except (OSError, ValueError) as error:
        raise RunError(str(error)) from error


def read_teacher(config, source):
    """The ``--teacher`` file of a distilling run, read once
    (`keras_vit.loading.read_pretrained`), after what the run's kind, the
    student (`run_vit_config`'s fields) and the dataset's classes allow
    are checked: nothing is built or written."""
    if config.distillation is None:
        return None
    if config.teacher is None:
        raise RunError(f"Config {config.name!r} distills ({config.distillation}): give its teacher with "
                       "--teacher PATH_OR_NAME (a .keras file, a checkpoint or a released name over the "
                       "dataset's classes, e.g. the model.keras of a digits or digits-finetune run).")
    teacher = read_model_file(config.teacher, "--teacher")
    if config.distillation != "features":  # features: a teacher of any head, or none
        try:
            check_classes(teacher.fields.get("num_classes", 0), source.num_classes)
            check_class_names(teacher.fields.get("class_names"), source.class_names)
        except ValueError as error:
            raise RunError(f"--teacher {config.teacher} over --dataset {config.dataset}: {error} Fine-tune the "
                           "teacher on the dataset first (keras-vit finetune --init ...).") from error
    return teacher


def distiller_for_run(run, student):
    """The `keras_vit.distillation.Distiller` of a distilling `Plan`: the
    ``--teacher`` built from its file (in the topology's scope) around
    `student`, with the run's kind, alpha, tau and label smoothing."""
    config = run.config
    teacher = ViT(ViTConfig.from_dict(run.teacher.fields), dtype=config.dtype, name="teacher")
    load_pretrained(teacher, run.teacher)
    try:
        return Distiller(student, teacher, config.distillation, alpha=config.distillation_alpha,
                         tau=config.distillation_tau, label_smoothing=config.label_smoothing)
    except ValueError as error:
        raise RunError(f"--distillation {config.distillation} --teacher {config.teacher}: {error}") from error


def student_of(model):
    """The model a run trains and saves: a distiller's student, or `model`."""
    return getattr(model, "student", model)


def model_for_run(run):
    """The model a `Plan` trains, built from its `vit_config`: freshly
    initialised, or with the ``--init`` file's weights (`plan` read them)."""
    config = run.config
    if config.kind == "masked_patch":
        return masked_patch.MaskedPatchPredictor(run.vit_config, dtype=config.dtype)
    model = ViT(run.vit_config, dtype=config.dtype)
    if run.pretrained is not None:
        load_pretrained(model, run.pretrained)
    return adapted_for_run(model, config)


def adapted_for_run(model, config):
    """`model` with the run's ``--adapter`` (`adapter_settings`): LoRA or
    DoRA on every block's q, k, v, out, fc1 and fc2, or the head alone
    trainable (`model` itself, changed); VPT's prompts (a copy); `model` as
    it is without one."""
    method, settings = adapter_settings(config)
    if method in ("lora", "dora"):  # the rest frozen but the head
        enable = model.enable_lora if method == "lora" else model.enable_dora
        enable(settings["rank"], variants.PROJECTION_NAMES, settings["alpha"])
    elif method == "head":  # a linear classifier of the frozen features
        variants.freeze_all_but(model, [])
    elif method is not None:  # VPT: a copy with the prompts, the rest frozen but the head
        model = model.with_prompts(settings["prompt_tokens"], deep=method == "vpt-deep")
    return model


def build_loss(config):
    """The loss of a resolved config: masked patch, sigmoid or softmax cross-entropy."""
    if config.kind == "masked_patch":
        return masked_patch.masked_patch_loss()
    if config.loss == "sigmoid":
        return losses.sigmoid_cross_entropy()
    return losses.softmax_cross_entropy(label_smoothing=config.label_smoothing)


def build_optimizer(config):
    """The optimizer of a resolved config: `pretrain_optimizer` or `finetune_optimizer`."""
    common = dict(
        base_lr=config.base_lr, total_steps=config.steps,
        warmup_steps=config.warmup_steps, decay_type=config.decay_type,
        grad_norm_clip=config.grad_norm_clip, accum_steps=config.accum_steps,
    )
    if config.polyak:
        common.update(use_ema=True, ema_momentum=config.polyak)
    if config.kind == "finetune":
        return finetune_optimizer(**common)
    return pretrain_optimizer(weight_decay=config.weight_decay, **common)


# -- data ---------------------------------------------------------------------

def train_dataset(config, source, start_batch=0, shard=None, scaling=None, patch_size=None):
    """The micro-batches of the run from `start_batch` on; with `shard`
    ``(index, count)``, those of input pipeline `index` of `count`; the
    images scaled as `scaling` says (`pixel_scaling` of the model; None:
    [-1, 1]); a masked patch prediction run's targets cut in the model's
    `patch_size`.

    The data is read as ``config.data_shards`` disjoint parts (one per
    pipeline unless set); each pipeline reads ``data_shards / count`` of
    them and puts their rows side by side, in part order. So the stream
    depends on `data_shards`, not on how many pipelines share it.
    """
    from keras_vit import data as vit_data  # TensorFlow's tf.data, for runs only

    index, count = shard or (0, 1)
    parts = config.data_shards or count
    micro_batch = config.micro_batch_size
    if config.kind == "masked_patch" and patch_size is None:
        raise ValueError("a masked patch prediction run's batches need the model's patch_size.")
    streams = []
    for part in range(index * parts // count, (index + 1) * parts // count):
        dataset = vit_data.input_pipeline(
            source, **_image_size(config), **_seq_lens(config), batch_size=micro_batch, training=True,
            preprocess=config.preprocess, seed=config.seed, area_range=config.area_range,
            flip=config.flip, randaugment=config.randaugment, mixup=config.mixup,
            cutmix=config.cutmix, start_batch=start_batch, shard=(part, parts), **(scaling or {}),
        )
        if config.kind == "masked_patch":
            dataset = masked_patch.masked_patch_dataset(
                dataset, patch_size, config.seed, start_batch=start_batch, shard=(part, parts)
            )
        streams.append(dataset)
    return vit_data.concatenate_shards(streams)


def eval_dataset(config, source, scaling=None):
    """The evaluation `input_pipeline` of a resolved config over `source`
    (batches of at most 256), scaled as `scaling` says."""
    from keras_vit import data as vit_data

    return vit_data.input_pipeline(
        source, **_image_size(config),
        batch_size=min(config.batch_size, 256), training=False, **(scaling or {}),
    )


def _image_size(config):
    """``image_size`` for the input pipelines, but for NaFlex (`--max-num-patches`),
    whose images keep their sizes (`pixel_scaling` gives its patch size and budget)."""
    return {} if config.max_num_patches is not None else dict(image_size=config.image_size)


def _seq_lens(config):
    """NaFlex training's sequence lengths, drawn per batch (`keras_vit.naflex.train_seq_lens`)."""
    from keras_vit.naflex import train_seq_lens

    return {} if config.max_num_patches is None else dict(seq_lens=train_seq_lens(config.max_num_patches))


def pixel_scaling(model):
    """The input pipelines' arguments for `model`'s recorded pixel scaling
    (a fine-tuning run from a keras-hub preset with ImageNet's mean and
    standard deviation trains and evaluates on images so scaled), and for a
    NaFlex model its patch size and ``max_num_patches`` (NaFlex mode)."""
    scaling = dict(pixel_scale=model.pixel_scale, pixel_offset=model.pixel_offset)
    if getattr(model, "naflex", False):
        scaling.update(patch_size=tuple(model.patch_size), max_num_patches=model.max_num_patches)
    return scaling


# -- the work directory -------------------------------------------------------

def check_workdir(workdir, config):
    """Checks that `workdir` can hold the run of `config`, writing nothing.

    A config.json already there must describe the same run (a resume; the
    placement keys may differ), unless the directory holds no checkpoint and
    no model: a run that never trained (refused, or stopped before its first
    checkpoint) is replaced (`write_workdir`). A config.json that is not
    valid JSON is refused.

    Returns:
        ``(workdir, replaces)``: the directory as a `pathlib.Path`, and
        whether it holds another config of a run that never trained, whose
        config.json and log.csv `write_workdir` keeps beside as
        ``replaced-{n}-config.json`` and ``replaced-{n}-log.csv``.
    """
    workdir = files.output_folder(workdir, "--workdir")
    record = _record(config)
    path = workdir / "config.json"
    # an unreadable config.json is refused, trained or not: nothing says what it was
    previous = files.read_json(path, "the config of the run in this --workdir") if path.exists() else None
    trained = previous is not None and _has_trained(workdir)
    if trained:
        changed = {
            k: (previous.get(k), record.get(k))
            for k in sorted(set(previous) | set(record))
            if previous.get(k) != record.get(k) and k not in PLACEMENT_KEYS
        }
        if changed:
            lines = "\n".join(f"    {k}: was {a!r}, now {b!r}" for k, (a, b) in changed.items())
            raise RunError(
                f"{workdir} holds a run with a different config:\n{lines}\n"
                "Nothing there was changed. Use another --workdir, or the same flags to resume."
            )
    return workdir, previous is not None and not trained and previous != record


def write_workdir(run):
    """Creates the `Plan`'s work directory (the chief's) and writes its
    config.json, the files of the run it replaces set aside first, as
    `check_workdir` found them."""
    run.workdir.mkdir(parents=True, exist_ok=True)
    if run.replaces:
        _set_aside(run.workdir, ("config.json", "log.csv"))
    files.write_json(run.workdir / "config.json", _record(run.config), indent=2, sort_keys=True)


def _record(config):
    """What config.json holds: the resolved config and the backend."""
    return {**config.to_dict(), "backend": keras.backend.backend()}


def _set_aside(workdir, names):
    """Renames the files `names` of a run that never reached a checkpoint to
    ``replaced-{n}-{name}`` (the first free n), saying so: the next run
    there overwrites nothing."""
    n = 1
    while any((workdir / f"replaced-{n}-{name}").exists() for name in names):
        n += 1
    kept = []
    for name in names:
        if (workdir / name).exists():
            (workdir / name).rename(workdir / f"replaced-{n}-{name}")
            kept.append(f"replaced-{n}-{name}")
    print(f"note: {workdir} held another run that never reached a checkpoint; its files are kept "
          f"as {', '.join(kept)}.", file=sys.stderr)


def recorded_config(workdir):
    """The config.json of the run in `workdir` (a `pathlib.Path`), or None
    when no run trained there (no checkpoint, no model)."""
    path = workdir / "config.json"
    if path.exists() and _has_trained(workdir):
        return files.read_json(path, "the config of the run in this --workdir")
    return None


def data_shards(config, workdir, topology):
    """How many parts the run reads its data as (`train_dataset`):
    ``config.data_shards``, else what the run resumed in `workdir`
    recorded, else one part per input pipeline of `topology`. Each
    pipeline must read the same number of parts, each part the same rows."""
    shards = config.data_shards
    if shards is None:
        previous = recorded_config(files.output_folder(workdir, "--workdir")) or {}
        shards = previous.get("data_shards") or topology.num_shards
    pipelines = topology.num_shards
    if shards % pipelines:
        raise RunError(
            f"The run reads its data as {shards} parts (--data-shards {shards}), which the {pipelines} "
            f"input pipelines of --strategy {topology.strategy} cannot share evenly: each reads whole "
            f"parts. Run it on a number of hosts that divides {shards}, or use another --workdir."
        )
    micro_batch = config.micro_batch_size
    if micro_batch % shards:
        raise RunError(
            f"--batch-size {config.batch_size}"
            + (f" / --accum-steps {config.accum_steps} = {micro_batch}" if config.accum_steps > 1 else "")
            + f" does not split into the {shards} parts the data is read as "
            f"(--data-shards; one per input pipeline by default): each part gives the same rows of "
            f"every batch. Use a batch that is a multiple of {shards}."
        )
    return shards


def _has_trained(workdir):
    """Whether `workdir` holds a checkpoint or a trained model."""
    return (workdir / "model.keras").exists() or bool(CheckpointManager(workdir / "checkpoints").steps())


def updates_per_epoch(config):
    """Keras epochs of this run are checkpoint intervals: the largest divisor
    of `steps` that is at most `checkpoint_every` optimizer updates."""
    steps, every = config.steps, max(1, min(config.checkpoint_every, config.steps))
    return max(d for d in range(1, every + 1) if steps % d == 0)


def trim_log(path, epochs):
    """Keeps the header and the rows of the first `epochs` checkpoint
    intervals of log.csv (none: the file goes): a resumed run logs the
    intervals after its checkpoint again, and those of a killed or diverged
    attempt go."""
    if not path.exists():
        return
    header, *rows = path.read_text().splitlines(keepends=True) or [""]
    if epochs == 0 or "epoch" not in header.split(","):
        path.unlink()
        return
    column = header.split(",").index("epoch")
    kept = [row for row in rows if int(row.split(",")[column]) < epochs]
    if len(kept) < len(rows):
        files.write_atomic(path, header + "".join(kept))


class LearningRateLogger(keras.callbacks.Callback):
    """Adds the optimizer's current learning rate to the logs."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


# -- the run ------------------------------------------------------------------

def train(config, workdir, verbose="auto", topology=None):
    """Runs `config` in `workdir`; returns the trained model (on one device)
    and a dict of results. Every check that can fail does so before
    training starts.

    Args:
        config: a `RunConfig` (`resolve_config` gives one), or a dict of its
            fields.
        workdir: the run's directory; a run there with the same config is
            resumed.
        verbose: `model.fit`'s verbosity.
        topology: a `keras_vit.distribution.Topology` from
            `keras_vit.distribution.setup(config.strategy, ...)`; None for
            one device.

    Examples:
        ```python
        from keras_vit.training import RunError, resolve_config, train

        config = resolve_config("digits", {
            "steps": 4, "warmup_steps": 1, "batch_size": 32, "checkpoint_every": 2, "few_shot": [1, 5],
            "model_args": {"num_layers": 1, "num_heads": 2, "hidden_dim": 16, "mlp_dim": 32},
        })
        model, results = train(config, "runs/tiny", verbose=0)
        print(sorted(results))   # -> ['few_shot', 'final_loss', 'steps', 'test_accuracy', 'train_seconds']
        try:
            train(config.replace(base_lr=0.01), "runs/tiny", verbose=0)
        except RunError as error:
            print(error)
        # -> runs/tiny holds a run with a different config:
        # ->     base_lr: was 0.003, now 0.01
        # -> Nothing there was changed. Use another --workdir, or the same flags to resume.
        ```
    """
    run = plan(config, workdir, topology)
    with run.topology.scope():
        built = build(run)
        history, seconds, weights = fit(run, built, verbose)
    return finish(run, built, history, seconds, weights)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What `plan` checked and decided, before anything is written: the
    config (with its data shards), the work directory, the topology, the
    data sources, the run's length in updates per checkpoint interval
    (a Keras epoch), intervals and micro-batches per interval, whether the
    run replaces one that never trained (`check_workdir`), and the
    model as it will be built: the `preset` it is built from (its name;
    None when the ``--init`` file gives the model), its `vit_config` (the
    one `keras_vit.ViTConfig` of the run, `run_vit_config`), and the
    ``--init`` file's arguments and weights (`pretrained`, read once), or None;
    a distilling run's ``--teacher`` file (`teacher`, read once), or None."""

    config: RunConfig
    workdir: pathlib.Path
    topology: Topology
    source: object
    eval_source: object
    updates_per_epoch: int
    epochs: int
    micro_batches_per_epoch: int
    replaces: bool
    preset: str | None
    vit_config: ViTConfig
    pretrained: Pretrained | None
    teacher: Pretrained | None = None


@dataclasses.dataclass(frozen=True)
class Built:
    """What `build` made: the compiled model (restored from the newest
    checkpoint, if any), the checkpoint manager and callback, every
    callback, the training data, the evaluation data (`few_shot_train`:
    the training images for the few-shot evaluation, None when the config
    asks for none), and the interval it starts at."""

    model: keras.Model
    manager: CheckpointManager
    checkpointing: Checkpointing
    callbacks: list
    dataset: object
    test: object
    few_shot_train: object
    initial_epoch: int


def plan(config, workdir, topology=None):
    """Every check a run can fail before training, and nothing written: the
    config, the topology, the micro-batches, `steps_per_execution`, a
    different run in `workdir` (refused), the data sources, the model (the
    ``--init`` file read) and its layout over the topology's devices."""
    if not isinstance(config, RunConfig):
        config = RunConfig.from_dict(config)  # checked on construction
    topology = topology or Topology()
    per_epoch = updates_per_epoch(config)
    _check_placement(config, topology, per_epoch)
    config = config.replace(data_shards=data_shards(config, workdir, topology))
    preset, pretrained = ((None, read_model_file(config.init, "--init")) if config.init
                          else (preset_name(config.model), None))
    fields = pretrained.fields if pretrained else {**PRESETS[preset]["config"], **config.model_args}
    _check_naflex_run(config, fields)
    workdir, replaces = check_workdir(workdir, config)
    keras.utils.set_random_seed(config.seed)  # initialisation and dropout; the data has its own
    from keras_vit import data as vit_data  # TensorFlow's tf.data: imported by runs only

    source = vit_data.load_source(config.dataset, config.train_split, config.data_dir)
    classes = (0, None) if config.kind == "masked_patch" else (source.num_classes, source.class_names)
    vit_config = run_vit_config(fields, config, *classes)
    if config.distillation in ("hard", "soft") and not vit_config.distillation:
        raise RunError(
            f"--distillation {config.distillation} is DeiT's token distillation, and the student "
            f"({config.init or config.model}) has no distillation token: add --model-args "
            "distillation_token=True (pre-training), start from a distilled DeiT (--init), or use "
            "--distillation logits.")
    topology.check_batch(config.micro_batch_size, "--batch-size / --accum-steps"
                         if config.accum_steps > 1 else "--batch-size")
    topology.shard_model(vit_config)  # model_parallel: its heads and MLP units over the model axis
    teacher = read_teacher(config, source)  # the teacher's file read after the cheaper checks
    return Plan(
        config, workdir, topology, source=source,
        eval_source=vit_data.load_source(config.dataset, config.eval_split, config.data_dir),
        updates_per_epoch=per_epoch, epochs=config.steps // per_epoch,
        micro_batches_per_epoch=per_epoch * config.accum_steps, replaces=replaces, preset=preset,
        vit_config=vit_config, pretrained=pretrained, teacher=teacher,
    )


def _check_placement(config, topology, per_epoch):
    """What the topology cannot run of `config`: another strategy than the
    config's, gradient accumulation under a TensorFlow strategy, and a
    `steps_per_execution` that the backend or the checkpoint interval
    (`per_epoch` updates) does not allow."""
    if topology.strategy != config.strategy:
        raise RunError(
            f"The config asks for --strategy {config.strategy} but the topology is set up for "
            f"{topology.strategy}; pass keras_vit.distribution.setup(config.strategy, ...)."
        )
    if topology.tf_strategy is not None and config.accum_steps > 1:
        # Keras 3.15 accumulates and applies inside ops.cond, and the
        # strategy's synchronisation (merge_call) is refused there.
        raise RunError(
            f"--accum-steps {config.accum_steps} with --strategy {config.strategy}: Keras 3.15 "
            "cannot accumulate gradients under a TensorFlow distribution strategy (it synchronises "
            "the replicas inside a conditional). Use --accum-steps 1: the replicas together hold the "
            "global batch."
        )
    if config.steps_per_execution > 1 and keras.backend.backend() == "torch":
        raise RunError(
            f"--steps-per-execution {config.steps_per_execution}: Keras runs one batch per call on "
            "the torch backend; leave it at 1 (it is for XLA on TensorFlow and JAX, chiefly TPUs)."
        )
    micro_per_epoch = per_epoch * config.accum_steps
    if micro_per_epoch % config.steps_per_execution:
        raise RunError(
            f"--steps-per-execution {config.steps_per_execution} must divide the "
            f"{micro_per_epoch} batches between checkpoints (--checkpoint-every {per_epoch} updates "
            f"of {config.accum_steps} micro-batches)."
        )


def _check_naflex_run(config, fields):
    """What a NaFlex run (`--max-num-patches`) cannot be: a hybrid model's
    (`fields`: its ViT arguments), or one whose data is read as several parts."""
    if config.max_num_patches is None:
        return
    if fields.get("resnet_block_units") is not None:
        model = f"--init {config.init}" if config.init else f"--model {config.model}"
        raise RunError(
            f"--max-num-patches with {model}: a hybrid (ResNet + ViT) model embeds "
            "ResNet features of a square image, and NaFlex cuts images into pixel patches. Use a "
            "plain ViT preset, or leave --max-num-patches out.")
    if config.data_shards > 1:
        raise RunError(
            f"--max-num-patches with {config.data_shards} data parts (--data-shards or --strategy "
            f"{config.strategy}): NaFlex's batches differ in size and are not yet split between "
            "input pipelines. Run it with one (--strategy none).")


def build(run):
    """The compiled model, restored from the newest checkpoint, and its data
    and callbacks, in the topology's scope; nothing is written. The
    evaluation and augmentation arguments are checked here (the pipelines
    made), before `fit` writes config.json, the first write."""
    config, topology = run.config, run.topology
    student = model_for_run(run)
    model = student if run.teacher is None else distiller_for_run(run, student)
    model.compile(
        optimizer=build_optimizer(config), loss=None if run.teacher else build_loss(config),
        metrics=None if config.kind == "masked_patch"
        else [keras.metrics.CategoricalAccuracy(name="accuracy")],
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        if config.kind == "masked_patch" else None,
        jit_compile=_jit_compile(config.strategy),
        steps_per_execution=config.steps_per_execution,
    )
    model.optimizer.build(model.trainable_variables)
    scaling = pixel_scaling(student)
    test = eval_dataset(config, run.eval_source, scaling)
    few_shot_train = eval_dataset(config, run.source, scaling) if config.few_shot else None
    manager = CheckpointManager(run.workdir / "checkpoints", keep=config.keep_checkpoints,
                                write=topology.is_chief)
    resumed = manager.restore(model)
    checkpointing = Checkpointing(manager, run.updates_per_epoch, config.accum_steps)
    initial_epoch = resumed["epoch"] if resumed else 0
    dataset = topology.distribute_dataset(
        lambda index, count: train_dataset(config, run.source,
                                           initial_epoch * run.micro_batches_per_epoch,
                                           shard=(index, count), scaling=scaling,
                                           patch_size=run.vit_config.patch_size),
        config.micro_batch_size,
    )
    callbacks = [checkpointing, LearningRateLogger()]
    if topology.is_chief:
        callbacks += [
            keras.callbacks.CSVLogger(str(run.workdir / "log.csv"), append=True),
            keras.callbacks.TensorBoard(str(run.workdir / "tensorboard"), update_freq="epoch"),
        ]
    return Built(model, manager, checkpointing, callbacks, dataset, test, few_shot_train, initial_epoch)


def fit(run, built, verbose="auto"):
    """Writes the work directory (the chief: `write_workdir`, and log.csv
    cut back to the intervals before the one it starts at), then
    ``model.fit`` over the run's remaining intervals, in the topology's
    scope; returns the history, the seconds it took and the weights (numpy,
    gathered from every process: the Polyak averages where asked). A run
    whose loss or final weights are not finite raises `DivergenceError`, an
    undecodable file `RunError`."""
    from keras_vit import data as vit_data

    if run.topology.is_chief:
        write_workdir(run)
        trim_log(run.workdir / "log.csv", built.initial_epoch)
    run.topology.prepare(built.model)
    start = time.perf_counter()
    try:
        history = built.model.fit(
            built.dataset, epochs=run.epochs, steps_per_epoch=run.micro_batches_per_epoch,
            initial_epoch=built.initial_epoch, callbacks=built.callbacks, verbose=verbose,
            shuffle=False)
    except vit_data.DecodeError as error:
        _raise_for_unreadable_files(error, run.source, built.manager)
        raise
    seconds = time.perf_counter() - start
    # fit ends with the Polyak averages (use_ema) in place; every process
    # takes part in gathering sharded weights.
    student = student_of(built.model)
    weights = [to_numpy(w) for w in student.weights]
    update, because = built.checkpointing.diverged_at, built.checkpointing.diverged_because
    bad = first_non_finite(student.weights, weights) if update is None else None
    if bad is not None:  # no checkpoint checked the final (averaged) weights
        update, because = run.config.steps, f"the final (averaged) weight {bad} holds NaN or infinite values"
    if update is not None:
        raise _divergence(run.config, update, because, built.manager)
    return history, seconds, weights


def finish(run, built, history, seconds, weights):
    """The trained model on one device, its accuracy (and few-shot
    accuracies), model.keras and results.json (the chief's alone)."""
    config = run.config
    model = single_device_copy(student_of(built.model), weights)
    if not run.topology.is_chief:
        return model, {}
    results = {"steps": config.steps, "train_seconds": round(seconds, 1)}
    if history.history.get("loss"):
        results["final_loss"] = float(history.history["loss"][-1])
    if config.kind != "masked_patch":
        results.update(_evaluate(model, run, built))
    if adapter_settings(config)[0] is not None:  # what was trained, apart from the --init model
        model.weights_source = config.init
        model.save_adapters(run.workdir / "adapters.safetensors")
    adapters.merged(model).save(run.workdir / "model.keras")
    path = run.workdir / "results.json"
    if path.exists():  # a finished run started again keeps what it recorded
        results = {**results, **files.read_json(path, "the results of the run")}
    files.write_json(path, results, indent=2)
    return model, results


def _evaluate(model, run, built):
    """``{"test_accuracy": ..., "few_shot": ...}`` of the trained `model` on
    `built`'s evaluation data, the few-shot accuracies where the config asks
    for them."""
    results = {"test_accuracy": scoring.accuracy(model, built.test)}
    if built.few_shot_train is not None:
        results["few_shot"] = scoring.few_shot_accuracy(
            model, built.few_shot_train, built.test, run.source.num_classes,
            shots=run.config.few_shot)
    return results


def _divergence(config, update, because, manager):
    """The `DivergenceError` of a run that diverged at `update` (`because`
    says how)."""
    kept = manager.steps()
    checkpoint = kept[-1] if kept else None
    where = (f"the newest checkpoint is that of update {checkpoint}, and the same command resumes "
             "from it" if checkpoint else "no checkpoint was written yet, and the same command "
             "starts over")
    return DivergenceError(
        f"Training diverged at update {update} of {config.steps}: {because}. Nothing non-finite "
        f"was written: {where}. If it diverges again, start a new --workdir with a lower --base-lr (now {config.base_lr:g}), gradient "
        f"clipping (--grad-norm-clip, now {config.grad_norm_clip}), more --warmup-steps (now "
        f"{config.warmup_steps}) or --dtype float32 (now {config.dtype}), and check the data "
        "for NaN or infinite values.",
        update, checkpoint,
    )


def _raise_for_unreadable_files(error, source, manager):
    """A `RunError` naming the files of `source` that cannot be decoded, when
    those caused `error` (one `fit` raised); returns otherwise."""
    from keras_vit import data as vit_data

    bad = vit_data.unreadable_files(source)
    if not bad:
        return
    (first, why), *rest = bad.items()
    kept = manager.steps()
    raise RunError(
        f"Cannot decode image file {first} ({why}), found during training"
        + (f"; {len(rest)} more cannot either" if rest else "")
        + f". Replace or remove {'them' if rest else 'it'}, then run the same command again: "
        + (f"it resumes from the checkpoint of update {kept[-1]}." if kept else "it starts over.")
        + "".join(f"\n  {path} ({reason})" for path, reason in rest)
    ) from error


def _jit_compile(strategy):
    """XLA for the training step on TensorFlow and JAX, except under the
    TensorFlow strategies with several replicas on one process: Keras 3.15
    compiles ``strategy.run`` as one XLA cluster, which cannot reach the
    other replicas' variables ("Trying to access resource ... located in
    device CPU:1 from device CPU:0"). TPUStrategy compiles with XLA anyway."""
    return keras.backend.backend() != "torch" and strategy not in ("mirrored", "multi_worker")


def single_device_copy(model, weights):
    """A fresh, uncompiled copy of `model` with `weights` (numpy, in
    `model.weights` order), outside any distribution: what is saved and
    evaluated. It is built from `model`'s own `keras_vit.ViTConfig`."""
    copy = type(model)(model.config, dtype=model.dtype_policy, name=model.name, trainable=model.trainable)
    adapters.enable_projection_adapters(copy, adapters.adapter_methods(model))  # LoRA, DoRA
    for variable, source, value in zip(copy.weights, model.weights, weights, strict=True):
        variable.assign(value)
        variable.trainable = source.trainable  # what the run trained: its adapter file's
    return copy
