"""The main job, make demo: train a ViT the paper's way on embedded data.

1. Pre-trains a small ViT from scratch on scikit-learn's digits (the `digits`
   config: Adam with lr-multiplied weight decay, linear warm-up, cosine decay,
   global-norm clipping, Inception crops) at 16x16 pixels.
2. Fine-tunes it at 32x32 pixels (the `digits-finetune` config: the vit_jax
   update, SGD momentum 0.9 outside the learning rate, cosine, clip 1) with
   2-D interpolated position embeddings and a new zero-initialised head.
3. Evaluates both on the 360 held-out digits that training never sees, and
   the pre-trained features with the paper's few-shot linear evaluation.
4. Saves the fine-tuned model as `.keras`, reloads it (safe_mode) and
   classifies a few held-out digits with it.
5. Shows what it learned (`keras_vit.explain`, Fig. 6 and 7 of the paper):
   attention rollout on held-out digits and on photos that scikit-image
   ships, attention distance, position-embedding similarity and the patch
   filters, as PNGs in `demo_output/explain/`.
6. Runs the fine-tuned model faster without retraining: token merging
   (ToMe) at several r, each r's held-out accuracy and speed (ToMe's Fig. 4)
   in `demo_output/token_merging.json` and `token_merging_curve.png`, and
   ToMe's picture of the merged patches in `demo_output/explain/digits/`.

No download; runs on any backend (KERAS_BACKEND=tensorflow|jax|torch).
"""

import argparse
import json
import pathlib
import shutil
import time

from keras_vit.startup import quiet_start

if __name__ == "__main__":  # the program, not a test that loads this file
    quiet_start()  # before Keras imports its backend

import keras
import numpy as np

from keras_vit import data as vit_data
from keras_vit import explain
from keras_vit.training import resolve_config
from keras_vit.training import train


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="demo_output", help="where the two runs are written")
    parser.add_argument("--verbose", default=2, type=int, help="Keras fit verbosity (0, 1, 2)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "mixed_bfloat16", "mixed_float16"],
                        help="the Keras dtype policy both runs train under (mixed_bfloat16: bfloat16 "
                             "matmuls, where the CPU has avx512_bf16 or amx_bf16)")
    args = parser.parse_args()
    output = pathlib.Path(args.output)
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}")
    start = time.perf_counter()

    runs = {}
    for name, overrides in (
        ("pretrain", {"dtype": args.dtype}),
        ("finetune", {"init": str(output / "pretrain" / "model.keras"), "dtype": args.dtype}),
    ):
        workdir = output / name
        shutil.rmtree(workdir, ignore_errors=True)  # the demo's own earlier run
        config = resolve_config("digits" if name == "pretrain" else "digits-finetune", overrides)
        print(f"\n== {name}: config {config.name!r} ({config.paper}), "
              f"{config.image_size}x{config.image_size} px, {config.steps} steps, "
              f"batch {config.batch_size}, lr {config.base_lr} -> {workdir}")
        model, results = train(config, workdir, verbose=args.verbose)
        runs[name] = (model, results)
        grid = model.get_layer("position_embedding").grid_size
        print(f"{name}: {model.count_params():,} parameters, patch grid {grid[0]}x{grid[1]}, "
              f"{results['train_seconds']:.0f} s of training")
        for shots, value in results.get("few_shot", {}).items():
            print(f"{name}: {shots}-shot linear accuracy of the frozen features: {value:.3f}")
        print(f"test accuracy: {results['test_accuracy']:.3f}")

    model = runs["finetune"][0]
    path = output / "finetune" / "model.keras"
    reloaded = keras.saving.load_model(path, safe_mode=True)
    test = vit_data.load_source("digits", "test")
    images, labels = next(iter(vit_data.input_pipeline(test, image_size=model.image_size, batch_size=8,
                                                       training=False)))
    images = keras.ops.convert_to_numpy(images)
    labels = [test.class_names[i] for i in keras.ops.convert_to_numpy(labels).argmax(-1)]
    diff = np.abs(keras.ops.convert_to_numpy(reloaded(images)) - keras.ops.convert_to_numpy(model(images))).max()
    predicted = keras.ops.convert_to_numpy(reloaded(images)).argmax(-1)
    print(f"\nreloaded {path} with safe_mode=True: max |logit difference| {diff:.1e}; "
          f"first held-out digits read as {[reloaded.class_names[i] for i in predicted]}")
    show_what_it_learned(reloaded, images, labels, output / "explain")
    show_token_merging(reloaded, output)
    before, after = (runs[k][1]["test_accuracy"] for k in ("pretrain", "finetune"))
    print(f"held-out accuracy: {before:.3f} pre-trained at 16 px, {after:.3f} fine-tuned at 32 px; "
          f"{time.perf_counter() - start:.0f} s in all")


def show_what_it_learned(model, digits, labels, out):
    """Writes the explain pictures for held-out digits and for photos."""
    import skimage.data

    written = explain.write_report(model, digits, out / "digits", titles=[f"a {label}" for label in labels],
                                   token_merging=TOKEN_MERGING[2])
    photos = [getattr(skimage.data, name)() for name in ("astronaut", "coffee", "chelsea", "rocket")]
    size = model.image_size
    photos = np.stack([
        keras.ops.convert_to_numpy(keras.ops.image.resize(p.astype("float32"), size, antialias=True)) / 127.5 - 1
        for p in photos
    ])
    rollout = explain.attention_rollout(model, photos)
    figure = explain.plot_attention_rollout(photos, rollout, ["astronaut", "coffee", "chelsea", "rocket"])
    figure.savefig(out / "photos_attention_rollout.png", dpi=150)
    distance = np.asarray(json.loads(written["numbers"].read_text())["mean_attention_distance"])
    print(f"\nwhat the model learned (Fig. 6, 7): {', '.join(str(p) for p in written.values())}, "
          f"{out / 'photos_attention_rollout.png'}")
    print("mean attention distance per layer (pixels, mean over heads): "
          + ", ".join(f"{d:.1f}" for d in distance.mean(axis=1)))


# ToMe's r for the fine-tuned model: 64 patches and a [class] token, 4 blocks
TOKEN_MERGING = (0, 2, 4, 6, 8)


def show_token_merging(model, output):
    """Held-out accuracy and speed of `model` merging r tokens in each block
    (`ViT.with_token_merging`, the same weights), for each r of
    `TOKEN_MERGING`: ToMe's Fig. 4, measured here in one run."""
    test = vit_data.load_source("digits", "test")
    images, labels = next(iter(vit_data.input_pipeline(test, image_size=model.image_size, batch_size=2000,
                                                       training=False)))
    images, labels = keras.ops.convert_to_numpy(images), keras.ops.convert_to_numpy(labels).argmax(-1)
    rows = []
    for r in TOKEN_MERGING:
        merging = model.with_token_merging(r)
        logits = merging.predict(images, batch_size=120, verbose=0)  # compiled here, untimed
        seconds = []
        for _ in range(3):  # the best of three passes over the 360 digits
            start = time.perf_counter()
            merging.predict(images, batch_size=120, verbose=0)
            seconds.append(time.perf_counter() - start)
        rate = len(images) / min(seconds)
        rows.append({"r": r, "tokens_after_last_block": merging.block_tokens()[-1],
                     "accuracy": float((np.asarray(logits).argmax(-1) == labels).mean()),
                     "images_per_s": rate})
    for row in rows:
        row["vs_r0"] = row["images_per_s"] / rows[0]["images_per_s"]
        print(f"token merging r={row['r']}: {row['tokens_after_last_block']} tokens after the last block, "
              f"held-out accuracy {row['accuracy']:.3f}, {row['vs_r0']:.2f}x r=0's speed")
    (output / "token_merging.json").write_text(json.dumps({"backend": keras.backend.backend(), "rows": rows},
                                                          indent=1))
    plt = explain.plots.pyplot()
    figure, axis = plt.subplots(figsize=(4.2, 3.2))
    axis.plot([row["vs_r0"] for row in rows], [100 * row["accuracy"] for row in rows], "o-")
    for row in rows:
        axis.annotate(f"r={row['r']}", (row["vs_r0"], 100 * row["accuracy"]), fontsize=8,
                      textcoords="offset points", xytext=(4, 4))
    axis.set_xlabel("speed / r=0's")
    axis.set_ylabel("held-out accuracy (%)")
    axis.set_title("Token merging without retraining (ToMe, Fig. 4)", fontsize=9)
    figure.tight_layout()
    figure.savefig(output / "token_merging_curve.png", dpi=150)
    plt.close(figure)


if __name__ == "__main__":
    main()
