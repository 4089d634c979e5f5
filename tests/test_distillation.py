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


# -- DeiT's token distillation in fit ------------------------------------------------

def _student_and_teacher(token=True):
    """A tiny student (with DeiT's distillation token), and a tiny teacher at
    another image size (24 px: it gets the batch resized) whose head is not
    zero, so that its logits say something."""
    from keras_vit import ViT

    small = dict(patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4)
    student = ViT(image_size=16, distillation=token, **small)
    teacher = ViT(image_size=24, **small)
    head = teacher.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    return student, teacher


def _digits_batch():
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (16, 16, 16, 3)).astype("float32")
    return images, np.eye(4, dtype="float32")[rng.integers(0, 4, 16)]


@pytest.mark.parametrize("kind", ["hard", "soft", "logits"])
def test_distillation_trains_the_student_in_fit(kind):
    """`fit` reports `deit_loss` of the student's two heads (token kinds) or
    its one head in both places (``"logits"``, DeiT's soft term) and the
    frozen teacher's logits on the resized batch; training moves the heads
    and never the teacher; the distiller predicts as the student (for a
    token, the heads' mean)."""
    from keras_vit.distillation import Distiller

    student, teacher = _student_and_teacher(token=kind != "logits")
    images, labels = _digits_batch()
    heads = [student.get_layer(name) for name in ("head", "head_dist") if kind != "logits" or name == "head"]
    for head in heads:  # not zero, so that the loss's value depends on each head
        head.kernel.assign(np.random.default_rng(2).normal(scale=0.1, size=head.kernel.shape).astype("float32"))
    distiller = Distiller(student, teacher, kind=kind, alpha=0.3, tau=2.0)
    distiller.compile(optimizer=keras.optimizers.SGD(0.0))  # first a step that changes nothing
    expected = []
    for batch in (slice(0, 8), slice(8, 16)):
        student_logits = distiller(images[batch], training=True)
        if kind == "logits":
            student_logits = (student_logits, student_logits)
        teacher_logits = teacher(keras.ops.image.resize(images[batch], (24, 24)), training=False)
        expected.append(keras.ops.convert_to_numpy(distillation.deit_loss(
            labels[batch], *student_logits, teacher_logits, "soft" if kind == "logits" else kind, 0.3, 2.0)))
    history = distiller.fit(images, labels, batch_size=8, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_allclose(history.history["loss"][0], np.mean(expected), rtol=1e-5)

    before = {w.path: keras.ops.convert_to_numpy(w) for w in (*student.weights, *teacher.weights)}
    distiller.optimizer.learning_rate.assign(0.5)
    distiller.fit(images, labels, batch_size=8, epochs=1, verbose=0)
    moved = {w.path for w in student.weights if not np.array_equal(keras.ops.convert_to_numpy(w), before[w.path])}
    assert {f"{head.name}/kernel" for head in heads} <= moved
    assert all(np.array_equal(keras.ops.convert_to_numpy(w), before[w.path]) for w in teacher.weights)
    assert len(distiller.trainable_variables) == len(student.trainable_variables)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(distiller.predict(images, verbose=0)),
                               keras.ops.convert_to_numpy(student.predict(images, verbose=0)), rtol=0, atol=1e-6)


def test_distillation_refuses_what_it_cannot_train():
    """Each refused when the distiller is made, before any step: a student
    without a distillation token, a teacher that is not a Keras model, a
    teacher with other classes."""
    from keras_vit import ViT
    from keras_vit.distillation import Distiller

    student, teacher = _student_and_teacher()
    plain = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4)
    with pytest.raises(ValueError, match=r"kind='hard' is DeiT's token distillation: .* this student has none. "
                       r"Build it with ViT\(\.\.\., distillation=True\) .* or distill its logits: kind='logits'"):
        Distiller(plain, teacher)
    with pytest.raises(ValueError, match="kind='features' is not a kind of distillation: use 'hard' or 'soft'"):
        Distiller(student, teacher, kind="features")
    with pytest.raises(ValueError, match="The teacher must be a Keras model from images to logits, got str"):
        Distiller(student, "teacher.keras")
    other = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=7)
    with pytest.raises(ValueError, match="The teacher gives 7 classes and the student 4"):
        Distiller(student, other)
    named = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=4, class_names=["zero", "one", "two", "three"], distillation=True)
    reordered = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                    num_classes=4, class_names=["zero", "two", "one", "three"])
    with pytest.raises(ValueError, match="The teacher's class 1 is 'two' and the student's 'one': distillation "
                       "needs the same classes, in the same order"):
        Distiller(named, reordered)
    with pytest.raises(ValueError, match=r"alpha=-0.1 must be a number in \[0, 1\]"):
        Distiller(student, teacher, alpha=-0.1)


def test_the_distilled_student_is_saved_alone_and_written_as_timms_deit(tmp_path):
    """The trained student is a plain `ViT`: its `.keras` file holds no
    teacher and loads with the same predictions, and it is written as timm's
    distilled DeiT (`head` and `head_dist`) and read back with the same logits."""
    from keras_vit import ViT
    from keras_vit.distillation import Distiller

    student, teacher = _student_and_teacher()
    images, labels = _digits_batch()
    distiller = Distiller(student, teacher, kind="hard")
    distiller.compile(optimizer=keras.optimizers.SGD(0.5))
    distiller.fit(images, labels, batch_size=8, epochs=1, verbose=0)
    expected = keras.ops.convert_to_numpy(student.predict(images, verbose=0))
    student.save(tmp_path / "student.keras")
    loaded = keras.saving.load_model(tmp_path / "student.keras")
    assert type(loaded) is ViT and len(loaded.weights) == len(student.weights)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded.predict(images, verbose=0)), expected, atol=1e-6)
    folder = student.save_checkpoint(tmp_path / "deit", checkpoint_format="timm")
    back = ViT.from_checkpoint(folder)
    assert back.config.distillation
    np.testing.assert_allclose(keras.ops.convert_to_numpy(back.predict(images, verbose=0)), expected, atol=1e-5)


def test_distillation_trains_a_mixed_precision_student():
    """A mixed_float16 student (a float32 teacher beside it): the distiller
    takes the student's policy, so compile scales the loss, and a step gives
    a finite loss and moves both heads."""
    from keras_vit import ViT
    from keras_vit.distillation import Distiller

    _, teacher = _student_and_teacher()
    student = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4,
                  distillation=True, dtype="mixed_float16")
    images, labels = _digits_batch()
    distiller = Distiller(student, teacher, kind="soft", tau=2.0)
    distiller.compile(optimizer=keras.optimizers.SGD(0.5))
    assert isinstance(distiller.optimizer, keras.optimizers.LossScaleOptimizer)
    before = {w.path: keras.ops.convert_to_numpy(w) for w in student.weights}
    history = distiller.fit(images, labels, batch_size=16, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    moved = {w.path for w in student.weights if not np.array_equal(keras.ops.convert_to_numpy(w), before[w.path])}
    assert {"head/kernel", "head_dist/kernel"} <= moved


# A Distiller trained two steps by this program (argv: the number of CPU devices); the student's
# heads after them, as JSON on the last line. With two devices, keras.distribution.DataParallel
# splits each batch of 16 between them.
JAX_DISTILLER = """
import json, os, sys
devices = int(sys.argv[1])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
import keras, numpy as np
from keras_vit import ViT
from keras_vit.distillation import Distiller
if devices > 1:
    keras.distribution.set_distribution(keras.distribution.DataParallel())
keras.utils.set_random_seed(0)
small = dict(patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4)
student, teacher = ViT(image_size=16, distillation=True, **small), ViT(image_size=24, **small)
teacher.get_layer("head").kernel.assign(np.random.default_rng(1).normal(size=(16, 4)).astype("float32"))
rng = np.random.default_rng(0)
images = rng.uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
labels = np.eye(4, dtype="float32")[rng.integers(0, 4, 32)]
distiller = Distiller(student, teacher, kind="soft", tau=2.0)
distiller.compile(optimizer=keras.optimizers.SGD(0.5))
distiller.fit(images, labels, batch_size=16, epochs=1, shuffle=False, verbose=0)
distribution = keras.distribution.distribution()
print(json.dumps({"devices": distribution.device_mesh.devices.size if distribution else 1,
                  **{name: keras.ops.convert_to_numpy(student.get_layer(name).kernel).tolist()
                     for name in ("head", "head_dist")}}))
"""


@pytest.mark.slow  # two programs
@pytest.mark.skipif(keras.backend.backend() != "jax",
                    reason="keras.distribution's DataParallel is JAX's; it runs in the KERAS_BACKEND=jax pass")
def test_distillation_under_jax_data_parallel_is_the_one_device_run():
    """Two CPU devices, each batch split between them: the student's heads
    after two steps are the one-device run's."""
    import json
    import os
    import subprocess
    import sys

    heads = []
    for devices in (1, 2):
        done = subprocess.run([sys.executable, "-c", JAX_DISTILLER, str(devices)], capture_output=True, text=True,
                              env={**os.environ, "KERAS_BACKEND": "jax"}, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        heads.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert [run["devices"] for run in heads] == [1, 2]
    for name in ("head", "head_dist"):
        assert np.abs(np.array(heads[0][name])).sum() > 0, name  # trained away from the zero initialisation
        np.testing.assert_allclose(heads[1][name], heads[0][name], rtol=0, atol=1e-5, err_msg=name)
