"""The main job, make demo: train a ViT the paper's way on embedded data.

1. Pre-trains a small ViT from scratch on scikit-learn's digits (the `digits`
   config: Adam with lr-multiplied weight decay, linear warm-up, cosine decay,
   global-norm clipping, Inception crops) at 16x16 pixels.
2. Fine-tunes it at 32x32 pixels (the `digits-finetune` config, shortened
   to `FINETUNE_LENGTH`: the vit_jax update, SGD momentum 0.9 outside the
   learning rate, cosine, clip 1) with 2-D interpolated position embeddings
   and a new zero-initialised head.
3. Evaluates both on the 360 held-out digits that training never sees, and
   the pre-trained features with the paper's few-shot linear evaluation.
4. Saves the fine-tuned model as `.keras`, reloads it (safe_mode) and
   classifies a few held-out digits with it.
5. Shows what it learned (`keras_vit.explain`, Fig. 6 and 7 of the paper):
   attention rollout on held-out digits and on photos that scikit-image
   ships, attention distance, position-embedding similarity and the patch
   filters, as PNGs in `demo_output/explain/`.
6. Token merging (ToMe), without retraining: the fine-tuned model's
   held-out accuracy at several r, and the speed-up where merging pays, on
   a model of ViT-B/16's width and length (random weights, timing only);
   in `demo_output/token_merging.json` and `token_merging_curve.png`, and
   ToMe's picture of the merged patches in `demo_output/explain/digits/`.

Where a step comes out no better than its baseline (fine-tuning at 32 px,
token merging on the digits model), the demo says why in one line.

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

from keras_vit import ViT
from keras_vit import data as vit_data
from keras_vit import explain
from keras_vit.training import resolve_config
from keras_vit.training import train

# The `digits-finetune` config's 500 steps cut to 120, its warm-up and
# checkpoints in proportion: the same held-out accuracy within a digit or two
# of the 360 in a quarter of the time (the whole config was the demo's
# longest step).
FINETUNE_LENGTH = {"steps": 120, "warmup_steps": 12, "checkpoint_every": 60}


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
        ("finetune", {"init": str(output / "pretrain" / "model.keras"), "dtype": args.dtype,
                      **FINETUNE_LENGTH}),
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
    if after <= before:
        print("fine-tuning at 32 px gains nothing here: the digits are 8x8-pixel scans upscaled, so 32 px "
              "shows no detail that 16 px lacks; a higher resolution pays on photos (Sec. 3.2)")


def show_what_it_learned(model, digits, labels, out):
    """Writes the explain pictures for held-out digits and for photos."""
    import skimage.data

    written = explain.write_report(model, digits, out / "digits", titles=[f"a {label}" for label in labels],
                                   token_merging=TOKEN_MERGING[1])
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
TOKEN_MERGING = (0, 4, 8)
# The digits model's batches in this section: nine predict steps per model,
# as TensorFlow logs a retracing warning where its predict functions (one per
# model) are traced five times within about ten steps.
DIGITS_BATCH = 40
# Token merging's speed is timed on 4 of ViT-B/16's 12 blocks (width 768,
# 196 patches and a [class] token at 224 px), random weights, batch 4: r=48
# merges in 4 blocks the 192 tokens that ToMe's r=16 merges in 12.
SPEED_MODEL = {"num_layers": 4}
SPEED_R = (0, 24, 48)
SPEED_BATCH = 4


def show_token_merging(model, output):
    """Token merging (`ViT.with_token_merging`: the same weights, no
    retraining), ToMe's Fig. 4 in two parts: `model`'s held-out accuracy at
    each r of `TOKEN_MERGING`, and the speed at each r of `SPEED_R` of a
    model of ViT-B/16's width and length (`SPEED_MODEL`), where merging
    pays; and, measured, why it does not pay on `model`."""
    test = vit_data.load_source("digits", "test")
    images, labels = next(iter(vit_data.input_pipeline(test, image_size=model.image_size, batch_size=2000,
                                                       training=False)))
    images, labels = keras.ops.convert_to_numpy(images), keras.ops.convert_to_numpy(labels).argmax(-1)
    print("\ntoken merging (ToMe) without retraining: each merge averages two tokens into one, so the "
          "accuracy can fall as r grows")
    accuracy, merged = [], {r: model.with_token_merging(r) for r in TOKEN_MERGING}
    for r, merging in merged.items():
        logits = merging.predict(images, batch_size=DIGITS_BATCH, verbose=0)
        accuracy.append({"r": r, "tokens_after_last_block": merging.block_tokens()[-1],
                         "accuracy": float((np.asarray(logits).argmax(-1) == labels).mean())})
        print(f"token merging r={r}: {accuracy[-1]['tokens_after_last_block']} tokens after the last block, "
              f"held-out accuracy {accuracy[-1]['accuracy']:.3f}")

    wide = ViT.from_preset("ViT-B/16", **SPEED_MODEL)
    largest = TOKEN_MERGING[-1]
    without, with_largest = images_per_second([merged[0], merged[largest]], images, DIGITS_BATCH)
    small = with_largest / without
    verdict, than = ("does not pay", "less than") if small < 1 else ("pays little", "hardly more than")
    print(f"on the demo's model (r={largest}: {small:.2f}x r=0's speed) merging {verdict}: a block there does "
          f"{block_multiply_adds(model) / 1e6:.0f} M multiply-adds per image (ViT-B/16's "
          f"{block_multiply_adds(wide) / 1e6:,.0f} M), so the attention and MLP that merged tokens save "
          f"weigh {than} the matching's own small operations (similarities, a sort, gathers, "
          "scatter-adds) in every block")

    photos = np.random.default_rng(0).uniform(-1, 1, (SPEED_BATCH, *wide.image_size, 3)).astype("float32")
    wide_merged = [wide.with_token_merging(r) for r in SPEED_R]
    rates = images_per_second(wide_merged, photos, SPEED_BATCH)
    speed = [{"r": r, "tokens_after_last_block": merging.block_tokens()[-1], "images_per_s": rate,
              "vs_r0": rate / rates[0]} for r, merging, rate in zip(SPEED_R, wide_merged, rates)]
    timed = (f"{wide.num_layers} blocks of ViT-B/16 (width {wide.hidden_dim}, {wide.block_tokens()[0]} tokens "
             f"at {wide.image_size[0]} px), random weights, batch {SPEED_BATCH}")
    print(f"where it pays, on {timed}: "
          + ", ".join(f"r={row['r']} {row['vs_r0']:.2f}x" for row in speed[1:])
          + f" r=0's images per second ({speed[-1]['tokens_after_last_block']} tokens after the last block "
          f"at r={speed[-1]['r']})")

    (output / "token_merging.json").write_text(json.dumps({
        "backend": keras.backend.backend(), "accuracy": accuracy,
        "demo_model_speed": {"r": largest, "vs_r0": small},
        "speed": {"model": timed, "rows": speed}}, indent=1))
    plt = explain.plots.pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(7.5, 3.2))
    left.plot([row["r"] for row in accuracy], [100 * row["accuracy"] for row in accuracy], "o-")
    left.set_xlabel("r (tokens merged per block)")
    left.set_ylabel("held-out accuracy (%)")
    left.set_title(f"The demo's model, {model.block_tokens()[0]} tokens", fontsize=9)
    right.plot([row["r"] for row in speed], [row["vs_r0"] for row in speed], "o-")
    right.set_xlabel("r (tokens merged per block)")
    right.set_ylabel("speed / r=0's")
    right.set_title(f"{wide.num_layers} blocks of ViT-B/16, {wide.block_tokens()[0]} tokens", fontsize=9)
    figure.suptitle("Token merging without retraining (ToMe, Fig. 4)", fontsize=10)
    figure.tight_layout()
    figure.savefig(output / "token_merging_curve.png", dpi=150)
    plt.close(figure)


def images_per_second(models, images, batch_size):
    """`model.predict`'s images per second on `images`, for each of
    `models`: after a pass of each that compiles it, the best of three
    passes, taken in turns (each model once, then again) so that another
    load on the machine weighs on every model alike."""
    for model in models:
        model.predict(images, batch_size=batch_size, verbose=0)
    best = [float("inf")] * len(models)
    for _ in range(3):
        for i, model in enumerate(models):
            start = time.perf_counter()
            model.predict(images, batch_size=batch_size, verbose=0)
            best[i] = min(best[i], time.perf_counter() - start)
    return [len(images) / seconds for seconds in best]


def block_multiply_adds(model):
    """The multiply-adds of `model`'s first encoder block for one image:
    the q, k, v and output projections and the MLP on each token, and the
    attention's scores and weighted sum."""
    tokens, width = model.block_tokens()[0], model.hidden_dim
    return tokens * (4 * width * width + 2 * width * model.mlp_dim) + 2 * tokens * tokens * width


if __name__ == "__main__":
    main()
