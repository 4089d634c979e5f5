"""The paper's evaluation protocols, with the published numbers beside ours:
ImageNet (top-1, top-5) with ReaL labels, ImageNet-v2, -Sketch, -A and -R;
the transfer sets of Table 2 (CIFAR-10/100, Pets, Flowers); VTAB-1k's 19
tasks; DINO's k-NN, a linear probe and the paper's few-shot linear
evaluation on frozen features; zero-shot. One
call (`evaluate_protocols`, ``keras-vit evaluate --benchmark``) runs any of
them on TensorFlow, JAX or PyTorch (docs/evaluation.md)."""

import typing

from keras_vit.lazy import import_lazily

# Each name imports its own module when first used: the scores (metrics)
# and label sets (imagenet) import neither Keras nor TensorFlow, the VTAB
# tasks (keras_vit.data) TensorFlow, and the protocols Keras when they run.
_NAMES = {
    "IMAGENET_A_INDICES": "keras_vit.evaluation.imagenet",
    "IMAGENET_R_INDICES": "keras_vit.evaluation.imagenet",
    "imagenet_real_labels": "keras_vit.evaluation.imagenet",
    "knn_accuracy": "keras_vit.evaluation.metrics",
    "knn_predictions": "keras_vit.evaluation.metrics",
    "few_shot_from_features": "keras_vit.evaluation.metrics",
    "linear_few_shot_accuracy": "keras_vit.evaluation.metrics",
    "linear_probe": "keras_vit.evaluation.metrics",
    "linear_probe_accuracy": "keras_vit.evaluation.metrics",
    "real_accuracy": "keras_vit.evaluation.metrics",
    "subset_predictions": "keras_vit.evaluation.metrics",
    "top_k_accuracy": "keras_vit.evaluation.metrics",
    "PROTOCOLS": "keras_vit.evaluation.protocols",
    "Protocol": "keras_vit.evaluation.protocols",
    "evaluate_protocols": "keras_vit.evaluation.protocols",
    "published_numbers": "keras_vit.evaluation.protocols",
    "vtab_means": "keras_vit.evaluation.protocols",
    # deprecated names of the three above, for one version
    "BENCHMARKS": "keras_vit.evaluation.protocols",
    "Benchmark": "keras_vit.evaluation.protocols",
    "evaluate_benchmarks": "keras_vit.evaluation.protocols",
    "VTAB_TASKS": "keras_vit.data.vtab",
    "VTAB_DIGITS": "keras_vit.data.vtab",
    "VtabTask": "keras_vit.data.vtab",
}

__all__ = sorted(_NAMES)

if typing.TYPE_CHECKING:  # the same names, for readers of the source (Griffe, type checkers)
    from keras_vit.data.vtab import VTAB_DIGITS
    from keras_vit.data.vtab import VTAB_TASKS
    from keras_vit.data.vtab import VtabTask
    from keras_vit.evaluation.protocols import BENCHMARKS
    from keras_vit.evaluation.protocols import PROTOCOLS
    from keras_vit.evaluation.protocols import Benchmark
    from keras_vit.evaluation.protocols import Protocol
    from keras_vit.evaluation.protocols import evaluate_benchmarks
    from keras_vit.evaluation.protocols import evaluate_protocols
    from keras_vit.evaluation.protocols import published_numbers
    from keras_vit.evaluation.protocols import vtab_means
    from keras_vit.evaluation.imagenet import IMAGENET_A_INDICES
    from keras_vit.evaluation.imagenet import IMAGENET_R_INDICES
    from keras_vit.evaluation.imagenet import imagenet_real_labels
    from keras_vit.evaluation.metrics import knn_accuracy
    from keras_vit.evaluation.metrics import few_shot_from_features
    from keras_vit.evaluation.metrics import knn_predictions
    from keras_vit.evaluation.metrics import linear_few_shot_accuracy
    from keras_vit.evaluation.metrics import linear_probe
    from keras_vit.evaluation.metrics import linear_probe_accuracy
    from keras_vit.evaluation.metrics import real_accuracy
    from keras_vit.evaluation.metrics import subset_predictions
    from keras_vit.evaluation.metrics import top_k_accuracy

import_lazily(__name__, _NAMES, by_module=True)
