"""ImageNet's evaluation label sets, shipped with the package.

- ``data/imagenet_real_labels.json``: the ReaL labels (Beyer et al., 2020,
  "Are we done with ImageNet?"), google-research/reassessed-imagenet
  ``real.json`` at bcd006fe (Apache-2.0), unchanged: 50,000 lists of
  ImageNet class ids, one per validation image in file order
  (``ILSVRC2012_val_00000001.JPEG`` first). timm ships the same file.
- ``data/imagenet_a_indices.txt``, ``data/imagenet_r_indices.txt``: the 200
  ImageNet-1k classes that ImageNet-A (Hendrycks et al., 2021, "Natural
  Adversarial Examples") and ImageNet-R (Hendrycks et al., 2021, "The Many
  Faces of Robustness") cover, ascending: timm's
  ``timm/data/_info/imagenet_{a,r}_indices.txt`` (Apache-2.0), whose
  synsets are the datasets' own class folders.
"""

import functools
import importlib.resources
import json


def _data(name):
    return importlib.resources.files("keras_vit.evaluation").joinpath("data", name).read_text("utf-8")


def _indices(name):
    return tuple(int(line) for line in _data(name).split())


IMAGENET_A_INDICES = _indices("imagenet_a_indices.txt")
IMAGENET_R_INDICES = _indices("imagenet_r_indices.txt")
REAL_IMAGES = 50_000  # ImageNet's validation images
REAL_SCORED = 46_837  # those with a non-empty set of real labels


@functools.lru_cache(maxsize=1)
def _real_labels():
    return tuple(tuple(labels) for labels in json.loads(_data("imagenet_real_labels.json")))


def imagenet_real_labels():
    """The ReaL labels of ImageNet's 50,000 validation images, in file order
    (``ILSVRC2012_val_00000001.JPEG`` first): a list of lists of ImageNet
    class ids; 3,163 are empty (no label the raters agreed on), and
    `real_accuracy` leaves those out.

    Examples:
        ```python
        from keras_vit.evaluation import imagenet_real_labels

        labels = imagenet_real_labels()
        print(len(labels), labels[1], sum(1 for x in labels if x))   # -> 50000 [970, 795] 46837
        ```
    """
    return [list(labels) for labels in _real_labels()]
