"""Batch augmentations from Keras core (RandAugment, MixUp, CutMix), with
draws that depend only on a key, so that tf.data pipelines repeat exactly.

Keras's random layers take their seeds from a `keras.random.SeedGenerator`:
a variable that every draw reads and advances. Inside a parallel
`tf.data` map that state is shared between batches, so which batch gets
which draws would depend on timing, and it cannot be set per batch
(`keras.random` takes an int or a SeedGenerator, never a tensor). Here each
layer draws from a `BatchSeeds` instead: a SeedGenerator without state whose
n-th draw is ``stateless_fold_in(key, n)``, with the key made from the
pipeline seed and the batch index. Keras's own layers then run unchanged
(on the TensorFlow backend inside tf.data, whatever ``KERAS_BACKEND`` is).
"""

import keras
import tensorflow as tf

RANDAUGMENT_MAX_MAGNITUDE = 10


class BatchSeeds(keras.random.SeedGenerator):
    """A `keras.random.SeedGenerator` whose draws are a function of a key.

    After ``reset(key)`` (key: int32/int64 tensor of shape (2,)), the n-th
    call of `next` returns ``tf.random.experimental.stateless_fold_in(key,
    n)``. The counter is a Python int, advanced while a tf.data map function
    is traced, so it numbers the draws of the traced graph; nothing changes
    when the graph runs, and parallel calls cannot interfere.
    """

    def __init__(self):
        super().__init__(seed=0)  # a complete generator; its state is never used
        self.key = None
        self.draws = 0

    def reset(self, key):
        """Starts the draws of a batch from the seed `key`, at counter 0."""
        self.key, self.draws = key, 0

    def next(self, ordered=True):
        """The seed of the next draw: `key` folded with the advanced counter."""
        self.draws += 1
        return tf.random.experimental.stateless_fold_in(self.key, self.draws)


class _BatchSeeded:
    """Makes a Keras image preprocessing layer draw from `self.batch_seeds`.

    Keras layers fetch their generator through `_get_seed_generator`
    (RandAugment ignores a `seed` argument and passes this generator on to
    its sub-layers), so overriding it routes every draw to the key.
    """

    def __init__(self, **kwargs):
        super().__init__(seed=0, dtype="float32", data_format="channels_last", **kwargs)
        self.batch_seeds = BatchSeeds()

    def _get_seed_generator(self, backend=None):
        return self.batch_seeds

    def apply(self, images, labels, key):
        """(images, labels) of a batch, transformed with draws from `key`."""
        self.batch_seeds.reset(key)
        outputs = self({"images": images, "labels": labels}, training=True)
        return outputs["images"], outputs["labels"]


class _Equalization(keras.layers.Equalization):
    """Keras's Equalization, always computing its histogram with bincount.

    Keras 3.15 chooses the histogram's code by the global backend: with
    ``KERAS_BACKEND=jax`` it unrolls a 256-step loop, even inside tf.data
    where the ops are TensorFlow's. The counts are the same; the loop makes a
    RandAugment pipeline about 20 times slower to build and 3 times slower
    to run. This is Keras's own non-JAX branch.
    """

    def _custom_histogram_fixed_width(self, values, value_range, nbins):
        values = self.backend.cast(values, "float32")
        value_min, value_max = value_range
        scaled = (values - value_min) * (nbins - 1) / (value_max - value_min)
        indices = self.backend.numpy.clip(self.backend.cast(scaled, "int32"), 0, nbins - 1)
        return self.backend.numpy.bincount(self.backend.numpy.reshape(indices, [-1]), minlength=nbins)


class _RandAugment(_BatchSeeded, keras.layers.RandAugment):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.equalization = _Equalization(
            value_range=self.value_range, data_format="channels_last", dtype="float32", name="equalization"
        )


class _MixUp(_BatchSeeded, keras.layers.MixUp):
    pass


class _CutMix(_BatchSeeded, keras.layers.CutMix):
    pass


class BatchAugment:
    """RandAugment, then MixUp or CutMix, on a batch of images in [0, 255].

    Args:
        randaugment: None, or (num_ops, magnitude): `num_ops` operations
            per batch (Keras picks the operations per batch and their
            strengths per image), at a strength drawn up to `magnitude`
            on the RandAugment paper's 0..10 scale (Keras's `factor` =
            magnitude / 10; 10 is the strongest Keras allows).
        mixup: float. MixUp's alpha; 0 turns it off.
        cutmix: float in [0, 1]. CutMix's factor; 0 turns it off. When
            both are on, each batch gets one of them, with probability 1/2
            (as DeiT and timm do).
    """

    def __init__(self, randaugment=None, mixup=0.0, cutmix=0.0):
        self.randaugment = None
        if randaugment is not None:
            num_ops, magnitude = _check_randaugment(randaugment)
            self.randaugment = _RandAugment(
                value_range=(0, 255), num_ops=num_ops, factor=magnitude / RANDAUGMENT_MAX_MAGNITUDE,
                name="randaugment",
            )
        if not (isinstance(mixup, (int, float)) and mixup >= 0):
            raise ValueError(f"`mixup` is MixUp's alpha, a number >= 0 (0 = off), got {mixup!r}.")
        if not (isinstance(cutmix, (int, float)) and 0 <= cutmix <= 1):
            raise ValueError(f"`cutmix` is CutMix's factor, a number in [0, 1] (0 = off), got {cutmix!r}.")
        self.mixup = _MixUp(alpha=float(mixup), name="mixup") if mixup else None
        self.cutmix = _CutMix(factor=float(cutmix), name="cutmix") if cutmix else None

    @property
    def active(self):
        """bool: whether any augmentation (RandAugment, mixup, CutMix) is on."""
        return any(layer is not None for layer in (self.randaugment, self.mixup, self.cutmix))

    def __call__(self, images, labels, key):
        """images float32 (batch, H, W, 3) in [0, 255], labels float32
        one-hot (batch, classes), key (2,) -> the augmented pair (labels
        soft after MixUp or CutMix, still summing to 1)."""
        fold = tf.random.experimental.stateless_fold_in
        if self.randaugment is not None:
            images, labels = self.randaugment.apply(images, labels, fold(key, 0))
        if self.mixup is not None and self.cutmix is not None:
            use_mixup = tf.random.stateless_uniform([], seed=fold(key, 3)) < 0.5
            images, labels = tf.cond(
                use_mixup,
                lambda: self.mixup.apply(images, labels, fold(key, 1)),
                lambda: self.cutmix.apply(images, labels, fold(key, 2)),
            )
        elif self.mixup is not None:
            images, labels = self.mixup.apply(images, labels, fold(key, 1))
        elif self.cutmix is not None:
            images, labels = self.cutmix.apply(images, labels, fold(key, 2))
        return images, labels


def _check_randaugment(value):
    try:
        num_ops, magnitude = value
        valid = (isinstance(num_ops, int) and num_ops >= 1
                 and 0 <= magnitude <= RANDAUGMENT_MAX_MAGNITUDE)
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(
            f"`randaugment` must be (num_ops, magnitude) with num_ops a positive int and magnitude "
            f"in [0, {RANDAUGMENT_MAX_MAGNITUDE}] (the RandAugment paper's scale; Keras's "
            f"RandAugment caps the strength at 10), e.g. (2, 10); got {value!r}."
        )
    return num_ops, float(magnitude)
