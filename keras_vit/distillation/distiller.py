"""Distillation as a Keras model that trains with `fit`: DeiT's token
distillation (Touvron et al., ICML 2021, Sec. 5), logit distillation and
feature distillation.

- ``"hard"``, ``"soft"``: a student ViT with a distillation token
  (``ViT(distillation_token=True)``) learns from the labels through its
  [class] token's head and from the teacher through its distillation
  token's head, by `deit_loss`; it predicts with the two heads' mean.
- ``"logits"``: any student learns from the labels and from the teacher
  through its one output, by DeiT's soft term (`deit_loss` with the
  student's logits in both places).
- ``"features"``: any student ViT learns from the labels and, through a
  learned linear projection to the teacher's width, from the teacher's
  features (`feature_loss`): its last block's patch tokens (``"tokens"``,
  the teacher's map resampled to the student's patch grid) or its pooled
  features (``"pooled"``).
"""

import os

import keras
import numpy as np
from keras import ops

from keras_vit.arguments import DISTILLATIONS
from keras_vit.distillation.losses import check_class_names
from keras_vit.distillation.losses import check_classes
from keras_vit.distillation.losses import check_distillation
from keras_vit.distillation.losses import cross_entropy
from keras_vit.distillation.losses import deit_loss
from keras_vit.distillation.losses import feature_loss
from keras_vit.distillation.losses import smooth_labels

# Which features "features" matches: the last block's patch tokens, or the pooled features.
FEATURES = ("tokens", "pooled")


def load_teacher(teacher, flag="the teacher"):
    """The teacher `teacher` names: a Keras model (a keras_vit model, a
    keras-hub classifier, any model from images to logits) as it is, or a
    str or path that `keras_vit.load_model` reads (a ``.keras`` file, a
    checkpoint, a released name or a preset). `flag` names the argument
    in errors (``"--teacher"``)."""
    if isinstance(teacher, keras.Model):
        return teacher
    if isinstance(teacher, (str, os.PathLike)):
        from keras_vit.loading import load_model

        return load_model(teacher, flag=flag)
    raise ValueError(f"{flag} must be a Keras model from images to logits, or the path or released name "
                     f"of one (a .keras file, a checkpoint: keras_vit.load_model reads it), got "
                     f"{type(teacher).__name__}.")


def pixel_scale_and_offset(model):
    """``(scale, offset)`` with which `model` takes pixels in [0, 255]
    (``pixels * scale + offset``): a keras_vit model's ``pixel_scale`` and
    ``pixel_offset``, a keras-hub model's image converter's ``scale`` and
    ``offset``; None where the model does not record it."""
    if hasattr(model, "pixel_scale"):
        return model.pixel_scale, model.pixel_offset
    converter = getattr(getattr(model, "preprocessor", None), "image_converter", None)
    if converter is not None and getattr(converter, "scale", None) is not None:
        return converter.scale, converter.offset if converter.offset is not None else 0.0
    return None


class Distiller(keras.Model):
    """A `student` trained by `fit` against a frozen `teacher` (any Keras
    model over the same classes, run in inference mode and never trained).

    With ``kind="hard"`` or ``"soft"`` (DeiT's token distillation), training
    calls return the student's two heads' logits, ``(class_logits,
    distillation_logits)``, each ``(batch, classes)``, and the loss is
    `deit_loss` of them and the teacher's logits on the same images. With
    ``kind="logits"``, they return the student's logits and the loss is
    `deit_loss` with those logits in both places: the labels'
    cross-entropy and the soft term, weighed by `alpha`. With
    ``kind="features"``, they return the student's logits and its features
    projected to the teacher's width (a ``Dense`` of the distiller's own,
    ``feature_projection``), and the loss is `feature_loss`: the labels'
    cross-entropy and the mean squared distance to the teacher's features,
    weighed by `alpha`. ``features="tokens"`` matches the last block's
    patch tokens after the final norm, ``(batch, h, w, width)`` maps as
    `keras_vit.ViT.feature_model` gives them: the teacher's map is resampled
    (bilinear) to the student's patch grid, so the grids may differ in size
    but not in aspect ratio. ``features="pooled"`` matches the pooled
    features that the heads read, ``(batch, width)``. A teacher that is not
    a keras_vit ViT gives its output as its features: a ``(batch, h, w,
    width)`` map or ``(batch, width)``.

    The teacher gets the batch as it takes images: at its own image size
    (bilinear) and, where both record their pixel scaling (keras_vit's
    ``pixel_scale`` and ``pixel_offset``, a keras-hub model's image
    converter), scaled as it expects. Inference calls return the student's
    prediction (for a distillation token, the two heads' mean, as DeiT's
    distilled checkpoints predict), and metrics see it. The distiller
    computes in the student's dtype policy (under ``mixed_float16``,
    `compile` scales the loss); the loss is float32. Save
    ``distiller.student``: a plain `ViT`, with no teacher.

    Args:
        student: a `keras_vit.ViT` (``distillation_token=True`` for
            ``"hard"`` and ``"soft"``), or for ``"logits"`` any Keras model
            from images to logits.
        teacher: a Keras model from images to ``(batch, classes)`` logits
            (for ``"features"``, a keras_vit ViT, or a model whose output
            is its features), or its path or released name (`load_teacher`).
        kind: ``"hard"``, ``"soft"``, ``"logits"`` or ``"features"``
            (`DISTILLATIONS`).
        alpha: the distillation term's weight, in [0, 1].
        tau: the soft term's temperature, > 0 (``"soft"`` and ``"logits"``).
        features: ``"tokens"`` or ``"pooled"`` (`FEATURES`), for
            ``"features"``.
        label_smoothing: the labels' smoothing in the labels' term, in [0, 1).

    Examples:
        ```python
        import numpy as np
        from keras_vit import ViT
        from keras_vit.distillation import Distiller

        small = dict(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                     num_classes=10)
        distiller = Distiller(ViT(distillation_token=True, **small), ViT(**small), kind="hard")
        distiller.compile(optimizer="adam")
        images, labels = np.zeros((4, 16, 16, 3), "float32"), np.eye(10, dtype="float32")[[0, 1, 2, 3]]
        distiller.fit(images, labels, epochs=1, verbose=0)
        print(distiller.student.predict(images, verbose=0).shape)   # -> (4, 10)
        ```
    """

    def __init__(self, student, teacher, kind="hard", alpha=0.5, tau=1.0, features="tokens",
                 label_smoothing=0.0, **kwargs):
        teacher = load_teacher(teacher)
        _check(student, teacher, kind, alpha, tau, features, label_smoothing)
        kwargs.setdefault("dtype", student.dtype_policy)  # mixed_float16: compile adds loss scaling
        super().__init__(**kwargs)
        self.student = student
        self.teacher = teacher
        self.teacher.trainable = False
        self.kind, self.alpha, self.tau, self.features = kind, alpha, tau, features
        self.label_smoothing = label_smoothing
        self.loss_kind = _loss_kind(kind)  # deit_loss's kind
        self.heads = self.teacher_features = self.projection = None
        if kind in ("hard", "soft"):  # the student's own graph read at its two heads: the same layers, no copy
            parts = student.parts
            self.heads = keras.Model(student.inputs, [parts.head.output, parts.head_dist.output],
                                     name=f"{student.name}_heads")
        elif kind == "features":
            own = feature_output(student, features, "student")
            self.heads = keras.Model(student.inputs, [student.outputs[0], own],
                                     name=f"{student.name}_features")
            self.teacher_features = keras.Model(teacher.inputs, feature_output(teacher, features, "teacher"),
                                                name=f"{teacher.name}_features")
            _check_grids(own, self.teacher_features.outputs[0], features)
            self.projection = keras.layers.Dense(self.teacher_features.outputs[0].shape[-1],
                                                 dtype=self.dtype_policy, name="feature_projection")
            self.projection.build(own.shape)
        self.teacher_scaling = _scaling_between(pixel_scale_and_offset(student), pixel_scale_and_offset(teacher))

    def call(self, images, training=None):
        """Training: the student's two heads' logits (token kinds), its
        logits and projected features (``"features"``) or its logits;
        otherwise its prediction, ``(batch, classes)``."""
        if training and self.heads is not None:
            outputs = tuple(self.heads(images, training=True))
            if self.projection is not None:
                return outputs[0], self.projection(outputs[1])
            return outputs
        return self.student(images, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Training: `deit_loss` (or `feature_loss`) of the student's
        outputs `y_pred` and the teacher's on `x`; evaluation: the
        cross-entropy of `y_pred` and `y`."""
        return _per_replica(self._loss(x, y, y_pred, training))

    def _loss(self, x, y, y_pred, training):
        if not training:  # evaluation: the labels' loss of the prediction
            return cross_entropy(y, ops.cast(y_pred, "float32"))
        images = self.teacher_images(x)
        if self.kind == "features":
            logits, projected = y_pred
            target = _on_grid(self.teacher_features(images, training=False), projected, self.features)
            return feature_loss(self._labels(y, logits), logits, projected, target, self.alpha)
        teacher = self.teacher(images, training=False)
        student = tuple(y_pred) if self.heads is not None else (y_pred, y_pred)
        return deit_loss(self._labels(y, student[0]), *student, teacher, self.loss_kind, self.alpha, self.tau)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """The compiled metrics of the student's prediction (two heads: their mean)."""
        if self.kind == "features" and isinstance(y_pred, (tuple, list)):
            y_pred = y_pred[0]
        elif isinstance(y_pred, (tuple, list)):  # the two heads: the prediction is their mean
            y_pred = (y_pred[0] + y_pred[1]) / 2
        return super().compute_metrics(x, y, y_pred, sample_weight)

    def teacher_images(self, images):
        """The batch `images` ``(batch, H, W, C)`` as the teacher takes
        images: scaled to its pixel scaling, at its image size (bilinear)."""
        if self.teacher_scaling is not None:
            scale, offset = self.teacher_scaling
            images = ops.add(ops.multiply(images, ops.cast(scale, images.dtype)), ops.cast(offset, images.dtype))
        size = tuple(self.teacher.inputs[0].shape[1:3]) if getattr(self.teacher, "inputs", None) else None
        if size is None or None in size or size == tuple(images.shape[1:3]):
            return images
        return ops.image.resize(images, size, interpolation="bilinear")

    def _labels(self, labels, logits):
        """The labels' targets, smoothed by `label_smoothing`."""
        return smooth_labels(labels, logits.shape[-1], self.label_smoothing)


def _per_replica(loss):
    """`loss` as one replica's share under a TensorFlow distribution strategy
    (divided by the replicas in sync), as Keras's losses give theirs: the
    strategy sums the replicas' gradients, and `fit` reports the sum."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            loss = loss / replicas
    return loss


def feature_output(model, features, role):
    """The symbolic tensor of `model`'s features that ``"features"``
    distillation matches: a keras_vit ViT's last block's patch-token map
    ``(batch, h, w, width)`` (``"tokens"``) or its pooled features
    ``(batch, width)`` (``"pooled"``); another model's output, of that rank.
    `role` (``"student"``, ``"teacher"``) names it in errors."""
    if hasattr(model, "feature_model") and hasattr(model, "parts"):
        if features == "pooled":
            head = model.parts.head
            return head.input if head is not None else model.outputs[0]
        try:
            return model.feature_model(layers=[-1]).outputs[0]
        except ValueError as error:
            raise ValueError(f"Feature distillation of tokens matches the {role}'s patch tokens over its "
                             f"patch grid, and the {role} has none to match: {error} Or distill the "
                             "pooled features: features='pooled'.") from error
    rank = 4 if features == "tokens" else 2
    output = model.outputs[0] if getattr(model, "outputs", None) else None
    if output is None or len(output.shape) != rank:
        shape = "(batch, h, w, width) map" if rank == 4 else "(batch, width) features"
        raise ValueError(f"Feature distillation of {features} needs the {role}'s {shape}: a keras_vit ViT, or "
                         f"a Keras model whose output is that, and {model.name} gives "
                         f"{None if output is None else tuple(output.shape)}.")
    return output


def _check_grids(student, teacher, features):
    """Refuses token grids that resampling cannot match: another aspect ratio."""
    if features != "tokens":
        return
    (h, w), (th, tw) = student.shape[1:3], teacher.shape[1:3]
    if None not in (h, w, th, tw) and h * tw != w * th:
        raise ValueError(f"The student's patch tokens lie on a {h}x{w} grid and the teacher's on {th}x{tw}: "
                         "feature distillation resamples the teacher's map to the student's grid, which "
                         "needs the same aspect ratio. Give both models images of the same aspect ratio "
                         "(model.with_image_size), or distill the pooled features: features='pooled'.")


def _on_grid(teacher, student, features):
    """The teacher's features `teacher` on the student's grid (bilinear)."""
    if features == "tokens" and tuple(teacher.shape[1:3]) != tuple(student.shape[1:3]):
        return ops.image.resize(teacher, tuple(student.shape[1:3]), interpolation="bilinear")
    return teacher


def _scaling_between(student, teacher):
    """``(scale, offset)`` that takes images scaled as `student` says to
    `teacher`'s scaling (each ``(scale, offset)`` of `pixel_scale_and_offset`), per
    channel; None where they agree or either is unknown."""
    if student is None or teacher is None:
        return None
    (s_scale, s_offset), (t_scale, t_offset) = (tuple(np.asarray(v, "float32") for v in pair)
                                                for pair in (student, teacher))
    scale = t_scale / s_scale
    offset = t_offset - s_offset * scale
    if np.allclose(scale, 1.0) and np.allclose(offset, 0.0):
        return None
    return scale, offset


def _loss_kind(kind):
    """`deit_loss`'s kind for a distillation `kind`: logit distillation is DeiT's soft term."""
    return "soft" if kind in ("logits", "features") else kind


def _check(student, teacher, kind, alpha, tau, features, label_smoothing):
    """What `Distiller` cannot train, named with the fix, before any step."""
    if kind not in DISTILLATIONS:
        raise ValueError(f"kind={kind!r} is not a kind of distillation: use 'hard' or 'soft' (DeiT's token "
                         "distillation, for a student with a distillation token), 'logits' (any student) "
                         "or 'features' (a student's features learn the teacher's).")
    check_distillation(_loss_kind(kind), alpha, tau)
    if features not in FEATURES:
        raise ValueError(f"features={features!r}: use 'tokens' (the last block's patch tokens) or 'pooled' "
                         "(the pooled features the head reads).")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) or not (
            0 <= label_smoothing < 1):
        raise ValueError(f"label_smoothing={label_smoothing!r} must be a number in [0, 1).")
    config = getattr(student, "config", None)
    if kind in ("hard", "soft") and not (getattr(config, "distillation", False)
                                         and student.parts.head_dist is not None):
        raise ValueError(
            f"kind={kind!r} is DeiT's token distillation: it trains the student's distillation token and its "
            "head, and this student has none. Build it with ViT(..., distillation_token=True) (DeiT's "
            "distilled models), or distill its logits: kind='logits'.")
    if kind == "features" and config is None:
        raise ValueError("kind='features' trains a keras_vit ViT student's features; this student is a "
                         f"{type(student).__name__}. Use a keras_vit.ViT, or kind='logits'.")
    if kind != "features":  # features: a teacher of any head, or none
        check_classes(*(model.outputs[0].shape[-1] if getattr(model, "outputs", None) else None
                        for model in (teacher, student)))
        check_class_names(*(getattr(model, "class_names", None) for model in (teacher, student)))
