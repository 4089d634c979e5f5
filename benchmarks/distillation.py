"""Distillation's two measurements (docs/distillation.md), on this process's KERAS_BACKEND.

``--cost``: the seconds of one training step (``train_on_batch``) of a student alone and of the
same student distilled from a frozen teacher (`keras_vit.distillation.Distiller`, DeiT's hard
kind: the teacher's forward pass on the batch at its own size, the student's two heads),
timed in the same rounds, the two alternating; the ratio with / without.

``--digits``: DeiT's recipe on the embedded digits (the ``digits-deit`` config). A teacher is
trained first (the ``digits`` config: the demo's model) unless ``--teacher`` names one; then the
student for the same steps with and without it, for each seed. It reports each seed's held-out
accuracy and the mean difference.

    .venv/bin/python benchmarks/distillation.py --cost --student vit_ti16 --teacher vit_s16 \\
        --image-size 224 --batch-size 16 --digits --json out.json
"""

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _throughput():
    """benchmarks/throughput.py as a module: its CPU naming and machine line."""
    spec = importlib.util.spec_from_file_location("throughput", ROOT / "benchmarks" / "throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_cost(args):
    """``{"alone_s": ..., "with_teacher_s": ..., "ratio": ...}``: the median
    seconds per training step of the student alone and distilled, each
    round timing `args.runs` steps of both, alternating which goes first."""
    import keras

    from keras_vit import ViT
    from keras_vit.distillation import Distiller

    layers = {} if args.num_layers is None else {"num_layers": args.num_layers}
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (args.batch_size, args.image_size, args.image_size, 3)).astype("float32")
    labels = np.eye(args.num_classes, dtype="float32")[rng.integers(0, args.num_classes, args.batch_size)]

    def student(**extra):
        return ViT.from_preset(args.student, image_size=args.image_size, num_classes=args.num_classes,
                               **layers, **extra)

    alone = student()
    alone.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    teacher = ViT.from_preset(args.teacher, image_size=args.teacher_image_size or args.image_size,
                              num_classes=args.num_classes, **layers)
    distiller = Distiller(student(distillation_token=True), teacher, kind="hard")
    distiller.compile(optimizer=keras.optimizers.AdamW(1e-4))
    models = {"alone": alone, "with_teacher": distiller}
    seconds = _throughput().training_steps_by_round(models, images, labels, args.warmup, args.runs,
                                                    args.rounds)
    result = {f"{name}_s": statistics.median(values) for name, values in seconds.items()}
    result.update({f"{name}_rounds_s": values for name, values in seconds.items()})
    result["ratio"] = result["with_teacher_s"] / result["alone_s"]
    return result


def digits(args, work):
    """The digits experiment: the teacher's accuracy, and per seed the
    student's held-out accuracy alone and distilled, and their mean difference."""
    from keras_vit.training import resolve_config
    from keras_vit.training import train

    short = {} if args.digits_steps is None else {"steps": args.digits_steps, "warmup_steps": 1,
                                                 "checkpoint_every": args.digits_steps}
    teacher, teacher_accuracy = args.teacher_path, None
    if teacher is None:
        config = resolve_config("digits", {"few_shot": [], **short})
        _, results = train(config, os.path.join(work, "teacher"), verbose=0)
        teacher, teacher_accuracy = os.path.join(work, "teacher", "model.keras"), results["test_accuracy"]
    seeds = []
    for seed in args.seeds:
        accuracies = {}
        for name, overrides in (("alone", {"distillation": None}), ("with_teacher", {"teacher": teacher})):
            config = resolve_config("digits-deit", {"seed": seed, **short}).replace(**overrides)
            _, results = train(config, os.path.join(work, f"{name}-{seed}"), verbose=0)
            accuracies[name] = results["test_accuracy"]
        seeds.append({"seed": seed, **accuracies, "difference": accuracies["with_teacher"] - accuracies["alone"]})
        print(f"digits, seed {seed}: alone {accuracies['alone']:.4f}, with the teacher "
              f"{accuracies['with_teacher']:.4f}", flush=True)
    differences = [row["difference"] for row in seeds]
    return {"teacher": args.teacher_path or "the digits config's model", "teacher_accuracy": teacher_accuracy,
            "steps": short.get("steps", resolve_config("digits-deit", {}).steps), "seeds": seeds,
            "mean_difference": statistics.mean(differences)}


def validate(doc):
    """Raises AssertionError naming what is wrong unless `doc` is this
    script's ``--json`` output: the machine and each part's numbers, the
    ratio the quotient of its seconds, the mean the seeds' differences'."""
    assert doc.get("benchmark") == "distillation.py", "not a distillation.py result"
    for key in ("date", "machine", "backend", "settings"):
        assert key in doc, f"no {key!r}"
    assert doc["machine"].get("cpu_info", {}).get("kind"), "the CPU is not named"
    assert "cost" in doc or "digits" in doc, "neither part was run"
    if "cost" in doc:
        cost = doc["cost"]
        assert cost["alone_s"] > 0 and cost["with_teacher_s"] > 0, cost
        assert abs(cost["ratio"] - cost["with_teacher_s"] / cost["alone_s"]) <= 1e-9 * cost["ratio"], cost
    if "digits" in doc:
        runs = doc["digits"]["seeds"]
        assert runs, "no seed"
        for row in runs:
            assert 0 <= row["alone"] <= 1 and 0 <= row["with_teacher"] <= 1, row
            assert abs(row["difference"] - (row["with_teacher"] - row["alone"])) <= 1e-12, row
        mean = statistics.mean(row["difference"] for row in runs)
        assert abs(doc["digits"]["mean_difference"] - mean) <= 1e-12, doc["digits"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cost", action="store_true", help="time a training step with and without a teacher")
    parser.add_argument("--student", default="vit_ti16")
    parser.add_argument("--teacher", default="vit_s16", help="--cost: the teacher's preset")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--teacher-image-size", type=int, help="--cost: the teacher's (default: the student's)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--num-layers", type=int, help="both models cut to N blocks (a check of the script)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--digits", action="store_true", help="the digits experiment")
    parser.add_argument("--teacher-path", help="--digits: a trained teacher (default: train the digits config)")
    parser.add_argument("--seeds", default=[0, 1, 2], type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--digits-steps", type=int, help="--digits: every run's steps (default: the configs')")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not (args.cost or args.digits):
        parser.error("give --cost, --digits or both")
    doc = _throughput().keras_result("distillation.py", {
        key: getattr(args, key) for key in ("student", "teacher", "image_size", "teacher_image_size",
                                            "batch_size", "num_classes", "num_layers", "warmup", "runs",
                                            "rounds", "seeds", "digits_steps")})
    if args.cost:
        doc["cost"] = cost = step_cost(args)
        print(f"training step, {args.student} at {args.image_size} px, batch {args.batch_size}: alone "
              f"{cost['alone_s']:.3f} s, with a {args.teacher} teacher (hard) {cost['with_teacher_s']:.3f} s, "
              f"{cost['ratio']:.2f}x", flush=True)
    if args.digits:
        with tempfile.TemporaryDirectory(prefix="keras_vit_distillation_") as work:
            doc["digits"] = result = digits(args, work)
        print(f"digits, {len(result['seeds'])} seeds: mean difference (with the teacher - alone) "
              f"{result['mean_difference']:+.4f}", flush=True)
    if args.json:
        validate(doc)
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
