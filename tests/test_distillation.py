"""`keras_vit.distillation`: DeiT's distillation loss against DeiT's own
`DistillationLoss` (tests/data/make_deit_distillation_loss.py ran it once),
and its settings refused with the fix named."""

import pathlib

import keras
import numpy as np
import pytest

from keras_vit import distillation

REFERENCE = np.load(pathlib.Path(__file__).parent / "data" / "deit_distillation_loss.npz")


@pytest.mark.parametrize("kind", ["hard", "soft"])
@pytest.mark.parametrize("labels", ["int", "soft"])
def test_deit_loss_is_deits_distillation_loss(kind, labels):
    """Within 1e-6 of DeiT's loss on the same logits, for its three (alpha,
    tau) pairs, with integer labels (CrossEntropyLoss) and MixUp's soft
    targets (SoftTargetCrossEntropy)."""
    r = REFERENCE
    targets = r["labels"] if labels == "int" else r["soft_labels"]
    ours = [float(keras.ops.convert_to_numpy(distillation.deit_loss(
        targets, r["class_logits"], r["distillation_logits"], r["teacher_logits"], kind, float(alpha), float(tau))))
        for alpha, tau in zip(r["alpha"], r["tau"])]
    np.testing.assert_allclose(ours, r[f"{kind}_{labels}"], rtol=0, atol=1e-6)


def test_the_teacher_takes_no_gradient():
    """Only the student's logits learn: DeiT runs its teacher under no_grad."""
    r = REFERENCE
    arrays = [r[name] for name in ("class_logits", "distillation_logits", "teacher_logits")]
    grads = _gradients(lambda *logits: distillation.deit_loss(r["labels"], *logits, kind="soft", tau=2.0), arrays)
    assert np.abs(grads[0]).sum() > 0 and np.abs(grads[1]).sum() > 0
    assert not np.abs(grads[2]).any()


def _gradients(loss, arrays):
    """The gradients of ``loss(*arrays)`` with respect to each array, by the backend's own autodiff."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return [np.asarray(g) for g in jax.grad(loss, argnums=tuple(range(len(arrays))))(*arrays)]
    if backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = loss(*tensors)
        return [np.zeros(a.shape) if g is None else g.numpy() for g, a in zip(tape.gradient(value, tensors), arrays)]
    import torch

    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    loss(*tensors).backward()
    return [np.zeros(a.shape) if t.grad is None else t.grad.numpy() for t, a in zip(tensors, arrays)]


@pytest.mark.backend_independent  # refused before any tensor is made
@pytest.mark.parametrize("settings, message", [
    (dict(kind="logits"), r"kind='logits' is not a kind of DeiT's token distillation: use 'hard'"),
    (dict(alpha=1.5), r"alpha=1.5 must be a number in \[0, 1\]"),
    (dict(alpha=True), r"alpha=True must be a number in \[0, 1\]"),
    (dict(tau=0.0), r"tau=0.0 must be a finite number > 0"),
    (dict(tau=float("inf")), r"tau=inf must be a finite number > 0"),
])
def test_bad_settings_are_refused_naming_the_fix(settings, message):
    r = REFERENCE
    with pytest.raises(ValueError, match=message):
        distillation.deit_loss(r["labels"], r["class_logits"], r["distillation_logits"], r["teacher_logits"],
                               **settings)


@pytest.mark.backend_independent  # refused before any tensor is made
def test_a_teacher_with_other_classes_is_refused():
    r = REFERENCE
    with pytest.raises(ValueError, match="The teacher gives 7 classes and the student 10: distillation needs "
                       "the same classes"):
        distillation.deit_loss(r["labels"], r["class_logits"], r["distillation_logits"], r["teacher_logits"][:, :7])
