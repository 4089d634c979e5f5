"""The recipes and the `keras-vit` command line: a whole (tiny) run in a work
directory on every backend, fine-tuning from it, and every bad input refused
with a clear error before training starts."""

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from helpers import TINY_RUN
from helpers import TINY_RUN_ARGS
from helpers import fails
from helpers import run_flags
from helpers import to_numpy

from keras_vit import ViT
from keras_vit.cli import main
from keras_vit.training import CONFIGS
from keras_vit.training import RunConfig
from keras_vit.training import resolve_config

FAST = run_flags(**TINY_RUN)
ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    return out


@pytest.mark.backend_independent
def test_the_program_exits_with_the_commands_status_and_leaves_nothing_to_collect(
        capsys, tmp_path, monkeypatch):
    """`cli.run`, the entry point of `keras-vit` and the recipes: `main`'s
    status as the exit status, and every live object frozen out of the
    collector's reach, so that the interpreter's shutdown has none to scan."""
    import gc

    from keras_vit import cli

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # run's quiet start: nothing for this process
    gc.unfreeze()  # conftest's freeze of the collected tests, so that run's own shows
    try:
        assert gc.get_freeze_count() == 0
        with pytest.raises(SystemExit) as exit_info:
            cli.run(["configs"])
        assert exit_info.value.code == 0 and "digits" in capsys.readouterr().out
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        with pytest.raises(SystemExit) as exit_info:  # an error's status too
            cli.run(["pretrain", "--config", "no-such-config", "--workdir", str(tmp_path / "run")])
        assert exit_info.value.code == 2 and "no-such-config" in capsys.readouterr().err
        assert not (tmp_path / "run").exists()
        assert gc.get_freeze_count() > 0
    finally:
        gc.freeze()


def test_every_config_resolves_and_the_tables_hold():
    kinds = {name: config.kind for name, config in CONFIGS.items()}
    assert {"pretrain", "finetune", "masked_patch"} == set(kinds.values())
    b16 = resolve_config("i21k-b16", {})
    assert (b16.batch_size, b16.warmup_steps, b16.base_lr, b16.weight_decay) == (4096, 10_000, 1e-3, 0.03)
    assert (b16.loss, b16.head_bias_init, b16.representation_size) == ("sigmoid", -10.0, 768)
    assert b16.steps == int(np.ceil(90 * 14_197_122 / 4096))
    assert resolve_config("i1k-b16", {}).decay_type == "cosine"
    cifar = resolve_config("ft-cifar10", {"batch_size": 512, "accum_steps": 8})
    assert (cifar.steps, cifar.image_size, cifar.train_split, cifar.lr_grid) == (
        10_000, 384, "train[:98%]", (0.001, 0.003, 0.01, 0.03))
    assert resolve_config("ft-pets", {}).steps == 500
    vtab = resolve_config("ft-vtab1k", {})  # Appendix B.1.1: one setting for all 19 tasks
    assert (vtab.steps, vtab.base_lr, vtab.batch_size, vtab.image_size, vtab.grad_norm_clip) == (
        2500, 0.01, 512, 384, 1.0)
    assert (vtab.train_split, vtab.eval_split, vtab.decay_type) == ("train800val200", "test", "cosine")


@pytest.mark.backend_independent
def test_a_run_config_is_deeply_immutable_and_its_json_round_trips():
    model_args = {"num_layers": 2, "hidden_dim": 32, "num_heads": 4, "mlp_dim": 64}
    few_shot = [1, 5]
    config = resolve_config("digits", {"model_args": model_args, "few_shot": few_shot})
    model_args["num_layers"], few_shot[0] = 12, 10  # the caller's objects, edited later
    assert config.model_args["num_layers"] == 2 and config.few_shot == (1, 5)
    with pytest.raises(TypeError):
        config.model_args["num_layers"] = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.steps = 1
    with pytest.raises(TypeError):
        CONFIGS["digits"] = config
    record = config.to_dict()
    assert isinstance(record["model_args"], dict) and record["few_shot"] == [1, 5]
    assert json.loads(json.dumps(record)) == record
    assert RunConfig.from_dict(record) == config
    assert resolve_config("ft-cifar10", {"batch_size": 512, "accum_steps": 8}).micro_batch_size == 64


@pytest.mark.backend_independent
def test_the_command_line_and_its_docs_are_the_run_configs_flags(capsys):
    import pathlib
    import re

    from keras_vit.cli import build_parser
    from keras_vit.training.configs import RUN_FIELDS as FIELDS
    from keras_vit.training.configs import FLAGS

    assert set(FLAGS) <= set(FIELDS)
    recipe = build_parser()._subparsers._group_actions[0].choices["pretrain"].add_flags()
    actions = {action.dest: action for action in recipe._actions}
    for field, flag in FLAGS.items():
        action = actions[field]
        assert action.option_strings == [flag.option], field
        assert (action.type, action.choices, action.default) == (flag.parse, flag.choices, None)
        # a bad choice or value is refused by the config with the flag's name
        bad = {"dtype": "float64", "loss": "hinge", "decay_type": "step", "strategy": "all",
               "steps": 0, "mixup": -1.0, "polyak": 1.5, "few_shot": [0]}.get(field)
        if bad is not None:
            with pytest.raises(ValueError, match=re.escape(flag.option) + r" (must|is)"):
                resolve_config("digits", {field: bad})
    args = recipe.parse_args(["--workdir", "w", *run_flags(dtype="mixed_bfloat16", few_shot=[1, 5],
                                                           model_args={"num_layers": 2})])
    assert resolve_config(args.config, {f: getattr(args, f) for f in FLAGS}).to_dict() == {
        **resolve_config("digits", {}).to_dict(), "dtype": "mixed_bfloat16", "few_shot": [1, 5],
        "model_args": {**resolve_config("digits", {}).model_args, "num_layers": 2}}
    with pytest.raises(SystemExit):
        recipe.parse_args(["--workdir", "w", "--dtype", "float64"])
    assert "argument --dtype: invalid choice: 'float64'" in capsys.readouterr().err
    # docs/cli.md's table: one row per flag, naming its config key
    text = (pathlib.Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    text = text[text.index("## `pretrain`"):text.index("## `evaluate`")]
    documented = set()
    for row in re.findall(r"^\| (`--.*?) \| (`[a-z_`, ]+`) \|", text, re.M):
        options, keys = re.findall(r"`(--[a-z-]+)", row[0]), re.findall(r"`([a-z_]+)`", row[1])
        documented |= set(zip(options, keys))
    assert documented == {(flag.option, field) for field, flag in FLAGS.items()}


# `python ARGS` (``-m keras_vit.cli ...`` or a script's path and its
# arguments), printing at its exit which of Keras and the backends it imported.
PROGRAM = textwrap.dedent("""
    import runpy, sys
    args, code = sys.argv[1:], 0
    try:
        if args[0] == "-m":
            sys.argv = args[1:]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = args
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exit:
        code = exit.code
    print("imported:", [m for m in ("keras", "tensorflow", "jax", "torch") if m in sys.modules])
    sys.exit(code)
""")
START_UP_LINES = ("oneDNN", "This TensorFlow binary", "absl::InitializeLog")


def _program(args, backend, **env):
    """`PROGRAM` run on `args` in the user's environment without
    TF_CPP_MIN_LOG_LEVEL, with KERAS_BACKEND `backend` (None: unset, Keras's
    default) and `env`: its exit status and its stdout and stderr, together."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL")},
           **({"KERAS_BACKEND": backend} if backend else {}), **env}
    result = subprocess.run([sys.executable, "-c", PROGRAM, *args], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    return result.returncode, result.stdout + result.stderr


# Each help's command line (after ``python``, in the repository's root) and
# the start of its usage line.
HELPS = [(["-m", "keras_vit.cli", "--help"], "keras-vit [-h] [--verbose] COMMAND"),
         *[(["-m", "keras_vit.cli", command, "--help"], f"keras-vit {command}") for command in
           ("predict", "export", "pretrain", "finetune", "masked-patch", "convert")],
         (["recipes/pretrain.py", "--help"], "keras-vit pretrain")]


@pytest.mark.backend_independent
@pytest.mark.parametrize("backend", [None, "tensorflow"])
@pytest.mark.parametrize("args,usage", HELPS, ids=[" ".join(args[-2:]) for args, _ in HELPS])
@pytest.mark.slow
def test_help_is_plain_text_from_a_process_without_a_backend(args, usage, backend):
    """`keras-vit --help` and each command's, the recipes' (their flags are
    `RunConfig`'s) and convert's (the formats it writes) too: plain text (no
    reST or Markdown quotes), printed by a process that imports neither
    Keras nor a backend, and so without their start-up lines."""
    status, out = _program(args, backend)
    assert status == 0, out
    assert out.startswith(f"usage: {usage}"), out
    assert out.rstrip().endswith("imported: []"), out
    assert "`" not in out and not [line for line in START_UP_LINES if line in out], out


@pytest.mark.backend_independent
@pytest.mark.slow
def test_a_recipe_starts_without_tensorflows_start_up_lines_and_writes_plain_progress(tmp_path):
    """A recipe run into a pipe, on PyTorch (whose import searches for
    TensorFlow before Keras imports it, for tf.data): none of TensorFlow's
    start-up lines, not even oneDNN's, which TensorFlow logs whatever
    TF_CPP_MIN_LOG_LEVEL says (TF_ENABLE_ONEDNN_OPTS=1 here has it logged
    on any CPU; the package leaves it as it is), and Keras's progress as
    plain lines, without the bar's ANSI escape codes."""
    status, out = _program([str(ROOT / "recipes" / "pretrain.py"), "--workdir", str(tmp_path / "run"),
                            *TINY_RUN_ARGS, *FAST, "--image-size", "16", "--few-shot", ""],
                           "torch", TF_ENABLE_ONEDNN_OPTS="1")
    assert status == 0, out
    assert "'tensorflow'" in out.splitlines()[-1] and "'torch'" in out.splitlines()[-1], out
    assert re.search(r"^2/2 - \d+s - ", out, re.MULTILINE), out  # Keras's verbose=2: an epoch's line
    assert not [line for line in START_UP_LINES if line in out], out
    assert not re.search(r"^I\d{4} \d\d:\d\d:", out, re.MULTILINE) and "\x1b[" not in out, out


@pytest.mark.backend_independent
def test_verbose_keeps_the_log_variables_as_they_are(capsys, monkeypatch):
    """``keras-vit --verbose COMMAND``: `run` starts without `quiet_start`,
    so TensorFlow's log level stays the user's (here unset); without the
    flag it becomes 1."""
    from keras_vit import cli

    assert cli.build_parser().parse_args(["--verbose", "configs"]).logs
    assert not cli.build_parser().parse_args(["configs"]).logs
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # quiet_start's hook, if it adds one
    for argv, level in ((["--verbose", "configs"], None), (["configs"], "1")):
        with pytest.raises(SystemExit) as exit_info:
            cli.run(argv)
        assert exit_info.value.code == 0 and "digits" in capsys.readouterr().out
        assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") == level, argv


@pytest.mark.backend_independent
def test_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere(monkeypatch):
    """`progress_verbose`: Keras's bar (1) on a terminal, its plain line per
    bar (2) into a file or a pipe."""
    import io

    from keras_vit.startup import progress_verbose

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert progress_verbose() == 2
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert progress_verbose() == 1


@pytest.mark.backend_independent
def test_a_quiet_import_waits_for_the_import_not_a_search(tmp_path, monkeypatch):
    """`lazy.ImportHook`, which quiets TensorFlow's import: a search that
    imports nothing (torch._dynamo's ``find_spec("tensorflow")``) leaves
    it in place, and the import that follows runs within it, once."""
    import contextlib
    import importlib.util

    from keras_vit.lazy import ImportHook

    (tmp_path / "searched_then_imported.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    events = []

    @contextlib.contextmanager
    def around():
        events.append("enter")
        yield
        events.append("exit")

    hook = ImportHook("searched_then_imported", around)
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    try:
        assert importlib.util.find_spec("searched_then_imported") is not None
        assert hook in sys.meta_path and not events
        import searched_then_imported  # noqa: F401
        assert events == ["enter", "exit"] and hook not in sys.meta_path
    finally:
        sys.modules.pop("searched_then_imported", None)


@pytest.mark.backend_independent
@pytest.mark.parametrize("level,quiet", [(None, "1 True"), ("0", "0 False"), ("2", "2 True")])
@pytest.mark.slow
def test_a_quiet_start_keeps_the_users_log_level(level, quiet):
    """`quiet_start`: TF_CPP_MIN_LOG_LEVEL 1 unless the user set it, and
    TensorFlow's import filtered by it unless it is 0 (every line)."""
    from keras_vit.startup import _shown

    code = ("import os, sys; from keras_vit.startup import quiet_start, _QuietTensorFlowImport; "
            "quiet_start(); print(os.environ['TF_CPP_MIN_LOG_LEVEL'], "
            "any(isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path))")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.strip() == quiet, result.stdout + result.stderr
    info = b"I0000 00:00:1795792946.278196   10142 port.cc:153] oneDNN custom operations are on.\n"
    warning = b"W1127 15:19:14.123456   10142 cuda_executor.cc:1] a warning\n"
    preamble = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    assert [[_shown(line, level) for level in range(4)] for line in (info, preamble, warning, b"text\n")] == [
        [True, False, False, False], [True, False, False, False], [True, True, False, False], [True] * 4]


def lookups_of_the_model(monkeypatch):
    """The calls a run makes to `preset_name` (the model's name resolved), counted."""
    from keras_vit.training import run as training_run

    calls = []
    resolve = training_run.preset_name
    monkeypatch.setattr(training_run, "preset_name", lambda *a, **k: calls.append(a) or resolve(*a, **k))
    return calls


@pytest.mark.slow
def test_a_run_fills_its_workdir_resumes_and_fine_tunes(tmp_path, capsys, monkeypatch):
    pre = tmp_path / "pre"
    lookups = lookups_of_the_model(monkeypatch)
    out = run(["pretrain", "--workdir", str(pre), *TINY_RUN_ARGS, *FAST, "--image-size", "16"], capsys)
    assert len(lookups) == 1, lookups  # the run resolves its model once (`Plan.preset`)
    assert "test accuracy: " in out
    for name in ("config.json", "log.csv", "model.keras", "results.json", "checkpoints/ckpt-000000004.json"):
        assert (pre / name).exists(), name
    assert any((pre / "tensorboard").rglob("*"))
    config = json.loads((pre / "config.json").read_text())
    assert (config["steps"], config["backend"]) == (4, keras.backend.backend())
    results = json.loads((pre / "results.json").read_text())
    assert 0.0 <= results["test_accuracy"] <= 1.0
    rows = (pre / "log.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2 and "learning_rate" in rows[0]  # two checkpoint intervals
    model = keras.saving.load_model(pre / "model.keras", safe_mode=True)
    assert isinstance(model, ViT) and model.class_names == [str(i) for i in range(10)]

    # The same command again: the run is complete, nothing is trained or lost.
    weights = [to_numpy(w) for w in model.weights]
    run(["pretrain", "--workdir", str(pre), *TINY_RUN_ARGS, *FAST, "--image-size", "16"], capsys)
    again = keras.saving.load_model(pre / "model.keras", safe_mode=True)
    for a, b in zip(weights, again.weights):
        np.testing.assert_array_equal(a, to_numpy(b))

    # Fine-tune at a higher resolution from the .keras file.
    ft = tmp_path / "ft"
    out = run(["finetune", "--workdir", str(ft), *TINY_RUN_ARGS, *FAST, "--image-size", "24",
               "--init", str(pre / "model.keras")], capsys)
    tuned = keras.saving.load_model(ft / "model.keras", safe_mode=True)
    assert tuned.image_size == (24, 24) and tuned.grid_size == (6, 6)
    assert "test accuracy: " in out


def test_a_different_config_in_a_workdir_is_refused(tmp_path, capsys):
    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
    (workdir / "checkpoints" / "ckpt-000000500.json").write_text("{}")  # it trained
    (workdir / "config.json").write_text(json.dumps({**resolve_config("digits", {}).to_dict(), "backend": "x"}))
    before = (workdir / "config.json").read_text()
    fails(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST], capsys, "holds a run with a different config")
    assert (workdir / "config.json").read_text() == before
    assert sorted(p.name for p in workdir.iterdir()) == ["checkpoints", "config.json"]
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["ckpt-000000500.json"]


@pytest.mark.parametrize("argv,message", [
    (["pretrain", "--config", "nope"], "Unknown config 'nope'"),
    (["pretrain", "--config", "ft-cifar10"], "is a finetune config, not pretrain"),
    (["pretrain", "--model", "vit_zz99"], "Unknown preset 'vit_zz99'"),
    (["pretrain", "--dataset", "no_such_dataset_xyz"], "no_such_dataset_xyz"),
    (["pretrain", "--steps", "0"], "--steps must be a positive integer, got 0"),
    (["pretrain", "--batch-size", "100", "--accum-steps", "3"],
     "--batch-size 100 is not divisible by --accum-steps 3"),
    (["pretrain", "--warmup-steps", "5000"], "--warmup-steps 5000 must be at least 0 and below --steps"),
    (["finetune", "--init", "/no/such/file.keras"], "--init /no/such/file.keras: no such file"),
    (["pretrain", "--init", "x.npz"], "--init is for fine-tuning"),
    (["finetune", "--lora-rank", "0"], "--lora-rank must be a positive integer, got 0"),
    (["pretrain", "--lora-rank", "4"], "--lora-rank adapts a trained model"),
])
def test_bad_input_fails_before_training(argv, message, tmp_path, capsys):
    workdir = tmp_path / "run"
    fails([*argv, "--workdir", str(workdir)], capsys, message)
    assert not workdir.exists() or not any(workdir.iterdir()), "nothing may be written"


def test_init_from_a_foreign_file(tmp_path, capsys):
    foreign = tmp_path / "notes.npz"
    np.savez(foreign, something=np.zeros(3))
    fails(["finetune", "--init", str(foreign), "--workdir", str(tmp_path / "a")], capsys, f"--init {foreign}")
    other = tmp_path / "dense.keras"
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(other)
    fails(["finetune", "--init", str(other), "--workdir", str(tmp_path / "b")], capsys,
          "not a keras_vit ViT or MaskedPatchPredictor")


def test_empty_or_unreadable_image_folder(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    fails(["pretrain", "--dataset", str(empty), "--workdir", str(tmp_path / "a")], capsys, str(empty))
    broken = tmp_path / "broken"
    (broken / "cat").mkdir(parents=True)
    (broken / "cat" / "x.png").write_bytes(b"not a png")
    fails(["pretrain", "--dataset", str(broken), "--workdir", str(tmp_path / "b")], capsys, "x.png")


@pytest.mark.slow
def test_predict_evaluate_convert_presets_configs(tmp_path, capsys):
    from PIL import Image

    model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3, class_names=["cat", "dog", "fish"])
    head = model.get_layer("head")
    head.bias.assign(np.array([0.0, 5.0, 0.0]))
    path = tmp_path / "m.keras"
    model.save(path)
    image = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(image)
    out = run(["predict", str(path), str(image), "--top-k", "2"], capsys)
    assert out.startswith(f"{image}: dog (") and "%)" in out
    # --dtype: the same model computing in bfloat16 (float32 weights), the same top class
    from keras_vit.cli import at_dtype

    low = at_dtype(model, "mixed_bfloat16")
    assert low.dtype_policy.name == "mixed_bfloat16" and at_dtype(model, None) is model
    np.testing.assert_allclose(to_numpy(low(np.zeros((1, 16, 16, 3)))).astype("float32"),
                               to_numpy(model(np.zeros((1, 16, 16, 3)))), atol=0.1)
    out = run(["predict", str(path), str(image), "--top-k", "2", "--dtype", "mixed_bfloat16"], capsys)
    assert out.startswith(f"{image}: dog (") and "%)" in out

    out = run(["convert", str(path), str(tmp_path / "big.keras"), "--image-size", "32",
               "--num-classes", "4"], capsys)
    assert "32x32 px" in out
    big = keras.saving.load_model(tmp_path / "big.keras")
    assert big.image_size == (32, 32) and big.num_classes == 4
    assert not to_numpy(big.get_layer("head").kernel).any(), "a new zero head"
    np.testing.assert_array_equal(to_numpy(big.get_layer("encoder_norm").gamma),
                                  to_numpy(model.get_layer("encoder_norm").gamma))

    ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
        num_classes=0).save(tmp_path / "headless.keras")
    fails(["predict", str(tmp_path / "headless.keras"), str(image)], capsys,
          "has no per-image classification head")

    digits = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                 num_classes=10)
    digits.save(tmp_path / "d.keras")
    out = run(["evaluate", str(tmp_path / "d.keras"), "--dataset", "digits", "--few-shot", "1,5"], capsys)
    assert "test accuracy: " in out and "5-shot linear accuracy: " in out
    fails(["evaluate", str(path), "--dataset", "digits"], capsys, "The model has 3 classes, digits has 10")

    assert "vit_b16" in run(["presets"], capsys)
    assert "ft-cifar10" in run(["configs"], capsys)
    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", "--help"])
    assert exit_info.value.code == 0
    assert "--accum-steps" in capsys.readouterr().out


@pytest.mark.slow
def test_masked_patch_run_then_fine_tune_from_it(tmp_path, capsys, monkeypatch):
    mpp = tmp_path / "mpp"
    lookups = lookups_of_the_model(monkeypatch)
    out = run(["masked-patch", "--workdir", str(mpp), *TINY_RUN_ARGS, *FAST, "--image-size", "16"], capsys)
    assert len(lookups) == 1, lookups
    assert "final_loss" in out and "test accuracy" not in out
    pre = keras.saving.load_model(mpp / "model.keras", safe_mode=True)
    ft = tmp_path / "ft"
    run(["finetune", "--workdir", str(ft), *TINY_RUN_ARGS, *FAST, "--image-size", "16",
         "--init", str(mpp / "model.keras")], capsys)
    tuned = keras.saving.load_model(ft / "model.keras", safe_mode=True)
    assert isinstance(tuned, ViT) and tuned.num_classes == 10
    # The fine-tuned encoder started from the pre-trained one: its patch
    # projection moved only a little (4 steps), it was not re-initialised.
    a = to_numpy(pre.get_layer("patch_embedding").weights[0])
    b = to_numpy(tuned.get_layer("patch_embedding").weights[0])
    assert np.abs(a - b).max() < 0.1 * np.abs(a).max()


# -- distillation on the command line -------------------------------------------------

@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """Teachers as a user saves them: a digits ViT (10 classes named as the
    digits' are), one over 7 classes, and one whose classes are named otherwise."""
    folder = tmp_path_factory.mktemp("teachers")
    small = dict(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16)
    for name, classes in (("digits", dict(num_classes=10, class_names=[str(i) for i in range(10)])),
                          ("seven", dict(num_classes=7)),
                          ("letters", dict(num_classes=10, class_names=list("abcdefghij")))):
        ViT(**small, **classes).save(folder / f"{name}.keras")
    return folder


def test_distillation_refusals_come_before_anything_is_written(teachers, tmp_path, capsys):
    """Each refused by the command line with the fix named, and no --workdir made."""
    workdir = tmp_path / "run"
    teacher = ["--teacher", str(teachers / "digits.keras")]
    token = ["--model-args", "num_layers=1,num_heads=2,hidden_dim=8,mlp_dim=16,distillation_token=True"]
    for argv, message in [
        (["--config", "digits-deit"], "Config 'digits-deit' distills (hard): give its teacher with --teacher"),
        ([*teacher], f"--teacher {teachers / 'digits.keras'} needs --distillation: hard or soft"),
        ([*teacher, "--distillation", "hard"],
         "has no distillation token: add --model-args distillation_token=True (pre-training), start from a "
         "distilled DeiT (--init), or use --distillation logits"),
        ([*teacher, "--distillation", "distill"], "--distillation must be one of hard, soft, logits, features"),
        ([*teacher, "--distillation", "logits", "--distillation-alpha", "1.5"],
         "--distillation-alpha must be a finite number at least 0 and at most 1, got 1.5"),
        ([*teacher, "--distillation", "soft", "--distillation-tau", "0", *token],
         "--distillation-tau must be a positive number, got 0.0"),
        (["--teacher", str(teachers / "seven.keras"), "--distillation", "logits"],
         "over --dataset digits: The teacher gives 7 classes and the student 10: distillation needs the same "
         "classes, in the same order. Fine-tune the teacher on the dataset first"),
        (["--teacher", str(teachers / "letters.keras"), "--distillation", "logits"],
         "The teacher's class 0 is 'a' and the student's '0': distillation needs the same classes"),
        (["--teacher", str(tmp_path / "none.keras"), "--distillation", "logits"], "none.keras: no such file"),
    ]:
        fails(["pretrain", "--workdir", str(workdir), *TINY_RUN_ARGS, *FAST, *argv], capsys, message)
        assert not workdir.exists(), argv
    fails(["masked-patch", "--workdir", str(workdir), *teacher, "--distillation", "logits"], capsys,
          "is masked patch prediction, which has no classes to distill")
    assert not workdir.exists()


@pytest.mark.backend_independent
def test_the_recipes_help_says_what_each_kind_of_distillation_does(capsys):
    from keras_vit.cli import main

    for command in ("pretrain", "finetune"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        out = " ".join(capsys.readouterr().out.split())
        for text in ("--teacher PATH_OR_NAME", "--distillation hard|soft|logits|features",
                     "--distillation-alpha A", "--distillation-tau T",
                     "hard (DeiT: the distillation token's head learns the teacher's top class",
                     "soft (DeiT: the same head learns the teacher's probabilities softened",
                     "logits (any student's own logits learn", "features (the student's last patch tokens",
                     "The saved model.keras is the student alone"):
            assert text in out, (command, text)


@pytest.mark.slow  # three short runs
def test_each_kind_distils_from_the_command_line_and_saves_the_student_alone(teachers, tmp_path, capsys):
    """`keras-vit pretrain --teacher ... --distillation soft|logits|features`
    (hard: tests/test_distribution.py): each run records its settings in
    config.json and saves a plain ViT of the student's own weights, without
    the teacher's or the feature projection's."""
    teacher = keras.saving.load_model(teachers / "digits.keras")
    for kind, token in (("soft", True), ("logits", False), ("features", False)):
        workdir = tmp_path / kind
        model_args = "num_layers=1,num_heads=2,hidden_dim=16,mlp_dim=32,patch_size=4"
        run(["pretrain", "--workdir", str(workdir), *FAST, "--image-size", "16", "--few-shot", "",
             "--model-args", model_args + (",distillation_token=True" if token else ""),
             "--teacher", str(teachers / "digits.keras"), "--distillation", kind,
             "--distillation-alpha", "0.3", "--distillation-tau", "2.0"], capsys)
        recorded = json.loads((workdir / "config.json").read_text())
        assert (recorded["teacher"], recorded["distillation"], recorded["distillation_alpha"],
                recorded["distillation_tau"]) == (str(teachers / "digits.keras"), kind, 0.3, 2.0)
        student = keras.saving.load_model(workdir / "model.keras")
        assert type(student) is ViT and student.config.distillation == token, kind
        assert (student.config.hidden_dim, teacher.config.hidden_dim) == (16, 8), kind  # the student saved
        assert len(student.weights) == len(ViT(student.config).weights), kind
        assert not any("feature_projection" in w.path for w in student.weights), kind
        assert 0 <= json.loads((workdir / "results.json").read_text())["test_accuracy"] <= 1
