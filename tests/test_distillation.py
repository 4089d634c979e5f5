"""`keras_vit.distillation`: DeiT's distillation loss against DeiT's own
`DistillationLoss` (tests/data/make_deit_distillation_loss.py ran it once),
and its settings refused with the fix named."""

import json
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

def test_distillation_token_builds_deits_two_tokens_and_heads():
    """``ViT(distillation_token=True)`` is DeiT's student: the distillation
    field's token and head (the same config as ``distillation=True``);
    both names at once are refused."""
    from keras_vit import ViT

    small = dict(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4)
    model = ViT(distillation_token=True, **small)
    assert model.config == ViT(distillation=True, **small).config and model.config.distillation
    assert model.num_prefix_tokens == 2 and model.parts.head_dist is not None
    with pytest.raises(ValueError, match=r"ViT\(\) takes distillation_token= or distillation=, the same field"):
        ViT(distillation_token=True, distillation=True, **small)


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
                       r"Build it with ViT\(\.\.\., distillation_token=True\) .* or distill its logits: "
                       r"kind='logits'"):
        Distiller(plain, teacher)
    with pytest.raises(ValueError, match="kind='tokens' is not a kind of distillation: use 'hard' or 'soft'"):
        Distiller(student, teacher, kind="tokens")
    with pytest.raises(ValueError, match="teacher must be a Keras model from images to logits, or the path or "
                       "released name of one .* got int"):
        Distiller(student, 42)
    with pytest.raises(FileNotFoundError, match="teacher.keras"):
        Distiller(student, "teacher.keras")
    with pytest.raises(ValueError, match=r"features='cls': use 'tokens' .* or 'pooled'"):
        Distiller(plain, teacher, kind="features", features="cls")
    with pytest.raises(ValueError, match=r"label_smoothing=1.0 must be a number in \[0, 1\)"):
        Distiller(student, teacher, label_smoothing=1.0)
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
teacher = ViT(image_size=24, **small)
teacher.get_layer("head").kernel.assign(np.random.default_rng(1).normal(size=(16, 4)).astype("float32"))
rng = np.random.default_rng(0)
images = rng.uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
labels = np.eye(4, dtype="float32")[rng.integers(0, 4, 32)]
trained = {}
for kind in ("soft", "hard", "logits", "features"):
    student = ViT(image_size=16, distillation=kind in ("soft", "hard"), **small)
    distiller = Distiller(student, teacher, kind=kind, tau=2.0)
    distiller.compile(optimizer=keras.optimizers.SGD(0.5))
    distiller.fit(images, labels, batch_size=16, epochs=1, shuffle=False, verbose=0)
    kept = ("head/kernel", "head_dist/kernel", "encoder_block_0/mlp/fc1/kernel", "feature_projection/kernel")
    trained.update({f"{kind}/{w.path}": keras.ops.convert_to_numpy(w).tolist()
                    for w in distiller.trainable_weights if w.path in kept})
distribution = keras.distribution.distribution()
print(json.dumps({"devices": distribution.device_mesh.devices.size if distribution else 1, **trained}))
"""


@pytest.mark.slow  # two programs
@pytest.mark.skipif(keras.backend.backend() != "jax",
                    reason="keras.distribution's DataParallel is JAX's; it runs in the KERAS_BACKEND=jax pass")
def test_distillation_under_jax_data_parallel_is_the_one_device_run():
    """Two CPU devices, each batch split between them: after two steps of
    each kind (soft and hard token, logits, features), the student's heads,
    a block's kernel and the projection are the one-device run's."""
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
    assert [run.pop("devices") for run in heads] == [1, 2]
    assert len(heads[0]) == 11 and heads[0].keys() == heads[1].keys(), sorted(heads[0])
    for name in heads[0]:
        assert np.abs(np.array(heads[0][name])).sum() > 0, name  # heads trained away from their zeros
        np.testing.assert_allclose(heads[1][name], heads[0][name], rtol=0, atol=1e-5, err_msg=name)


# -- feature distillation, and the teacher as it takes images -------------------------

@pytest.mark.parametrize("features", ["tokens", "pooled"])
def test_feature_distillation_trains_the_student_and_its_projection(features):
    """``"features"``: `fit` reports `feature_loss` of the student's logits
    and its features through the projection against the teacher's, whose
    6x6 patch-token map (24 px) is resampled to the student's 4x4 grid
    (``"tokens"``) or whose pooled features are taken as they are
    (``"pooled"``); the projection and the student learn, the teacher does
    not, and the projection is not part of the saved student."""
    from keras_vit.distillation import Distiller
    from keras_vit.distillation import feature_loss

    student, _ = _student_and_teacher(token=False)
    images, labels = _digits_batch()
    wide = _wide_teacher()
    distiller = Distiller(student, wide, kind="features", features=features, alpha=0.4)
    distiller.compile(optimizer=keras.optimizers.SGD(0.0))
    expected = []
    for batch in (slice(0, 8), slice(8, 16)):
        logits, projected = distiller(images[batch], training=True)
        assert tuple(projected.shape) == ((8, 4, 4, 24) if features == "tokens" else (8, 24))
        resized = keras.ops.image.resize(images[batch], (24, 24))
        if features == "tokens":
            target = wide.feature_model(layers=[-1])(resized)["encoder_block_1"]
            target = keras.ops.image.resize(target, (4, 4))
        else:
            target = keras.Model(wide.inputs, wide.get_layer("head").input)(resized)
        expected.append(keras.ops.convert_to_numpy(feature_loss(labels[batch], logits, projected, target, 0.4)))
    history = distiller.fit(images, labels, batch_size=8, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_allclose(history.history["loss"][0], np.mean(expected), rtol=1e-5)

    before = {w.path: keras.ops.convert_to_numpy(w) for w in (*student.weights, *wide.weights,
                                                              *distiller.projection.weights)}
    distiller.optimizer.learning_rate.assign(0.5)
    distiller.fit(images, labels, batch_size=8, epochs=1, verbose=0)
    moved = {w.path for w in (*student.weights, *distiller.projection.weights)
             if not np.array_equal(keras.ops.convert_to_numpy(w), before[w.path])}
    assert {"feature_projection/kernel", "encoder_block_0/mlp/fc1/kernel"} <= moved, moved
    assert all(np.array_equal(keras.ops.convert_to_numpy(w), before[w.path]) for w in wide.weights)
    assert len(distiller.trainable_variables) == len(student.trainable_variables) + 2
    assert not any("feature_projection" in w.path for w in student.weights)


def _wide_teacher():
    """A teacher of another width (24), depth (2) and image size (24 px: a 6x6 grid)."""
    from keras_vit import ViT

    teacher = ViT(image_size=24, patch_size=4, num_layers=2, num_heads=2, hidden_dim=24, mlp_dim=48, num_classes=4)
    head = teacher.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    return teacher


def test_feature_distillation_refuses_tokens_it_cannot_match():
    """Grids of other aspect ratios, a student that merges tokens, and a
    teacher whose output is not a map: each refused with what to use."""
    from keras_vit import ViT
    from keras_vit.distillation import Distiller

    small = dict(patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4)
    student = ViT(image_size=16, **small)
    with pytest.raises(ValueError, match=r"student's patch tokens lie on a 4x4 grid and the teacher's on 8x4: .* "
                       r"same aspect ratio .* features='pooled'"):
        Distiller(student, ViT(image_size=(32, 16), **small), kind="features")
    with pytest.raises(ValueError, match=r"student's patch tokens over its patch grid, .* merges tokens .* "
                       r"features='pooled'"):
        Distiller(ViT(image_size=16, token_merging=2, **small), ViT(image_size=16, **small), kind="features")
    with pytest.raises(ValueError, match=r"Feature distillation of tokens needs the teacher's \(batch, h, w, "
                       r"width\) map: .* gives \(None, 4\)"):
        Distiller(student, _plain_classifier(), kind="features")


def _plain_classifier():
    """A Keras model from 16 px images to 4 logits that is not a keras_vit model."""
    inputs = keras.Input((16, 16, 3))
    return keras.Model(inputs, keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(inputs)), name="plain")


def test_the_teacher_gets_images_at_its_size_and_pixel_scaling(tmp_path):
    """A student on [-1, 1] pixels and a keras-hub classifier (keras_vit's
    keras-hub writer) on ImageNet's mean and standard deviation: inside the
    step the teacher gets the student's batch rescaled to its own scaling,
    so its logits are those of keras-hub's own `predict` on the raw
    pixels; a teacher given by its .keras path is read."""
    keras_hub = pytest.importorskip("keras_hub", reason="the keras-hub teacher needs keras-hub (requirements/keras-hub.txt)")
    from keras_vit import ViT
    from keras_vit.distillation import Distiller

    small = dict(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4)
    imagenet = dict(pixel_scale=(1 / (255 * 0.229), 1 / (255 * 0.224), 1 / (255 * 0.225)),
                    pixel_offset=(-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225))
    source = ViT(**small, **imagenet, gelu_approximate=False)
    head = source.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    source.save_checkpoint(tmp_path / "hub", checkpoint_format="keras_hub")
    teacher = keras_hub.models.ImageClassifier.from_preset(str(tmp_path / "hub"))
    raw = np.random.default_rng(0).uniform(0, 255, (4, 16, 16, 3)).astype("float32")
    distiller = Distiller(ViT(**small), teacher, kind="logits")
    scaled = raw / 127.5 - 1  # the student's pixels
    inside = teacher(distiller.teacher_images(scaled), training=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(inside), teacher.predict(raw, verbose=0), atol=1e-4)
    assert np.abs(keras.ops.convert_to_numpy(inside) - keras.ops.convert_to_numpy(teacher(scaled))).max() > 1e-3

    source.save(tmp_path / "teacher.keras")
    by_path = Distiller(ViT(**small), str(tmp_path / "teacher.keras"), kind="logits")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(by_path.teacher(raw)),
                               keras.ops.convert_to_numpy(source(raw)), atol=1e-6)


def test_a_distillers_checkpoint_holds_no_teacher_and_restores(tmp_path):
    """A run's checkpoint of a distiller holds the student, the projection
    and the optimizer, not the frozen teacher (read again from its own
    file), and restores them into a fresh distiller."""
    from keras_vit.distillation import Distiller
    from keras_vit.training import checkpoints

    def made():
        student, _ = _student_and_teacher(token=False)
        distiller = Distiller(student, _wide_teacher(), kind="features")
        distiller.compile(optimizer=keras.optimizers.Adam(0.01))
        return distiller

    images, labels = _digits_batch()
    trained = made()
    trained.fit(images, labels, batch_size=8, epochs=1, verbose=0)
    checkpoints.CheckpointManager(tmp_path).save(trained, step=2, epoch=1)
    record = json.loads((tmp_path / "ckpt-000000002.json").read_text())
    assert len(record["variables"]) == (len(trained.variables) - len(trained.teacher.variables)
                                        + len(trained.optimizer.variables))
    fresh = made()
    fresh.optimizer.build(fresh.trainable_variables)  # as a run builds it before restoring
    assert checkpoints.CheckpointManager(tmp_path).restore(fresh)["step"] == 2
    for a, b in zip((*trained.student.weights, *trained.projection.weights),
                    (*fresh.student.weights, *fresh.projection.weights), strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
