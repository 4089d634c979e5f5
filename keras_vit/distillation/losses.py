"""DeiT's distillation loss in `keras.ops`, the same on TensorFlow, JAX and
PyTorch (facebookresearch/deit ``losses.py``, ``DistillationLoss``)."""

import math
import numbers

from keras import ops

# DeiT's --distillation-type, without "none" (a plain run has no teacher).
KINDS = ("hard", "soft")


def check_distillation(kind, alpha, tau):
    """Raises a ValueError naming what is wrong with DeiT's settings: `kind`
    in `KINDS`, `alpha` (the distillation term's weight) in [0, 1], `tau`
    (the soft kind's temperature) a finite number > 0."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not a kind of DeiT's token distillation: use 'hard' (the "
                         "distillation head learns the teacher's top class, DeiT's best) or 'soft' (it learns "
                         "the teacher's probabilities softened by tau).")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha={alpha!r} must be a number in [0, 1]: the weight of the distillation term, "
                         "the labels' term weighing 1 - alpha (DeiT's default 0.5).")
    if isinstance(tau, bool) or not isinstance(tau, numbers.Real) or not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau={tau!r} must be a finite number > 0: the temperature that softens the "
                         "teacher's and the student's probabilities (DeiT's default 1.0).")


def check_classes(teacher_classes, student_classes):
    """Raises a ValueError where the teacher's class count differs from the
    student's (None: not known, not checked)."""
    if None not in (teacher_classes, student_classes) and teacher_classes != student_classes:
        raise ValueError(f"The teacher gives {teacher_classes} classes and the student {student_classes}: "
                         "distillation needs the same classes, in the same order.")


def check_class_names(teacher_names, student_names):
    """Raises a ValueError naming the first class where the teacher's names
    differ from the student's (either None or empty: not known, not checked)."""
    names = [list(n or []) for n in (teacher_names, student_names)]
    if all(names) and names[0] != names[1]:
        first = next((i for i, (a, b) in enumerate(zip(*names)) if a != b), min(map(len, names)))
        theirs, ours = (n[first] if first < len(n) else "none" for n in names)
        raise ValueError(f"The teacher's class {first} is {theirs!r} and the student's {ours!r}: distillation "
                         "needs the same classes, in the same order.")


def cross_entropy(labels, logits):
    """The mean cross-entropy of `logits` ``(batch, classes)`` against integer
    `labels` ``(batch,)`` (``torch.nn.CrossEntropyLoss``) or soft targets
    ``(batch, classes)`` (MixUp's, CutMix's: timm's ``SoftTargetCrossEntropy``)."""
    log_p = ops.log_softmax(logits, axis=-1)
    if len(labels.shape) == len(logits.shape):
        return ops.mean(ops.sum(-ops.cast(labels, log_p.dtype) * log_p, axis=-1))
    picked = ops.take_along_axis(log_p, ops.expand_dims(ops.cast(labels, "int32"), -1), axis=-1)
    return -ops.mean(picked)


def deit_loss(labels, class_logits, distillation_logits, teacher_logits, kind="hard", alpha=0.5, tau=1.0):
    """DeiT's loss for a student with a distillation token, a scalar:
    ``CE(class_logits, labels) * (1 - alpha) + D * alpha``, where D is

    - ``"hard"``: ``CE(distillation_logits, argmax(teacher_logits))``;
    - ``"soft"``: ``KL(softmax(teacher / tau) || softmax(distillation / tau))
      * tau**2``, summed and divided by the logits' element count
      (batch x classes, as DeiT divides by ``numel``).

    The teacher's logits take no gradient. Computed in float32.

    Args:
        labels: ``(batch,)`` integer labels, or ``(batch, classes)`` soft
            targets (one-hot, MixUp's, CutMix's).
        class_logits: ``(batch, classes)``, the [class] token's head.
        distillation_logits: ``(batch, classes)``, the distillation token's head.
        teacher_logits: ``(batch, classes)``, the teacher's on the same images.
        kind: ``"hard"`` or ``"soft"`` (DeiT's ``--distillation-type``).
        alpha: the distillation term's weight, in [0, 1] (``--distillation-alpha``).
        tau: the soft kind's temperature, > 0 (``--distillation-tau``).

    Raises:
        ValueError: a `kind`, `alpha` or `tau` out of range, or a teacher
            with another number of classes than the student.

    Examples:
        ```python
        import numpy as np
        from keras_vit.distillation import deit_loss

        student = np.array([[2.0, 0.0, -1.0]], "float32")
        teacher = np.array([[0.0, 3.0, 0.0]], "float32")
        loss = deit_loss(np.array([0]), student, student, teacher, kind="hard", alpha=0.5)
        print(round(float(loss), 4))   # -> 1.1698
        ```
    """
    check_distillation(kind, alpha, tau)
    check_classes(teacher_logits.shape[-1], distillation_logits.shape[-1])
    class_logits, student_logits = (ops.cast(x, "float32") for x in (class_logits, distillation_logits))
    teacher = ops.stop_gradient(ops.cast(teacher_logits, "float32"))
    labels = ops.convert_to_tensor(labels)
    base = cross_entropy(labels, class_logits)
    if kind == "hard":
        distillation = cross_entropy(ops.argmax(teacher, axis=-1), student_logits)
    else:
        log_student = ops.log_softmax(student_logits / tau, axis=-1)
        log_teacher = ops.log_softmax(teacher / tau, axis=-1)
        count = ops.cast(ops.shape(student_logits)[0] * ops.shape(student_logits)[-1], "float32")
        distillation = ops.sum(ops.exp(log_teacher) * (log_teacher - log_student)) * (tau * tau) / count
    return base * (1.0 - alpha) + distillation * alpha


def smooth_labels(labels, num_classes, label_smoothing):
    """`labels` (integer ``(batch,)`` or soft ``(batch, classes)``) as
    targets ``(batch, num_classes)`` smoothed by `label_smoothing` (Szegedy
    et al., 2016: ``t * (1 - e) + e / classes``); unchanged when it is 0."""
    if not label_smoothing:
        return labels
    labels = ops.convert_to_tensor(labels)
    if len(labels.shape) == 1:
        labels = ops.one_hot(ops.cast(labels, "int32"), num_classes)
    return ops.cast(labels, "float32") * (1.0 - label_smoothing) + label_smoothing / num_classes


def feature_loss(labels, logits, student_features, teacher_features, alpha=0.5):
    """Feature distillation's loss, a scalar: ``CE(logits, labels) * (1 - alpha)
    + MSE(student_features, teacher_features) * alpha``, the mean squared
    error over every element (timm's feature distillation task: the student's
    features, projected to the teacher's width, against the teacher's).

    The teacher's features take no gradient. Computed in float32.

    Args:
        labels: ``(batch,)`` integer labels or ``(batch, classes)`` soft targets.
        logits: ``(batch, classes)``, the student's.
        student_features: the student's features projected to the teacher's
            width: ``(batch, width)`` pooled, or ``(batch, h, w, width)``
            tokens on a grid.
        teacher_features: the teacher's, of the same shape.
        alpha: the distillation term's weight, in [0, 1].

    Examples:
        ```python
        import numpy as np
        from keras_vit.distillation import feature_loss

        logits = np.array([[2.0, 0.0, -1.0]], "float32")
        student, teacher = np.ones((1, 2, 2, 4), "float32"), np.zeros((1, 2, 2, 4), "float32")
        print(round(float(feature_loss(np.array([0]), logits, student, teacher, alpha=1.0)), 4))   # -> 1.0
        ```
    """
    check_distillation("soft", alpha, 1.0)
    if tuple(student_features.shape[1:]) != tuple(teacher_features.shape[1:]):
        raise ValueError(f"The student's features {tuple(student_features.shape[1:])} and the teacher's "
                         f"{tuple(teacher_features.shape[1:])} differ in shape: project the student's to the "
                         "teacher's width and resample the teacher's grid to the student's first.")
    base = cross_entropy(ops.convert_to_tensor(labels), ops.cast(logits, "float32"))
    teacher = ops.stop_gradient(ops.cast(teacher_features, "float32"))
    distillation = ops.mean(ops.square(ops.cast(student_features, "float32") - teacher))
    return base * (1.0 - alpha) + distillation * alpha
