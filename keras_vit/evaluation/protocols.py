"""The paper's evaluation protocols, each a named `Protocol`, and one
function that runs any of them on a model and writes ``results.json`` and
``results.md`` with the published numbers beside ours. (Speed is measured
apart, by the scripts in the repository's ``benchmarks/``.)

The protocols (`PROTOCOLS`; ``keras-vit evaluate --benchmark NAME`` on the
command line), by their method:

- ``classify``: an ImageNet-1k classifier's top-1 and top-5 on ImageNet's
  validation images, ImageNet-v2 (matched frequency) or ImageNet-Sketch;
  ``imagenet_real`` adds ReaL (Beyer et al., 2020) on the same images;
  ``imagenet_a`` and ``imagenet_r`` score the 200 covered classes' logits.
- ``transfer``: CIFAR-10/100, Pets, Flowers (Table 2). A model with the
  dataset's classes is tested as it is; any other is fine-tuned first with
  Table 4's protocol (the ``ft-<dataset>`` config), its learning rate swept
  on the held-out split on request.
- ``vtab``: VTAB-1k (Table 2, Fig. 2; Appendix B.1.1): every task
  fine-tuned on its 1,000 examples with one setting (lr 0.01, 2,500 steps,
  SGD momentum 0.9, batch 512, cosine, clip 1, 384 px) and tested; or,
  with ``sweep``, Kolesnikov et al. (2020)'s sweep over {0.001, 0.003,
  0.01, 0.03} chosen on val200 after training on train800.
- ``knn``, ``linear``: DINO's k-NN and a logistic-regression probe on the
  frozen features of any dataset.
- ``zero_shot``: an image-text model's zero-shot top-1 with CLIP's prompts.

Every finished part is in ``results.json`` as soon as it ends; a run
started again with the same arguments continues from there (a fine-tuning
run killed half-way resumes from its own checkpoints).
"""

import dataclasses
import json
import math
import pathlib
import time
import warnings

import numpy as np

from keras_vit.evaluation import metrics
from keras_vit.evaluation.imagenet import IMAGENET_A_INDICES
from keras_vit.evaluation.imagenet import IMAGENET_R_INDICES
from keras_vit.startup import progress_verbose


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One named evaluation protocol.

    Attributes:
        name: its name (``keras-vit evaluate --benchmark``).
        title: its name in the paper's tables.
        method: ``"classify"``, ``"transfer"``, ``"vtab"``, ``"knn"``,
            ``"linear"`` or ``"zero_shot"``.
        dataset: the TFDS dataset (None: the ``dataset`` argument's).
        split: the split tested.
        classes: None, or the ImageNet class ids whose logits are scored.
        config: the fine-tuning config (`keras_vit.training.CONFIGS`).
        held_out: where a learning-rate sweep chooses (``transfer``).
    """

    name: str
    title: str
    method: str
    dataset: str | None = None
    split: str = "test"
    classes: tuple | None = None
    config: str | None = None
    held_out: str | None = None


PROTOCOLS = {b.name: b for b in (
    Protocol("imagenet", "ImageNet", "classify", "imagenet2012", "validation"),
    Protocol("imagenet_real", "ImageNet ReaL", "classify", "imagenet2012", "validation"),
    Protocol("imagenet_v2", "ImageNet-v2", "classify", "imagenet_v2/matched-frequency", "test"),
    Protocol("imagenet_sketch", "ImageNet-Sketch", "classify", "imagenet_sketch", "test"),
    Protocol("imagenet_a", "ImageNet-A", "classify", "imagenet_a", "test", IMAGENET_A_INDICES),
    Protocol("imagenet_r", "ImageNet-R", "classify", "imagenet_r", "test", IMAGENET_R_INDICES),
    Protocol("cifar10", "CIFAR-10", "transfer", "cifar10", config="ft-cifar10", held_out="train[98%:]"),
    Protocol("cifar100", "CIFAR-100", "transfer", "cifar100", config="ft-cifar100",
             held_out="train[98%:]"),
    Protocol("pets", "Oxford-IIIT Pets", "transfer", "oxford_iiit_pet", config="ft-pets",
             held_out="train[90%:]"),
    Protocol("flowers", "Oxford Flowers-102", "transfer", "oxford_flowers102", config="ft-flowers",
             held_out="train[90%:]"),
    Protocol("vtab1k", "VTAB-1k", "vtab", config="ft-vtab1k"),
    Protocol("knn", "k-NN", "knn"),
    Protocol("linear", "linear probe", "linear"),
    Protocol("zero_shot", "zero-shot", "zero_shot"),
)}

RESULTS = "results.json"
TABLE = "results.md"


def published_numbers():
    """The published accuracies (%) the results table quotes:
    ``{"sources": {key: citation}, "models": {released name: {protocol:
    [{"value", "source", optional "metric", "note"}, ...]}}}``, from the
    package's ``data/published.json``."""
    import importlib.resources

    text = importlib.resources.files("keras_vit.evaluation").joinpath("data", "published.json")
    return json.loads(text.read_text("utf-8"))


def check_protocols(names):
    """`names` (a list, or ``"a,b"``) as a list of `PROTOCOLS` keys."""
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in names if name not in PROTOCOLS]
    if unknown or not names:
        raise ValueError(f"Unknown benchmark {', '.join(map(repr, unknown)) or '(none given)'}: "
                         f"choose from {', '.join(PROTOCOLS)}.")
    return list(dict.fromkeys(names))


class Results:
    """``results.json`` of an evaluation folder: the settings it was run
    with, every finished part (``parts``) and every protocol's scores, each
    written as soon as it is known."""

    def __init__(self, folder, settings):
        from keras_vit.io import files

        self.folder = pathlib.Path(folder)
        self.path = self.folder / RESULTS
        self.data = {"settings": settings, "parts": {}, "benchmarks": {}}
        if self.path.exists():
            found = files.read_json(self.path, "the evaluation's results")
            changed = {key: (found.get("settings", {}).get(key), value) for key, value in settings.items()
                       if found.get("settings", {}).get(key) != value}
            if changed:
                lines = "\n".join(f"    {key}: was {was!r}, now {now!r}"
                                  for key, (was, now) in changed.items())
                raise ValueError(f"{self.folder} holds an evaluation with other settings:\n{lines}\n"
                                 "Nothing there was changed. Use another --out, or the same "
                                 "arguments to continue it.")
            self.data.update(found)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write()  # the settings first: a later call with others is refused from the start

    def part(self, key):
        """The finished part `key` (a fine-tuning run's scores), or None."""
        return self.data["parts"].get(key)

    def set_part(self, key, value):
        """Records a finished part, on disk at once."""
        self.data["parts"][key] = value
        self._write()

    def set_scores(self, name, value):
        """Records a finished protocol's scores, on disk at once."""
        self.data["benchmarks"][name] = value
        self._write()

    def _write(self):
        from keras_vit.io import files

        files.write_json(self.path, self.data, indent=1)


def _progress(total, verbose, title):
    import keras

    if verbose:
        print(title)
    return keras.utils.Progbar(total, verbose=progress_verbose() if verbose else 0, unit_name="batch")


def _predict(model, source, options, title, vit=None):
    """``(outputs (n, ...) float64, labels (n,))`` of every image of `source`
    through `model`, the images at the input size and pixel scaling of `vit`
    (default `model`), with a progress bar."""
    from keras_vit.data import input_pipeline
    from keras_vit.training.scoring import predict_batches
    from keras_vit.training.run import pixel_scaling

    vit = vit or model
    size = {} if getattr(vit, "naflex", False) else dict(image_size=tuple(vit.image_size))
    dataset = input_pipeline(source, **size, batch_size=options["batch_size"], training=False,
                             **pixel_scaling(vit))
    bar = _progress(math.ceil(source.num_examples / options["batch_size"]), options["verbose"], title)
    outputs, labels = [], []
    for batch_outputs, batch_labels in predict_batches(model, dataset):
        outputs.append(batch_outputs)
        labels.append(batch_labels)
        bar.add(1)
    return np.concatenate(outputs).astype("float64"), np.concatenate(labels)


def _real_sets(source, data_dir):
    """The ReaL label sets of `source`'s images (ImageNet's validation
    split), in its order: each image's ``file_name`` looked up in the
    shipped labels."""
    from keras_vit.data.sources import prepared_builder
    from keras_vit.evaluation.imagenet import imagenet_real_labels

    import tensorflow as tf
    import tensorflow_datasets as tfds

    builder = prepared_builder(source.name, data_dir)
    names = builder.as_dataset(split=source.split, shuffle_files=False,
                               decoders={"image": tfds.decode.SkipDecoding()})
    names = names.map(lambda example: example["file_name"], num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=True)
    labels = imagenet_real_labels()
    sets = []
    for name in names.as_numpy_iterator():
        stem = pathlib.PurePath(name.decode()).stem  # ILSVRC2012_val_00000001
        sets.append(labels[int(stem.rsplit("_", 1)[-1]) - 1])
    return sets


def _vit(model, protocol):
    """`model` if it is a ViT, else an error naming what to use."""
    from keras_vit import ViT

    if not isinstance(model, ViT):
        raise ValueError(f"--benchmark {protocol.name} runs a ViT ({type(model).__name__} given). "
                         "An image-text model runs zero_shot, knn and linear.")
    return model


def _classify(protocol, model, options, results):
    from keras_vit.data import load_source

    if _vit(model, protocol).num_classes != 1000:
        raise ValueError(
            f"--benchmark {protocol.name} scores an ImageNet-1k classifier's logits; this model has "
            f"{model.num_classes or 'no'} classes. Give an ImageNet fine-tune (keras-vit pretrained "
            "lists them), or use --benchmark knn or linear on its features.")
    source = load_source(protocol.dataset, protocol.split, options["data_dir"])
    key = ("logits", protocol.dataset, protocol.split)
    if key not in options["features"]:  # imagenet and imagenet_real read the same images
        options["features"][key] = _predict(model, source, options,
                                            f"{protocol.title}: {source.num_examples} images")
    logits, labels = options["features"][key]
    if protocol.classes is not None:
        right = metrics.subset_predictions(logits, protocol.classes) == labels
        return {"top1": 100 * float(right.mean()), "images": len(labels)}
    scores = {"top1": 100 * metrics.top_k_accuracy(logits, labels, 1),
              "top5": 100 * metrics.top_k_accuracy(logits, labels, 5), "images": len(labels)}
    if protocol.name == "imagenet_real":
        sets = _real_sets(source, options["data_dir"])
        scores = {"real": 100 * metrics.real_accuracy(logits, sets), **scores,
                  "images": sum(1 for labels in sets if labels)}
    return scores


# -- fine-tuning protocols ---------------------------------------------------------

INIT = "evaluated_model.keras"


def _init_path(model, folder):
    """What fine-tuning starts from: the path or name given, or the model
    saved once as `INIT` in the evaluation's folder (the settings hold the
    hash of its weights)."""
    if isinstance(model, (str, pathlib.Path)):
        return str(model)
    path = pathlib.Path(folder) / INIT
    if not path.exists():
        model.save(path)
    return str(path)


def _fine_tune(results, key, init, config, options):
    """One fine-tuning run (`keras_vit.training.train`) in
    ``<out>/runs/<key>``: its accuracy on the config's eval split, kept in
    the results as ``parts[key]`` (a finished run is not run again)."""
    from keras_vit.training import train

    done = results.part(key)
    if done is not None:
        return done
    workdir = results.folder / "runs" / key
    _, scores = train(config, workdir, verbose=2 if options["verbose"] else 0)
    found = {"accuracy": 100 * scores["test_accuracy"], "split": config.eval_split,
             "lr": config.base_lr, "steps": config.steps}
    results.set_part(key, found)
    return found


def _learning_rates(config, options):
    if options["sweep"]:
        return list(options.get("lr_grid") or config.lr_grid)
    return [config.base_lr]


def _run_config(name, options, **changes):
    from keras_vit.training import resolve_config

    return resolve_config(name, {**options["finetune"], **changes})


def _chosen(runs):
    """The learning rate whose held-out accuracy is highest (ties: the smaller)."""
    best = max(run["accuracy"] for run in runs.values())
    return min(lr for lr, run in runs.items() if run["accuracy"] == best)


def _transfer(protocol, model, options, results):
    from keras_vit.data import load_source

    source = load_source(protocol.dataset, protocol.split, options["data_dir"])
    if _vit(model, protocol).num_classes == source.num_classes:
        logits, labels = _predict(model, source, options,
                                  f"{protocol.title}: {source.num_examples} images")
        return {"top1": 100 * float((logits.argmax(-1) == labels).mean()), "images": len(labels),
                "fine_tuned": False}
    init = _init_path(options["given"], results.folder)
    base = _run_config(protocol.config, options, init=init, data_dir=options["data_dir"])
    rates = _learning_rates(base, options)
    sweep = {}
    if len(rates) > 1:
        for lr in rates:
            run = _fine_tune(results, f"{protocol.name}/lr-{lr}/held-out", init,
                             base.replace(base_lr=lr, eval_split=protocol.held_out), options)
            sweep[lr] = run
        lr = _chosen(sweep)
    else:
        lr = rates[0]
    final = _fine_tune(results, f"{protocol.name}/lr-{lr}/test", init,
                       base.replace(base_lr=lr, eval_split=protocol.split), options)
    return {"top1": final["accuracy"], "lr": lr, "steps": base.steps, "fine_tuned": True,
            **({"held_out": {str(k): v["accuracy"] for k, v in sweep.items()}} if sweep else {})}


def vtab_task_names(tasks=None):
    """The VTAB-1k tasks to run: all 19 (None), or those named."""
    from keras_vit.data.vtab import VTAB_TASKS
    from keras_vit.data.vtab import vtab_task

    if tasks is None:
        return list(VTAB_TASKS)
    if isinstance(tasks, str):
        tasks = [task.strip() for task in tasks.split(",") if task.strip()]
    return [vtab_task(task).name for task in tasks]


def _vtab(protocol, model, options, results):
    """VTAB-1k: each task fine-tuned and tested; the means of each group and
    of all tasks (the VTAB paper's, and the ViT paper's Fig. 2)."""
    from keras_vit.data.vtab import vtab_task

    _vit(model, protocol)
    init = _init_path(options["given"], results.folder)
    tasks = vtab_task_names(options["tasks"])
    scores = {}
    for index, name in enumerate(tasks):
        task = vtab_task(name)
        if options["verbose"]:
            print(f"VTAB-1k task {index + 1} of {len(tasks)}: {task.title} ({task.group})")
        base = _run_config(protocol.config, options, init=init, dataset=f"vtab/{name}",
                           data_dir=options["data_dir"])
        rates = _learning_rates(base, options)
        sweep = {}
        if len(rates) > 1:
            for lr in rates:
                sweep[lr] = _fine_tune(results, f"vtab1k/{name}/lr-{lr}/val200", init,
                                       base.replace(base_lr=lr, train_split="train800",
                                                    eval_split="val200"), options)
            lr = _chosen(sweep)
        else:
            lr = rates[0]
        final = _fine_tune(results, f"vtab1k/{name}/lr-{lr}/test", init,
                           base.replace(base_lr=lr, train_split="train800val200", eval_split="test"),
                           options)
        scores[name] = {"top1": final["accuracy"], "lr": lr, "group": task.group,
                        **({"val200": {str(k): v["accuracy"] for k, v in sweep.items()}} if sweep else {})}
    return {"tasks": scores, **vtab_means(scores)}


def vtab_means(scores):
    """``{"natural": mean, "specialized": mean, "structured": mean, "mean":
    mean of all}`` of ``{task: {"top1": accuracy, "group": group}}``; a
    group without tasks is left out. The overall mean is over the tasks, as
    VTAB reports it."""
    from keras_vit.data.vtab import GROUPS

    means = {}
    for group in GROUPS:
        values = [s["top1"] for s in scores.values() if s["group"] == group]
        if values:
            means[group] = float(np.mean(values))
    means["mean"] = float(np.mean([s["top1"] for s in scores.values()]))
    return means


# -- frozen features ----------------------------------------------------------------

def _features(model, source, options, title):
    """Frozen features (what the head reads) of `source`, and its labels."""
    from keras_vit.training.scoring import feature_extractor

    return _predict(feature_extractor(model), source, options, title, vit=model)


def _probe(protocol, model, options, results):
    from keras_vit.data import load_source
    from keras_vit.image_text import ImageTextModel

    if isinstance(model, ImageTextModel):  # its image embeddings
        model = model.image_model

    dataset = _dataset(protocol, options)
    parts = {}
    for role, split in (("train", options["train_split"]), ("test", options["split"])):
        if (dataset, split) not in options["features"]:  # k-NN and the probe read the same
            source = load_source(dataset, split, options["data_dir"])
            options["features"][dataset, split] = _features(
                model, source, options, f"features ({role}): {source.num_examples} images of {dataset}")
        parts[role] = options["features"][dataset, split]
    (x, y), (test_x, test_y) = parts["train"], parts["test"]
    if protocol.method == "knn":
        k = min(options["k"], len(x))
        return {"top1": 100 * metrics.knn_accuracy(x, y, test_x, test_y, k, options["temperature"]),
                "k": k, "temperature": options["temperature"], "dataset": dataset}
    probe = metrics.linear_probe(x, y, test_x, test_y)
    return {"top1": 100 * probe["accuracy"], "C": probe["C"],
            "held_out": 100 * probe["validation_accuracy"], "dataset": dataset}


def _dataset(protocol, options):
    if not options["dataset"]:
        raise ValueError(f"--benchmark {protocol.name} runs on the dataset given with --dataset "
                         "(a TFDS name, 'vtab/<task>', 'digits' or an image folder).")
    return options["dataset"]


def _zero_shot(protocol, model, options, results):
    from keras_vit.data import load_source
    from keras_vit.image_text import ImageTextModel
    from keras_vit.zero_shot import zero_shot_classifier

    if not isinstance(model, ImageTextModel):
        raise ValueError(f"--benchmark zero_shot needs an image-text model (CLIP, SigLIP); this is a "
                         f"{type(model).__name__}.")
    dataset = _dataset(protocol, options)
    source = load_source(dataset, options["split"], options["data_dir"])
    names = source.class_names
    if names and len(names) == 1000 and all(n[:1] == "n" and n[1:].isdigit() for n in names):
        # ImageNet's datasets name WordNet ids: the prompts take each class's first English name
        from keras_vit.released import imagenet1k_class_names

        names = [name.split(",")[0] for name in imagenet1k_class_names()]
    if not names:
        raise ValueError(f"{dataset} names no classes: zero-shot classification needs the class "
                         "names to write its prompts.")
    classifier = zero_shot_classifier(model, names, options["templates"])
    logits, labels = _predict(classifier, source, options,
                              f"zero-shot: {source.num_examples} images of {dataset}")
    return {"top1": 100 * metrics.top_k_accuracy(logits, labels, 1),
            "top5": 100 * metrics.top_k_accuracy(logits, labels, min(5, logits.shape[1])),
            "dataset": dataset, "templates": options["templates"]}


_METHODS = {"classify": _classify, "transfer": _transfer, "vtab": _vtab, "knn": _probe,
            "linear": _probe, "zero_shot": _zero_shot}


def _fingerprint(model):
    """A model given as an object, named in the settings by its name and a
    hash of its weights: another model in the same folder is refused, never
    scored with the first one's results."""
    import hashlib

    import keras

    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(weight)).tobytes())
    return f"{model.name} (weights sha256 {digest.hexdigest()[:16]})"


def evaluate_protocols(model, protocols, out, *, published_as=None, dataset=None, split="test",
                       train_split="train", data_dir=None, batch_size=64, tasks=None, sweep=False,
                       lr_grid=None, finetune=None, k=20, temperature=0.07, templates="imagenet",
                       verbose=1):
    """Runs the evaluation `protocols` on `model`; writes ``results.json`` and
    ``results.md`` into `out` and returns the results.

    Args:
        model: a ViT or `ImageTextModel`, or what `keras_vit.load_model`
            reads (a ``.keras`` file, a checkpoint, a released name). The
            fine-tuning protocols start from it (saved into `out` as
            ``evaluated_model.keras`` when it is a model).
        protocols: names of `PROTOCOLS` (a list or ``"a,b"``).
        out: the folder of the results (and of the fine-tuning runs); an
            evaluation there with the same arguments is continued.
        published_as: the released name whose published numbers the table
            quotes (default: `model`, when it is a released name).
        dataset: the dataset of ``knn``, ``linear`` and ``zero_shot``.
        split: its split that is tested.
        train_split: its split of labelled features (``knn``, ``linear``).
        data_dir: TFDS's data folder (prepared copies).
        batch_size: images per forward pass.
        tasks: VTAB-1k tasks to run (default all 19; ``"digits"`` is the
            embedded digits carved the same way).
        sweep: sweep the learning rate (``lr_grid``, default the config's:
            0.001, 0.003, 0.01, 0.03) on the held-out split (VTAB: train on
            train800, choose on val200), then train with the chosen one.
        finetune: `keras_vit.training.RunConfig` fields over the paper's
            fine-tuning settings, to scale them down for a small machine,
            e.g. ``{"steps": 100, "batch_size": 64, "image_size": 224}``.
        k: the k-NN's neighbours.
        temperature: the k-NN's vote temperature.
        templates: the zero-shot prompts (``"imagenet"``: CLIP's 80).
        verbose: progress bars and the runs' logs.
    Returns: ``{"settings": ..., "parts": ..., "benchmarks": {name: scores}}``
        (``"benchmarks"``: the protocols' scores, the key results.json has
        always had)
        as written to ``results.json``.

    Examples:
        ```python
        from keras_vit import ViT
        from keras_vit.evaluation import evaluate_protocols

        model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                    num_classes=0)
        results = evaluate_protocols(model, "knn,linear", "eval/tiny", dataset="digits", verbose=0)
        print(sorted(results["benchmarks"]))   # -> ['knn', 'linear']
        ```
    """
    from keras_vit.image_text import ImageTextModel
    from keras_vit.loading import load_model

    names = check_protocols(protocols)
    given = model
    if isinstance(model, (str, pathlib.Path)):  # a checkpoint of two towers: both for zero-shot
        model = load_model(str(model), model_class=ImageTextModel if "zero_shot" in names else None)
    if published_as is None and isinstance(given, str):
        published_as = given
    settings = dict(model=str(given) if isinstance(given, (str, pathlib.Path)) else _fingerprint(model),
                    dataset=dataset, split=split, train_split=train_split, tasks=tasks, sweep=sweep,
                    lr_grid=list(lr_grid) if lr_grid else None, finetune=dict(finetune or {}), k=k,
                    temperature=temperature, templates=templates)
    options = dict(settings, data_dir=data_dir, batch_size=batch_size, verbose=verbose,
                   finetune=dict(finetune or {}), given=given,
                   features={})  # what a pass over a dataset gave, for the protocols that share it
    results = Results(out, settings)
    for name in names:
        protocol = PROTOCOLS[name]
        if name in results.data["benchmarks"]:
            continue
        start = time.perf_counter()
        scores = _METHODS[protocol.method](protocol, model, options, results)
        scores["seconds"] = round(time.perf_counter() - start, 1)
        results.set_scores(name, scores)
    write_table(results.data, results.folder / TABLE, published_as)
    return results.data


# Deprecated names, kept for one version (CHANGELOG.md): the protocols were
# called benchmarks, as the speed scripts of benchmarks/ still are.
Benchmark = Protocol
BENCHMARKS = PROTOCOLS


def evaluate_benchmarks(model, benchmarks, out, **options):
    """Deprecated: `evaluate_protocols`."""
    warnings.warn("keras_vit.evaluation.evaluate_benchmarks is deprecated; use "
                  "keras_vit.evaluation.evaluate_protocols (the same arguments, `benchmarks` named "
                  "`protocols`).", DeprecationWarning, stacklevel=2)
    return evaluate_protocols(model, benchmarks, out, **options)


# -- the table ---------------------------------------------------------------------

_METRICS = {"top1": "top-1", "top5": "top-5", "real": "ReaL"}


def table_rows(data, published_as=None):
    """``[(protocol, metric, ours, published, difference, source)]`` of a
    results dict; published numbers are those of `published_as`."""
    numbers = published_numbers()
    quoted = numbers["models"].get(published_as or "", {})
    rows = []

    def quote(key, metric):
        for entry in quoted.get(key, []):
            if entry.get("metric", "top1") == metric:
                return entry["value"], entry["source"]
        return None, None

    for name, scores in data["benchmarks"].items():
        protocol = PROTOCOLS[name]
        if protocol.method == "vtab":
            for task, task_scores in scores["tasks"].items():
                rows.append((f"VTAB-1k {task}", "top-1", task_scores["top1"], None, None))
            for group in ("natural", "specialized", "structured"):
                if group in scores:
                    rows.append((f"VTAB-1k {group}", "mean", scores[group], None, None))
            value, source = quote("vtab1k", "top1")
            rows.append(("VTAB-1k", "mean", scores["mean"], value, source))
            continue
        for metric in ("real", "top1", "top5"):
            if metric not in scores:
                continue
            key = "imagenet_real" if metric == "real" else (
                "imagenet" if name == "imagenet_real" else name)
            value, source = quote(key, "top5" if metric == "top5" else "top1")
            title = protocol.title if protocol.method not in ("knn", "linear", "zero_shot") \
                else f"{protocol.title} ({scores['dataset']})"
            rows.append((title, _METRICS[metric], scores[metric], value, source))
    return [(title, metric, ours, published, None if published is None else ours - published, source)
            for title, metric, ours, published, source in rows]


def write_table(data, path, published_as=None):
    """``results.md``: our number beside the published one (where the model
    has one), with the difference and the source."""
    numbers = published_numbers()
    rows = table_rows(data, published_as)
    lines = [f"# Evaluation of {data['settings']['model']}", "",
             "| benchmark | metric | ours (%) | published (%) | difference | source |",
             "|---|---|---:|---:|---:|---|"]
    for benchmark, metric, ours, published, difference, source in rows:
        lines.append(f"| {benchmark} | {metric} | {ours:.2f} | "
                     f"{'' if published is None else f'{published:.2f}'} | "
                     f"{'' if difference is None else f'{difference:+.2f}'} | {source or ''} |")
    cited = sorted({row[5] for row in rows if row[5]})
    if cited:
        lines += ["", "Sources:", ""] + [f"- {key}: {numbers['sources'][key]}" for key in cited]
    elif published_as:
        lines += ["", f"No published numbers for {published_as} in keras_vit's table."]
    pathlib.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
