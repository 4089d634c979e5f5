"""Latency of the deployable artifact, per runtime.

ViT-B/16 at 224 px (seeded random weights, 1000 class names) exported with
the preprocessing inside (`ViT.export(..., preprocessing=True)`: uint8
photos of any size in, logits and probabilities out), fed uint8 photos of
480x640 pixels at batch 1 and batch 8, in each runtime: onnxruntime,
OpenVINO (at float32 precision), TensorFlow's SavedModel, the LiteRT
interpreter and a ``torch.export`` program. One child process per backend
exports (TensorFlow: onnx, openvino, tf_saved_model, litert; PyTorch:
torch), then this process times every artifact in the same rounds, so that
the ratios compare the runtimes on one machine in one run. The artifacts
are loaded as ``keras-vit predict`` loads them (`keras_vit.export.runtime`),
without Keras.

    .venv/bin/python benchmarks/serving_latency.py --json benchmarks/results/DATE-CPU-serving.json

Flags: ``--model`` (a preset), ``--image-size``, ``--photo HxW``,
``--batches`` (comma list), ``--formats`` (comma list), ``--runs`` per
round, ``--rounds``, ``--num-layers N`` (the model cut to N blocks: a check
of the harness, not a measurement), ``--json PATH``.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXPORTED_FROM = {"onnx": "tensorflow", "openvino": "tensorflow", "tf_saved_model": "tensorflow",
                 "litert": "tensorflow", "torch": "torch"}
ARTIFACT = {"onnx": "vit.onnx", "openvino": "vit.xml", "tf_saved_model": "saved_model",
            "litert": "vit.tflite", "torch": "vit.pt2"}
RUNTIME = {"onnx": "onnxruntime", "openvino": "OpenVINO (f32)", "tf_saved_model": "TF SavedModel",
           "litert": "LiteRT", "torch": "torch.export"}


def _throughput():
    """benchmarks/throughput.py as a module: its CPU naming and machine line."""
    spec = importlib.util.spec_from_file_location("throughput", ROOT / "benchmarks" / "throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export(args, formats, out):
    """In a child on this process's KERAS_BACKEND: the model exported with
    preprocessing to each of `formats` under `out`."""
    import keras

    from keras_vit import ViT

    overrides = {} if args.num_layers is None else {"num_layers": args.num_layers}
    model = ViT.from_preset(args.model, pretrained=False, image_size=args.image_size,
                            class_names=[f"class {i}" for i in range(1000)], **overrides)
    rng = np.random.default_rng(0)
    head = model.get_layer("head")
    head.kernel.assign(rng.normal(0, 0.02, head.kernel.shape).astype("float32"))  # zeros by default
    for fmt in formats:
        start = time.perf_counter()
        model.export(str(out / ARTIFACT[fmt]), format=fmt, verbose=False, preprocessing=True)
        print(f"exported {fmt} from {keras.backend.backend()} in {time.perf_counter() - start:.0f} s",
              flush=True)


def time_artifacts(args, paths):
    """``{format: {batch: [median ms per round]}}`` of each artifact at `paths`
    on uint8 photos, the formats taking turns within each round."""
    from keras_vit.export import runtime

    height, width = args.photo
    rng = np.random.default_rng(1)
    photos = {b: rng.integers(0, 256, (b, height, width, 3), dtype=np.uint8) for b in args.batches}
    runs = {fmt: runtime.load(path) for fmt, path in paths.items()}
    for fmt, run in runs.items():  # a first call each: compilation, allocation
        for batch in args.batches:
            run(photos[batch])
    times = {fmt: {batch: [] for batch in args.batches} for fmt in runs}
    for _ in range(args.rounds):
        for fmt, run in runs.items():
            for batch in args.batches:
                seconds = []
                for _ in range(args.runs):
                    start = time.perf_counter()
                    run(photos[batch])
                    seconds.append(time.perf_counter() - start)
                times[fmt][batch].append(1000 * statistics.median(seconds))
    return times


def validate(doc):
    """Raises AssertionError naming what is wrong unless `doc` is this
    script's ``--json`` output: the machine, the settings, and per format
    and batch a row whose rate and ratio are its milliseconds'."""
    assert doc.get("benchmark") == "serving_latency.py", "not a serving_latency.py result"
    for key in ("date", "machine", "settings", "results"):
        assert key in doc, f"no {key!r}"
    assert doc["machine"].get("cpu_info", {}).get("kind"), "the CPU is not named"
    settings = doc["settings"]
    reference = {}
    for row in doc["results"]:
        assert row["format"] in ARTIFACT and row["batch"] in settings["batches"], row
        assert row["ms"] > 0 and len(row["ms_rounds"]) == settings["rounds"], row
        assert abs(row["images_per_s"] - 1000 * row["batch"] / row["ms"]) <= 1e-6 * row["images_per_s"], row
        reference.setdefault(row["batch"], row)  # the first format's row of each batch
        base = reference[row["batch"]]
        ratio = row[f"vs_{base['format']}"]
        assert abs(ratio - base["ms"] / row["ms"]) <= 1e-9 * ratio, row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vit_b16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--photo", default="480x640", type=lambda s: tuple(int(v) for v in s.split("x")))
    parser.add_argument("--batches", default="1,8", type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--formats", default=",".join(ARTIFACT), type=lambda s: s.split(","))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-layers", type=int)
    parser.add_argument("--json")
    parser.add_argument("--export-to", help=argparse.SUPPRESS)  # the child's folder
    args = parser.parse_args(argv)
    unknown = sorted(set(args.formats) - set(ARTIFACT))
    if unknown:
        parser.error(f"unknown formats {unknown}: choose from {', '.join(ARTIFACT)}")
    if args.export_to:
        return export(args, args.formats, pathlib.Path(args.export_to))

    bench = _throughput()
    machine = bench.machine_record(("keras", "tensorflow-cpu", "torch", "onnxruntime", "openvino"))
    print(bench.machine_line(machine), flush=True)
    with tempfile.TemporaryDirectory(prefix="keras_vit_serving_") as work:
        for backend in dict.fromkeys(EXPORTED_FROM[fmt] for fmt in args.formats):
            formats = [fmt for fmt in args.formats if EXPORTED_FROM[fmt] == backend]
            child = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                     "--formats", ",".join(formats), "--export-to", work]
            subprocess.run(child, check=True, env=dict(os.environ, KERAS_BACKEND=backend))
        times = time_artifacts(args, {fmt: os.path.join(work, ARTIFACT[fmt]) for fmt in args.formats})
    reference = args.formats[0]
    results = []
    for fmt in args.formats:
        for batch in args.batches:
            ms = statistics.median(times[fmt][batch])
            base = statistics.median(times[reference][batch])
            results.append({"format": fmt, "runtime": RUNTIME[fmt], "exported_from": EXPORTED_FROM[fmt],
                            "batch": batch, "ms": ms, "ms_rounds": times[fmt][batch],
                            "images_per_s": 1000 * batch / ms, f"vs_{reference}": base / ms})
    print(f"{args.model} at {args.image_size} px, uint8 photos {args.photo[0]}x{args.photo[1]} in "
          f"(resized in the graph), median of {args.rounds} rounds of {args.runs} runs")
    print(f"{'runtime':18s} {'from':11s}" + "".join(f" {'batch ' + str(b) + ' ms':>12s}" for b in args.batches)
          + f" {'img/s at ' + str(args.batches[-1]):>13s} {'vs ' + RUNTIME[reference]:>16s}")
    for fmt in args.formats:
        rows = [r for r in results if r["format"] == fmt]
        print(f"{RUNTIME[fmt]:18s} {EXPORTED_FROM[fmt]:11s}" + "".join(f" {r['ms']:12.1f}" for r in rows)
              + f" {rows[-1]['images_per_s']:13.1f} {rows[-1][f'vs_{reference}']:15.2f}x")
    if args.json:
        doc = {"benchmark": "serving_latency.py", "date": time.strftime("%Y-%m-%d"), "machine": machine,
               "settings": {"model": args.model, "image_size": args.image_size, "photo": list(args.photo),
                            "batches": args.batches, "runs": args.runs, "rounds": args.rounds,
                            "num_layers": args.num_layers, "preprocessing": True},
               "results": results}
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
