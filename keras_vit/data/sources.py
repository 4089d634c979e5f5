"""Where images come from: the embedded digits, TFDS, or a folder of images.

Every source is a `Source`: a `tf.data.Dataset` of ``{"image": uint8
(H, W, 3), "label": int64}`` in a fixed order, with its class count and
names. Splits use the TFDS syntax everywhere (``"train"``,
``"train[:98%]"``, ``"train[90%:]"``, ``"test[:50]"``, ``"train+test"``).
"""

import dataclasses
import functools
import os

import numpy as np
import tensorflow as tf

from keras_vit.config import is_int
from keras_vit.data import vtab
from keras_vit.data.preprocessing import IMAGE_EXTENSIONS
from keras_vit.data.preprocessing import check_image_file
from keras_vit.data.preprocessing import decode_image
from keras_vit.data.preprocessing import decode_failure
from keras_vit.data.preprocessing import random_crop
from keras_vit.data.preprocessing import random_crop_encoded
from keras_vit.data.preprocessing import to_rgb
from keras_vit.extras import require
from keras_vit.naflex import antialiased_resize_matrix

# TFDS image-classification datasets of the paper and its transfer tasks; any
# other TFDS builder with "image" and "label" features works too.
DATASETS = (
    "cifar10",
    "cifar100",
    "oxford_iiit_pet",
    "oxford_flowers102",
    "imagenet2012",
    "imagenet_v2",
    "caltech101",
    "dtd",
    "eurosat",
    "svhn_cropped",
    "mnist",
)

DIGITS_SIZE = 32
DIGITS_TEST_SIZE = 360
# The digits stretched to random aspect ratios (NaFlex's demo): height / width
# drawn log-uniformly in [1 / STRETCH, STRETCH], the area about 32 x 32 pixels.
STRETCHED_DIGITS = "digits_stretched"
STRETCH = 3.0
_FOLDER_SPLITS = ("train", "test", "validation")
_FOLDER_LAYOUT = (
    "An image folder holds one sub-folder of images per class (root/<class>/<image>.jpg), "
    "or train/ and test/ (or validation/) folders laid out that way."
)


ENCODINGS = ("pixels", "file", "bytes")


@dataclasses.dataclass
class Source:
    """A labelled image dataset, before any preprocessing, its images still
    encoded: an input pipeline shuffles and skips them so, and decodes only
    those it keeps (and of a JPEG, only the crop).

    Attributes:
        records: `tf.data.Dataset` of ``{"image": encoded image, "label":
            int64 scalar}``, in the same order on every pass. The image is
            as `encoding` says.
        name: the dataset name or folder given to `load_source`.
        split: the split as given, e.g. ``"train[:98%]"``.
        num_classes: int. Labels are in ``[0, num_classes)``.
        class_names: list of str, or None when the dataset names none.
        num_examples: int. Length of `records`.
        encoding: ``"pixels"`` (uint8 (H, W, 3): the digits, or any
            decoded dataset), ``"file"`` (the path of an image file: an
            image folder) or ``"bytes"`` (the bytes of a JPEG, PNG, GIF or
            BMP file: TFDS).
        files: list of str, or None. An image folder's files, in the order
            of `records`; None for other sources.
        image_shape: the static shape of the decoded images, e.g. (32, 32,
            3) for CIFAR, (None, None, 3) when they differ.
        table: None, or the records as arrays ``{"image": (n, ...), "label":
            (n,)}`` for random access: an input pipeline then shuffles the
            indices of a whole epoch, with no shuffle buffer, and starts
            anywhere in it at no cost.
        reader: None, or ``f(index, count)`` -> the `Source` of part
            `index` of `count`, read as such (TFDS reads only that part's
            files); see `shard`.
    """

    records: tf.data.Dataset
    name: str
    split: str
    num_classes: int
    class_names: list | None
    num_examples: int
    encoding: str = "pixels"
    files: list | None = None
    image_shape: tuple = (None, None, 3)
    table: dict | None = None
    reader: object = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.encoding not in ENCODINGS:
            raise ValueError(f"Source `encoding` must be one of {ENCODINGS}, got {self.encoding!r}.")

    @property
    def dataset(self):
        """The decoded examples: `tf.data.Dataset` of ``{"image": uint8
        (H, W, 3), "label": int64}``, in the order of `records`."""
        if self.encoding == "pixels":
            return self.records
        return self.records.map(lambda record: {**record, "image": self.decode(record["image"])},
                                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    def decode(self, image):
        """One record's image -> uint8 (H, W, 3)."""
        if self.encoding == "pixels":
            return image
        if self.encoding == "file":
            image = tf.io.read_file(image)
        image = decode_image(image)
        image.set_shape(self.image_shape)
        return image

    def random_crop(self, image, key, size, area_range, flip):
        """`preprocessing.random_crop` of one record's image, decoding no
        more of it than the crop needs (`random_crop_encoded`)."""
        if self.encoding == "pixels":
            return random_crop(image, key, size, area_range, flip)
        if self.encoding == "file":
            image = tf.io.read_file(image)
        return random_crop_encoded(image, key, size, area_range, flip)

    def shard(self, index, count):
        """Part `index` of `count`: the examples
        ``[index * n // count, (index + 1) * n // count)`` of this source's
        n (TFDS: `tfds.even_splits`, which reads only that part's files).
        The parts are disjoint, their sizes differ by at most one, and
        together they are the source: one host's share of the data.
        """
        if not (is_int(index) and is_int(count) and 0 <= index < count):
            raise ValueError(f"A source's part must be (index, count) with 0 <= index < count, "
                             f"got ({index!r}, {count!r}).")
        if count == 1:
            return self
        if self.reader is not None:
            return self.reader(index, count)
        start, stop = self.num_examples * index // count, self.num_examples * (index + 1) // count
        if self.table is not None:
            table = {key: values[start:stop] for key, values in self.table.items()}
            records = tf.data.Dataset.from_tensor_slices(table)
        else:
            table, records = None, self.records.skip(start).take(stop - start)
        files = None if self.files is None else self.files[start:stop]
        return dataclasses.replace(self, records=records, num_examples=stop - start, table=table,
                                   files=files, split=f"{self.split} (part {index + 1} of {count})")


def load_source(name, split, data_dir=None):
    """The labelled images of one split of a dataset.

    Args:
        name: ``"digits"`` (scikit-learn's 8x8 digits, embedded: 1437
            training and 360 test images, upscaled to 32x32 RGB),
            ``"digits_stretched"`` (the same digits, each stretched to its own
            aspect ratio between 1:3 and 3:1, about 32x32 pixels in area,
            as PNG: images of many shapes, for NaFlex), the name of
            a TFDS image-classification dataset (see `DATASETS`), a VTAB-1k
            task as ``"vtab/<task>"`` (`keras_vit.data.VTAB_TASKS`; its
            splits are ``train800``, ``val200``, ``train800val200``,
            ``train``, ``val``, ``trainval`` and ``test``), or the path
            of an image folder (one sub-folder per class).
        split: a split in TFDS syntax, e.g. ``"train"``, ``"test"``,
            ``"train[:98%]"``, ``"train[98%:]"``, ``"validation"``.
        data_dir: where TFDS keeps its data (TFDS's default when None).

    Returns:
        A `Source`.

    Examples:
        ```python
        import os
        import numpy as np
        import tensorflow as tf
        from keras_vit.data import load_source

        rng = np.random.default_rng(0)
        for name in ("cat", "dog"):                      # pets/cat/*.png, pets/dog/*.png
            os.makedirs(f"pets/{name}", exist_ok=True)
            for i in range(5):
                pixels = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
                tf.io.write_file(f"pets/{name}/{i}.png", tf.io.encode_png(pixels))

        source = load_source("pets", "train[:80%]")
        print(source.num_examples, source.num_classes, source.class_names)   # -> 8 2 ['cat', 'dog']
        print(load_source("pets", "train[80%:]").num_examples)               # -> 2

        digits = load_source("digits", "test")
        print(digits.num_examples, tuple(digits.dataset.element_spec["image"].shape))  # -> 360 (32, 32, 3)
        ```
    """
    if not isinstance(split, str) or not split:
        raise ValueError(f"`split` must be a split name such as 'train' or 'train[:90%]', got {split!r}.")
    if name == "digits":
        return _digits_source(split)
    if name == STRETCHED_DIGITS:
        return _stretched_digits_source(split)
    path = os.path.expanduser(os.fspath(name))
    if os.path.isdir(path):
        return _folder_source(path, split)
    if isinstance(name, str) and name.startswith(vtab.PREFIX):
        return vtab_source(name, split, data_dir)
    return _tfds_source(name, split, data_dir)


def vtab_source(name, split, data_dir=None):
    """The `Source` of one named split (`keras_vit.data.vtab.SPLITS`) of a
    VTAB-1k task (``"vtab/clevr_count"``): its images, and its labels as the
    task defines them; `load_source` reads ``"vtab/<task>"`` through this."""
    task = vtab.vtab_task(name)
    if task.dataset == vtab.VTAB_DIGITS.dataset:
        source = load_source("digits", task.split(split))
    else:
        builder = prepared_builder(task.dataset, data_dir)
        sizes = {key: info.num_examples for key, info in builder.info.splits.items()}
        source = tfds_source(builder, task.dataset, task.split(split, sizes), label=task.label,
                             num_classes=task.num_classes, pixel_scale=task.pixel_scale)
    return dataclasses.replace(source, name=vtab.PREFIX + task.name, split=split)


def _slices(name, split, sizes):
    """[(split name, start, stop), ...] that the TFDS-syntax `split` selects
    from splits of the given `sizes` ({name: number of examples})."""
    tfds = _tfds()
    infos = {
        key: tfds.core.SplitInfo(name=key, shard_lengths=[size], num_bytes=0)
        for key, size in sizes.items()
    }
    try:
        instructions = tfds.core.ReadInstruction.from_spec(split).to_absolute(infos)
    except (ValueError, AssertionError) as err:
        available = ", ".join(f"{key} ({size} examples)" for key, size in sizes.items())
        raise ValueError(
            f"Split {split!r} of {name!r} cannot be read: {err}\nIts splits: {available}. Slice "
            "them as TFDS does, e.g. 'train[:90%]', 'train[90%:]' or 'test[:50]'."
        ) from None
    return [(i.splitname, i.from_ or 0, sizes[i.splitname] if i.to is None else i.to)
            for i in instructions]


# -- digits ------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _digits_arrays():
    """{"train": (images, labels), "test": (images, labels)}: scikit-learn's
    1797 digits as uint8 (n, 32, 32, 3) and int64 (n,), split by a fixed
    permutation."""
    require("sklearn", "The embedded digits (scikit-learn's load_digits)")
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images[..., None].astype("float32") * (255.0 / 16.0)
    images = tf.image.resize(images, (DIGITS_SIZE, DIGITS_SIZE), method="bilinear").numpy()
    images = np.repeat(np.clip(np.round(images), 0, 255).astype("uint8"), 3, axis=-1)
    labels = digits.target.astype("int64")
    order = np.random.default_rng(0).permutation(len(labels))
    train, test = order[:-DIGITS_TEST_SIZE], order[-DIGITS_TEST_SIZE:]
    return {"train": (images[train], labels[train]), "test": (images[test], labels[test])}


def _digits_source(split):
    arrays = _digits_arrays()
    sizes = {key: len(labels) for key, (_, labels) in arrays.items()}
    parts = [(arrays[key][0][start:stop], arrays[key][1][start:stop])
             for key, start, stop in _slices("digits", split, sizes)]
    images = np.concatenate([images for images, _ in parts])
    labels = np.concatenate([labels for _, labels in parts])
    table = {"image": images, "label": labels}
    return Source(tf.data.Dataset.from_tensor_slices(table), "digits", split, 10,
                  [str(i) for i in range(10)], len(labels), table=table)


@functools.lru_cache(maxsize=1)
def _stretched_digits_arrays():
    """`_digits_arrays` with each image stretched to an aspect ratio of its
    own (fixed: np.random.default_rng(1)), as PNG bytes."""
    rng = np.random.default_rng(1)
    arrays = {}
    for key, (images, labels) in _digits_arrays().items():
        ratios = np.exp(rng.uniform(-np.log(STRETCH), np.log(STRETCH), len(images)))
        encoded = []
        for image, ratio in zip(images, ratios):
            size = (max(1, round(DIGITS_SIZE * ratio ** 0.5)), max(1, round(DIGITS_SIZE / ratio ** 0.5)))
            rows, cols = (antialiased_resize_matrix(DIGITS_SIZE, n) for n in size)
            stretched = np.einsum("hH,HWc,wW->hwc", rows, image.astype(np.float64), cols, optimize=True)
            encoded.append(tf.io.encode_png(np.clip(np.round(stretched), 0, 255).astype(np.uint8)).numpy())
        arrays[key] = (np.array(encoded, dtype=object), labels)
    return arrays


def _stretched_digits_source(split):
    arrays = _stretched_digits_arrays()
    sizes = {key: len(labels) for key, (_, labels) in arrays.items()}
    parts = [(arrays[key][0][start:stop], arrays[key][1][start:stop])
             for key, start, stop in _slices(STRETCHED_DIGITS, split, sizes)]
    table = {"image": np.concatenate([images for images, _ in parts]),
             "label": np.concatenate([labels for _, labels in parts])}
    return Source(tf.data.Dataset.from_tensor_slices(table), STRETCHED_DIGITS, split, 10,
                  [str(i) for i in range(10)], len(table["label"]), "bytes", table=table)


# -- image folders -----------------------------------------------------------


def _visible_entries(path):
    return sorted(entry for entry in os.listdir(path) if not entry.startswith("."))


def _subfolders(path):
    return [entry for entry in _visible_entries(path) if os.path.isdir(os.path.join(path, entry))]


def _folder_splits(root):
    """{split: folder}: train/ and test/ (or validation/) when both kinds are
    there, else the whole folder as "train"."""
    if not _visible_entries(root):
        raise ValueError(f"Image folder {root} is empty. {_FOLDER_LAYOUT}")
    folders = set(_subfolders(root))
    if "train" in folders and folders & {"test", "validation"}:
        return {key: os.path.join(root, key) for key in _FOLDER_SPLITS if key in folders}
    return {"train": root}


def _folder_files(folder, class_names):
    """(paths, labels) of the images under `folder`/<class>/, sorted, then in
    the fixed order of np.random.default_rng(0)."""
    paths, labels = [], []
    for class_name in _subfolders(folder):
        if class_name not in class_names:
            raise ValueError(
                f"Class folder {os.path.join(folder, class_name)} has no counterpart among the "
                f"training classes {class_names}. Every split must use the training split's classes."
            )
        class_dir = os.path.join(folder, class_name)
        files = [os.path.join(class_dir, entry) for entry in _visible_entries(class_dir)
                 if entry.lower().endswith(IMAGE_EXTENSIONS)]
        if not files:
            raise ValueError(
                f"Class folder {class_dir} has no images (files ending in "
                f"{', '.join(IMAGE_EXTENSIONS)}). Add images or remove the folder."
            )
        paths += files
        labels += [class_names.index(class_name)] * len(files)
    order = np.random.default_rng(0).permutation(len(paths))
    return [paths[i] for i in order], [labels[i] for i in order]


def _folder_source(root, split):
    folders = _folder_splits(root)
    class_names = _subfolders(folders["train"])
    if not class_names:
        raise ValueError(f"Image folder {folders['train']} has no class sub-folders. {_FOLDER_LAYOUT}")
    files = {key: _folder_files(folder, class_names) for key, folder in folders.items()}
    paths, labels = [], []
    for key, start, stop in _slices(root, split, {key: len(p) for key, (p, _) in files.items()}):
        paths += files[key][0][start:stop]
        labels += files[key][1][start:stop]
    _check_files(paths)
    table = {"image": np.array(paths, dtype=object), "label": np.array(labels, dtype=np.int64)}
    return Source(tf.data.Dataset.from_tensor_slices(table), root, split, len(class_names), class_names,
                  len(paths), "file", paths, table=table)


def _check_files(paths, shown=5):
    """Refuses a folder with any file `check_image_file` refuses, naming
    the first on the first line and listing `shown` in all, before any
    training starts."""
    problems = []
    for path in paths:
        try:
            check_image_file(path)
        except (OSError, ValueError) as error:
            problems.append(str(error))
    if len(problems) > 1:
        listed = problems[1:shown]
        more = f"\n  ... and {len(problems) - shown} more" if len(problems) > shown else ""
        raise ValueError(f"{problems[0]}\n{len(problems) - 1} more of the {len(paths)} image files "
                         "cannot be used either:\n  " + "\n  ".join(listed) + more)
    if problems:
        raise ValueError(problems[0])


def unreadable_files(source):
    """``{path: why}`` for the files of an image-folder `source` that
    TensorFlow cannot decode (each fully decoded: slow, for after a decoding
    error); empty for other sources."""
    failures = {path: decode_failure(path) for path in source.files or ()}
    return {path: why for path, why in failures.items() if why is not None}


# -- TFDS --------------------------------------------------------------------


def _tfds():
    """TensorFlow Datasets, which reads TFDS datasets and slices every
    source's splits; imported when first used."""
    return require("tensorflow_datasets", "Reading a dataset's splits (TFDS)")


def prepared_builder(name, data_dir=None):
    """The TFDS builder of `name` (``"cifar100"``, ``"clevr:3.*.*"``), its
    data prepared: downloaded and prepared here when it is not yet in
    `data_dir`, or a clear error naming how to prepare it elsewhere."""
    tfds = _tfds()
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except ValueError:  # DatasetNotFoundError, or a name TFDS cannot parse (a path)
        raise ValueError(
            f"Unknown dataset {name!r}: it is not 'digits', not a TFDS dataset, and no folder "
            f"{os.path.abspath(os.path.expanduser(name))} exists. TFDS datasets known to work: "
            f"{', '.join(DATASETS)} (any TFDS image-classification dataset is tried), and the "
            f"VTAB-1k tasks as 'vtab/<task>'. {_FOLDER_LAYOUT}"
        ) from None
    if not builder.is_prepared():
        try:
            builder.download_and_prepare()
        except Exception as err:  # a download needs the network, some datasets a manual step
            raise RuntimeError(
                f"TFDS dataset {name!r} is not in {builder.data_dir} and could not be downloaded "
                f"and prepared ({type(err).__name__}: {err}). Prepare it on a machine with network "
                f"access (`tfds build {name.split(':')[0]} --data_dir=...`; imagenet2012 needs its "
                "archives in the manual download folder first, see the TFDS catalog) and pass that "
                "data_dir."
            ) from err
    return builder


def _tfds_source(name, split, data_dir):
    return tfds_source(prepared_builder(name, data_dir), name, split)


def tfds_source(builder, name, split, label=None, num_classes=None, pixel_scale=1):
    """The `Source` of `split` of a prepared TFDS `builder`.

    Args:
        builder: from `prepared_builder`.
        name: the dataset's name, for messages.
        split: TFDS split syntax.
        label: None (the ``"label"`` class feature), or ``f(example,
            features)`` -> int64, the label computed from each example
            (VTAB's structured tasks).
        num_classes: the classes of a computed `label`.
        pixel_scale: the decoded images are multiplied by it (1: they stay
            encoded until the pipeline decodes them).
    """
    tfds = _tfds()
    features = builder.info.features
    if "image" not in features or (label is None and not (
            "label" in features and isinstance(features["label"], tfds.features.ClassLabel))):
        raise ValueError(
            f"TFDS dataset {name!r} has features {sorted(features)}: an image-classification "
            "dataset needs an 'image' and a class 'label' feature."
        )
    key = getattr(label, "feature", None) if label is not None else "label"
    class_feature = features[key] if key else None
    if label is None:
        num_classes = class_feature.num_classes
    class_names = list(class_feature.names) if isinstance(
        class_feature, tfds.features.ClassLabel) and class_feature.num_classes == num_classes else None
    encoded = isinstance(features["image"], tfds.features.Image) and pixel_scale == 1

    def example_record(example):
        image = example["image"]
        if not encoded:
            image = to_rgb(image) * tf.cast(pixel_scale, image.dtype)
        value = tf.cast(example["label"], tf.int64) if label is None else label(example, features)
        return {"image": image, "label": value}

    def read(part, index=0, count=1):
        """The `Source` of `part`: the images still encoded (TFDS's
        `SkipDecoding`) when the feature is an image file."""
        try:
            dataset = builder.as_dataset(
                split=part, shuffle_files=False,
                decoders={"image": tfds.decode.SkipDecoding()} if encoded else None,
            )
        except ValueError as err:
            raise ValueError(
                f"Split {split!r} of TFDS dataset {name!r} cannot be read: {err}\nIts splits: "
                f"{', '.join(builder.info.splits) or 'unknown'}; slices as 'train[:98%]'."
            ) from None
        num_examples = int(dataset.cardinality())
        if num_examples < 0:
            num_examples = builder.info.splits[part].num_examples
        dataset = dataset.map(example_record, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        described = split if count == 1 else f"{split} (part {index + 1} of {count})"
        return Source(dataset, name, described, num_classes, class_names, num_examples,
                      "bytes" if encoded else "pixels", image_shape=(*features["image"].shape[:2], 3),
                      reader=lambda i, n: read(tfds.even_splits(split, n)[i], i, n))

    return read(split)
