"""Scale-out and fault tolerance.

Every strategy gives the one-device run's losses and final weights for the
same steps (within 1e-4); a run killed with SIGKILL at any point and started
again with the same command ends with the uninterrupted run's weights
(within 1e-6). Strategies and multi-process runs need a fresh process (the
host is split into devices before the backend starts), so they run the
command line in subprocesses, each in the pass of the backend it belongs to.
"""

import csv
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import warnings

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_vit import distribution
from keras_vit.data import input_pipeline
from keras_vit.data import load_source
from keras_vit.training import checkpoints
from keras_vit.training import resolve_config
from keras_vit.training import train

BACKEND = keras.backend.backend()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tiny and short: 4 checkpoint intervals of 2 updates; dropout on, so that
# its random state must come back on resume.
RUN = ["--config", "digits", "--steps", "8", "--warmup-steps", "2", "--batch-size", "32",
       "--checkpoint-every", "2", "--few-shot=", "--model-args",
       "num_layers=2,hidden_dim=32,num_heads=4,mlp_dim=64,patch_size=4"]
DROPOUT = ["--dropout-rate", "0.1", "--drop-path-rate", "0.1"]
# The strategies: 4 updates, a checkpoint (and a logged loss) after each.
SHORT = [*RUN, "--steps", "4", "--checkpoint-every", "1", "--warmup-steps", "1"]


def only_on(backend, what):
    return pytest.mark.skipif(
        BACKEND != backend, reason=f"{what} is {backend}'s; it runs in the KERAS_BACKEND={backend} pass"
    )


def command(workdir, *extra, script=None, base=SHORT):
    entry = [os.path.join(ROOT, "recipes", "pretrain.py")] if script else ["-m", "keras_vit.cli", "pretrain"]
    return [sys.executable, *entry, *base, "--workdir", str(workdir), *extra]


def launch(cmd, env=None, **kwargs):
    env = {**os.environ, "KERAS_BACKEND": BACKEND, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen(cmd, env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def finish(process, timeout=400):
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out


def run_ok(cmd, env=None):
    code, out = finish(launch(cmd, env))
    assert code == 0, out[-4000:]
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(workdir):
    with open(workdir / "log.csv") as file:
        return [float(row["loss"]) for row in csv.DictReader(file)]


def weights(workdir):
    model = keras.saving.load_model(workdir / "model.keras", safe_mode=True)
    return [to_numpy(w) for w in model.weights]


def max_difference(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(weights(a), weights(b), strict=True))


def run_here(cmd):
    """`cmd` (a `command(...)`) run by `keras_vit.cli.main` in this process:
    the same command line without a process to start (a one-device run
    needs no fresh process)."""
    from keras_vit import cli

    assert cmd[1:3] == ["-m", "keras_vit.cli"], cmd
    assert cli.main(cmd[3:]) == 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The one-device run every strategy is compared with (no dropout: each
    replica draws its own dropout masks, as in every framework)."""
    workdir = tmp_path_factory.mktemp("reference") / "run"
    run_here(command(workdir))
    return workdir


@pytest.fixture(scope="module")
def reference_two_hosts(tmp_path_factory):
    """The one-device run fed the global batches of two hosts (each reading
    half the data): the reference of the two-process runs."""
    workdir = tmp_path_factory.mktemp("reference_two_hosts") / "run"
    run_here(command(workdir, "--data-shards", "2"))
    return workdir


def assert_same_run(workdir, reference, strategy):
    difference = max_difference(workdir, reference)
    loss_difference = np.max(np.abs(np.subtract(losses(workdir), losses(reference))))
    print(f"{strategy}: max |loss - one-device loss| = {loss_difference:.2e}, "
          f"max |weight - one-device weight| = {difference:.2e}")
    assert len(losses(workdir)) == len(losses(reference)) == 4
    assert loss_difference < 1e-4
    assert difference < 1e-4


# -- strategies -----------------------------------------------------------------

@pytest.mark.slow
@only_on("tensorflow", "MirroredStrategy")
def test_mirrored_over_two_cpu_devices_is_the_one_device_run(tmp_path, reference):
    workdir = tmp_path / "mirrored"
    run_ok(command(workdir, "--strategy", "mirrored", "--host-devices", "2"))
    assert_same_run(workdir, reference, "mirrored (2 devices)")
    assert json.loads((workdir / "config.json").read_text())["strategy"] == "mirrored"


@pytest.mark.slow
@only_on("tensorflow", "MultiWorkerMirroredStrategy")
def test_multi_worker_on_two_processes_is_the_one_device_run(tmp_path, reference_two_hosts):
    workdir = tmp_path / "multi_worker"
    workers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    processes = [
        launch(command(workdir, "--strategy", "multi_worker"), env={"TF_CONFIG": json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})})
        for index in range(2)
    ]
    for process in processes:
        code, out = finish(process)
        assert code == 0, out[-4000:]
    assert_same_run(workdir, reference_two_hosts, "multi_worker (2 processes)")
    assert json.loads((workdir / "config.json").read_text())["data_shards"] == 2


@only_on("tensorflow", "TPUStrategy")
@pytest.mark.slow
def test_tpu_without_a_tpu_is_a_clear_error(tmp_path):
    code, out = finish(launch(command(tmp_path / "tpu", "--strategy", "tpu")))
    assert code == 2 and "--strategy tpu: no TPU found" in out and "--tpu local" in out, out[-2000:]
    assert not (tmp_path / "tpu").exists()


@only_on("tensorflow", "TPUStrategy")
@pytest.mark.slow
def test_tpu_runs_the_mirrored_code_path_after_the_strategy(tmp_path, monkeypatch):
    import tensorflow as tf

    # What a machine without a TPU can test: the resolver is the only
    # TPU-specific step; from the strategy on, tpu is the shared code path.
    monkeypatch.setattr(distribution, "_tpu_strategy", lambda tpu: tf.distribute.MirroredStrategy(["/cpu:0"]))
    topology = distribution.setup("tpu", tpu="local")
    assert (topology.strategy, topology.num_replicas, topology.is_chief) == ("tpu", 1, True)
    config = resolve_config("digits", dict(steps=2, warmup_steps=1, batch_size=16, checkpoint_every=1,
                                           few_shot=[], strategy="tpu", steps_per_execution=1,
                                           model_args=dict(num_layers=1, hidden_dim=16, num_heads=2,
                                                           mlp_dim=32, patch_size=4)))
    model, results = train(config, tmp_path / "tpu", verbose=0, topology=topology)
    alone, _ = train(config.replace(strategy="none"), tmp_path / "none", verbose=0)
    for a, b in zip(model.weights, alone.weights, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-5)
    assert 0 <= results["test_accuracy"] <= 1


# One process split into 4 devices for every JAX check that needs them (a
# process costs 10-25 s here, its imports and compilations): the command line's
# data_parallel run, which splits the host, its model_parallel run on those
# devices, and the model_parallel shardings of a model built after them.
JAX_FOUR_DEVICES = """
import json, sys
from keras_vit import cli, distribution
command, data_parallel, model_parallel = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
assert cli.main([*command, "--workdir", data_parallel, "--strategy", "data_parallel", "--host-devices", "4"]) == 0
assert cli.main([*command, "--workdir", model_parallel, "--strategy", "model_parallel"]) == 0
topology = distribution.setup("model_parallel", model_axis=2)
config = dict(image_size=16, patch_size=4, num_layers=1, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10)
topology.shard_model(config)
from keras_vit import ViT
with topology.scope():
    model = ViT(**config)
print(json.dumps({v.path: [str(a) for a in v.value.sharding.spec] for v in model.weights}))
"""


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    """`JAX_FOUR_DEVICES` run once: the two strategies' work directories and
    the shardings' specs, by variable path."""
    root = tmp_path_factory.mktemp("four_devices")
    workdirs = {strategy: root / strategy for strategy in ("data_parallel", "model_parallel")}
    out = run_ok([sys.executable, "-c", JAX_FOUR_DEVICES, json.dumps(["pretrain", *SHORT]),
                  str(workdirs["data_parallel"]), str(workdirs["model_parallel"])])
    return workdirs, json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@only_on("jax", "keras.distribution")
@pytest.mark.parametrize("strategy", ["data_parallel", "model_parallel"])
def test_jax_strategies_over_four_devices_are_the_one_device_run(strategy, four_devices, reference):
    workdirs, _ = four_devices
    assert_same_run(workdirs[strategy], reference, f"{strategy} (4 devices)")


@pytest.mark.slow
@only_on("jax", "keras.distribution")
def test_model_parallel_really_shards_heads_and_mlp(four_devices):
    _, specs = four_devices
    block = "encoder_block_0"
    for name in ("query", "key", "value"):
        assert specs[f"{block}/attention/{name}/kernel"] == ["None", "model", "None"]
        assert specs[f"{block}/attention/{name}/bias"] == ["model", "None"]
    assert specs[f"{block}/attention/out/kernel"] == ["model", "None", "None"]
    assert specs[f"{block}/mlp/fc1/kernel"] == ["None", "model"]
    assert specs[f"{block}/mlp/fc2/kernel"] == ["model", "None"]
    assert all(a == "None" for a in specs["position_embedding/embeddings"])


@pytest.mark.slow
@only_on("jax", "jax.distributed")
def test_two_jax_processes_are_the_one_device_run(tmp_path, reference_two_hosts):
    workdir = tmp_path / "two_hosts"
    coordinator = f"127.0.0.1:{free_port()}"
    processes = [
        launch(command(workdir, "--strategy", "data_parallel", "--coordinator", coordinator,
                       "--num-processes", "2", "--process-id", str(index)))
        for index in range(2)
    ]
    for process in processes:
        code, out = finish(process)
        assert code == 0, out[-4000:]
    assert_same_run(workdir, reference_two_hosts, "data_parallel (2 processes)")
    assert json.loads((workdir / "config.json").read_text())["data_shards"] == 2


# -- runs that survive ----------------------------------------------------------------

def kill_at_file(process, fifo, written=None):
    """SIGKILLs `process` from outside at a file it writes, as a scheduler
    would: a FIFO in place of the temporary file (`files.write_atomic`
    writes `<name>.tmp`, then renames it) stops the run there, since
    opening a FIFO blocks until it has a reader.

    With `written` None, the test is that reader (opened without blocking):
    the kill comes with the run's first bytes, and the run then blocks on
    the full pipe (a checkpoint holds more than a pipe's 64 KiB). Otherwise
    the FIFO gets no reader, and the kill comes once `written`, the file the
    run writes just before, exists: the run cannot get past the FIFO either
    way. A run that ends first, or takes over 400 s, fails the test instead
    of hanging it.
    """
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if written is None else None
    try:
        deadline, reached = time.monotonic() + 400, False
        while not reached and process.poll() is None and time.monotonic() < deadline:
            if reader is not None:
                reached = bool(select.select([reader], [], [], 0.1)[0])  # the run's first bytes
            else:
                reached = written.exists()
                if not reached:
                    time.sleep(0.05)  # a poll on the condition; the FIFO holds the run there
        process.kill()
        code, out = finish(process)
        assert reached and code == -signal.SIGKILL, (fifo.name, reached, code, out[-3000:])
    finally:
        if reader is not None:
            os.close(reader)
        fifo.unlink()


@pytest.mark.slow
@pytest.mark.backend_independent  # files and a SIGKILL: the checkpoints' writing is numpy's on every backend
def test_a_run_killed_while_checkpointing_keeps_the_checkpoints_before(tmp_path):
    """SIGKILL from outside in the first interval (before any checkpoint),
    and while a checkpoint is written (its data in place, its record not
    yet): the checkpoints the run had before are all it has."""
    workdir = tmp_path / "killed"
    folder = workdir / "checkpoints"
    again = command(workdir, *DROPOUT, script=True, base=RUN)
    folder.mkdir(parents=True)
    kill_at_file(launch(again), folder / "ckpt-000000002.npz.tmp")
    assert checkpoints.CheckpointManager(folder).steps() == []
    kill_at_file(launch(again), folder / "ckpt-000000004.json.tmp", written=folder / "ckpt-000000004.npz")
    steps = checkpoints.CheckpointManager(folder).steps()
    assert steps == [2], steps  # the checkpoint of step 4 lacks its record: it does not exist
    assert (folder / "ckpt-000000004.npz").exists()
    assert (folder / "ckpt-000000004.npz").stat().st_size > 64 * 1024  # fills a pipe


def kill_once_written(cmd, record):
    """Starts `cmd` and sends it SIGKILL at the first line it prints after
    the file `record` exists (waiting on the run's own output, not on time)."""
    process = launch(cmd)
    for line in process.stdout:
        if record.exists():
            break
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_weights(tmp_path):
    """SIGKILL at a random moment once the checkpoint of step 4 is on disk,
    then a damaged newest checkpoint: the same command each time, and the
    end is the run never interrupted. (Kills at the checkpoints' own files:
    `test_a_run_killed_while_checkpointing_keeps_the_checkpoints_before`.)"""
    whole = tmp_path / "whole"
    run_ok(command(whole, *DROPOUT, script=True, base=RUN))
    workdir = tmp_path / "killed"
    folder = workdir / "checkpoints"
    again = command(workdir, *DROPOUT, script=True, base=RUN)

    # At a random moment, once the checkpoint of step 4 is on disk (half the run to go).
    kill_once_written(again, folder / "ckpt-000000004.json")
    assert not (workdir / "model.keras").exists()

    # Damage the newest checkpoint: it is reported and the one before is used.
    newest = checkpoints.CheckpointManager(folder).steps()[-1]
    data = folder / f"ckpt-{newest:09d}.npz"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    out = run_ok(again)
    assert f"Skipping checkpoint of step {newest}" in out and "damaged or partial" in out, out[-3000:]

    difference = max_difference(workdir, whole)
    print(f"killed, a checkpoint damaged, resumed ({BACKEND}): max |weight - uninterrupted weight| = {difference:.2e}")
    assert difference <= 1e-6
    assert len(losses(workdir)) >= 4
    assert checkpoints.CheckpointManager(folder).steps() == [4, 6, 8]  # the newest 3


# -- a run with a teacher (distillation) ---------------------------------------------

def distilling(reference, kind="hard"):
    """The flags of a run that distills the `reference` run's model (the
    teacher) into a student of the same size with DeiT's distillation token."""
    return ["--teacher", str(reference / "model.keras"), "--distillation", kind, "--model-args",
            "num_layers=2,hidden_dim=32,num_heads=4,mlp_dim=64,patch_size=4,distillation_token=True"]


@pytest.fixture(scope="module")
def distilled(reference, tmp_path_factory):
    """The one-device distilling run (hard, DeiT's token) the others are compared with."""
    workdir = tmp_path_factory.mktemp("distilled") / "run"
    run_here(command(workdir, *distilling(reference)))
    return workdir


@pytest.mark.slow
@only_on("tensorflow", "MirroredStrategy")
def test_a_distilling_run_under_mirrored_is_the_one_device_run(tmp_path, reference, distilled):
    """The teacher built in the strategy's scope, each replica distilling
    its half of the batch: the one-device run's losses and weights."""
    workdir = tmp_path / "mirrored"
    run_ok(command(workdir, *distilling(reference), "--strategy", "mirrored", "--host-devices", "2"))
    assert_same_run(workdir, distilled, "mirrored distillation (2 devices)")


@pytest.mark.slow
def test_a_killed_distilling_run_resumes_to_the_same_weights(tmp_path, reference):
    """SIGKILL once the checkpoint of update 2 (of 4) is on disk; the same
    command again ends with the uninterrupted run's student, saved alone.
    Both runs are processes of their own (a worker computes with other
    thread settings, whose sums differ in the last bits)."""
    whole = tmp_path / "whole"
    run_ok(command(whole, *distilling(reference)))
    workdir = tmp_path / "killed"
    again = command(workdir, *distilling(reference))
    kill_once_written(again, workdir / "checkpoints" / "ckpt-000000002.json")
    assert not (workdir / "model.keras").exists()
    run_ok(again)
    difference = max_difference(workdir, whole)
    print(f"distilling run killed and resumed ({BACKEND}): max |weight - uninterrupted weight| = {difference:.2e}")
    assert difference <= 1e-6
    student = keras.saving.load_model(workdir / "model.keras")
    assert type(student).__name__ == "ViT" and student.config.distillation


# -- checkpoints ------------------------------------------------------------------

def tiny_compiled_model():
    from keras_vit import ViT
    from keras_vit.training import pretrain_optimizer

    model = ViT(image_size=8, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3, dropout_rate=0.1)
    model.compile(optimizer=pretrain_optimizer(base_lr=1e-3, total_steps=10, warmup_steps=1), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def test_checkpoints_are_atomic_pruned_and_checked(tmp_path):
    model = tiny_compiled_model()
    manager = checkpoints.CheckpointManager(tmp_path, keep=2)
    for step in (1, 2, 3):
        model.weights[0].assign(np.full(model.weights[0].shape, step, "float32"))
        manager.save(model, step, epoch=step)
    assert manager.steps() == [2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000002.json", "ckpt-000000002.npz", "ckpt-000000003.json", "ckpt-000000003.npz"]

    other = tiny_compiled_model()
    assert manager.restore(other)["step"] == 3
    np.testing.assert_array_equal(to_numpy(other.weights[0]), 3)
    for a, b in zip(model.variables + model.optimizer.variables, other.variables + other.optimizer.variables):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))  # seeds and optimizer too

    # A flipped byte in the newest: skipped, with a warning naming it.
    data = tmp_path / "ckpt-000000003.npz"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match="Skipping checkpoint of step 3.*damaged"):
        assert manager.restore(other)["step"] == 2
    np.testing.assert_array_equal(to_numpy(other.weights[0]), 2)

    # Another architecture's checkpoint is not loaded into this model.
    from keras_vit import ViT

    bigger = ViT(image_size=8, patch_size=4, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=16, num_classes=3)
    bigger.compile(optimizer="sgd", loss="mse")
    bigger.optimizer.build(bigger.trainable_variables)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert manager.restore(bigger) is None
    assert any("other variables" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="`keep` must be an int >= 1"):
        checkpoints.CheckpointManager(tmp_path, keep=0)


@pytest.mark.slow
def test_hosts_read_disjoint_parts_and_make_the_global_batches():
    """Each of 4 hosts reads a quarter of the split; their rows side by side
    are the global batches of a one-device run fed as 4 hosts."""
    from keras_vit.data import concatenate_shards

    source = load_source("digits", "train")
    common = dict(image_size=16, batch_size=8, training=True, seed=3, start_batch=5)
    parts = [input_pipeline(source, **common, shard=(i, 4)) for i in range(4)]
    quarters = [source.shard(i, 4) for i in range(4)]
    assert [q.num_examples for q in quarters] == [359, 359, 359, 360]
    labels = [np.concatenate([np.asarray(y) for _, y in input_pipeline(
        source, **{**common, "start_batch": 0}, shard=(i, 4)).take(180)]).argmax(1) for i in range(4)]
    for quarter, seen in zip(quarters, labels, strict=True):  # 180 batches of 2 rows: an epoch of a quarter
        expected = np.bincount(quarter.table["label"], minlength=10)
        assert (np.bincount(seen[:quarter.num_examples], minlength=10) == expected).all()
    whole = next(iter(concatenate_shards(parts)))
    assert whole[0].shape == (8, 16, 16, 3)
    for k in range(2):
        np.testing.assert_array_equal(np.concatenate([next(iter(p))[k].numpy() for p in parts]), whole[k].numpy())
    with pytest.raises(ValueError, match="does not split into 3 equal shards"):
        input_pipeline(source, **{**common, "shard": (0, 3)})
    with pytest.raises(ValueError, match="0 <= index < count"):
        input_pipeline(source, **{**common, "shard": (4, 4)})


# -- bad input ----------------------------------------------------------------------

def test_a_strategy_the_backend_lacks_is_a_clear_error(tmp_path, capsys):
    lacking = {"tensorflow": "data_parallel", "jax": "mirrored", "torch": "mirrored"}[BACKEND]
    with pytest.raises(distribution.DistributionError, match=f"--strategy {lacking}") as error:
        distribution.check_strategy(lacking)
    assert "KERAS_BACKEND=" in str(error.value)
    if BACKEND == "torch":
        assert "one device" in str(error.value)
    # The command line (`keras_vit.cli.main`, the `keras-vit` entry point) in this process.
    with pytest.raises(SystemExit) as exit:
        run_here(command(tmp_path / "x", "--strategy", lacking))
    err = capsys.readouterr().err
    assert exit.value.code == 2 and f"keras-vit pretrain: error: --strategy {lacking}" in err, err[-2000:]
    assert not (tmp_path / "x").exists()


def test_a_batch_the_replicas_cannot_split_is_refused(tmp_path):
    topology = distribution.Topology(num_replicas=3)
    with pytest.raises(distribution.DistributionError, match="--batch-size 32 does not split evenly over the 3"):
        topology.check_batch(32)
    config = resolve_config("digits", dict(steps=2, warmup_steps=1, batch_size=32, few_shot=[]))
    with pytest.raises(distribution.DistributionError, match="Use a multiple of 3"):
        train(config, tmp_path / "run", topology=topology)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("tf_config,message", [
    (None, "TF_CONFIG, which is not set"),
    ("{not json", "TF_CONFIG is malformed"),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 1}}', "TF_CONFIG is malformed"),
    ('{"cluster": {"worker": "127.0.0.1:1"}, "task": {"type": "worker", "index": 0}}', "TF_CONFIG is malformed"),
])
def test_a_malformed_tf_config_is_a_clear_error(tf_config, message, monkeypatch):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(distribution.DistributionError, match=message):
        distribution._tf_config()


@pytest.mark.parametrize("kwargs,message", [
    (dict(coordinator="127.0.0.1:1234", num_processes=2, process_id=2), "--process-id 2 is out of range"),
    (dict(coordinator="127.0.0.1:1234", num_processes=2, process_id=-1), "--process-id -1 is out of range"),
    (dict(coordinator="127.0.0.1", num_processes=2, process_id=0), "--coordinator must be HOST:PORT"),
    (dict(num_processes=2, process_id=0), "need all three of --coordinator"),
])
def test_bad_multi_host_flags_are_clear_errors(kwargs, message):
    if BACKEND != "jax":
        with pytest.raises(distribution.DistributionError, match="join JAX processes"):
            distribution.setup("none", **kwargs)
        return
    with pytest.raises(distribution.DistributionError, match=message):
        distribution.setup("data_parallel", **kwargs)


@only_on("jax", "keras.distribution")
def test_layout_map_checks_the_mesh_and_the_model():
    import jax

    devices = jax.devices()[:1]
    mesh = keras.distribution.DeviceMesh((1, 1), ["batch", "model"], devices)
    layouts = distribution.layout_map(dict(num_heads=4, mlp_dim=64), mesh)
    assert layouts["encoder_block_3/attention/query/kernel"].axes == (None, "model", None)
    assert layouts["encoder_block_0/mlp/fc2/kernel"].axes == ("model", None)
    with pytest.raises(distribution.DistributionError, match="needs a mesh with a 'model' axis"):
        distribution.layout_map(dict(num_heads=4, mlp_dim=64),
                                keras.distribution.DeviceMesh((1,), ["batch"], devices))


@only_on("jax", "keras.distribution")
@pytest.mark.parametrize("sizes,refused", [
    (dict(num_heads=3, hidden_dim=12, mlp_dim=24), "num_heads (3)"),
    (dict(num_heads=2, hidden_dim=8, mlp_dim=15), "mlp_dim (15)"),
])
def test_model_parallel_checks_the_init_files_sizes_not_its_presets(sizes, refused, tmp_path):
    """A model-parallel fine-tuning of a file whose heads or MLP width are not
    its config's model's (`helpers.TINY_RUN_MODEL`: 2 heads, MLP 32, which
    split over 2 devices) is checked against the file's sizes, before
    anything is built or written."""
    import types

    from helpers import tiny_run_config

    from keras_vit import ViT

    ViT(image_size=16, patch_size=4, num_layers=1, num_classes=10, **sizes).save(tmp_path / "init.keras")
    mesh = types.SimpleNamespace(shape=(1, 2), axis_names=["batch", "model"])  # the layout check reads these
    topology = distribution.Topology(strategy="model_parallel", mesh=mesh)
    config = tiny_run_config(kind="finetune", init=str(tmp_path / "init.keras"), strategy="model_parallel")
    with pytest.raises(distribution.DistributionError, match=re.escape(f"The model's {refused} does not split")):
        train(config, tmp_path / "run", topology=topology)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_resume_may_change_placement_but_not_the_run(tmp_path):
    config = resolve_config("digits", dict(steps=2, warmup_steps=1, batch_size=16, checkpoint_every=1,
                                           few_shot=[], model_args=dict(num_layers=1, hidden_dim=16,
                                                                        num_heads=2, mlp_dim=32)))
    train(config, tmp_path, verbose=0)
    train(config.replace(keep_checkpoints=5), tmp_path, verbose=0)  # placement: accepted
    with pytest.raises(ValueError, match="seed: was 0, now 1"):
        train(config.replace(seed=1), tmp_path, verbose=0)


@pytest.mark.slow
def test_steps_per_execution_is_the_same_run(tmp_path):
    config = resolve_config("digits", dict(steps=4, warmup_steps=1, batch_size=16, checkpoint_every=2,
                                           few_shot=[], model_args=dict(num_layers=1, hidden_dim=16,
                                                                        num_heads=2, mlp_dim=32)))
    if BACKEND == "torch":
        with pytest.raises(ValueError, match="one batch per call on the torch backend"):
            train(config.replace(steps_per_execution=2), tmp_path / "two", verbose=0)
        return
    one, _ = train(config, tmp_path / "one", verbose=0)
    two, _ = train(config.replace(steps_per_execution=2), tmp_path / "two", verbose=0)
    for a, b in zip(one.weights, two.weights, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-6)
    with pytest.raises(ValueError, match="--steps-per-execution 3 must divide the 2 batches"):
        train(config.replace(steps_per_execution=3), tmp_path / "three", verbose=0)
