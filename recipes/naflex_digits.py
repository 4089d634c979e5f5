"""Native resolution (NaFlex) against squashing, on digits of many shapes.

The embedded digits, each stretched to an aspect ratio of its own between
1:3 and 3:1 (`load_source("digits_stretched", ...)`), train the `digits`
config's ViT twice from scratch, with the same steps, optimizer and patch
budget (16 patches of 4x4 pixels):

1. NaFlex (`--max-num-patches 16`): each digit, or its training crop, keeps
   its aspect ratio and becomes at most 16 patches (a wide digit a wide
   grid); the position table, learned at 4x4, is resized to each grid.
2. Squashed: each digit resized to a 16x16 square, 4x4 patches, as a
   fixed-size ViT takes it.

Both are evaluated on the 360 held-out digits, stretched the same way;
`WORKDIR/results.json` records both accuracies, `WORKDIR/naflex/` and
`WORKDIR/squashed/` the runs. No download; any backend
(KERAS_BACKEND=tensorflow|jax|torch).

    python recipes/naflex_digits.py --workdir naflex_output
"""

import argparse
import pathlib
import shutil
import time

from keras_vit.startup import quiet_start

if __name__ == "__main__":  # the program, not a test that loads this file
    quiet_start()  # before Keras imports its backend

import keras

from keras_vit.io import files
from keras_vit.training import resolve_config
from keras_vit.training import train


def run(workdir, steps=800, max_num_patches=16, verbose=2, **settings):
    """Trains the NaFlex and the squashed model on the stretched digits and
    writes ``workdir/results.json``; returns its dict. `settings`: other
    run settings over the `digits` config's for both runs (`RunConfig`
    fields, e.g. ``batch_size``, ``model_args``)."""
    workdir = pathlib.Path(workdir)
    start = time.perf_counter()
    results = {"backend": keras.backend.backend(), "steps": steps, "max_num_patches": max_num_patches,
               "image_size": 16}
    for name, budget in (("naflex", max_num_patches), ("squashed", None)):
        shutil.rmtree(workdir / name, ignore_errors=True)  # the recipe's own earlier run
        config = resolve_config("digits", {
            "dataset": "digits_stretched", "image_size": 16, "max_num_patches": budget,
            "steps": steps, "warmup_steps": min(100, steps // 10), "checkpoint_every": steps,
            "few_shot": [], **settings})
        _, run_results = train(config, workdir / name, verbose=verbose)
        results[f"{name}_accuracy"] = run_results["test_accuracy"]
        results[f"{name}_train_seconds"] = run_results["train_seconds"]
        how = (f"at most {budget} patches, each digit at its own aspect ratio" if budget
               else "squashed to 16x16 px, 16 patches")
        print(f"{name}: held-out accuracy {run_results['test_accuracy']:.3f} ({how}; "
              f"{run_results['train_seconds']:.0f} s of training)")
    results["seconds"] = round(time.perf_counter() - start, 1)
    files.write_json(workdir / "results.json", results, indent=2)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="naflex_output", help="where the runs and results.json go")
    parser.add_argument("--steps", type=int, default=800, help="updates of each run (fewer for a quick look)")
    parser.add_argument("--max-num-patches", type=int, default=16,
                        help="NaFlex's patch budget (the squashed model has 16 patches)")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2, help="Keras fit verbosity")
    args = parser.parse_args()
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}")
    results = run(args.workdir, args.steps, args.max_num_patches, args.verbose)
    print(f"held-out accuracy on the stretched digits: NaFlex {results['naflex_accuracy']:.3f}, "
          f"squashed {results['squashed_accuracy']:.3f}; {results['seconds']:.0f} s in all; "
          f"{pathlib.Path(args.workdir) / 'results.json'}")


if __name__ == "__main__":
    main()
