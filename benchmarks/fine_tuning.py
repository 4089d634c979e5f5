"""Fine-tuning that fits (docs/fine_tuning.md): every method on the embedded digits, on this
process's KERAS_BACKEND.

The base is the demo's pre-trained model (the ``digits`` config, trained first unless
``--pretrained`` names one) with a new zero-initialised head, as fine-tuning to a new task starts.
Each method fine-tunes it with one recipe and the same steps (``--digits``: the ``digits-finetune``
config at the demo's length; ``--vtab``: VTAB-1k's protocol, ``keras-vit evaluate --benchmark
vtab1k --tasks digits --adapter ...``, its settings scaled down), for each seed: full
fine-tuning, the head alone, LoRA and DoRA of rank 8, VPT-shallow and VPT-deep of 10 prompts.

For each method: the trainable parameters, the held-out accuracy of each seed and their mean, the
seconds of one training step (``train_on_batch`` of one batch, timed after warm-up, the methods
in turn, in the same rounds) and the adapter file's size against the whole model's.

    .venv/bin/python benchmarks/fine_tuning.py --digits --vtab --json out.json
"""

import argparse
import json
import os
import pathlib
import statistics
import tempfile

import numpy as np

# method -> its RunConfig fields (the full fine-tuning has none)
METHODS = {"full": {}, "head": {"adapter": "head"},
           "lora": {"adapter": "lora", "rank": 8}, "dora": {"adapter": "dora", "rank": 8},
           "vpt-shallow": {"adapter": "vpt-shallow", "prompts": 10},
           "vpt-deep": {"adapter": "vpt-deep", "prompts": 10}}
# the demo's fine-tuning length (recipes/demo.py's FINETUNE_LENGTH)
DIGITS_LENGTH = {"steps": 120, "warmup_steps": 12, "checkpoint_every": 120}
# VTAB-1k's settings (ft-vtab1k: SGD momentum, lr 0.01, cosine, clip 1) scaled down to the digits
VTAB_SCALED = {"image_size": 32, "batch_size": 64, "accum_steps": 1, "steps": 200, "warmup_steps": 20}


def _short(args):
    """Every run cut to ``--steps`` (a check of the script), or nothing."""
    if args.steps is None:
        return {}
    return {"steps": args.steps, "warmup_steps": 1, "checkpoint_every": args.steps}


def base_model(args, work):
    """The path of the base: the pre-trained model with a new zero head."""
    import keras_vit
    from keras_vit.training import resolve_config
    from keras_vit.training import train

    pretrained = args.pretrained
    if pretrained is None:
        train(resolve_config("digits", {"few_shot": [], **_short(args)}), os.path.join(work, "pretrain"), verbose=0)
        pretrained = os.path.join(work, "pretrain", "model.keras")
    base = keras_vit.load_model(pretrained).with_config(skip=("head",))
    path = os.path.join(work, "base.keras")
    base.save(path)
    return path


def digits(args, base, work):
    """Each method's runs of the ``digits-finetune`` recipe: ``{method: {"seeds":
    [{"seed", "accuracy"}], "mean_accuracy", "trainable_params", "adapter_bytes",
    "model_bytes"}}``."""
    from keras_vit.training import resolve_config
    from keras_vit.training import train

    table = {}
    for method, fields in METHODS.items():
        rows = []
        for seed in args.seeds:
            config = resolve_config("digits-finetune", {"init": base, "seed": seed, "few_shot": [],
                                                        **DIGITS_LENGTH, **_short(args), **fields})
            workdir = os.path.join(work, f"digits-{method}-{seed}")
            model, results = train(config, workdir, verbose=0)
            rows.append({"seed": seed, "accuracy": results["test_accuracy"]})
            print(f"digits, {method}, seed {seed}: held-out accuracy {results['test_accuracy']:.4f}", flush=True)
        adapters = os.path.join(workdir, "adapters.safetensors")
        table[method] = {"seeds": rows, "mean_accuracy": statistics.mean(r["accuracy"] for r in rows),
                         "trainable_params": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
                         "total_params": int(model.count_params()),
                         "adapter_bytes": os.path.getsize(adapters) if os.path.exists(adapters) else None,
                         "model_bytes": os.path.getsize(os.path.join(workdir, "model.keras"))}
    return table


def step_seconds(args, base):
    """``{method: seconds}``: the median seconds of one training step of the
    ``digits-finetune`` recipe's batch, each method's model adapted as its
    run adapts it, timed in the same rounds, the methods in turn."""
    import keras_vit
    from keras_vit.training import resolve_config
    from keras_vit.training.run import adapted_for_run
    from keras_vit.training.run import build_loss
    from keras_vit.training.run import build_optimizer

    models = {}
    for method, fields in METHODS.items():
        config = resolve_config("digits-finetune", {"init": base, **DIGITS_LENGTH, **fields})
        model = adapted_for_run(keras_vit.load_model(base, image_size=config.image_size), config)
        model.compile(optimizer=build_optimizer(config), loss=build_loss(config))
        models[method] = model
    rng = np.random.default_rng(0)
    size = config.image_size
    images = rng.uniform(-1, 1, (config.batch_size, size, size, 3)).astype("float32")
    labels = np.eye(10, dtype="float32")[rng.integers(0, 10, config.batch_size)]
    from throughput import training_steps_by_round  # beside this file

    seconds = training_steps_by_round(models, images, labels, args.warmup, args.runs, args.rounds)
    return {method: statistics.median(values) for method, values in seconds.items()}


def vtab(args, base, work):
    """Each method in VTAB-1k's protocol on the digits task (`VTAB_SCALED`):
    ``{method: {"seeds": [{"seed", "accuracy"}], "mean_accuracy"}}``."""
    from keras_vit.evaluation import evaluate_protocols

    table = {}
    for method, fields in METHODS.items():
        rows = []
        for seed in args.seeds:
            out = os.path.join(work, f"vtab-{method}-{seed}")
            results = evaluate_protocols(base, "vtab1k", out, tasks=["digits"],
                                         finetune={**VTAB_SCALED, **_short(args), **fields, "seed": seed},
                                         verbose=0)
            accuracy = results["benchmarks"]["vtab1k"]["tasks"]["digits"]["top1"] / 100  # reported in percent
            rows.append({"seed": seed, "accuracy": accuracy})
            print(f"vtab1k digits, {method}, seed {seed}: {accuracy:.4f}", flush=True)
        table[method] = {"seeds": rows, "mean_accuracy": statistics.mean(r["accuracy"] for r in rows)}
    return table


def validate(doc):
    """Raises AssertionError naming what is wrong unless `doc` is this
    script's ``--json`` output: the machine, every method's seeds and their
    mean, the steps' seconds."""
    assert doc.get("benchmark") == "fine_tuning.py", "not a fine_tuning.py result"
    for key in ("date", "machine", "backend", "settings"):
        assert key in doc, f"no {key!r}"
    assert doc["machine"].get("cpu_info", {}).get("kind"), "the CPU is not named"
    assert "digits" in doc or "vtab" in doc, "neither part was run"
    for part in ("digits", "vtab"):
        for method, row in doc.get(part, {}).items():
            assert method in METHODS, method
            values = [seed["accuracy"] for seed in row["seeds"]]
            assert values and all(0 <= v <= 1 for v in values), (part, method)
            assert abs(row["mean_accuracy"] - statistics.mean(values)) <= 1e-12, (part, method)
    if "digits" in doc:
        assert set(doc["step_seconds"]) == set(doc["digits"]) and min(doc["step_seconds"].values()) > 0
        for method, row in doc["digits"].items():
            assert 0 < row["trainable_params"] <= row["total_params"], method
            assert (row["adapter_bytes"] is None) == (method == "full"), method


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--digits", action="store_true", help="the digits-finetune recipe, and the step times")
    parser.add_argument("--vtab", action="store_true", help="VTAB-1k's protocol on the digits task")
    parser.add_argument("--pretrained", help="the pre-trained model (default: train the digits config)")
    parser.add_argument("--seeds", default=[0, 1, 2], type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, help="every run's steps (a check of the script; default: "
                        "the recipes')")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not (args.digits or args.vtab):
        parser.error("give --digits, --vtab or both")
    from throughput import keras_result  # beside this file: the machine's record

    doc = keras_result("fine_tuning.py", {
        "methods": METHODS, "digits_length": DIGITS_LENGTH, "vtab_scaled": VTAB_SCALED,
        "pretrained": args.pretrained or "the digits config's model", "seeds": args.seeds,
        "warmup": args.warmup, "runs": args.runs, "rounds": args.rounds, "steps": args.steps})
    with tempfile.TemporaryDirectory(prefix="keras_vit_fine_tuning_") as work:
        base = base_model(args, work)
        if args.digits:
            doc["digits"] = digits(args, base, work)
            doc["step_seconds"] = step_seconds(args, base)
            for method, row in doc["digits"].items():
                size = "-" if row["adapter_bytes"] is None else f"{row['adapter_bytes'] / row['model_bytes']:.1%}"
                print(f"digits, {method}: {row['trainable_params']:,} trainable, mean held-out accuracy "
                      f"{row['mean_accuracy']:.4f}, {doc['step_seconds'][method] * 1000:.0f} ms per step, "
                      f"adapters {size} of the model", flush=True)
        if args.vtab:
            doc["vtab"] = vtab(args, base, work)
    if args.json:
        validate(doc)
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
