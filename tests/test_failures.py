"""Runs that fail leave nothing broken: a diverging run writes nothing
non-finite and resumes from its last finite checkpoint; every check runs
before the first write; every failure of the command line is one line
``keras-vit CMD: error: ...`` with exit status 2; the Python API raises the
same messages as `ValueError`, `FileNotFoundError` or `CheckpointError`."""

import csv
import hashlib
import io
import json
import math

import numpy as np
import pytest
import tensorflow as tf
from helpers import TINY_RUN
from helpers import TINY_RUN_ARGS
from helpers import run_flags
from helpers import tiny_run_config
from helpers import to_numpy
from PIL import Image

from keras_vit import ViT
from keras_vit.cli import main
from keras_vit.io import files
from keras_vit.training import DivergenceError
from keras_vit.training import resolve_config
from keras_vit.training import run as run_module
from keras_vit.training import train
from keras_vit.training.checkpoints import CheckpointManager
from keras_vit.weights import CheckpointError

FAST = run_flags(**TINY_RUN, image_size=16)


def cli_error(argv, capsys):
    """The first line of a command that must fail with exit status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[0]


def all_finite(path):
    with np.load(path) as arrays:
        return all(np.isfinite(a).all() for a in arrays.values() if np.issubdtype(a.dtype, np.floating))


def nan_at_batch(index):
    """`run.train_dataset` with the images of micro-batch `index` (from the
    stream's start) turned into NaN."""
    original = run_module.train_dataset

    def poisoned(config, source, start_batch=0, shard=None, scaling=None, patch_size=None):
        dataset = original(config, source, start_batch, shard, scaling, patch_size)
        return dataset.enumerate().map(
            lambda i, batch: (tf.where(i + start_batch == index, math.nan, batch[0]), batch[1]))

    return poisoned


# -- 1. a diverging run ---------------------------------------------------------

@pytest.mark.slow
def test_a_diverging_run_writes_nothing_non_finite_and_resumes(tmp_path, monkeypatch):
    config = tiny_run_config()
    workdir = tmp_path / "run"
    monkeypatch.setattr(run_module, "train_dataset", nan_at_batch(2))  # update 3 of 4
    with pytest.raises(DivergenceError) as info:
        train(config, workdir, verbose=0)
    message = str(info.value)
    assert message.startswith("Training diverged at update 3 of 4: the loss is nan.")
    assert "the newest checkpoint is that of update 2, and the same command resumes from it" in message
    assert "--base-lr (now 0.003)" in message and "--grad-norm-clip" in message
    assert (info.value.update, info.value.checkpoint) == (3, 2)
    assert CheckpointManager(workdir / "checkpoints").steps() == [2]
    assert all_finite(workdir / "checkpoints" / "ckpt-000000002.npz")
    assert not (workdir / "model.keras").exists() and not (workdir / "results.json").exists()
    assert not list(workdir.rglob("*.tmp"))
    json.loads((workdir / "config.json").read_text())

    # The same config again (the data healthy now) resumes from update 2 and
    # ends as a run never interrupted does.
    monkeypatch.undo()
    model, results = train(config, workdir, verbose=0)
    reference, _ = train(config, tmp_path / "reference", verbose=0)
    for a, b in zip(model.weights, reference.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    assert CheckpointManager(workdir / "checkpoints").steps() == [2, 4]
    assert json.loads((workdir / "results.json").read_text())["steps"] == 4
    # The log holds each interval once: the diverged attempt's row is gone.
    with open(workdir / "log.csv") as file:
        rows = list(csv.DictReader(file))
    assert [row["epoch"] for row in rows] == ["0", "1"]
    assert all(math.isfinite(float(row["loss"])) for row in rows)


@pytest.mark.slow
def test_divergence_before_the_first_checkpoint_through_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(run_module, "train_dataset", nan_at_batch(0))
    workdir = tmp_path / "run"
    line = cli_error(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST], capsys)
    assert line.startswith("keras-vit pretrain: error: Training diverged at update 1 of 4: the loss is nan.")
    assert "no checkpoint was written yet, and the same command starts over" in line
    assert sorted(p.name for p in workdir.iterdir() if p.is_file()) == ["config.json", "log.csv"]
    assert not (workdir / "checkpoints").exists()


def test_no_checkpoint_or_report_holds_a_non_finite_value(tmp_path):
    model = ViT(image_size=8, patch_size=4, num_layers=1, num_heads=1, hidden_dim=4, mlp_dim=8, num_classes=2)
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.save(model, step=1, epoch=1)
    model.get_layer("head").bias.assign([math.inf, 0.0])
    with pytest.raises(CheckpointError, match=r"update 2 is not finite \(.*head/bias holds NaN"):
        manager.save(model, step=2, epoch=2)
    assert manager.steps() == [1] and not list((tmp_path / "checkpoints").glob("*.tmp"))

    # A non-finite checkpoint (as older versions wrote) is skipped, with a warning.
    (tmp_path / "checkpoints" / "ckpt-000000001.npz").rename(tmp_path / "finite.npz")
    other = CheckpointManager(tmp_path / "checkpoints")
    with np.load(tmp_path / "finite.npz") as arrays:
        values = dict(arrays)
    values = {k: (np.full_like(v, np.nan) if np.issubdtype(v.dtype, np.floating) else v)
              for k, v in values.items()}
    np.savez(tmp_path / "checkpoints" / "ckpt-000000001.npz", **values)
    record = tmp_path / "checkpoints" / "ckpt-000000001.json"
    meta = json.loads(record.read_text())
    data = tmp_path / "checkpoints" / "ckpt-000000001.npz"
    meta.update(size=data.stat().st_size, sha256=hashlib.sha256(data.read_bytes()).hexdigest())
    record.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="holds NaN or infinite values"):
        assert other.restore(model) is None

    # Reports: strict JSON, non-finite numbers as null.
    files.write_json(tmp_path / "r.json", {"loss": math.nan, "few_shot": {"5": math.inf}, "ok": 0.5})
    assert json.loads((tmp_path / "r.json").read_text()) == {"loss": None, "few_shot": {"5": None}, "ok": 0.5}


def test_a_full_disk_keeps_the_checkpoints_before(tmp_path, monkeypatch):
    model = ViT(image_size=8, patch_size=4, num_layers=1, num_heads=1, hidden_dim=4, mlp_dim=8, num_classes=2)
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.save(model, step=1, epoch=1)

    def full(file, **arrays):
        file.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(CheckpointError, match="Could not write the checkpoint of update 2 .*No space left "
                       "on device.*The checkpoint of update 1 is kept"):
        manager.save(model, step=2, epoch=2)
    monkeypatch.undo()
    assert manager.steps() == [1]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["ckpt-000000001.json",
                                                                           "ckpt-000000001.npz"]


# -- 2. a refused run ----------------------------------------------------------

@pytest.mark.slow
def test_a_refused_run_writes_nothing_and_a_config_alone_is_not_a_run(tmp_path, capsys):
    workdir = tmp_path / "run"
    for argv, message in (
        (["--randaugment", "2,99"], "`randaugment` must be (num_ops, magnitude)"),
        (["--mixup", "-1"], "--mixup must be a finite number at least 0, got -1.0."),
        (["--base-lr", "nan"], "--base-lr must be a positive number, got nan."),
        (["--dataset", str(tmp_path / "nowhere")], "Unknown dataset"),
    ):
        line = cli_error(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST, *argv], capsys)
        assert line.startswith(f"keras-vit pretrain: error: {message}"), line
        assert not workdir.exists(), argv
    # A directory with only the config of a run that never trained is taken;
    # that run's config and log are kept beside, with a note.
    workdir.mkdir()
    old_config = json.dumps({**resolve_config("digits", {}).to_dict(), "backend": "x"})
    (workdir / "config.json").write_text(old_config)
    (workdir / "log.csv").write_text("epoch,loss\n0,nan\n")
    assert main(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST]) == 0
    assert json.loads((workdir / "config.json").read_text())["steps"] == 4
    assert (workdir / "replaced-1-config.json").read_text() == old_config
    assert (workdir / "replaced-1-log.csv").read_text() == "epoch,loss\n0,nan\n"
    assert "its files are kept as replaced-1-config.json, replaced-1-log.csv" in capsys.readouterr().err


def test_a_corrupt_config_beside_a_log_is_refused_and_kept(tmp_path, capsys):
    # No checkpoint, so no run to resume; but nothing says what the config
    # was, so the directory is not taken and its log stays.
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "config.json").write_text('{"steps": ')
    (workdir / "log.csv").write_text("epoch,loss\n0,0.5\n")
    line = cli_error(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST], capsys)
    assert line.startswith(f"keras-vit pretrain: error: {workdir / 'config.json'} is not valid JSON")
    assert (workdir / "log.csv").read_text() == "epoch,loss\n0,0.5\n"
    assert sorted(p.name for p in workdir.iterdir()) == ["config.json", "log.csv"]


def test_a_corrupt_config_of_a_run_is_named(tmp_path, capsys):
    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
    (workdir / "checkpoints" / "ckpt-000000002.json").write_text("{}")  # a run was here
    (workdir / "config.json").write_text('{"steps": ')
    line = cli_error(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST], capsys)
    assert line.startswith(f"keras-vit pretrain: error: {workdir / 'config.json'} is not valid JSON")
    assert "Repair or remove the file" in line
    assert (workdir / "config.json").read_text() == '{"steps": '


# -- 3. operating-system errors --------------------------------------------------

def jpeg_bytes(seed=0, size=(24, 24)):
    pixels = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def image_folder(root, count=8):
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(count):
            (root / label / f"{i}.jpg").write_bytes(jpeg_bytes(i + 100 * (label == "b")))
    return root


def test_paths_that_cannot_be_used(tmp_path, capsys):
    model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16, num_classes=2)
    path = tmp_path / "m.keras"
    model.save(path)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(jpeg_bytes())
    cut = tmp_path / "cut.keras"
    cut.write_bytes(path.read_bytes()[:1000])
    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
    for argv, start in (
        (["predict", str(path), str(tmp_path / "missing.png")],
         f"keras-vit predict: error: Image file {tmp_path / 'missing.png'} does not exist."),
        (["convert", str(path), str(tmp_path / "no" / "x.keras")],
         f"keras-vit convert: error: output {tmp_path / 'no' / 'x.keras'}: the folder {tmp_path / 'no'} "
         "does not exist. Create it first"),
        (["pretrain", "--workdir", str(a_file), *TINY_RUN_ARGS, *FAST],
         f"keras-vit pretrain: error: --workdir {a_file} is a file, not a folder."),
        (["pretrain", "--workdir", str(a_file / "run"), *TINY_RUN_ARGS, *FAST],
         f"keras-vit pretrain: error: --workdir {a_file / 'run'}: {a_file} is a file"),
        (["explain", str(path), str(photo), "--out", str(a_file)],
         f"keras-vit explain: error: --out {a_file} is a file, not a folder."),
        (["predict", str(tmp_path / "missing.keras"), str(photo)],
         f"keras-vit predict: error: No model at {tmp_path / 'missing.keras'}"),
        (["predict", str(cut), str(photo)],
         f"keras-vit predict: error: {cut} is not a readable .keras file: it is not a zip archive"),
        (["convert", str(workdir), str(tmp_path / "x.keras")],
         f"keras-vit convert: error: {workdir} is a keras_vit work directory, not a checkpoint: its "
         f"trained model is {workdir / 'model.keras'}, written when its run ends."),
    ):
        assert cli_error(argv, capsys).startswith(start), argv
    with pytest.raises(FileNotFoundError, match="missing.png does not exist"):
        from keras_vit.data import read_images
        read_images(tmp_path / "missing.png", 16)


def test_a_truncated_image_is_refused_before_training(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    whole = (root / "a" / "3.jpg").read_bytes()
    (root / "a" / "3.jpg").write_bytes(whole[: len(whole) // 2])
    workdir = tmp_path / "run"
    line = cli_error(["pretrain", "--workdir", str(workdir), "--dataset", str(root), *TINY_RUN_ARGS, *FAST,
                      "--batch-size", "4"], capsys)
    assert line.startswith(f"keras-vit pretrain: error: Cannot decode image file {root / 'a' / '3.jpg'}: "
                           "it is cut short or damaged (jpeg::Uncompress failed. Invalid JPEG data")
    assert line.endswith("Replace it with a whole copy, or remove it.")
    assert not workdir.exists()
    # A JPEG followed by other data (a motion photo) is whole, and kept.
    (root / "a" / "3.jpg").write_bytes(whole + b"\0" * 5000 + b"ftypmp42")
    from keras_vit.data import load_source
    assert load_source(str(root), "train").num_examples == 16


@pytest.mark.slow
def test_a_damaged_image_found_during_training_is_named(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    whole = (root / "b" / "5.jpg").read_bytes()
    # Its end marker is in place, so only decoding finds the damage.
    (root / "b" / "5.jpg").write_bytes(whole[:300] + bytes(range(256)) * 4 + whole[-200:])
    workdir = tmp_path / "run"
    line = cli_error(["pretrain", "--workdir", str(workdir), "--dataset", str(root), "--eval-split",
                      "train", *TINY_RUN_ARGS, *FAST, "--batch-size", "4"], capsys)
    assert line.startswith(f"keras-vit pretrain: error: Cannot decode image file {root / 'b' / '5.jpg'} (")
    assert "found during training. Replace or remove it, then run the same command again" in line
    for path in workdir.rglob("*.npz"):
        assert all_finite(path)


# -- 4. wrong values -------------------------------------------------------------

def test_wrong_values_are_refused(tmp_path, capsys):
    model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16, num_classes=2)
    path = tmp_path / "m.keras"
    model.save(path)
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(jpeg_bytes())
    workdir = tmp_path / "run"
    for argv, start in (
        (["pretrain", "--workdir", str(workdir), "--model-args", "num_layrs=2", *FAST],
         "keras-vit pretrain: error: --model-args: unknown ViT argument(s) 'num_layrs'. Valid ones: "
         "patch_size, num_layers,"),
        (["pretrain", "--workdir", str(workdir), "--model-args", "image_size=8", *FAST],
         "keras-vit pretrain: error: --model-args: image_size is set by --image-size"),
        (["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST, "--polyak", "1.5"],
         "keras-vit pretrain: error: --polyak is the averaging momentum, a number in (0, 1)"),
        (["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST, "--grad-norm-clip", "-1"],
         "keras-vit pretrain: error: --grad-norm-clip must be a positive number"),
        (["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST, "--few-shot", "0,5"],
         "keras-vit pretrain: error: argument --few-shot: expected positive shots per class"),
        (["predict", str(path), str(photo), "--top-k", "-1"],
         "keras-vit predict: error: argument --top-k: expected a positive integer, got '-1'"),
        (["predict", str(path), str(photo), "--batch-size", "0"],
         "keras-vit predict: error: argument --batch-size: expected a positive integer, got '0'"),
        (["convert", str(path), str(tmp_path / "out.h5")],
         f"keras-vit convert: error: output {tmp_path / 'out.h5'} must end in .keras"),
        (["export", str(path), str(tmp_path / "out.txt"), "--format", "onnx"],
         f"keras-vit export: error: output {tmp_path / 'out.txt'} must end in .onnx"),
        (["evaluate", str(path), "--image-size", "0"],
         "keras-vit evaluate: error: argument --image-size: expected a positive integer, got '0'"),
        (["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST, "--tpu", "local"],
         "keras-vit pretrain: error: --tpu local is for --strategy tpu; with --strategy none it would "
         "do nothing."),
        (["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST, "--host-devices", "2"],
         "keras-vit pretrain: error: --host-devices 2 is for --strategy mirrored or multi_worker or "
         "data_parallel or model_parallel; with --strategy none"),
    ):
        line = cli_error(argv, capsys)
        assert line.startswith(start), (argv, line)
    assert not workdir.exists()
    assert not (tmp_path / "out.h5").exists()
    with pytest.raises(ValueError, match="--model-args: unknown ViT argument"):
        tiny_run_config(model_args={"num_layrs": 2})
