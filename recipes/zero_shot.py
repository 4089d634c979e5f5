"""Contrastive image-text training and zero-shot classification on embedded
captioned digits (CLIP, Radford et al. 2021; SigLIP, Zhai et al. 2023; LiT,
Zhai et al. 2022).

1. Trains a small two-tower model from scratch (`keras_vit.ImageTextModel`:
   two blocks of the demo's ViT with CLIP's image projection, and a
   one-block causal text tower) on
   the 1437 training digits, each with one caption ("a handwritten seven."),
   with CLIP's softmax contrastive loss and `model.fit`.
2. Classifies the 360 held-out digits zero-shot before and after: the ten
   names put into prompts the captions never used ("a photo of the digit
   {}."), a `zero_shot_classifier`, an ordinary ViT.
3. Locked-image tuning: the trained image tower frozen, a fresh text tower
   trained against it with SigLIP's sigmoid loss (and its logit bias).
4. Saves both as `.keras` (the tokenizer in the archive), reloads them and
   classifies a few held-out digits with the reloaded classifier.

No download; runs on any backend (KERAS_BACKEND=tensorflow|jax|torch).
"""

import argparse
import math
import pathlib
import time

from keras_vit.startup import quiet_start

if __name__ == "__main__":  # the program, not a test that loads this file
    quiet_start()  # before Keras imports its backend

import keras
import numpy as np

from keras_vit import ImageTextModel
from keras_vit import TextTransformer
from keras_vit import ViT
from keras_vit import zero_shot_classifier
from keras_vit.data.captions import DIGIT_NAMES
from keras_vit.data.captions import PROMPTS
from keras_vit.data.captions import caption_tokenizer
from keras_vit.data.captions import captioned_digits
from keras_vit.training import AdamWeightDecay
from keras_vit.training import CLIPLoss
from keras_vit.training import SigLIPLoss
from keras_vit.training import learning_rate_schedule

# The demo's ViT (the `digits` config's code: D 64, patch 4) at 16 px with 2 of its 4 blocks, no head.
IMAGE_TOWER = dict(image_size=16, patch_size=4, num_layers=2, num_heads=4, hidden_dim=64,
                   mlp_dim=128, num_classes=0, projection_dim=64)


def text_tower(tokenizer, causal=True):
    """A one-block text tower of width 64 over the caption vocabulary."""
    return TextTransformer(vocab_size=tokenizer.vocab_size, context_length=tokenizer.context_length,
                           hidden_dim=64, num_layers=1, num_heads=4, mlp_dim=128,
                           projection_dim=64, causal=causal, pooling="eos", eos_token_id=2,
                           mlp_activation="gelu")


def zero_shot_accuracy(model, images, labels):
    """Top-1 of `model`'s zero-shot classifier over the ten digit names."""
    classifier = zero_shot_classifier(model, DIGIT_NAMES, templates=PROMPTS)
    logits = keras.ops.convert_to_numpy(classifier.predict(images, batch_size=512, verbose=0))
    return float((logits.argmax(-1) == labels).mean()), classifier


def fit(model, loss, images, token_ids, epochs, verbose):
    """`model.fit` on ``{"images", "token_ids"}`` batches of 64 (image i goes
    with caption i): the paper's pre-training Adam (weight decay 0.1 times
    the learning rate), vit_jax's warm-up and cosine decay, global clipping."""
    steps = epochs * math.ceil(len(images) / 64)
    schedule = learning_rate_schedule(1e-3, steps, warmup_steps=min(50, steps // 4))
    model.compile(optimizer=AdamWeightDecay(schedule, weight_decay=0.1, global_clipnorm=1.0),
                  loss=loss)
    model.fit({"images": images, "token_ids": token_ids}, batch_size=64, epochs=epochs,
              shuffle=True, verbose=verbose)


def run(output, epochs=20, lit_epochs=10, verbose=2):
    """The recipe; returns the zero-shot accuracies, ``{stage: (before, after)}``."""
    output = pathlib.Path(output)
    output.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(0)
    tokenizer = caption_tokenizer()
    images, captions, _ = captioned_digits("train")
    test_images, _, test_labels = captioned_digits("test")
    token_ids = tokenizer(captions)
    results = {}

    model = ImageTextModel(ViT(**IMAGE_TOWER), text_tower(tokenizer), tokenizer=tokenizer,
                           name="digits_clip")
    before, _ = zero_shot_accuracy(model, test_images, test_labels)
    print(f"\n== two towers from scratch, CLIP's softmax loss, {epochs} epochs: "
          f"{model.count_params():,} parameters; e.g. {captions[0]!r} -> {token_ids[0].tolist()}")
    fit(model, CLIPLoss(), images, token_ids, epochs, verbose)
    after, classifier = zero_shot_accuracy(model, test_images, test_labels)
    results["clip"] = (before, after)
    print(f"zero-shot accuracy on the held-out digits: {before:.3f} before, {after:.3f} after")
    model.save(output / "digits_clip.keras")
    if lit_epochs:
        results["lit"], classifier = locked_image_tuning(model, tokenizer, images, token_ids,
                                                         test_images, test_labels, lit_epochs,
                                                         verbose)
    path = output / "digits_zero_shot.keras"
    classifier.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    again = keras.saving.load_model(output / "digits_clip.keras")
    batch = {"images": test_images[:8], "token_ids": token_ids[:8]}
    same = np.abs(keras.ops.convert_to_numpy(again.predict(batch, verbose=0))
                  - keras.ops.convert_to_numpy(model.predict(batch, verbose=0))).max()
    predicted = keras.ops.convert_to_numpy(reloaded.predict(test_images[:8], verbose=0)).argmax(-1)
    print(f"\nreloaded {output / 'digits_clip.keras'} (tokenizer included): max |logit "
          f"difference| {same:.1e}; the zero-shot classifier {path} reads the first held-out "
          f"digits as {[reloaded.class_names[i] for i in predicted]} (they are "
          f"{[DIGIT_NAMES[i] for i in test_labels[:8]]})")
    return results


def locked_image_tuning(model, tokenizer, images, token_ids, test_images, test_labels, epochs,
                        verbose):
    """LiT: `model`'s image tower frozen, a new text tower with SigLIP's
    loss; ``((before, after), zero-shot classifier)``."""
    lit = ImageTextModel(model.image_model, text_tower(tokenizer, causal=False),
                         logit_scale=math.log(10), logit_bias=-10.0, tokenizer=tokenizer,
                         name="digits_lit")
    lit.lock_image_tower()
    before, _ = zero_shot_accuracy(lit, test_images, test_labels)
    print(f"\n== locked-image tuning (LiT): the image tower frozen, a new text tower, SigLIP's "
          f"sigmoid loss, {epochs} epochs")
    fit(lit, SigLIPLoss(), images, token_ids, epochs, verbose)
    after, classifier = zero_shot_accuracy(lit, test_images, test_labels)
    print(f"zero-shot accuracy on the held-out digits: {before:.3f} before, {after:.3f} after")
    return (before, after), classifier


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--output", default="zero_shot_output", help="where the models are written")
    parser.add_argument("--epochs", default=20, type=int, help="epochs of two-tower training")
    parser.add_argument("--lit-epochs", default=10, type=int,
                        help="epochs of locked-image tuning (0: none)")
    parser.add_argument("--verbose", default=2, type=int, help="Keras fit verbosity (0, 1, 2)")
    args = parser.parse_args(argv)
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}")
    start = time.perf_counter()
    run(args.output, args.epochs, args.lit_epochs, args.verbose)
    print(f"{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
