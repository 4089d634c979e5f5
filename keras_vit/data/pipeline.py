"""`input_pipeline`: a `Source` to batches that `model.fit` takes on every
backend, repeatable exactly from a seed, and cheap to shard and resume.

The stream is a sequence of epochs, each the source's examples (shuffled
per epoch when training), numbered by their position in the stream; batch k
holds stream elements [k * batch_size, (k + 1) * batch_size) and may span two
epochs. Every random choice is a stateless op keyed on (seed, element
index) or (seed, batch index): parallel maps keep the result fixed,
``start_batch`` can begin anywhere, and the output does not depend on the
Keras backend or on TensorFlow's global seed.

What a pod needs (big_vision's input pipeline does the same):

- each host reads its own part of the data (`Source.shard`: TFDS's
  `even_splits`, or a range of an image folder's files), never the other
  hosts' images;
- images stay encoded until after the shuffle and the skip of a resume: the
  digits and image folders shuffle the indices of a whole epoch
  (`tf.random.experimental.index_shuffle`, no buffer, so a resume starts at
  batch k at no cost); TFDS shuffles encoded records in a buffer, and a
  resume skips encoded records;
- the training crops decode only the crop window of a JPEG
  (`preprocessing.random_crop_encoded`).

NaFlex mode (``max_num_patches``, `keras_vit.naflex`): each image, or its
training crop, keeps its own size and aspect ratio and becomes a padded
patch sequence (`keras_vit.naflex.naflex_example`). A batch of the training
stream is one of a few shapes, as timm's NaFlex loader makes them: its
sequence length L is drawn from ``seq_lens`` and it holds ``batch_size *
max_num_patches // L`` images, a fixed token budget. The lengths come in
cycles, each length once per cycle in an order drawn from (seed, cycle), so
where batch k starts in the stream is known without reading it (a resume).
"""

import functools

import tensorflow as tf

from keras_vit.data import preprocessing
from keras_vit.data.augment import BatchAugment
from keras_vit.data.sources import Source
from keras_vit.data.sources import load_source
from keras_vit.config import is_int
from keras_vit.config import pair
from keras_vit.naflex import naflex_example

# Streams of stateless keys drawn from the seed, one per use.
_ELEMENT, _BATCH, _SHUFFLE = 0, 1, 2


def input_pipeline(
    source,
    split=None,
    *,
    image_size=None,
    batch_size,
    training,
    preprocess=None,
    seed=0,
    area_range=None,
    flip=True,
    randaugment=None,
    mixup=0.0,
    cutmix=0.0,
    shuffle_buffer=10_000,
    repeat=None,
    drop_remainder=None,
    start_batch=0,
    shard=None,
    data_dir=None,
    pixel_scale=None,
    pixel_offset=None,
    patch_size=None,
    max_num_patches=None,
    seq_lens=None,
):
    """Batches of preprocessed images and one-hot labels.

    Args:
        source: a `Source`, or a dataset name or folder for `load_source`.
        split: the split to load when `source` is a name (TFDS syntax,
            e.g. ``"train[:98%]"``); None with a `Source`.
        image_size: int or (int, int). Output height and width. None in
            NaFlex mode, where each image keeps its own.
        batch_size: int. Images per batch; in NaFlex mode, per batch of
            `max_num_patches`, and the token budget of every batch is
            ``batch_size * max_num_patches``.
        training: bool. Shuffles, crops and augments when True.
        preprocess: ``"inception"`` (Inception crop, area (0.08, 1), and
            flip: pre-training), ``"finetune"`` (vit_jax's fine-tuning crop,
            area (0.05, 1), and flip) or ``"resize"`` (plain bilinear resize:
            evaluation). Defaults to ``"inception"`` when training, else
            ``"resize"``.
        seed: int. The same seed gives the same batches, on every backend
            and every run.
        area_range: (min, max) fractions of the image area for the crops;
            None for the preprocessing's default. Ignored by ``"resize"``.
        flip: bool. Random horizontal flips with the crops (turn off for
            digits and text).
        randaugment: None, or (num_ops, magnitude) with magnitude in
            [0, 10]: Keras's `RandAugment`. Training only.
        mixup: float. Alpha of Keras's `MixUp`; 0 = off. Training only.
        cutmix: float in [0, 1]. Factor of Keras's `CutMix`; 0 = off.
            Training only. With both on, each batch gets one of the two.
        shuffle_buffer: int. Encoded examples in the shuffle buffer of a
            source without random access (TFDS, or a `Source` made by
            hand); the digits and image folders shuffle whole epochs and
            need none.
        repeat: bool. Repeat the data without end (each epoch reshuffled).
            Defaults to `training`.
        drop_remainder: bool. Drop a last, smaller batch (static shapes
            for XLA). Defaults to `training`.
        start_batch: int. Start the stream at this batch: the result equals
            the stream from batch 0 with `start_batch` batches skipped
            (for resuming a run mid-epoch).
        shard: None, or (index, count): the pipeline of host `index` of
            `count` that share each global batch of `batch_size`. It reads
            only its part of the source (`Source.shard`: disjoint parts that
            together are the source) and yields ``batch_size / count`` rows
            of each global batch from it. The same seed and count give the
            same batches; another count gives another order (and other
            crops) of the same examples per epoch. MixUp and CutMix mix
            within a shard. Needs `drop_remainder`. `concatenate_shards`
            puts the shards' batches together.
        data_dir: TFDS data folder, when `source` is a name.
        pixel_scale: float, a sequence of one per channel, or None. The
            images as a model takes them are ``pixels * pixel_scale +
            pixel_offset`` (a model's ``pixel_scale`` and ``pixel_offset``);
            None for both: [-1, 1].
        pixel_offset: float, a sequence, or None. See `pixel_scale`.
        patch_size: int or (int, int). NaFlex mode: the model's patch size.
        max_num_patches: int >= 1, or None. Set, the pipeline is in NaFlex
            mode (module docstring) for a model made with
            ``naflex=True, max_num_patches=...``: each image (a training
            crop keeps the crop's own size) resized to at most this many
            patches, as `keras_vit.naflex_inputs` does; evaluation batches
            are all of this length.
        seq_lens: ints in [1, max_num_patches], or None for
            ``(max_num_patches,)``. NaFlex training: the sequence lengths
            drawn per batch, e.g. ``(64, 128, 256)`` for 256 (timm's
            ``train_seq_lens``); a batch of length L holds ``batch_size *
            max_num_patches // L`` images, each of at most L patches.

    Returns:
        `tf.data.Dataset` of (images, labels): images float32 (batch, H, W,
        3) in [-1, 1] (or as `pixel_scale` and `pixel_offset` make them), labels float32 (batch, num_classes), one-hot (soft
        with MixUp or CutMix, each row summing to 1). In NaFlex mode the
        images are the dict of `keras_vit.naflex_inputs`: ``"patches"``
        float32 (batch, L, P * P * 3), ``"patch_mask"`` int32 (batch, L),
        ``"spatial_shapes"`` int32 (batch, 2).

    Examples:
        ```python
        import numpy as np
        from keras_vit.data import input_pipeline, load_source

        source = load_source("digits", "train[:90%]")
        train = input_pipeline(source, image_size=16, batch_size=32, training=True, flip=False,
                               area_range=(0.7, 1.0), seed=0)
        images, labels = next(iter(train))
        print(tuple(images.shape), tuple(labels.shape))  # -> (32, 16, 16, 3) (32, 10)
        print(train.cardinality().numpy())       # -> -1  # infinite: repeat defaults to training

        # Resuming at batch 50 gives what batch 50 of the first stream was.
        resumed = input_pipeline(source, image_size=16, batch_size=32, training=True, flip=False,
                                 area_range=(0.7, 1.0), seed=0, start_batch=50)
        batch_50 = next(iter(train.skip(50)))[0]
        print(np.array_equal(next(iter(resumed))[0], batch_50))   # -> True

        # Host 0 of 2: its 16 rows of each global batch of 32, from its half of the data.
        host = input_pipeline(source, image_size=16, batch_size=32, training=True, flip=False, shard=(0, 2))
        print(tuple(next(iter(host))[0].shape), source.shard(0, 2).num_examples)  # -> (16, 16, 16, 3) 646

        test = input_pipeline("digits", "test", image_size=16, batch_size=100, training=False)
        print([int(x.shape[0]) for x, _ in test])   # -> [100, 100, 100, 60]

        # NaFlex: lengths 8 and 16 drawn per batch, a budget of 4 * 16 tokens.
        flex = input_pipeline("digits_stretched", "train", batch_size=4, training=True, flip=False,
                              patch_size=4, max_num_patches=16, seq_lens=(8, 16))
        print(sorted({tuple(x["patches"].shape) for x, _ in flex.take(4)}))
        # -> [(4, 16, 48), (8, 8, 48)]
        ```
    """
    source = _source(source, split, data_dir)
    if max_num_patches is not None or patch_size is not None or seq_lens is not None:
        return _naflex_pipeline(source, dict(
            image_size=image_size, patch_size=patch_size, max_num_patches=max_num_patches,
            seq_lens=seq_lens, batch_size=batch_size, training=training, preprocess=preprocess,
            seed=seed, area_range=area_range, flip=flip, augment=(randaugment, mixup, cutmix),
            shuffle_buffer=shuffle_buffer, repeat=repeat, drop_remainder=drop_remainder,
            start_batch=start_batch, shard=shard, scaling=(pixel_scale, pixel_offset)))
    if image_size is None:
        raise ValueError("`image_size` is required: the height and width of the batches (or give "
                         "`max_num_patches` and `patch_size` for NaFlex, images at their own sizes).")
    return _fixed_pipeline(source, pair(image_size, "image_size"), batch_size, training, preprocess,
                           seed, area_range, flip, (randaugment, mixup, cutmix), shuffle_buffer,
                           repeat, drop_remainder, start_batch, shard, pixel_scale, pixel_offset)


def _fixed_pipeline(source, size, batch_size, training, preprocess, seed, area_range, flip,
                    augmentation, shuffle_buffer, repeat, drop_remainder, start_batch, shard,
                    pixel_scale, pixel_offset):
    """`input_pipeline` for images of one `size` (height, width): its
    arguments, RandAugment, MixUp and CutMix as `augmentation`."""
    preprocess = preprocess or ("inception" if training else "resize")
    repeat = training if repeat is None else repeat
    drop_remainder = training if drop_remainder is None else drop_remainder
    area_range = _check_arguments(source, preprocess, area_range, batch_size, shuffle_buffer,
                                  start_batch, seed, training=training, repeat=repeat,
                                  drop_remainder=drop_remainder, flip=flip)
    part, shard_index, shard_count = _part(source, shard, batch_size, drop_remainder)
    rows = batch_size // shard_count
    augment = BatchAugment(*augmentation) if training else None

    root = tf.constant([seed, 0], tf.int64)
    element_key, batch_key, shuffle_key = (
        tf.random.experimental.stateless_fold_in(root, stream) for stream in (_ELEMENT, _BATCH, _SHUFFLE)
    )
    first = start_batch * rows

    mixes = augment is not None and augment.active  # batch-level augmentation, on [0, 255]

    def element(j, record):
        """Stream element `j` (its record) -> (image, one-hot label)."""
        if preprocess == "resize":
            image = preprocessing.resize(part.decode(record["image"]), size)
        else:
            # Keyed on the element's row of the global batch: one host's
            # crops do not depend on what the other hosts read.
            row = j // rows * batch_size + shard_index * rows + j % rows
            key = tf.random.experimental.stateless_fold_in(element_key, row)
            image = part.random_crop(record["image"], key, size, area_range, flip)
        if not mixes:
            image = preprocessing.normalize(image, pixel_scale, pixel_offset)
        return image, tf.one_hot(record["label"], source.num_classes, dtype=tf.float32)

    dataset = _elements(part, element, training, repeat, first, shuffle_buffer, shuffle_key)

    # A plain batch: batching in parallel measured 4% slower (benchmarks/input_pipeline.py).
    dataset = dataset.batch(rows, drop_remainder=drop_remainder).apply(
        tf.data.experimental.assert_cardinality(  # flat_map hides it from Keras
            tf.data.INFINITE_CARDINALITY if repeat
            else _num_batches(part.num_examples - first, rows, drop_remainder)))
    if mixes:
        mix = _mixer(augment, batch_key, shard_index, shard_count, pixel_scale, pixel_offset)
        dataset = dataset.enumerate(start=start_batch).map(
            mix, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(_options())


def _mixer(augment, batch_key, shard_index, shard_count, pixel_scale, pixel_offset):
    """``(index, (images, labels))`` -> batch `index` mixed by `augment`
    (MixUp, CutMix, RandAugment on [0, 255]) with its key, then scaled."""
    def mix(index, images_labels):
        key = tf.random.experimental.stateless_fold_in(batch_key, index * shard_count + shard_index)
        images, labels = augment(*images_labels, key)
        images = tf.clip_by_value(images, 0.0, 255.0)  # RandAugment may overshoot by rounding
        return preprocessing.normalize(images, pixel_scale, pixel_offset), labels

    return mix


def _naflex_pipeline(source, o):
    """`input_pipeline` in NaFlex mode (`o`: its arguments by name)."""
    preprocess = o["preprocess"] or ("inception" if o["training"] else "resize")
    repeat = o["training"] if o["repeat"] is None else o["repeat"]
    drop_remainder = o["training"] if o["drop_remainder"] is None else o["drop_remainder"]
    area_range = _check_arguments(source, preprocess, o["area_range"], o["batch_size"],
                                  o["shuffle_buffer"], o["start_batch"], o["seed"],
                                  training=o["training"], repeat=repeat,
                                  drop_remainder=drop_remainder, flip=o["flip"])
    patch_size, lengths = _check_naflex(o)
    longest = max(lengths)
    schedule = _Schedule(lengths, o["batch_size"] * o["max_num_patches"], o["seed"], o["training"])
    element_key, shuffle_key = (tf.random.experimental.stateless_fold_in(
        tf.constant([o["seed"], 0], tf.int64), stream) for stream in (_ELEMENT, _SHUFFLE))
    first = int(schedule.first_element(o["start_batch"]))

    def element(j, record):
        """Stream element `j` -> (batch index, length index, NaFlex inputs, one-hot label)."""
        batch, index = schedule.batch_of(j)
        image = source.decode(record["image"])
        key = tf.random.experimental.stateless_fold_in(element_key, j)
        if preprocess != "resize":
            image = _naflex_crop(image, key, area_range)
        if o["flip"] and o["training"]:
            image = tf.image.stateless_random_flip_left_right(
                image, seed=tf.random.experimental.stateless_fold_in(key, 1))
        branches = [functools.partial(_naflex_padded, image, patch_size, length, longest, o["scaling"])
                    for length in lengths]
        inputs = branches[0]() if len(branches) == 1 else tf.switch_case(tf.cast(index, tf.int32), branches)
        return batch, index, inputs, tf.one_hot(record["label"], source.num_classes, dtype=tf.float32)

    dataset = _elements(source, element, o["training"], repeat, first, o["shuffle_buffer"], shuffle_key)
    if len(lengths) == 1:  # batch k is elements [k * size, (k + 1) * size)
        dataset = dataset.map(lambda batch, index, inputs, label: (inputs, label)).batch(
            schedule.sizes_list[0], drop_remainder=drop_remainder).apply(
            tf.data.experimental.assert_cardinality(
                tf.data.INFINITE_CARDINALITY if repeat else _num_batches(
                    source.num_examples - first, schedule.sizes_list[0], drop_remainder)))
    else:
        dataset = dataset.group_by_window(
            key_func=lambda batch, *_: batch, window_size_func=schedule.size,
            reduce_func=lambda batch, window: window.batch(schedule.size(batch), drop_remainder))
        dataset = dataset.map(functools.partial(_trimmed, schedule.lengths),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(_options())


def _naflex_crop(image, key, area_range):
    """A random box of `area_range` of the image's area whose aspect ratio is
    the image's times a factor in (3/4, 4/3) (log-uniform): the training
    crop of NaFlex, which keeps a wide image wide (the fixed-size crops'
    boxes are near-square, `preprocessing.crop_window`)."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    area, log_ratio, y, x = tf.unstack(tf.random.stateless_uniform(
        [4], tf.random.experimental.stateless_fold_in(key, 0)))
    low, high = area_range
    area = low + (high - low) * area
    ratio = tf.exp(tf.math.log(3 / 4) + (tf.math.log(4 / 3) - tf.math.log(3 / 4)) * log_ratio)
    size = tf.clip_by_value(tf.round(shape * tf.stack([tf.sqrt(area * ratio), tf.sqrt(area / ratio)])),
                            1.0, shape)
    begin = tf.cast(tf.floor((shape - size + 1) * tf.stack([y, x])), tf.int32)
    size = tf.cast(size, tf.int32)
    return tf.slice(image, tf.concat([begin, [0]], 0), tf.concat([size, [3]], 0))


def _trimmed(lengths, batch, index, inputs, labels):
    """A NaFlex batch at its own length (its elements are padded to the longest)."""
    length = tf.gather(lengths, index[0])
    return {"patches": inputs["patches"][:, :length], "patch_mask": inputs["patch_mask"][:, :length],
            "spatial_shapes": inputs["spatial_shapes"]}, labels


def _naflex_padded(image, patch_size, length, longest, scaling):
    """`naflex_example` of `image` at `length` patches, padded to `longest`."""
    inputs = naflex_example(image, patch_size, length, *_naflex_scaling(scaling))
    pad = longest - length
    return {"patches": tf.pad(inputs["patches"], [[0, pad], [0, 0]]),
            "patch_mask": tf.pad(inputs["patch_mask"], [[0, pad]]),
            "spatial_shapes": inputs["spatial_shapes"]}


def _naflex_scaling(scaling):
    """``(pixel_scale, pixel_offset)`` with None as [-1, 1]'s, as `normalize`."""
    scale, offset = scaling
    return (1 / 127.5 if scale is None else scale), (-1.0 if offset is None else offset)


class _Schedule:
    """Which batch each element of a NaFlex stream is in, and its length.

    The batches come in cycles of one batch per length in `lengths`, in an
    order drawn from (seed, cycle) when `shuffled`; a batch of length L holds
    ``budget // L`` elements, so every cycle holds the same elements and
    batch k's first element is known from k alone."""

    def __init__(self, lengths, budget, seed, shuffled):
        self.sizes_list = [budget // length for length in lengths]
        self.lengths = tf.constant(lengths, tf.int64)
        self.sizes = tf.constant(self.sizes_list, tf.int64)
        self.count, self.cycle = len(lengths), sum(self.sizes_list)
        self.key = tf.random.experimental.stateless_fold_in(tf.constant([seed, 0], tf.int64), _BATCH)
        self.shuffled = shuffled and len(lengths) > 1

    def order(self, cycle):
        """The length indices of the batches of `cycle`, in their order."""
        indices = tf.range(self.count, dtype=tf.int64)
        if not self.shuffled:
            return indices
        key = tf.random.experimental.stateless_fold_in(self.key, cycle)
        return tf.random.experimental.index_shuffle(indices, key, self.count - 1)

    def batch_of(self, j):
        """(batch index, length index) of stream element `j`."""
        cycle, offset = j // self.cycle, j % self.cycle
        order = self.order(cycle)
        ends = tf.cumsum(tf.gather(self.sizes, order))
        position = tf.searchsorted(ends, offset[None], side="right", out_type=tf.int64)[0]
        return cycle * self.count + position, order[position]

    def size(self, batch):
        """The number of elements of batch `batch` (int64)."""
        return tf.gather(self.sizes, self.order(batch // self.count)[batch % self.count])

    def first_element(self, batch):
        """The stream index of the first element of batch `batch`."""
        batch = tf.constant(batch, tf.int64)
        order = self.order(batch // self.count)[:batch % self.count]
        return batch // self.count * self.cycle + tf.reduce_sum(tf.gather(self.sizes, order))


def _check_naflex(options):
    """NaFlex mode's own arguments checked: returns the patch size and the
    sorted sequence lengths."""
    budget, lengths = options["max_num_patches"], options["seq_lens"]
    if options["image_size"] is not None:
        raise ValueError(
            f"`image_size` ({options['image_size']!r}) with `max_num_patches`: NaFlex keeps each "
            "image's size and aspect ratio within the patch budget. Leave `image_size` out.")
    if options["patch_size"] is None or budget is None:
        raise ValueError("NaFlex mode needs both `patch_size` and `max_num_patches`: the model's "
                         "(`model.patch_size`, `model.max_num_patches`).")
    patch_size = pair(options["patch_size"], "patch_size")
    if not is_int(budget, 1):
        raise ValueError(f"`max_num_patches` must be an int >= 1, got {budget!r}: a budget below one "
                         "patch leaves no room for any image. Give the model's, e.g. 256.")
    lengths = (budget,) if lengths is None else tuple(lengths)
    if not lengths or not all(is_int(length, 1) and length <= budget for length in lengths):
        raise ValueError(f"`seq_lens` must be ints in [1, max_num_patches={budget}], e.g. "
                         f"({max(1, budget // 4)}, {max(1, budget // 2)}, {budget}); got {options['seq_lens']!r}.")
    if not options["training"] and lengths != (budget,):
        raise ValueError("`seq_lens` is for training; evaluation pads every image to "
                         "`max_num_patches`. Leave `seq_lens` out.")
    if options["shard"] is not None and options["shard"][1] != 1:
        raise ValueError(f"`shard` {options['shard']!r}: a NaFlex stream is not yet split between "
                         "hosts (its batches differ in size). Read it on one host (shard=None).")
    if any(options["augment"]):
        raise ValueError("RandAugment, MixUp and CutMix work on batches of one image size; NaFlex's "
                         "images keep their own. Leave `randaugment`, `mixup` and `cutmix` out.")
    return patch_size, tuple(sorted(set(lengths)))


def _part(source, shard, batch_size, drop_remainder):
    """``(part, index, count)``: the part of `source` that `shard` (None or
    ``(index, count)``, checked) reads, refused when it is empty."""
    index, count = _check_shard(shard, batch_size, drop_remainder)
    part = source.shard(index, count)
    if part.num_examples < 1:
        raise ValueError(
            f"Part {index + 1} of {count} of {source.name!r} split {source.split!r} has no "
            f"examples: the split has {source.num_examples}, fewer than the {count} shards."
        )
    return part, index, count


def _source(source, split, data_dir):
    """`source` as a `Source`: loaded by name with its `split`, or as given."""
    if isinstance(source, Source):
        if split is not None:
            raise ValueError(
                f"`split` ({split!r}) is for loading a dataset by name; a Source (here "
                f"{source.name!r}, split {source.split!r}) is already one split. Leave `split` out."
            )
        return source
    if split is None:
        raise ValueError(f"`split` is required when `source` is a name ({source!r}), e.g. split='train'.")
    return load_source(source, split, data_dir=data_dir)


def _check_arguments(source, preprocess, area_range, batch_size, shuffle_buffer, start_batch,
                     seed, **flags):
    """`input_pipeline`'s arguments checked, each error naming the argument;
    returns the crops' area range (the preprocessing's default for None)."""
    if preprocess not in preprocessing.PREPROCESSING:
        raise ValueError(
            f"`preprocess` must be one of {preprocessing.PREPROCESSING}, got {preprocess!r}."
        )
    area_range = _check_area_range(area_range or preprocessing.AREA_RANGES.get(preprocess))
    for name, value in (("batch_size", batch_size), ("shuffle_buffer", shuffle_buffer)):
        if not is_int(value, 1):
            raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    if not is_int(start_batch, 0):
        raise ValueError(f"`start_batch` must be an int >= 0, got {start_batch!r}.")
    if not is_int(seed):
        raise ValueError(f"`seed` must be an int, got {seed!r}.")
    if source.num_examples < 1:
        raise ValueError(f"Source {source.name!r} split {source.split!r} has no examples.")
    for name, value in flags.items():  # training, repeat, drop_remainder, flip
        if not isinstance(value, bool):
            raise ValueError(f"`{name}` must be True or False, got {value!r}.")
    return area_range


def _elements(part, element, training, repeat, first, shuffle_buffer, shuffle_key):
    """The stream of `element(j, record)` from element `first` on: epochs of
    `part` (a `Source`) in order, or shuffled per epoch with keys from
    `shuffle_key` when `training`; without end when `repeat`."""
    n = part.num_examples

    def epoch_key(index):
        return tf.random.experimental.stateless_fold_in(shuffle_key, index)

    if training and part.table is not None:
        # Random access: element j is example shuffle_e(j mod n) of epoch
        # e = j // n, a permutation drawn from (seed, e) and evaluated at one
        # index (no buffer, any start at no cost); the record is read in the
        # same parallel map as it is decoded.
        table = {key: tf.constant(values) for key, values in part.table.items()}

        def indexed(j):
            index = tf.random.experimental.index_shuffle(j % n, epoch_key(j // n), n - 1)
            return element(j, {key: tf.gather(values, index) for key, values in table.items()})

        return tf.data.Dataset.range(first, tf.int64.max if repeat else n).map(
            indexed, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    def epoch(index):
        """The records of epoch `index`: in source order, or shuffled
        (encoded) with a seed made from (seed, index) when training."""
        if not training:
            return part.records
        # Dataset.shuffle mixes its seed with the graph-level seed, which
        # is TensorFlow's global seed unless set here, in this graph.
        tf.compat.v1.random.set_random_seed(1)
        epoch_seed = tf.random.stateless_uniform([], epoch_key(index), minval=None, maxval=None,
                                                 dtype=tf.int64)
        return part.records.shuffle(shuffle_buffer, seed=epoch_seed, reshuffle_each_iteration=False)

    first_epoch, offset = divmod(first, n)
    epochs = tf.data.Dataset.range(first_epoch, tf.int64.max if repeat else 1)
    examples = epochs.flat_map(epoch).skip(offset).enumerate(start=first)  # skipped still encoded
    return examples.map(element, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def concatenate_shards(datasets):
    """The global batches of sharded pipelines: batch k of every dataset in
    `datasets` (each a tuple of tensors per batch, e.g. the shards of an
    `input_pipeline`), concatenated along the batch in their order. One
    dataset is returned as it is."""
    if len(datasets) == 1:
        return datasets[0]
    return tf.data.Dataset.zip(tuple(datasets)).map(
        lambda *shards: tuple(tf.concat(parts, axis=0) for parts in zip(*shards)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    )


def _options():
    """tf.data's host settings, as big_vision sets them: ops inside a map
    run on one thread each (the pipeline is parallel across elements)."""
    options = tf.data.Options()
    options.deterministic = True
    options.threading.max_intra_op_parallelism = 1
    return options


def _num_batches(num_examples, batch_size, drop_remainder):
    if num_examples <= 0:
        return 0
    return num_examples // batch_size if drop_remainder else -(-num_examples // batch_size)


def _check_shard(shard, batch_size, drop_remainder):
    if shard is None:
        return 0, 1
    try:
        index, count = shard
        valid = is_int(index) and is_int(count) and 0 <= index < count
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(f"`shard` must be (index, count) with 0 <= index < count, got {shard!r}.")
    if batch_size % count:
        raise ValueError(
            f"`batch_size` {batch_size} does not split into {count} equal shards; use a multiple of {count}."
        )
    if count > 1 and not drop_remainder:
        raise ValueError("A sharded pipeline needs `drop_remainder=True`: every shard gets full batches.")
    return index, count


def _check_area_range(area_range):
    if area_range is None:
        return None
    try:
        low, high = (float(v) for v in area_range)
        valid = 0 < low <= high <= 1
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(
            f"`area_range` must be (min, max) fractions of the image area with 0 < min <= max <= 1, "
            f"e.g. (0.08, 1.0); got {area_range!r}."
        )
    return low, high
