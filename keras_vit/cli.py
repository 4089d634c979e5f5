"""The keras-vit command line.

    keras-vit presets                               the model variants (Table 1)
    keras-vit pretrained vit_b16                    released weights that load by name
    keras-vit configs                               the training recipes (Tables 3, 4)
    keras-vit pretrain --config digits --workdir runs/digits
    keras-vit finetune --config ft-cifar10 --init ViT-B_16.npz --workdir runs/c10
    keras-vit masked-patch --config digits-mpp --workdir runs/mpp
    keras-vit evaluate runs/digits/model.keras --dataset digits --split test --few-shot 1,5,10
    keras-vit predict runs/digits/model.keras photo.png --top-k 3
    keras-vit predict vit_b16.augreg_in21k_ft_in1k_224 photo.jpg
    keras-vit predict hf://google/vit-base-patch16-224 photo.jpg
    keras-vit convert ViT-B_16.npz vit_b16.keras --image-size 384
    keras-vit export runs/digits/model.keras vit.onnx --format onnx
    keras-vit explain runs/digits/model.keras photo.png --out runs/digits/explain
    keras-vit zero-shot hf://openai/clip-vit-base-patch32 photo.jpg --labels cat,dog,car
    keras-vit segment --init demo_output/finetune/model.keras --workdir runs/segment

Choose the backend with ``KERAS_BACKEND=tensorflow|jax|torch``. The
command starts without TensorFlow's start-up log lines
(`keras_vit.startup.quiet_start`); ``keras-vit --verbose COMMAND ...`` keeps
them. Keras's progress bars are drawn on a terminal and written as plain
lines into a file or a pipe (`keras_vit.startup.progress_verbose`).

Parsing the command line starts no backend: the parser is built from
`keras_vit.arguments`, the recipes' flags (`keras_vit.training.configs.FLAGS`,
which imports no Keras either) are added when their command is parsed, and
each command imports what it runs. So ``keras-vit --help`` and every
command's ``--help`` print without importing Keras.
"""

import argparse
import functools
import gc
import importlib.util
import pathlib
import sys

import keras_vit

from keras_vit import extras
from keras_vit.arguments import ADAPTERS
from keras_vit.arguments import BACKENDS
from keras_vit.arguments import DTYPES
from keras_vit.arguments import int_at_least
from keras_vit.arguments import merge_counts as _merge_counts
from keras_vit.arguments import parse_floats
from keras_vit.arguments import parse_ints
from keras_vit.arguments import parse_key_values
from keras_vit.arguments import parse_shots
from keras_vit.export.int8 import QUANTIZE_MODES
from keras_vit.startup import progress_verbose
from keras_vit.startup import quiet_start
from keras_vit.weights.formats import FORMATS

# evaluate --benchmark's choices (the evaluation protocols, keras_vit.evaluation.PROTOCOLS), named here
# so that --help imports no NumPy; tests/test_evaluation.py keeps them equal.
BENCHMARK_NAMES = ("imagenet", "imagenet_real", "imagenet_v2", "imagenet_sketch", "imagenet_a",
                   "imagenet_r", "cifar10", "cifar100", "pets", "flowers", "vtab1k", "knn", "linear",
                   "zero_shot")

MODEL_HELP = ("a .keras model; a checkpoint file or folder; a URL (hf://owner/repo, https://, "
              "gs://); or a released name (keras-vit pretrained)")

RECIPES = {
    "pretrain": ("pretrain", "digits", "Pre-train a ViT (Table 3: Adam, lr-multiplied weight "
                 "decay, linear warm-up, clip 1; sigmoid or softmax cross-entropy)."),
    "finetune": ("finetune", "digits-finetune", "Fine-tune a ViT (Table 4: SGD momentum 0.9, "
                 "cosine decay, clip 1, higher resolution with 2-D interpolated position "
                 "embeddings, zero-initialised head)."),
    "masked-patch": ("masked_patch", "digits-mpp", "Masked patch prediction (Appendix B.1.2): "
                     "50% of patches corrupted, each predicts its 3-bit mean colour."),
}


_positive_int = int_at_least(1, "a positive integer")
_non_negative_int = int_at_least(0, "an integer >= 0")


def add_recipe_flags(parser, default_config):
    """The flags every recipe shares: one per row of
    `keras_vit.training.configs.FLAGS` (each overrides the named config's
    field), and the flags of the run's placement."""
    from keras_vit.training.configs import ADAPTING
    from keras_vit.training.configs import FLAGS
    from keras_vit.training.configs import DISTILLATION
    from keras_vit.training.configs import SCALE_OUT

    parser.add_argument("--config", default=default_config,
                        help=f"a named config (keras-vit configs lists them); default {default_config}")
    parser.add_argument("--workdir", required=True,
                        help="the run's directory: config.json, checkpoints/, tensorboard/, "
                        "log.csv, model.keras, results.json. The same command again resumes.")
    groups = {
        "overrides of the config": parser.add_argument_group("overrides of the config"),
        SCALE_OUT: parser.add_argument_group(
            SCALE_OUT,
            "TensorFlow: tpu, mirrored, multi_worker (reads TF_CONFIG); JAX: data_parallel, "
            "model_parallel; torch: none. The global batch, learning rate and steps mean the same "
            "run under every strategy."),
        DISTILLATION: parser.add_argument_group(
            DISTILLATION,
            "A student learns from the labels and from a frozen teacher over the same classes (DeiT, "
            "Touvron et al. 2021): the loss is (1 - A) x the labels' cross-entropy + A x the "
            "distillation term. The teacher gets the images at its own size and pixel scaling. "
            "The saved model.keras is the student alone."),
        ADAPTING: parser.add_argument_group(
            ADAPTING,
            "Train a few weights of the --init model, the rest frozen but the head (LoRA, Hu et al. "
            "2022; DoRA, Liu et al. 2024; VPT, Jia et al. 2022). model.keras is the adapted model "
            "(LoRA and DoRA merged into the kernels); adapters.safetensors beside it holds what was "
            "trained, which keras-vit predict BASE --adapters FILE and keras_vit.load_adapters "
            "put on the base again."),
    }
    for flag in FLAGS.values():
        groups[flag.group].add_argument(flag.option, type=flag.parse, choices=flag.choices,
                                        metavar=flag.metavar, help=flag.help.replace("%", "%%"))
    scale = groups[SCALE_OUT]
    scale.add_argument("--tpu", help="tpu: the TPU name or address; 'local' on a Cloud TPU VM "
                       "(default: the TPU_NAME environment variable)")
    scale.add_argument("--coordinator", metavar="HOST:PORT",
                       help="JAX, several hosts: the address of process 0")
    scale.add_argument("--num-processes", type=_positive_int, help="JAX, several hosts: processes in all")
    scale.add_argument("--process-id", type=_non_negative_int, help="JAX, several hosts: this process, 0..N-1")
    scale.add_argument("--model-axis", type=_positive_int,
                       help="model_parallel: devices that split each layer's heads and MLP (default 2)")
    scale.add_argument("--host-devices", type=_positive_int,
                       help="split the host CPU into N logical devices (to try a strategy on a CPU)")


def _overrides(args):
    from keras_vit.training.configs import FLAGS

    return {field: getattr(args, field) for field in FLAGS}


def _run_recipe(args):
    from keras_vit import distribution
    from keras_vit.training import resolve_config
    from keras_vit.training import train

    config = resolve_config(args.config, _overrides(args), kind=RECIPES[args.command][0])
    if config.kind == "finetune" and not config.init:
        print("note: no --init given: fine-tuning starts from random weights.", file=sys.stderr)
    topology = distribution.setup(
        config.strategy, tpu=args.tpu, coordinator=args.coordinator,
        num_processes=args.num_processes, process_id=args.process_id, model_axis=args.model_axis,
        host_devices=args.host_devices,
    )
    _, results = train(config, args.workdir, verbose=progress_verbose(), topology=topology)
    for key, value in results.items():
        print(f"{key}: {value}")
    if "test_accuracy" in results:
        print(f"test accuracy: {results['test_accuracy']:.3f}")
    return 0


def _load_model(path, image_size=None, num_classes=None, dtype=None, model_class=None, adapters=None):
    """`keras_vit.load_model` (imported when a command runs, not for
    ``--help``); with `adapters` (``--adapters FILE``), the adapters put on
    it by `keras_vit.load_adapters`."""
    from keras_vit.loading import load_model

    model = load_model(path, image_size, num_classes, dtype=dtype, model_class=model_class)
    if adapters is None:
        return model
    from keras_vit.adapters import load_adapters

    return load_adapters(model, adapters)


def _adapters_flag(sub):
    sub.add_argument("--adapters", metavar="FILE",
                     help="an adapter file put on MODEL, the base it was trained on: the "
                     "adapters.safetensors of keras-vit finetune --adapter, or what "
                     "model.save_adapters wrote (docs/fine_tuning.md)")


def at_dtype(model, dtype):
    """`model` (a ViT) computing under the dtype policy `dtype` (``--dtype``:
    ``mixed_bfloat16`` computes in bfloat16 with float32 weights); the same
    model when `dtype` is None or its own."""
    from keras_vit import ViT

    if dtype is None or model.dtype_policy.name == dtype:
        return model
    if not isinstance(model, ViT):
        raise ValueError(f"--dtype applies to a ViT; this model is a {type(model).__name__}.")
    return model.with_config(dtype=dtype)


def _classifier(model, path):
    """`model` if it is a ViT with a per-image classification head."""
    from keras_vit import ViT

    if not isinstance(model, ViT) or not model.num_classes or model.pooling == "none":
        raise ValueError(
            f"{path} has no per-image classification head ({type(model).__name__}, output "
            f"shape {model.output_shape}). `predict` needs a classifier: fine-tune it first "
            "(`keras-vit finetune --init ...`)."
        )
    return model


def _presets(args):
    import keras_vit

    for name, preset in keras_vit.presets().items():
        print(f"{name:14s} {preset['paper_name']:14s} {preset['params']:>13,d}  {preset['description']}")
    return 0


def _pretrained(args):
    import keras_vit

    entries = keras_vit.pretrained(args.preset)
    print(f"{'name':46s} {'size':>4s} {'classes':>7s} {'top-1':>6s}  pre-training / source")
    for entry in entries:
        top1 = f"{entry.top1:.2f}" if entry.top1 is not None else "-"
        metric = "" if entry.metric == "top-1" else f" ({entry.metric})"
        print(f"{entry.name:46s} {entry.image_size:4d} {entry.num_classes:7d} {top1:>6s}  "
              f"{entry.pretraining}; {entry.url}{metric}")
    return 0


def _configs(args):
    from keras_vit.training import CONFIGS

    for name, config in CONFIGS.items():
        print(f"{name:14s} {config.kind:12s} {config.model:12s} {config.dataset:18s} "
              f"{config.steps:>9,d} steps  batch {config.batch_size:<5d} lr {config.base_lr:g}"
              f"  ({config.paper})")
    return 0


def _predict(args):
    import keras

    from keras_vit.export import runtime

    if runtime.is_artifact(args.model):
        return _predict_artifact(args)
    model = _classifier(_load_model(args.model, dtype=args.dtype, adapters=args.adapters), args.model)
    model, images = _model_inputs(model, args.images, args.max_num_patches, args.model)
    logits = keras.ops.convert_to_numpy(model.predict(images, batch_size=args.batch_size, verbose=0))
    names = getattr(model, "class_names", None)
    _print_top(args.images, _probabilities(logits, model.config.head_activation), names, args.top_k)
    return 0


def _predict_artifact(args):
    """``keras-vit predict ARTIFACT IMAGE...``: the artifact run in its own
    runtime (`keras_vit.export.runtime`), on the images decoded at their own
    sizes where its preprocessing is inside, else read as `read_images`
    reads them for the model it was exported from (its record:
    `keras_vit.export.artifact_info`)."""
    import types

    import numpy as np

    from keras_vit.data import read_images
    from keras_vit.data import read_pixels
    from keras_vit.export import artifact_info
    from keras_vit.export import runtime

    for flag, value in (("--dtype", args.dtype), ("--max-num-patches", args.max_num_patches)):
        if value is not None:
            raise ValueError(f"{flag} does not apply to {args.model}, an exported artifact: its "
                             "dtype and input are fixed. Leave it out, or predict with the model.")
    info = artifact_info(args.model)
    record = info["keras_vit"]
    if record.get("naflex"):
        raise ValueError(f"{args.model} is a NaFlex model's artifact (three inputs, NaFlex's "
                         "sequences): predict runs artifacts of one image input. Predict with the "
                         "model itself, which reads NaFlex sequences for you.")
    run = runtime.load(args.model)
    if record["preprocessing"]:  # each image at its own size: one per call
        logits = np.concatenate([run(pixels[None])["logits"] for pixels in read_pixels(args.images)])
    else:
        scaling = types.SimpleNamespace(pixel_scale=record["pixel_scale"],
                                        pixel_offset=record["pixel_offset"])
        images = read_images(args.images, image_size=record["image_size"], model=scaling)
        if record["data_format"] == "channels_first":
            images = images.transpose(0, 3, 1, 2)
        logits = np.concatenate([run(images[i:i + args.batch_size])["logits"]
                                 for i in range(0, len(images), args.batch_size)])
    probabilities = _probabilities(np.asarray(logits, np.float64), record.get("activation", "softmax"))
    _print_top(args.images, probabilities, info["class_names"], args.top_k)
    return 0


def _model_inputs(model, paths, max_num_patches, name):
    """`model` (a ViT) and the image files `paths` as it takes them:
    resized to its size, or, with `max_num_patches` (``--max-num-patches``)
    or for a NaFlex model, at their own sizes and aspect ratios as NaFlex
    sequences (`keras_vit.naflex_inputs`), the model made NaFlex of that
    budget (`_naflex_model`)."""
    from keras_vit.data import read_images

    model = _naflex_model(model, max_num_patches, name)
    return model, read_images(paths, model=model)


def _naflex_model(model, max_num_patches, name):
    """`model` (a ViT, named `name`) made NaFlex of budget `max_num_patches`
    (``--max-num-patches``; `ViT.with_naflex`, the same weights); as it is
    for None or its own budget. A hybrid is refused: NaFlex cuts pixels."""
    if max_num_patches is not None and max_num_patches != model.max_num_patches:
        if model.resnet_block_units is not None:
            raise ValueError(
                f"--max-num-patches does not apply to {name}, a hybrid (ResNet + ViT) model: NaFlex "
                "cuts images into pixel patches, and a hybrid embeds ResNet features of a square "
                "image. Leave --max-num-patches out; the images are then resized to "
                f"{model.image_size[0]}x{model.image_size[1]}.")
        model = model.with_naflex(max_num_patches)
    return model


def _probabilities(logits, activation):
    """The classes' probabilities of `logits` by the head's `activation`
    (``ViTConfig.head_activation``): a softmax over the classes, or SigLIP's
    sigmoid, each class on its own."""
    import numpy as np

    logits = np.asarray(logits, np.float64)
    if activation == "sigmoid":
        return 1 / (1 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _print_top(paths, probabilities, names, k):
    import numpy as np

    for path, row in zip(paths, probabilities):
        top = np.argsort(row)[::-1][:k]
        labels = ", ".join(f"{names[i] if names else i} ({row[i]:.1%})" for i in top)
        print(f"{path}: {labels}")


def _zero_shot(args):
    import keras
    import numpy as np

    from keras_vit.image_text import ImageTextModel
    from keras_vit.zero_shot import zero_shot_classifier

    labels = [label.strip() for label in args.labels.split(",") if label.strip()]
    if not labels:
        raise ValueError("--labels is empty: give the class names, comma-separated (--labels cat,dog).")
    model = _load_model(args.model, model_class=ImageTextModel)
    classifier = at_dtype(zero_shot_classifier(model, labels, args.templates), args.dtype)
    classifier, images = _model_inputs(classifier, args.images, args.max_num_patches, args.model)
    logits = keras.ops.convert_to_numpy(classifier.predict(images, batch_size=args.batch_size,
                                                           verbose=0)).astype(np.float64)
    # SigLIP: each class on its own, a sigmoid; CLIP: a softmax over the classes
    _print_top(args.images, _probabilities(logits, classifier.config.head_activation), labels,
               args.top_k)
    return 0


def _explain(args):
    from keras_vit.io import files
    from keras_vit.data import read_images
    from keras_vit.explain import write_report

    out = files.output_folder(args.out, "--out")
    model = _load_model(args.model, args.image_size, dtype=args.dtype)
    images = read_images(args.images, model=model)
    titles = [pathlib.Path(p).name for p in args.images]
    written = write_report(model, images, out, titles=titles, batch_size=args.batch_size,
                           token_merging=args.token_merging)
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0


def _protocols(args):
    """``evaluate --benchmark``: `keras_vit.evaluation.evaluate_protocols`."""
    from keras_vit.adapters import merged
    from keras_vit.evaluation import evaluate_protocols
    from keras_vit.evaluation.protocols import TABLE
    from keras_vit.evaluation.protocols import check_protocols
    from keras_vit.io import files

    if not args.out:
        raise ValueError("--benchmark writes results.json and results.md: give the folder with --out.")
    check_protocols(args.benchmark)  # before the model is read (or downloaded)
    out = files.output_folder(args.out, "--out")
    changed = args.image_size or args.dtype or args.max_num_patches or args.adapters
    model = _naflex_model(_load_model(args.model, args.image_size, dtype=args.dtype, adapters=args.adapters),
                          args.max_num_patches, args.model) if changed else args.model
    if args.adapters:  # the runs start from it, LoRA and DoRA merged
        model = merged(model)
    results = evaluate_protocols(
        model, args.benchmark, out, published_as=args.published_as, dataset=args.dataset,
        split=args.split, train_split=args.train_split, data_dir=args.data_dir,
        batch_size=args.batch_size, tasks=args.tasks, sweep=args.sweep, lr_grid=args.lr_grid,
        finetune={**args.finetune, **{name: getattr(args, name) for name in ("adapter", "rank", "alpha", "prompts")
                                      if getattr(args, name) is not None}},
        k=args.k, temperature=args.temperature, templates=args.templates)
    print((pathlib.Path(out) / TABLE).read_text(encoding="utf-8"))
    print(f"results: {pathlib.Path(out) / 'results.json'} ({len(results['benchmarks'])} protocols)")
    return 0


def _evaluate(args):
    from keras_vit import ViT
    from keras_vit import data as vit_data
    from keras_vit.training import scoring
    from keras_vit.training.run import pixel_scaling

    if args.benchmark:
        return _protocols(args)
    model = _load_model(args.model, args.image_size, dtype=args.dtype, adapters=args.adapters)
    if not isinstance(model, ViT):
        raise ValueError(
            f"{args.model} is a {type(model).__name__}, not a ViT: fine-tune it first "
            "(`keras-vit finetune --init ...`), then evaluate the ViT."
        )
    model = _naflex_model(model, args.max_num_patches, args.model)
    # a NaFlex model's images keep their sizes: its patch size and budget (pixel_scaling)
    size = {} if model.naflex else dict(image_size=tuple(model.image_size))
    source = vit_data.load_source(args.dataset, args.split, args.data_dir)
    scaling = pixel_scaling(model)
    test = vit_data.input_pipeline(source, **size, batch_size=args.batch_size, training=False, **scaling)
    if model.num_classes:
        if model.num_classes != source.num_classes:
            raise ValueError(
                f"The model has {model.num_classes} classes, {args.dataset} has "
                f"{source.num_classes}: top-1 accuracy needs the same classes. Use --few-shot "
                "alone to evaluate the features."
            )
        print(f"test accuracy: {scoring.accuracy(model, test):.3f}")
    if args.few_shot:
        train = vit_data.input_pipeline(
            vit_data.load_source(args.dataset, args.train_split, args.data_dir),
            **size, batch_size=args.batch_size, training=False, **scaling,
        )
        results = scoring.few_shot_accuracy(model, train, test, source.num_classes,
                                               shots=args.few_shot)
        for shots, value in results.items():
            print(f"{shots}-shot linear accuracy: {value:.3f}")
    return 0


def _segment(args):
    from keras_vit import ViT
    from keras_vit.io import files
    from keras_vit.dense import segment_digits

    files.output_folder(args.workdir, "--workdir")  # before the model is read (or downloaded)
    model = _load_model(args.init, args.image_size)
    if not isinstance(model, ViT):
        raise ValueError(f"{args.init} holds a {type(model).__name__}, not a ViT: the probe reads "
                         "a ViT's feature maps. Give a ViT (a .keras ViT, a checkpoint or a "
                         "released name).")
    results, paths = segment_digits(
        model, args.workdir, layers=args.layers or None, norm=not args.no_norm,
        freeze=not args.train_backbone, epochs=args.epochs, train_canvases=args.train_canvases,
        test_canvases=args.test_canvases, batch_size=args.batch_size,
        learning_rate=args.learning_rate, digits_per_canvas=args.digits_per_canvas, seed=args.seed,
        verbose=args.verbose)
    print(f"held-out mean IoU: {results['mean_iou']:.3f} (background-only baseline "
          f"{results['baseline_mean_iou']:.3f}); pixel accuracy {results['pixel_accuracy']:.3f} "
          f"(baseline {results['baseline_pixel_accuracy']:.3f}); blocks {results['blocks']}, "
          f"{results['seconds']:.0f} s")
    print(f"results: {paths['results']}")
    print(f"picture: {paths['picture']}")
    return 0


def _convert(args):
    from keras_vit import ViT
    from keras_vit.io import files
    from keras_vit.weights import check_output

    # the output checked before the input is read (and perhaps downloaded)
    if args.format == "keras":
        files.output_file(args.output, "output", (".keras",))
    else:
        check_output(args.output, args.format)
    model = _load_model(args.checkpoint, args.image_size, args.num_classes)
    if args.format == "keras":
        model.save(args.output)
    elif not isinstance(model, ViT):
        raise ValueError(f"{args.checkpoint} holds a {type(model).__name__}, not a ViT; "
                         f"--format {args.format} writes a ViT.")
    else:
        model.save_checkpoint(args.output, checkpoint_format=args.format)
    print(f"wrote {args.output} ({args.format}): {type(model).__name__}, "
          f"{model.count_params():,} parameters, {model.image_size[0]}x{model.image_size[1]} px")
    return 0


def _export(args):
    import keras

    from keras_vit.adapters import merged
    from keras_vit.io import files
    from keras_vit.export import routes
    from keras_vit.export.int8 import check_mode

    backend = keras.backend.backend()
    routes.route_traced(args.format, args.quantize).exporter(backend)  # a backend it is exported from
    suffix = routes.route(args.format).suffix
    if suffix:
        files.output_file(args.output, "output", (suffix,))  # before loading
    else:  # an artifact that is a folder
        files.output_folder(args.output, "output")
    check_mode(args.format, args.quantize, calibrated=args.calibration is not None)
    model = _load_model(args.model, args.image_size, adapters=args.adapters)
    if args.adapters:  # LoRA and DoRA merged: the same logits, a plain ViT
        model = merged(model)
    calibration = None
    if args.calibration is not None:
        calibration = _calibration_images(model, args.calibration, args.calibration_split,
                                          args.calibration_count)
    model.export(args.output, format=args.format, verbose=False, quantize=args.quantize,
                 calibration_images=calibration, preprocessing=args.preprocessing,
                 dynamic_image_size=args.dynamic_image_size)
    quantized = "" if args.quantize is None else f", {args.quantize} " + (
        f"calibrated on {len(calibration)} images" if calibration is not None else "dynamic")
    if args.preprocessing:
        takes = "uint8 images of any size in, logits and probabilities out"
    elif args.dynamic_image_size:
        takes = (f"float images of any height and width in (multiples of {model.patch_size[0]}x"
                 f"{model.patch_size[1]}), the position embeddings resampled in the graph")
    else:
        takes = f"{'x'.join(map(str, model.input_shape[1:]))} input"
    print(f"wrote {args.output}: {args.format} from {backend}{quantized}, {type(model).__name__} "
          f"{takes}, dynamic batch")
    return 0


def _calibration_images(model, data, split, count):
    """The first `count` images of `data` as `model` takes them: of a
    dataset (``digits``, a TFDS name or an image folder; its `split`),
    resized and scaled as evaluation does, or of a ``.npy`` file, as they
    are (scaled already)."""
    import numpy as np

    if str(data).endswith(".npy"):
        if not pathlib.Path(data).is_file():
            raise FileNotFoundError(f"--calibration {data}: no such file.")
        try:
            return np.load(data, allow_pickle=False)[:count]
        except ValueError as error:
            raise ValueError(f"--calibration {data} is not a .npy array of images ({error}).") from None
    from keras_vit import data as vit_data
    from keras_vit.training.run import pixel_scaling

    batches = vit_data.input_pipeline(data, split=split, image_size=tuple(model.image_size),
                                      batch_size=count, training=False, **pixel_scaling(model))
    images = next(iter(batches))[0].numpy()
    if model.config.data_format == "channels_first":
        images = images.transpose(0, 3, 1, 2)
    return images


def _import_package():
    """Imports the package's names, and with them Keras and its backend, as
    `keras_vit` does: with the cyclic collector off, which makes the import
    faster. A backend that is not installed raises a MissingDependency
    naming the ones that are."""
    try:
        keras_vit.ViT  # noqa: B018
    except ModuleNotFoundError as error:
        backend = (error.name or "").partition(".")[0]
        if backend not in BACKENDS:
            raise
        installed = [name for name in BACKENDS if importlib.util.find_spec(name) is not None]
        instead = (f"set KERAS_BACKEND to one that is ({', '.join(installed)}), or "
                   if installed else "")
        raise extras.MissingDependency(
            f"Keras's backend is {backend} (from KERAS_BACKEND, else ~/.keras/keras.json, else "
            f"tensorflow), which is not installed: {instead}{extras.install_command(backend)}",
            name=error.name) from None


class _Parser(argparse.ArgumentParser):
    """argparse with every error as one first line, ``keras-vit CMD: error:
    ...`` (exit status 2), as the commands' own errors are.

    A command whose flags need the package's modules is added with
    ``flags=``, a function that adds them: they are added when the command
    is parsed or its help printed (`add_flags`), so that the other commands'
    ``--help`` imports none of those modules.
    """

    def __init__(self, *args, flags=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._flags = flags

    def add_flags(self):
        """Adds the flags given as ``flags=``, once; returns the parser."""
        if self._flags is not None:
            flags, self._flags = self._flags, None
            flags(self)
        return self

    def parse_known_args(self, args=None, namespace=None):
        return super(_Parser, self.add_flags()).parse_known_args(args, namespace)

    def format_usage(self):
        return super(_Parser, self.add_flags()).format_usage()

    def format_help(self):
        return super(_Parser, self.add_flags()).format_help()

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\nRun `{self.prog} --help` for its flags.\n")


def _dtype_flag(sub):
    sub.add_argument("--dtype", choices=DTYPES, help="the dtype policy to compute in (default: "
                     "the model's own; mixed_bfloat16 is faster where the CPU has bfloat16 units, "
                     "docs/performance.md)")


def _classify_flags(sub):
    """The image files and flags of `predict` and `zero-shot`."""
    sub.add_argument("images", nargs="+", help="JPEG, PNG, BMP or GIF files")
    sub.add_argument("--top-k", type=_positive_int, default=5, help="classes to print per image")
    sub.add_argument("--batch-size", type=_positive_int, default=32, help="images per forward pass")
    _max_num_patches_flag(sub)
    _dtype_flag(sub)


def _max_num_patches_flag(sub):
    sub.add_argument("--max-num-patches", type=_positive_int, metavar="N",
                     help="NaFlex: each image at its own size and aspect ratio, resized to at most "
                     "N patches (the model made NaFlex with the same weights; docs/naflex.md)")


def _convert_flags(sub):
    sub.add_argument("checkpoint")
    sub.add_argument("output", help="path ending in .keras; with --format: a .npz file, a new "
                     "directory, or (timm) a .safetensors file")
    sub.add_argument("--format", choices=("keras", *FORMATS), default="keras",
                     help="what to write (default keras)")
    sub.add_argument("--image-size", type=_positive_int, help="resample the position embeddings")
    sub.add_argument("--num-classes", type=_positive_int, help="a new zero-initialised head")


def _add_listings(commands):
    """The commands that list presets, released checkpoints and training configs."""
    commands.add_parser("presets", help="list the model presets with parameter counts")
    sub = commands.add_parser(
        "pretrained", help="list the released checkpoints that load by name",
        description="Released weights that ViT.from_preset(name) and ViT.from_checkpoint(name) "
        "download, cache and load; predict, evaluate, explain and convert take the names too.")
    sub.add_argument("preset", nargs="?", help="only this preset, e.g. vit_b16 or ViT-B/16")
    commands.add_parser("configs", help="list the named training configs (Tables 3 and 4)")


def _add_recipes(commands):
    """The recipes' commands (`RECIPES`), whose flags are added when parsed."""
    for command, (_, default, description) in RECIPES.items():
        commands.add_parser(command, help=description.split(" (")[0], description=description,
                            flags=functools.partial(add_recipe_flags, default_config=default))


def _add_predict(commands):
    """``predict``: the top-k classes of image files."""
    from keras_vit.export.routes import ROUTES

    artifacts = ", ".join(r.suffix or f"a {r.title} folder" for r in ROUTES.values())
    sub = commands.add_parser("predict", help="classify image files",
                              description="Print the top-k classes of each image file. The "
                              "images are read, resized and scaled to [-1, 1] for you. MODEL may also "
                              f"be an artifact of keras-vit export ({artifacts}), run in its own runtime "
                              "with the class names it holds.")
    sub.add_argument("model", help=MODEL_HELP)
    _adapters_flag(sub)
    _classify_flags(sub)


def _add_zero_shot(commands):
    """``zero-shot``: image files classified into classes named on the command line."""
    sub = commands.add_parser(
        "zero-shot", help="classify image files into classes named here (CLIP, SigLIP)",
        description="Zero-shot classification (CLIP's Sec. 3.1.4): each label is put into the "
        "prompt templates, embedded by the text tower and averaged; each image's top labels are "
        "printed with CLIP's softmax or SigLIP's sigmoid probabilities.")
    sub.add_argument("model", help="a Hugging Face CLIPModel or SiglipModel folder (or hf://owner/"
                     "repo), or a .keras ImageTextModel")
    sub.add_argument("--labels", required=True, help="the class names, comma-separated")
    sub.add_argument("--templates", choices=("imagenet", "simple"), default="imagenet",
                     help="the CLIP paper's 80 ImageNet prompts (default) or open_clip's 7")
    _classify_flags(sub)


def _add_evaluate(commands):
    """``evaluate``: top-1 and few-shot accuracy on a dataset."""
    sub = commands.add_parser("evaluate", help="top-1 and few-shot accuracy on a dataset",
                              description="Top-1 accuracy of a model on a dataset split, and "
                              "optionally the paper's few-shot linear evaluation (Sec. 4.1).")
    sub.add_argument("model", help=MODEL_HELP)
    sub.add_argument("--dataset", default="digits", help="digits, a TFDS name or an image folder")
    sub.add_argument("--data-dir", help="TFDS data directory")
    sub.add_argument("--split", default="test", help="the split to evaluate on (TFDS syntax)")
    sub.add_argument("--train-split", default="train", help="where few-shot examples come from")
    sub.add_argument("--image-size", type=_positive_int, help="evaluate at this resolution")
    sub.add_argument("--batch-size", type=_positive_int, default=64, help="images per forward pass")
    sub.add_argument("--few-shot", type=parse_shots, metavar="K,K", help="e.g. 1,5,10,25")
    _adapters_flag(sub)
    _max_num_patches_flag(sub)
    _dtype_flag(sub)
    paper = sub.add_argument_group(
        "the paper's evaluation protocols (docs/evaluation.md)",
        "--benchmark runs named evaluation protocols and writes results.json and results.md (ours beside "
        "the published numbers) into --out; started again with the same flags, it continues.")
    paper.add_argument("--benchmark", metavar="NAME,NAME", help=f"any of: {', '.join(BENCHMARK_NAMES)}")
    paper.add_argument("--out", help="the folder of the results and of any fine-tuning runs")
    paper.add_argument("--tasks", metavar="TASK,TASK", help="vtab1k: the tasks (default all 19; "
                       "'digits' is the embedded digits carved as VTAB carves its tasks)")
    paper.add_argument("--sweep", action="store_true", help="fine-tuning: sweep the learning rate "
                       "(VTAB: train800, chosen on val200) instead of the paper's one setting")
    paper.add_argument("--lr-grid", type=parse_floats, metavar="LR,LR",
                       help="the sweep's rates (default 0.001,0.003,0.01,0.03)")
    paper.add_argument("--finetune", type=parse_key_values, default={}, metavar="KEY=VALUE,...",
                       help="fine-tuning settings over the paper's, for a small machine, e.g. "
                            "steps=200,batch_size=64,accum_steps=1,image_size=224")
    paper.add_argument("--adapter", choices=ADAPTERS,
                       help="fine-tuning: train only adapters, the rest frozen but the head "
                       "(keras-vit finetune --adapter; docs/fine_tuning.md)")
    paper.add_argument("--rank", type=_positive_int, metavar="R", help="--adapter lora, dora: the rank (default 8)")
    paper.add_argument("--alpha", type=float, metavar="A", help="--adapter lora, dora: the scale's alpha")
    paper.add_argument("--prompts", type=_positive_int, metavar="N",
                       help="--adapter vpt-shallow, vpt-deep: prompt tokens (default 10)")
    paper.add_argument("--published-as", metavar="NAME", help="quote the published numbers of this "
                       "released name (default: MODEL, when it is one)")
    paper.add_argument("--k", type=_positive_int, default=20, help="knn: neighbours that vote")
    paper.add_argument("--temperature", type=float, default=0.07, help="knn: the votes' temperature")
    paper.add_argument("--templates", choices=("imagenet", "simple"), default="imagenet",
                       help="zero_shot: CLIP's 80 ImageNet prompts or open_clip's 7")


def _add_explain(commands):
    """``explain``: the paper's Fig. 6 and 7 of a model."""
    sub = commands.add_parser(
        "explain", help="what the model learned, as the paper's pictures (Fig. 6, 7)",
        description="Writes attention rollout on the images (Fig. 6), mean attention distance "
        "(Fig. 7 right), position-embedding similarity (Fig. 7 centre) and the patch filters' "
        "principal components (Fig. 7 left) as PNGs, and the numbers as explain.json. "
        'Needs matplotlib: pip install "keras-vision-transformer[plots]".')
    sub.add_argument("model", help=MODEL_HELP)
    sub.add_argument("images", nargs="+", help="image files (PNG, JPEG, ...)")
    sub.add_argument("--out", required=True, help="folder for the PNGs and explain.json")
    sub.add_argument("--image-size", type=_positive_int, help="resolution for a checkpoint (default: its own)")
    sub.add_argument("--batch-size", type=_positive_int, default=32, help="images per forward pass")
    sub.add_argument("--token-merging", type=_merge_counts, metavar="R",
                     help="also draw token_merging.png: the patches each token holds with ToMe's "
                          "r tokens merged in every block (an int, or one per block: 8,8,4)")
    _dtype_flag(sub)


def _add_convert(commands):
    """``convert``: a checkpoint or model to another format."""
    sub = commands.add_parser("convert", help="a checkpoint or model to a .keras file, or to "
                              "vit_jax .npz, Hugging Face or timm files",
                              description="Read any checkpoint ViT.from_checkpoint reads (or a "
                              ".keras ViT) and write it as a .keras model (default) or, with "
                              "--format, as a vit_jax .npz, a Hugging Face ViT directory or a "
                              "timm .safetensors / hub directory (ViT.save_checkpoint).")
    _convert_flags(sub)


def _add_export(commands):
    """``export``: an inference artifact, int8 too (the formats, their
    backends and files from their records, `keras_vit.export.routes`)."""
    from keras_vit.export.routes import QUANTIZED_FORMATS
    from keras_vit.export.routes import ROUTES
    from keras_vit.export.routes import either

    sub = commands.add_parser(
        "export", help="a model as an inference artifact (" + ", ".join(r.title for r in ROUTES.values()) + ")",
        description="Export a model with Keras's model.export, traced from Keras's layers and "
        "ops alone; the batch axis stays dynamic. Formats by backend: "
        + ", ".join(f"{name} ({', '.join(r.exporters)})" for name, r in ROUTES.items())
        + ". docs/deploy.md lists what each exporter handles. --quantize int8 writes "
        f"{either(QUANTIZED_FORMATS)} quantized with onnxruntime's tools, for a fast CPU inference "
        "(on every backend).")
    sub.add_argument("model", help=MODEL_HELP)
    _adapters_flag(sub)
    sub.add_argument("output", help="the artifact: a folder for "
                     + either(name for name, r in ROUTES.items() if not r.suffix) + ", else a file ("
                     + ", ".join(r.suffix for r in ROUTES.values() if r.suffix) + ")")
    sub.add_argument("--format", required=True, choices=tuple(ROUTES))
    sub.add_argument("--image-size", type=_positive_int, help="resample the position embeddings first")
    sub.add_argument("--preprocessing", action="store_true",
                     help="images in, classes out: one input 'images', uint8 (batch, height, width, 3) "
                     "of any size, resized and scaled in the graph as predict does; outputs 'logits' "
                     "and 'probabilities'")
    sub.add_argument("--dynamic-image-size", action="store_true",
                     help="without --preprocessing: float images of any height and width, "
                     "multiples of the patch size, the position embeddings resampled in the graph "
                     "as --image-size resamples them (with it, the images are resized anyway)")
    sub.add_argument("--quantize", choices=QUANTIZE_MODES,
                     help="int8: the projections quantized with onnxruntime's tools, for a fast CPU "
                     f"inference (--format {either(QUANTIZED_FORMATS)}; docs/deploy.md)")
    sub.add_argument("--calibration", metavar="DATA",
                     help="with --quantize: measure the int8 inputs' scales on these images (static "
                     f"quantization; {either(n for n in QUANTIZED_FORMATS if ROUTES[n].supports.get('int8'))} "
                     "needs it): digits, a TFDS name, an image folder, or a "
                     ".npy file of images scaled as the model takes them")
    sub.add_argument("--calibration-split", default="train", metavar="SPLIT",
                     help="the split of --calibration's dataset (TFDS syntax; default train)")
    sub.add_argument("--calibration-count", type=_positive_int, default=256, metavar="N",
                     help="how many of --calibration's images, the first (default 256)")


def _add_segment(commands):
    """``segment``: a linear segmentation probe."""
    sub = commands.add_parser(
        "segment", help="a linear segmentation probe of a model's feature maps (DINOv3)",
        description="Trains DINOv3's linear segmentation probe (BatchNorm over the concatenated "
        "feature maps of some blocks, a 1x1 convolution to the classes, bilinear upsampling to "
        "the pixels) on canvases of the embedded digits at the model's image size, every pixel "
        "labelled with its digit or the background, the backbone frozen. Reports the mean IoU "
        "on canvases of the held-out digits against the background-only baseline, and writes "
        "results.json and segmentation.png (image, ground truth, prediction) into --workdir.")
    sub.add_argument("--init", required=True, help=MODEL_HELP)
    sub.add_argument("--workdir", required=True, help="where results.json and segmentation.png go")
    sub.add_argument("--layers", type=parse_ints, metavar="I,I",
                     help="the blocks whose maps are read, e.g. 2,5,8,11 or --layers=-2,-1 "
                     "(default: DINOv3's four evenly spaced blocks ending at the last)")
    sub.add_argument("--no-norm", action="store_true",
                     help="the blocks' tokens without the final LayerNorm")
    sub.add_argument("--train-backbone", action="store_true",
                     help="train the backbone with the head (default: frozen, a probe)")
    sub.add_argument("--epochs", type=_positive_int, default=6, help="passes over the canvases")
    sub.add_argument("--train-canvases", type=_positive_int, default=2000,
                     help="canvases of the 1437 training digits")
    sub.add_argument("--test-canvases", type=_positive_int, default=500,
                     help="canvases of the 360 held-out digits")
    sub.add_argument("--digits-per-canvas", type=_positive_int, default=3,
                     help="digits on each canvas, each in a cell of its own")
    sub.add_argument("--batch-size", type=_positive_int, default=64, help="canvases per update")
    sub.add_argument("--learning-rate", type=float, default=3e-2,
                     help="the peak learning rate of AdamW (warm-up, cosine decay)")
    sub.add_argument("--image-size", type=_positive_int,
                     help="resample the position embeddings first (the canvases' size)")
    sub.add_argument("--seed", type=_non_negative_int, default=0, help="the canvases' and the head's")
    sub.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2, help="Keras fit verbosity")


def build_parser():
    """The ``argparse`` parser of the ``keras-vit`` command and its
    subcommands. Its help is plain text, and building it imports no backend:
    the recipes' flags are added when their command is parsed or its help
    printed (or by the command's parser's `add_flags`)."""
    parser = _Parser(
        prog="keras-vit", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run keras-vit COMMAND --help for each command's flags. "
        "Backend: KERAS_BACKEND=tensorflow|jax|torch.",
    )
    parser.add_argument("--verbose", dest="logs", action="store_true",
                        help="keep TensorFlow's and absl's log lines (left out unless "
                        "TF_CPP_MIN_LOG_LEVEL is set); give it before COMMAND")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add in (_add_listings, _add_recipes, _add_predict, _add_zero_shot, _add_evaluate, _add_explain,
                _add_convert, _add_export, _add_segment):
        add(commands)
    return parser



HANDLERS = {"presets": _presets, "pretrained": _pretrained, "configs": _configs, "predict": _predict,
            "evaluate": _evaluate, "convert": _convert, "explain": _explain, "export": _export,
            "zero-shot": _zero_shot, "segment": _segment,
            **{command: _run_recipe for command in RECIPES}}


def main(argv=None):
    """Runs the ``keras-vit`` command.

    Args:
        argv: list of str or None. The arguments after the program name;
            ``None`` reads ``sys.argv``.

    Returns:
        int: the exit status.
    """
    parser = build_parser()
    return _command(parser, parser.parse_args(argv))


def _command(parser, args):
    """Runs the command `parser` parsed into `args`; returns its exit status."""
    try:
        _import_package()  # every command runs Keras
        return HANDLERS[args.command](args)
    except (ValueError, RuntimeError, OSError, ImportError) as error:  # what was given, and what to do
        parser.exit(2, f"keras-vit {args.command}: error: {_message(error)}\n")


def _message(error):
    """The error's text; an operating-system error the package did not word
    (a full disk, a permission) as its reason and path; a missing optional
    dependency with the extra that installs it (`keras_vit.extras`)."""
    if isinstance(error, OSError) and error.strerror and error.filename:
        return f"{error.filename}: {error.strerror}."
    if isinstance(error, ModuleNotFoundError):
        return str(extras.missing(error) or error)
    return str(error)


def run(argv=None):
    """Runs the ``keras-vit`` command as this process's program and exits
    with its status (the ``keras-vit`` entry point, ``python -m
    keras_vit.cli`` and the scripts in ``recipes/``).

    The command line is parsed first (parsing imports no backend); then the
    program starts quietly (`keras_vit.startup.quiet_start`: without
    TensorFlow's start-up lines, unless TF_CPP_MIN_LOG_LEVEL asks for
    them), or, given ``--verbose``, with the environment as it is.
    Before the interpreter shuts down, the objects still alive (Keras's, the
    backend's, TensorFlow's) are moved out of the cyclic collector's reach
    (`gc.freeze`): shutting down collects them otherwise, which takes seconds
    of every command and does nothing but free memory that the process gives
    back anyway. `main` leaves the environment and the collector alone, for
    callers that go on.

    Args:
        argv: list of str or None. As for `main`.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.logs:
        quiet_start()
    try:
        status = _command(parser, args)
    finally:
        gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    run()
