"""An embedded image-text toy set: scikit-learn's digits with captions, and
a word-level tokenizer for them, to train and check a two-tower model
(`keras_vit.ImageTextModel`) with no download.

Each training digit gets one caption drawn from `CAPTION_TEMPLATES` with
its name (``"a handwritten seven."``); zero-shot evaluation puts the names
into other prompts (`PROMPTS`) and never sees a caption.
"""

import json

import numpy as np

from keras_vit.extras import require
from keras_vit.text_tokenizer import TextTokenizer

DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
CAPTION_TEMPLATES = ("a handwritten {}.", "the digit {}.", "a scan of the number {}.",
                     "a {} written by hand.", "a small gray {}.")
PROMPTS = ("a photo of the digit {}.", "the number {}.")
SPECIAL_TOKENS = ("<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|unk|>")


def caption_tokenizer(context_length=12):
    """A word-level `keras_vit.TextTokenizer` (lowercase, split on
    whitespace and punctuation) over the words of `CAPTION_TEMPLATES`,
    `PROMPTS` and `DIGIT_NAMES`, each text as ``<|startoftext|> words
    <|endoftext|>`` padded with ``<|pad|>``: CLIP's layout, for a text tower
    with ``pooling="eos"`` and ``eos_token_id=2``."""
    require("tokenizers", "The captions' tokenizer")
    from tokenizers import Tokenizer
    from tokenizers import normalizers
    from tokenizers import pre_tokenizers
    from tokenizers import processors
    from tokenizers.models import WordLevel

    words = sorted({w for text in CAPTION_TEMPLATES + PROMPTS for w in _words(text.format(""))}
                   | set(DIGIT_NAMES) | {"."})
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + tuple(words))}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<|unk|>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                       pre_tokenizers.Punctuation()])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[(t, vocab[t]) for t in ("<|startoftext|>", "<|endoftext|>")])
    files = {"tokenizer.json": tokenizer.to_str().encode(),
             "tokenizer_config.json": json.dumps({"pad_token": "<|pad|>"}).encode()}
    return TextTokenizer(files, context_length)


def _words(text):
    return [w for w in text.lower().replace(".", " ").split() if w]


def captioned_digits(split, image_size=16, seed=0):
    """The digits of `split` (``"train"``: 1437, ``"test"``: 360) with captions.

    Returns:
        ``(images, captions, labels)``: float32 ``(n, image_size,
        image_size, 3)`` in [-1, 1] (the paper's scaling), one caption per
        image (a template of `CAPTION_TEMPLATES` drawn with `seed`, filled
        with the digit's name), and the int labels.
    """
    import tensorflow as tf

    from keras_vit.data.sources import load_source

    source = load_source("digits", split)
    batch = next(iter(source.dataset.batch(4096)))
    images = tf.image.resize(tf.cast(batch["image"], "float32"), (image_size, image_size))
    images = images.numpy() / 127.5 - 1
    labels = np.asarray(batch["label"])
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, len(CAPTION_TEMPLATES), len(labels))
    captions = [CAPTION_TEMPLATES[t].format(DIGIT_NAMES[y]) for t, y in zip(templates, labels)]
    return images.astype("float32"), captions, labels
