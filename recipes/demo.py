"""End-to-end demo on embedded data: `make demo`.

Builds a ViT preset, runs it on a photo that scikit-image ships, writes the
model's weights as an original vit_jax `.npz` checkpoint and loads that back
with `ViT.from_checkpoint` (at 224 px and, resampled, at 384 px), then saves
and reloads the model as a `.keras` file. Runs on any backend
(KERAS_BACKEND=tensorflow|jax|torch).
"""

import argparse
import pathlib
import time

import keras
import numpy as np
import skimage.data

import keras_vit
from keras_vit import ViT


def load_photo(size):
    """scikit-image's astronaut, resized and scaled to [-1, 1] as vit_jax does."""
    image = skimage.data.astronaut().astype("float32")
    image = keras.ops.image.resize(image[None], (size, size), interpolation="bilinear")
    return keras.ops.convert_to_numpy(image) / 127.5 - 1.0


def to_vit_jax_npz(model, path):
    """The model's weights under the original checkpoint's names."""
    w = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}
    arrays = {
        "embedding/kernel": w["patch_embedding/projection/kernel"],
        "embedding/bias": w["patch_embedding/projection/bias"],
        "cls": w["class_token/tokens"],
        "Transformer/posembed_input/pos_embedding": w["position_embedding/embeddings"],
        "Transformer/encoder_norm/scale": w["encoder_norm/gamma"],
        "Transformer/encoder_norm/bias": w["encoder_norm/beta"],
        "head/kernel": w["head/kernel"],
        "head/bias": w["head/bias"],
    }
    for i in range(model.num_layers):
        src, dst = f"encoder_block_{i}/", f"Transformer/encoderblock_{i}/"
        for ours, theirs in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
            arrays[f"{dst}{theirs}/scale"] = w[f"{src}{ours}/gamma"]
            arrays[f"{dst}{theirs}/bias"] = w[f"{src}{ours}/beta"]
        for name in ("query", "key", "value", "out"):
            for leaf in ("kernel", "bias"):
                arrays[f"{dst}MultiHeadDotProductAttention_1/{name}/{leaf}"] = w[f"{src}attention/{name}/{leaf}"]
        for ours, theirs in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
            for leaf in ("kernel", "bias"):
                arrays[f"{dst}MlpBlock_3/{theirs}/{leaf}"] = w[f"{src}mlp/{ours}/{leaf}"]
    np.savez(path, **arrays)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="vit_ti16")
    parser.add_argument("--output", default="demo_output")
    args = parser.parse_args()
    out = pathlib.Path(args.output)
    out.mkdir(exist_ok=True)
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}")

    info = keras_vit.presets()[args.preset]
    model = ViT.from_preset(args.preset)
    print(f"\n1. {info['paper_name']}: {model.count_params():,} parameters "
          f"(paper architecture: {info['params']:,})")
    # A fresh model has the paper's zero head; give it a random one so the
    # outputs below are not trivially zero.
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape))

    image = load_photo(224)
    start = time.perf_counter()
    logits = keras.ops.convert_to_numpy(model(image))
    print(f"2. astronaut photo {image.shape} -> logits {logits.shape} in "
          f"{time.perf_counter() - start:.2f} s; top-5 classes (untrained): "
          f"{np.argsort(logits[0])[::-1][:5].tolist()}")
    record = model.intermediates(image)
    cls_attention = keras.ops.convert_to_numpy(record[f"attention_{model.num_layers - 1}"])[0, :, 0, 1:]
    print(f"   last block: the [class] token's {cls_attention.shape[0]} heads put "
          f"{cls_attention.sum(-1).mean():.1%} of their attention on the {cls_attention.shape[-1]} patches")

    npz = out / f"{args.preset}.npz"
    to_vit_jax_npz(model, npz)
    loaded = ViT.from_checkpoint(npz)
    diff = np.abs(keras.ops.convert_to_numpy(loaded(image)) - logits).max()
    print(f"3. wrote {npz} in the original vit_jax layout; from_checkpoint reads "
          f"{loaded.count_params():,} parameters back, max |logit diff| = {diff:.1e}")

    hires = ViT.from_checkpoint(npz, image_size=384)
    hires_logits = keras.ops.convert_to_numpy(hires(load_photo(384)))
    posemb = hires.get_layer("position_embedding").embeddings.shape
    print(f"   at 384 px: position embeddings resampled to {tuple(posemb)} "
          f"(grid {hires.grid_size}); logits {hires_logits.shape}")

    path = out / f"{args.preset}.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    diff = np.abs(keras.ops.convert_to_numpy(reloaded(image)) - logits).max()
    print(f"4. saved {path} ({path.stat().st_size / 2**20:.1f} MiB) and reloaded it "
          f"with safe_mode=True: max |logit diff| = {diff:.1e}")
    assert diff < 1e-5, "the reloaded model must give the same logits"


if __name__ == "__main__":
    main()
