"""VTAB-1k (Zhai et al., 2019, "A Large-scale Study of Representation
Learning with the Visual Task Adaptation Benchmark"): its 19 tasks as data,
each a labelled image dataset that `load_source` reads as ``"vtab/<task>"``.

Every task is as google-research/task_adaptation defines it
(``task_adaptation/data/*.py`` at d7630d3c, the tasks of
``scripts/run_all_tasks.sh``): its TFDS dataset and version, how its splits
are carved, the image, and the label, with the same constants. The groups
are the VTAB paper's. Each task has the same named splits:

- ``train800``, ``val200``, ``train800val200``: the 1,000 labelled
  examples of VTAB-1k (800 to train on and 200 to choose the learning rate
  on; both together for the final run);
- ``train``, ``val``, ``trainval``, ``test``: the full splits.

How the splits are carved (``carve``), from the sizes TFDS records:

- ``"validation"``: the dataset's own validation split; val200 is
  ``validation[:200]``.
- ``"percent"``: ``train`` is the first ``percent``% of TFDS's train and
  ``val`` the rest; val200 is the first 200 of ``val``.
- ``"percent3"``: train, val and test all from TFDS's train,
  ``percent``% and ``val_percent``% and the rest.
- ``"half_test"``: sNORB: the TFDS test split halved, val the first half.
"""

import dataclasses

import numpy as np
import tensorflow as tf

GROUPS = ("natural", "specialized", "structured")
SPLITS = ("train800", "val200", "train800val200", "train", "val", "trainval", "test")
PREFIX = "vtab/"


# -- labels: each reads one TFDS example (its image still encoded) --------------

def _feature(key):
    def label(example, features):
        return tf.cast(example[key], tf.int64)
    label.feature = key
    return label


def _binned(key, num_classes):
    """dSprites: a factor of `n` values binned into `num_classes`:
    ``floor(value / (n / num_classes))``."""
    def label(example, features):
        factor = features[key].num_classes / num_classes
        return tf.cast(tf.math.floordiv(tf.cast(example[key], tf.float32), factor), tf.int64)
    label.feature = key
    return label


def _clevr_count(example, features):
    """The number of objects in the scene, less 3 (scenes hold 3 to 10)."""
    return tf.cast(tf.size(example["objects"]["size"]) - 3, tf.int64)


def _last_threshold_below(value, thresholds):
    """The largest i with ``thresholds[i] < value``."""
    return tf.cast(tf.reduce_max(tf.where(np.asarray(thresholds, "float32") - value < 0)), tf.int64)


def _clevr_distance(example, features):
    """The depth of the closest object, in 6 bins."""
    depth = tf.reduce_min(example["objects"]["pixel_coords"][:, 2])
    return _last_threshold_below(depth, (0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0))


def _kitti_distance(example, features):
    """The distance of the closest car, van or truck (TFDS types 0-2): up to
    8 m, to 20 m, beyond; or 3 when there is none."""
    vehicles = tf.where(example["objects"]["type"] < 3)
    depth = tf.gather(params=example["objects"]["location"][:, 2], indices=vehicles)
    depth = tf.concat([depth, tf.constant([[1000.0]])], axis=0)
    return _last_threshold_below(tf.reduce_min(depth), (-100.0, 8.0, 20.0, 999.0))


@dataclasses.dataclass(frozen=True)
class VtabTask:
    """One VTAB-1k task.

    Attributes:
        name: the task's name here, e.g. ``"clevr_count"``
            (``load_source("vtab/clevr_count", "train800")``).
        title: its name in the VTAB paper's tables, e.g. ``"Clevr-Count"``.
        group: ``"natural"``, ``"specialized"`` or ``"structured"``.
        dataset: the TFDS builder and version, as task_adaptation names it.
        num_classes: int.
        label: ``f(example, features)`` -> int64 label.
        carve: how the splits are carved (the module's docstring).
        percent: TFDS train's share of ``train`` (``"percent"``, ``"percent3"``).
        val_percent: its share of ``val`` (``"percent3"``).
        test: the TFDS split that ``test`` reads (``"percent"``: CLEVR's is
            ``validation``).
        pixel_scale: the decoded image is multiplied by it (dSprites: its
            images are 0 or 1).
        train_examples: the size of TFDS's train split that task_adaptation
            was written against (its tests), for the carves that cut it by
            percent; the size TFDS records for the prepared data is used when
            it records one.
        registry: the task as task_adaptation's ``run_all_tasks.sh`` names it.
    """

    name: str
    title: str
    group: str
    dataset: str
    num_classes: int
    label: object
    carve: str
    percent: int = 0
    val_percent: int = 0
    test: str = "test"
    pixel_scale: int = 1
    train_examples: int = 0
    registry: str = ""

    def split(self, split, sizes=None):
        """The TFDS split string of the named `split`, from the TFDS split
        sizes `sizes` ({name: examples}; `train_examples` where it has no
        ``"train"``).

        Examples:
            ```python
            from keras_vit.data import VTAB_TASKS

            task = VTAB_TASKS["caltech101"]
            print(task.split("train800val200"))   # -> train[:800]+train[2754:2954]
            ```
        """
        if split not in SPLITS:
            raise ValueError(f"VTAB task {self.name!r} has no split {split!r}: its splits are "
                             f"{', '.join(SPLITS)} (the 1,000 examples of VTAB-1k are train800val200).")
        if self.carve == "validation":
            whole = {"train": "train", "val": "validation", "test": "test", "val200": "validation[:200]"}
        elif self.carve == "half_test":
            whole = {"train": "train", "val": "test[:50%]", "test": "test[50%:]", "val200": "test[:200]"}
        else:
            total = (sizes or {}).get("train") or self.train_examples
            train = self.percent * total // 100
            val = total - train if self.carve == "percent" else self.val_percent * total // 100
            whole = {"train": f"train[:{train}]", "val": f"train[{train}:{train + val}]",
                     "val200": f"train[{train}:{train + 200}]",
                     "test": self.test if self.carve == "percent" else f"train[{train + val}:]"}
        whole["train800"] = "train[:800]"
        whole["train800val200"] = f"{whole['train800']}+{whole['val200']}"
        whole["trainval"] = f"{whole['train']}+{whole['val']}"
        return whole[split]


class _Tasks(dict):
    """`VTAB_TASKS`: {name: `VtabTask`}, in the VTAB paper's order; a key
    that names no task (a position, a misspelling) raises a KeyError that
    names the tasks."""

    def __missing__(self, key):
        raise KeyError(f"VTAB_TASKS has no task {key!r}: it is keyed by the task's name, one of "
                       f"{', '.join(self)}. Index it by name, e.g. VTAB_TASKS[{next(iter(self))!r}]; "
                       "list(VTAB_TASKS.values()) gives the tasks in order.")


def _tasks(*tasks):
    return _Tasks((task.name, task) for task in tasks)


_LABEL = _feature("label")

# The 19 tasks of VTAB-1k, in the order of the VTAB paper's tables.
VTAB_TASKS = _tasks(
    # natural (7)
    VtabTask("caltech101", "Caltech101", "natural", "caltech101:3.*.*", 102, _LABEL, "percent", 90,
             train_examples=3060,
             registry="caltech101"),
    VtabTask("cifar100", "CIFAR-100", "natural", "cifar100:3.*.*", 100, _LABEL, "percent", 90,
             train_examples=50_000,
             registry="cifar(num_classes=100)"),
    VtabTask("dtd", "DTD", "natural", "dtd:3.*.*", 47, _LABEL, "validation", registry="dtd"),
    VtabTask("oxford_flowers102", "Flowers102", "natural", "oxford_flowers102:2.*.*", 102, _LABEL,
             "validation", registry="oxford_flowers102"),
    # task_adaptation reads 3.*.*, which TFDS 4.9 no longer builds; 4.0.0 has the same images
    # and splits, with head boxes added and corrupt images fixed (its release notes)
    VtabTask("oxford_iiit_pet", "Pets", "natural", "oxford_iiit_pet:4.*.*", 37, _LABEL, "percent", 80,
             train_examples=3680,
             registry="oxford_iiit_pet"),
    VtabTask("sun397", "Sun397", "natural", "sun397/tfds:4.*.*", 397, _LABEL, "validation",
             registry="sun397"),
    VtabTask("svhn", "SVHN", "natural", "svhn_cropped:3.*.*", 10, _LABEL, "percent", 90,
             train_examples=73_257,
             registry="svhn"),
    # specialized (4)
    VtabTask("patch_camelyon", "Camelyon", "specialized", "patch_camelyon:2.*.*", 2, _LABEL,
             "validation", registry="patch_camelyon"),
    VtabTask("eurosat", "EuroSAT", "specialized", "eurosat/rgb:2.*.*", 10, _LABEL, "percent3", 60, 20,
             train_examples=27_000,
             registry="eurosat"),
    VtabTask("resisc45", "Resisc45", "specialized", "resisc45:3.*.*", 45, _LABEL, "percent3", 60, 20,
             train_examples=31_500,
             registry="resisc45"),
    VtabTask("diabetic_retinopathy", "Retinopathy", "specialized",
             "diabetic_retinopathy_detection/btgraham-300:3.*.*", 5, _LABEL, "validation",
             registry='diabetic_retinopathy(config="btgraham-300")'),
    # structured (8)
    VtabTask("clevr_count", "Clevr-Count", "structured", "clevr:3.*.*", 8, _clevr_count, "percent", 90,
             test="validation", train_examples=70_000, registry='clevr(task="count_all")'),
    VtabTask("clevr_distance", "Clevr-Dist", "structured", "clevr:3.*.*", 6, _clevr_distance, "percent",
             90, test="validation", train_examples=70_000, registry='clevr(task="closest_object_distance")'),
    VtabTask("dmlab", "DMLab", "structured", "dmlab:2.0.1", 6, _LABEL, "validation", registry="dmlab"),
    VtabTask("kitti_distance", "KITTI-Dist", "structured", "kitti:3.1.0", 4, _kitti_distance,
             "validation", registry='kitti(task="closest_vehicle_distance")'),
    VtabTask("dsprites_location", "dSpr-Loc", "structured", "dsprites:2.*.*", 16,
             _binned("label_x_position", 16), "percent3", 80, 10, pixel_scale=255, train_examples=737_280,
             registry='dsprites(predicted_attribute="label_x_position",num_classes=16)'),
    VtabTask("dsprites_orientation", "dSpr-Ori", "structured", "dsprites:2.*.*", 16,
             _binned("label_orientation", 16), "percent3", 80, 10, pixel_scale=255, train_examples=737_280,
             registry='dsprites(predicted_attribute="label_orientation",num_classes=16)'),
    VtabTask("smallnorb_azimuth", "sNORB-Azim", "structured", "smallnorb:2.*.*", 18,
             _feature("label_azimuth"), "half_test",
             registry='smallnorb(predicted_attribute="label_azimuth")'),
    VtabTask("smallnorb_elevation", "sNORB-Elev", "structured", "smallnorb:2.*.*", 9,
             _feature("label_elevation"), "half_test",
             registry='smallnorb(predicted_attribute="label_elevation")'),
)

# The embedded digits carved as VTAB carves CIFAR (train800 and val200 from
# the 1,437 training images, 60% of them ``train``), and tested on the 360
# test images: a VTAB-1k task that runs anywhere, for demos and tests.
VTAB_DIGITS = VtabTask("digits", "Digits", "natural", "digits", 10, _LABEL, "percent", 60,
                       train_examples=1437)


def vtab_task(name):
    """The `VtabTask` named `name` (``"clevr_count"`` or ``"vtab/clevr_count"``;
    ``"digits"`` is `VTAB_DIGITS`)."""
    if isinstance(name, VtabTask):
        return name
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if key == VTAB_DIGITS.name:
        return VTAB_DIGITS
    if key not in VTAB_TASKS:
        raise ValueError(f"Unknown VTAB-1k task {name!r}: the tasks are {', '.join(VTAB_TASKS)} "
                         f"(and {VTAB_DIGITS.name!r}, the embedded digits carved the same way).")
    return VTAB_TASKS[key]
