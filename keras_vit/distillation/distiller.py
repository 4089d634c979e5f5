"""Distillation as a Keras model that trains with `fit`: DeiT's token
distillation (Touvron et al., ICML 2021, Sec. 5) and logit distillation.

- ``"hard"``, ``"soft"``: a student ViT with a distillation token
  (``ViT(distillation=True)``) learns from the labels through its [class]
  token's head and from the teacher through its distillation token's head,
  by `deit_loss`; it predicts with the two heads' mean.
- ``"logits"``: any student learns from the labels and from the teacher
  through its one output, by DeiT's soft term (`deit_loss` with the
  student's logits in both places).
"""

import keras
from keras import ops

from keras_vit.distillation.losses import cross_entropy
from keras_vit.distillation.losses import check_classes
from keras_vit.distillation.losses import check_distillation
from keras_vit.distillation.losses import deit_loss

# What `Distiller` trains: DeiT's two token kinds, and the logits of any student.
DISTILLATIONS = ("hard", "soft", "logits")


class Distiller(keras.Model):
    """A `student` trained by `fit` against a frozen `teacher` (any Keras
    model from images to logits over the same classes, run in inference
    mode and never trained).

    With ``kind="hard"`` or ``"soft"`` (DeiT's token distillation), training
    calls return the student's two heads' logits, ``(class_logits,
    distillation_logits)``, each ``(batch, classes)``, and the loss is
    `deit_loss` of them and the teacher's logits on the same images. With
    ``kind="logits"``, they return the student's logits and the loss is
    `deit_loss` with those logits in both places: the labels' cross-entropy
    and the soft term, weighed by `alpha`. The teacher gets the batch at its
    own image size (bilinear). Inference calls return the student's
    prediction (for a distillation token, the two heads' mean, as DeiT's
    distilled checkpoints predict), and metrics see it. The distiller
    computes in the student's dtype policy (under ``mixed_float16``,
    `compile` scales the loss); the loss is float32. Save
    ``distiller.student``: a plain `ViT`, with no teacher.

    Args:
        student: a `keras_vit.ViT` (``distillation=True`` for ``"hard"``
            and ``"soft"``).
        teacher: a Keras model from images to ``(batch, classes)`` logits.
        kind: ``"hard"``, ``"soft"`` or ``"logits"`` (`DISTILLATIONS`).
        alpha: the distillation term's weight, in [0, 1].
        tau: the soft term's temperature, > 0.

    Examples:
        ```python
        import numpy as np
        from keras_vit import ViT
        from keras_vit.distillation import Distiller

        small = dict(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                     num_classes=10)
        distiller = Distiller(ViT(distillation=True, **small), ViT(**small), kind="hard")
        distiller.compile(optimizer="adam")
        images, labels = np.zeros((4, 16, 16, 3), "float32"), np.eye(10, dtype="float32")[[0, 1, 2, 3]]
        distiller.fit(images, labels, epochs=1, verbose=0)
        print(distiller.student.predict(images, verbose=0).shape)   # -> (4, 10)
        ```
    """

    def __init__(self, student, teacher, kind="hard", alpha=0.5, tau=1.0, **kwargs):
        _check(student, teacher, kind, alpha, tau)
        kwargs.setdefault("dtype", student.dtype_policy)  # mixed_float16: compile adds loss scaling
        super().__init__(**kwargs)
        self.student = student
        self.teacher = teacher
        self.teacher.trainable = False
        self.kind, self.alpha, self.tau = kind, alpha, tau
        self.loss_kind = _loss_kind(kind)  # deit_loss's kind
        self.heads = None
        if kind != "logits":  # the student's own graph read at its two heads: the same layers, no copy
            parts = student.parts
            self.heads = keras.Model(student.inputs, [parts.head.output, parts.head_dist.output],
                                     name=f"{student.name}_heads")

    def call(self, images, training=None):
        """Training: the student's two heads' logits (token kinds) or its
        logits; otherwise its prediction, ``(batch, classes)``."""
        if training and self.heads is not None:
            return tuple(self.heads(images, training=True))
        return self.student(images, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Training: `deit_loss` of the student's logits `y_pred` and the
        teacher's on `x`; evaluation: the cross-entropy of `y_pred` and `y`."""
        if not training:  # evaluation: the labels' loss of the prediction
            return cross_entropy(y, ops.cast(y_pred, "float32"))
        teacher = self.teacher(self._teacher_images(x), training=False)
        student = tuple(y_pred) if self.heads is not None else (y_pred, y_pred)
        return deit_loss(y, *student, teacher, self.loss_kind, self.alpha, self.tau)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """The compiled metrics of the student's prediction (two heads: their mean)."""
        if isinstance(y_pred, (tuple, list)):  # the two heads: the prediction is their mean
            y_pred = (y_pred[0] + y_pred[1]) / 2
        return super().compute_metrics(x, y, y_pred, sample_weight)

    def _teacher_images(self, images):
        """The batch at the teacher's image size (bilinear), where it differs from the student's."""
        size = tuple(self.teacher.inputs[0].shape[1:3]) if getattr(self.teacher, "inputs", None) else None
        if size is None or None in size or size == tuple(images.shape[1:3]):
            return images
        return ops.image.resize(images, size, interpolation="bilinear")


def _loss_kind(kind):
    """`deit_loss`'s kind for a distillation `kind`: logit distillation is DeiT's soft term."""
    return "soft" if kind == "logits" else kind


def _check(student, teacher, kind, alpha, tau):
    """What `Distiller` cannot train, named with the fix, before any step."""
    if kind not in DISTILLATIONS:
        raise ValueError(f"kind={kind!r} is not a kind of distillation: use 'hard' or 'soft' (DeiT's token "
                         "distillation, for a student with a distillation token) or 'logits' (any student).")
    check_distillation(_loss_kind(kind), alpha, tau)
    config = getattr(student, "config", None)
    if kind != "logits" and not (getattr(config, "distillation", False) and student.parts.head_dist is not None):
        raise ValueError(
            f"kind={kind!r} is DeiT's token distillation: it trains the student's distillation token and its "
            "head, and this student has none. Build it with ViT(..., distillation=True) (DeiT's distilled "
            "models), or distill its logits: kind='logits'.")
    if not isinstance(teacher, keras.Model):
        raise ValueError(f"The teacher must be a Keras model from images to logits, got "
                         f"{type(teacher).__name__}: load it first (keras_vit.load_model(path)).")
    check_classes(*(model.outputs[0].shape[-1] if getattr(model, "outputs", None) else None
                    for model in (teacher, student)))
    names = [list(getattr(model, "class_names", None) or []) for model in (teacher, student)]
    if all(names) and names[0] != names[1]:
        first = next(i for i, (a, b) in enumerate(zip(*names)) if a != b)
        raise ValueError(f"The teacher's class {first} is {names[0][first]!r} and the student's "
                         f"{names[1][first]!r}: distillation needs the same classes, in the same order.")
