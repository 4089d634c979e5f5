"""Training with NaFlex: the input pipeline's NaFlex mode (lengths drawn per
batch, a token budget), `--max-num-patches` on a run and on `predict`, and
the recipe that compares NaFlex with squashed images."""

import json
import pathlib
import runpy

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import TINY
from helpers import TINY_RUN
from helpers import TINY_RUN_ARGS
from helpers import TINY_RUN_MODEL
from helpers import fails
from helpers import run_flags
from helpers import to_numpy

import keras_vit
from keras_vit import ViT
from keras_vit.cli import main
from keras_vit.data import input_pipeline
from keras_vit.data import load_source
from keras_vit.naflex import naflex_inputs
from keras_vit.naflex import train_seq_lens

ROOT = pathlib.Path(__file__).resolve().parents[1]
# 40 stretched digits, 4x4-px patches, a budget of 16 patches.
FLEX = dict(batch_size=4, patch_size=4, max_num_patches=16, flip=False)


@pytest.mark.backend_independent
def test_the_batches_follow_the_token_budget_and_the_drawn_lengths():
    """Each batch of length L holds 64 // L images of at most L patches;
    every cycle of three batches has each length once; a resumed stream
    is the same stream; each row is its image's `naflex_inputs` at the
    batch's length, with its own label."""
    source = load_source("digits_stretched", "train[:40]")
    stream = input_pipeline(source, training=True, preprocess="resize", seq_lens=(4, 8, 16), **FLEX)
    batches = [(x, to_numpy(y)) for x, y in stream.take(9)]
    lengths = [int(x["patches"].shape[1]) for x, _ in batches]
    assert sorted(lengths[:3]) == sorted(lengths[3:6]) == sorted(lengths[6:]) == [4, 8, 16], lengths
    images = [image for image in source.dataset.map(lambda r: r["image"]).as_numpy_iterator()]
    labels = [int(r["label"]) for r in source.records.as_numpy_iterator()]
    for length, (x, y) in zip(lengths, batches):
        assert x["patches"].shape == (64 // length, length, 48) and y.shape == (64 // length, 10)
        counts = to_numpy(x["patch_mask"]).sum(1)
        np.testing.assert_array_equal(counts, to_numpy(x["spatial_shapes"]).prod(1))
        assert (counts <= length).all() and (counts > length // 2).any()
        reference = keras_vit.naflex_inputs(images, 4, length)["patches"]
        for row, label in zip(to_numpy(x["patches"]), y.argmax(-1)):
            matches = [i for i in range(len(images)) if np.allclose(reference[i], row, atol=1e-5)]
            assert matches and labels[matches[0]] == label
    resumed = input_pipeline(source, training=True, preprocess="resize", seq_lens=(4, 8, 16),
                             start_batch=4, **FLEX)
    for (x, y), (x_resumed, y_resumed) in zip(batches[4:], resumed.take(5)):
        np.testing.assert_array_equal(to_numpy(x["patches"]), to_numpy(x_resumed["patches"]))
        np.testing.assert_array_equal(y, to_numpy(y_resumed))


@pytest.mark.backend_independent
def test_evaluation_pads_every_image_to_the_budget_in_order():
    source = load_source("digits_stretched", "test[:10]")
    test = input_pipeline(source, training=False, **FLEX)
    shapes = [tuple(x["patches"].shape) for x, _ in test]
    assert shapes == [(4, 16, 48), (4, 16, 48), (2, 16, 48)] and test.cardinality() == 3
    images = list(source.dataset.map(lambda r: r["image"]).as_numpy_iterator())
    x, y = next(iter(test.unbatch().batch(10)))
    expected = keras_vit.naflex_inputs(images, 4, 16)
    for key, value in expected.items():
        np.testing.assert_allclose(to_numpy(x[key]), value, atol=1e-5)
    assert to_numpy(y).argmax(-1).tolist() == [int(r["label"]) for r in source.records.as_numpy_iterator()]


@pytest.mark.backend_independent
@pytest.mark.parametrize("arguments,message", [
    (dict(max_num_patches=0), "budget below one patch"),
    (dict(seq_lens=(8, 32)), "`seq_lens` must be ints in [1, max_num_patches=16]"),
    (dict(image_size=16), "Leave `image_size` out"),
    (dict(mixup=0.5), "Leave `randaugment`, `mixup` and `cutmix` out"),
    (dict(patch_size=None), "needs both `patch_size` and `max_num_patches`"),
])
def test_bad_naflex_arguments_say_what_to_do(arguments, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        input_pipeline("digits", "train[:8]", training=True, **{**FLEX, **arguments})


@pytest.mark.slow
def test_fit_runs_on_the_pipeline_at_every_drawn_length():
    """One model trains on batches of 4, 8 and 16 patches (budget // L
    images each), and an image's logits do not change with the padding
    that makes its sequence longer."""
    model = ViT(**{**TINY, "image_size": 16, "patch_size": 4, "num_classes": 10},
                naflex=True, max_num_patches=16)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.CategoricalCrossentropy(
        from_logits=True))
    train = input_pipeline("digits_stretched", "train[:8]", training=True,  # 8 to learn by heart
                           **{**FLEX, "seq_lens": train_seq_lens(16)})
    lengths = {int(x["patches"].shape[1]) for x, _ in train.take(6)}
    assert lengths == {4, 8, 16}, lengths
    losses = model.fit(train, steps_per_epoch=6, epochs=3, verbose=0, shuffle=False).history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
    short = naflex_inputs([np.full((8, 20, 3), 200, np.uint8)], 4, 8)
    padded = {key: np.pad(value, ((0, 0), (0, 8), (0, 0))[:value.ndim]) if key != "spatial_shapes"
              else value for key, value in short.items()}
    np.testing.assert_allclose(to_numpy(model.predict_on_batch(short)),
                               to_numpy(model.predict_on_batch(padded)), atol=1e-5)


@pytest.mark.slow
def test_a_run_with_max_num_patches_trains_and_evaluates_a_naflex_model(tmp_path, capsys):
    workdir = tmp_path / "run"
    out = main(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS,
                *run_flags(**TINY_RUN, image_size=16, dataset="digits_stretched", max_num_patches=12,
                           few_shot=[1])])
    assert out == 0
    results = json.loads((workdir / "results.json").read_text())
    assert 0 <= results["test_accuracy"] <= 1 and set(results["few_shot"]) == {"1"}
    assert json.loads((workdir / "config.json").read_text())["max_num_patches"] == 12
    model = keras.saving.load_model(workdir / "model.keras")
    assert model.naflex and model.max_num_patches == 12 and model.num_classes == 10
    test = input_pipeline("digits_stretched", "test", training=False, batch_size=360,
                          patch_size=4, max_num_patches=12)
    x, y = next(iter(test))
    accuracy = (to_numpy(model.predict(x, verbose=0)).argmax(-1) == to_numpy(y).argmax(-1)).mean()
    assert accuracy == pytest.approx(results["test_accuracy"])
    assert "test accuracy:" in capsys.readouterr().out
    # the command line evaluates the saved NaFlex model the same way, at its budget
    assert main(["evaluate", str(workdir / "model.keras"), "--dataset", "digits_stretched",
                 "--batch-size", "100"]) == 0
    assert f"test accuracy: {accuracy:.3f}" in capsys.readouterr().out


@pytest.mark.backend_independent
def test_a_naflex_run_refuses_what_it_cannot_be(tmp_path, capsys):
    workdir = str(tmp_path / "run")
    fails(["pretrain", "--workdir", workdir, *run_flags(max_num_patches=0)], capsys,
          "--max-num-patches must be a positive integer")
    fails(["pretrain", "--workdir", workdir, "--model", "r50_vit_b16", *run_flags(max_num_patches=16)],
          capsys, "a hybrid (ResNet + ViT) model")
    fails(["pretrain", "--workdir", workdir, *run_flags(max_num_patches=16, mixup=0.2)], capsys,
          "--mixup with --max-num-patches")
    fails(["masked-patch", "--workdir", workdir, *run_flags(max_num_patches=16)], capsys,
          "masked patch prediction, which takes square images")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_predict_classifies_images_at_their_own_aspect_ratios(tmp_path, capsys):
    model = ViT(**TINY, class_names=list("abcde"))
    rng = np.random.default_rng(0)
    for layer in (model.get_layer("head"),):
        layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    model.save(tmp_path / "model.keras")
    sizes = [(20, 70), (64, 24), (30, 30)]
    images = [rng.integers(0, 256, (*size, 3), dtype=np.uint8) for size in sizes]
    paths = []
    for i, image in enumerate(images):
        paths.append(str(tmp_path / f"{i}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(image))
    assert main(["predict", str(tmp_path / "model.keras"), *paths, "--max-num-patches", "12",
                 "--top-k", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    logits = to_numpy(model.with_naflex(12)(keras_vit.naflex_inputs(images, 8, 12)))
    assert len({tuple(row) for row in np.round(logits, 4)}) == 3  # three different images
    for path, line, row in zip(paths, lines, logits):
        assert line.startswith(f"{path}: {'abcde'[row.argmax()]} (")


@pytest.mark.slow
def test_the_recipe_writes_both_accuracies(tmp_path):
    recipe = runpy.run_path(str(ROOT / "recipes" / "naflex_digits.py"))
    results = recipe["run"](tmp_path, steps=4, verbose=0, batch_size=16, model_args=TINY_RUN_MODEL)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved == results
    assert 0 <= saved["naflex_accuracy"] <= 1 and 0 <= saved["squashed_accuracy"] <= 1
    assert keras.saving.load_model(tmp_path / "naflex" / "model.keras").naflex
    assert not keras.saving.load_model(tmp_path / "squashed" / "model.keras").naflex
