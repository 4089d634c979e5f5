"""A user's install: the wheel, installed with one backend extra into a
fresh virtual environment, used the Keras way, each journey a process of
that environment's own (tests/journeys/).

The rest of the suite runs in .venv, which has every extra. Here the wheel
is built from this tree once per session (`wheel`), installed into one
environment per extra set (`ENVIRONMENTS`: ``pip install
"<wheel>[jax]"``, ...), and each journey of `JOURNEYS` runs there as a
user runs it: ``<env>/bin/python tests/journeys/<script>`` in a fresh
working folder, with KERAS_BACKEND set to the environment's backend. A
journey works (exit status 0, its own checks passed, a last line ``OK
...``), or fails with the one-line message that names the extra to
install: a command's last line ``keras-vit COMMAND: error: ... pip install
"keras-vision-transformer[EXTRA]"`` and no traceback, Python code's the
``MissingDependency`` that says the same (`outcome`). `EXPECTED` says
which, for every environment and journey; the test prints the table of
what happened (and writes it to $KERAS_VIT_JOURNEY_TABLE where that is
set).

The environments live in the user's cache folder (``install/``), one per
extra set and set of dependencies, so that the next run reuses them: an
unchanged wheel as it is, a changed one reinstalled over the dependencies
(``pip install --force-reinstall --no-deps``), which takes seconds. Pip's
own cache is used too. The journeys are marked ``install``: `make
test-install` runs all four environments' (KERAS_VIT_INSTALL_ENVS=jax,
torch,tensorflow,jax-data, or ``all``), ``pytest -m slow`` the [jax] one.
"""

import contextlib
import dataclasses
import email.parser
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest
from conftest import FAST_XLA_COMPILES
from conftest import _cache_folder

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "journeys"
DATA = ROOT / "tests" / "data"

# name -> (the extras installed, KERAS_BACKEND)
ENVIRONMENTS = {
    "jax": (("jax",), "jax"),
    "torch": (("torch",), "torch"),
    "tensorflow": (("tensorflow",), "tensorflow"),
    "jax-data": (("jax", "data"), "jax"),
}
SELECTED = "KERAS_VIT_INSTALL_ENVS"  # comma-separated names of ENVIRONMENTS, or "all"; default jax
TABLE_FILE = "KERAS_VIT_JOURNEY_TABLE"  # where the table is written too, if set

# name -> the script in tests/journeys/ and its arguments; a command-line
# journey's second word is the keras-vit command it runs.
JOURNEYS = {
    "saved files": ("saved_files.py", str(DATA)),  # .keras files of earlier versions: their logits
    "keras file": ("keras_file.py",),              # save, load in this process and in a new one
    "checkpoints": ("checkpoints.py", "npz", "timm", "huggingface"),  # written and read back
    "keras_hub ckpt": ("checkpoints.py", "keras_hub"),                # (writing needs keras-hub)
    "convert": ("cli.py", "convert"),              # keras-vit convert tiny.npz tiny.keras
    "pretrain": ("cli.py", "pretrain"),            # keras-vit pretrain --config digits, 2 steps
    "predict": ("cli.py", "predict"),              # keras-vit predict tiny.keras tiny.png
    "export": ("cli.py", "export"),                # keras-vit export tiny.keras tiny.onnx --format onnx
    "evaluate": ("cli.py", "evaluate"),            # keras-vit evaluate constant.keras --dataset digits
    "naflex": ("naflex.py",),                      # naflex_inputs of two sizes through with_naflex
}
OK = "ok"
HUB = "keras-hub"
# For each environment and journey (in JOURNEYS' order): OK, or the extra
# that the journey's message must name. TensorFlow decodes images, so
# `predict` needs [data] only where TensorFlow is missing; writing a
# keras-hub preset goes through keras-hub (reading one does not).
EXPECTED = {name: dict(zip(JOURNEYS, row, strict=True)) for name, row in {
    #              saved keras checkp. keras_hub convert pretrain predict export    evaluate naflex
    "jax":        (OK,   OK,   OK,     HUB,      OK,     "data",  "data", "export", "data",  OK),
    "torch":      (OK,   OK,   OK,     HUB,      OK,     "data",  "data", "export", "data",  OK),
    "tensorflow": (OK,   OK,   OK,     HUB,      OK,     "data",  OK,     "export", "data",  OK),
    "jax-data":   (OK,   OK,   OK,     HUB,      OK,     OK,      OK,     "export", OK,      OK),
}.items()}
JOURNEY_SECONDS = 300  # a journey still running then has hung (the longest takes ~15 s)
# The message of a missing optional dependency (keras_vit.extras.MissingDependency).
INSTALL_LINE = re.compile(r'pip install "keras-vision-transformer\[([^\]]+)\]"')


def _selected():
    text = os.environ.get(SELECTED, "jax")
    names = list(ENVIRONMENTS) if text == "all" else [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(ENVIRONMENTS))
    if unknown:
        raise ValueError(f"{SELECTED}={text}: unknown {', '.join(unknown)}; use {','.join(ENVIRONMENTS)} or all")
    return names


# -- the wheel -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Wheel:
    path: pathlib.Path
    sha256: str  # of its members' names and contents: the same files give the same hash
    seconds: float  # to build it; 0 where another worker built it

    def requirements(self, extras):
        """The wheel's Requires-Dist lines that `extras` install."""
        from packaging.requirements import Requirement

        with zipfile.ZipFile(self.path) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            lines = email.parser.Parser().parsestr(archive.read(name).decode()).get_all("Requires-Dist") or []
        markers = [Requirement(line).marker for line in lines]
        return sorted(line for line, marker in zip(lines, markers)
                      if marker is None or any(marker.evaluate({"extra": e}) for e in ("", *extras)))


def _content_hash(path):
    digest = hashlib.sha256()
    with zipfile.ZipFile(path) as archive:
        for name in sorted(archive.namelist()):
            digest.update(name.encode() + b"\0" + archive.read(name) + b"\0")
    return digest.hexdigest()


def _source_files():
    """The tree's files, as a clone with the current edits has them: git's
    tracked files that exist and its untracked ones that are not ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [path for path in listed.split("\0") if path and (ROOT / path).is_file()]


def build_wheel(folder):
    """The wheel that ``pip wheel`` builds of a copy of the tree into
    `folder` (building in place would leave build/ and an .egg-info)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="keras-vit-source-") as source:
        for path in _source_files():
            (pathlib.Path(source) / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, pathlib.Path(source) / path)
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", source, "-w", str(folder)])
    (path,) = pathlib.Path(folder).glob("*.whl")
    return Wheel(path, _content_hash(path), time.perf_counter() - start)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory, worker_id):
    """The wheel of this tree, built once per session: under pytest-xdist by
    the first worker that needs it, into the session's common temporary
    folder, where the other finds it."""
    import filelock

    if worker_id == "master":  # no workers: nothing to share
        return build_wheel(tmp_path_factory.mktemp("wheel"))
    folder = tmp_path_factory.getbasetemp().parent / "install_wheel"
    with filelock.FileLock(f"{folder}.lock"):
        built = sorted(folder.glob("*.whl"))
        if built:
            return Wheel(built[0], _content_hash(built[0]), 0.0)
        return build_wheel(folder)


# -- the environments ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Environment:
    name: str
    folder: pathlib.Path
    backend: str
    how: str  # "made", "wheel reinstalled" or "reused"
    seconds: float

    @property
    def python(self):
        return self.folder / "bin" / "python"

    def variables(self):
        """The environment variables of a user who activated it: none of
        the test run's Python settings, KERAS_BACKEND its backend. Python
        caches its bytecode there, as it does for a user. On JAX, XLA
        compiles as in the suite's JAX pass (`conftest.FAST_XLA_COMPILES`,
        a persistent cache in the user's cache folder): each journey
        compiles its eager ops afresh otherwise, which took half of the
        [jax] journeys' time."""
        left_out = {"PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONSTARTUP", "VIRTUAL_ENV"}
        variables = {k: v for k, v in os.environ.items() if k not in left_out and not k.startswith("PYTEST_")}
        variables.update(KERAS_BACKEND=self.backend, VIRTUAL_ENV=str(self.folder),
                         PATH=os.pathsep.join([str(self.folder / "bin"), os.environ.get("PATH", "")]))
        if self.backend == "jax":
            flags = variables.get("XLA_FLAGS", "").split()
            given = {flag.split("=")[0] for flag in flags}
            flags += [flag for flag in FAST_XLA_COMPILES if flag.split("=")[0] not in given]
            variables.update(XLA_FLAGS=" ".join(flags), JAX_COMPILATION_CACHE_DIR=_cache_folder("jax-install"),
                             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
        return variables


def _run(argv):
    """Runs `argv`; a failure raises with its output's end."""
    process = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if process.returncode:
        output = (process.stdout + process.stderr).strip().splitlines()
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({process.returncode}):\n"
                           + "\n".join(output[-30:]))
    return process


@contextlib.contextmanager
def environment(name, wheel):
    """The environment `name` (`ENVIRONMENTS`) with `wheel` installed, in
    the user's cache folder, held (a file lock) while it is used: one per
    extra set and the requirements those extras install (a change to them
    makes a new one, and the old one is removed). Made with ``python -m
    venv`` and ``pip install "<wheel>[extras]"``; the next run reuses it,
    reinstalling the wheel alone if it changed."""
    import filelock

    extras, backend = ENVIRONMENTS[name]
    key = hashlib.sha256(json.dumps([sys.version, wheel.requirements(extras)]).encode()).hexdigest()[:12]
    folder = pathlib.Path(_cache_folder("install")) / f"{name}-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_others(folder, name)
    with filelock.FileLock(f"{folder}.lock"):
        start = time.perf_counter()
        stamp = folder / "keras-vit-wheel.sha256"  # the wheel installed, written once it is
        python = folder / "bin" / "python"
        installed = stamp.read_text() if stamp.exists() and python.exists() else None
        if installed == wheel.sha256:
            how = "reused"
        elif installed is not None:
            _run([python, "-m", "pip", "install", "-q", "--no-compile", "--force-reinstall", "--no-deps",
                  wheel.path])
            how = "wheel reinstalled"
        else:
            shutil.rmtree(folder, ignore_errors=True)
            _run([sys.executable, "-m", "venv", folder])
            _run([python, "-m", "pip", "install", "-q", "--no-compile", f"{wheel.path}[{','.join(extras)}]"])
            how = "made"
        stamp.write_text(wheel.sha256)
        yield Environment(name, folder, backend, how, time.perf_counter() - start)


def _remove_others(folder, name):
    """Removes the environments `name` had for other requirements, but any in use."""
    import filelock

    for other in folder.parent.iterdir():
        if other != folder and other.is_dir() and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}", other.name):
            try:
                with filelock.FileLock(f"{other}.lock", timeout=0):
                    shutil.rmtree(other)
            except filelock.Timeout:
                continue
            pathlib.Path(f"{other}.lock").unlink(missing_ok=True)


# -- the journeys --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a journey ended: `result` OK, the extra its message names, or
    None (anything else); `line`, what shows that."""
    result: str | None
    line: str
    seconds: float
    output: str  # its stdout and stderr, for a failure's report


def outcome(journey, returncode, stdout, stderr):
    """A journey's `Outcome` from its process. OK: exit status 0 and the
    journey's ``OK ...`` line last. The message: a non-zero exit status,
    the install line as stderr's last line, and for a command-line journey
    no traceback anywhere and that line the command's own error
    (``keras-vit COMMAND: error: ...``); a Python journey ends with the
    exception's traceback, its last line the MissingDependency."""
    out = [line for line in stdout.splitlines() if line.strip()]
    err = [line for line in stderr.splitlines() if line.strip()]
    last = err[-1].strip() if err else ""
    if returncode == 0:
        if out and out[-1].startswith("OK "):
            return OK, out[-1][3:]
        return None, f"exit status 0 without the journey's OK line (last: {out[-1] if out else ''!r})"
    named = INSTALL_LINE.search(last)
    script, *args = JOURNEYS[journey]
    if script == "cli.py":
        if named and last.startswith(f"keras-vit {args[0]}: error: ") and "Traceback" not in stdout + stderr:
            return named.group(1), last
    elif named and "MissingDependency" in last:
        return named.group(1), last
    return None, f"exit status {returncode}: {last or '(nothing on stderr)'}"


def run_journey(env, journey, folder):
    """`journey` run in `env`, in `folder` (made empty), as a user runs it."""
    folder.mkdir(parents=True)
    script, *args = JOURNEYS[journey]
    start = time.perf_counter()
    try:
        process = subprocess.run([str(env.python), str(SCRIPTS / script), *args], cwd=folder,
                                 env=env.variables(), capture_output=True, text=True, timeout=JOURNEY_SECONDS)
        returncode, stdout, stderr = process.returncode, process.stdout, process.stderr
    except subprocess.TimeoutExpired as timeout:  # its output so far comes as bytes
        stdout, stderr = ((s or b"").decode(errors="replace") for s in (timeout.stdout, timeout.stderr))
        returncode, stderr = -1, f"{stderr}\nstill running after {timeout.timeout} s: stopped"
    result, line = outcome(journey, returncode, stdout, stderr)
    return Outcome(result, line, time.perf_counter() - start, (stdout + stderr).strip())


# -- the table -----------------------------------------------------------------------------------

_TABLES = {}  # environment -> its table, in the order they ran (one worker runs this file)


def _cell(result):
    return {OK: "OK", None: "ERROR"}.get(result, f"[{result}]")


def table(wheel, env, outcomes):
    """The journeys of `env`, one line each: the result (OK, the extra the
    message names, ERROR), what was expected where it differs, the
    seconds, and the journey's OK line or message."""
    extras = ",".join(ENVIRONMENTS[env.name][0])
    total = sum(o.seconds for o in outcomes.values())
    lines = [f"[{extras}] KERAS_BACKEND={env.backend}: environment {env.how} in {env.seconds:.1f} s, "
             f"journeys {total:.1f} s; {wheel.path.name} {wheel.sha256[:12]}"
             + (f", built in {wheel.seconds:.1f} s" if wheel.seconds else ""),
             f"  {'journey':14} {'result':11} {'expected':11} {'time':>7}  OK line or message"]
    for journey, o in outcomes.items():
        expected = EXPECTED[env.name][journey]
        differs = "" if o.result == expected else _cell(expected)
        lines.append(f"  {journey:14} {_cell(o.result):11} {differs:11} {o.seconds:6.1f}s  {o.line}")
    return "\n".join(lines)


def _show(text, capsys):
    """`text` on the terminal (stderr, which pytest-xdist's workers share
    with the run), and the tables so far in $KERAS_VIT_JOURNEY_TABLE."""
    with capsys.disabled():
        sys.stderr.write(f"\n{text}\n")
        sys.stderr.flush()
    if os.environ.get(TABLE_FILE):
        with open(os.environ[TABLE_FILE], "w") as file:
            file.write("\n\n".join(_TABLES.values()) + "\n")


@pytest.mark.backend_independent
@pytest.mark.slow
@pytest.mark.install
@pytest.mark.parametrize("name", _selected())
def test_a_users_journeys_end_as_expected(name, wheel, tmp_path, capsys):
    with environment(name, wheel) as env:
        outcomes = {journey: run_journey(env, journey, tmp_path / journey.replace(" ", "_"))
                    for journey in JOURNEYS}
    _TABLES[name] = table(wheel, env, outcomes)
    _show(_TABLES[name], capsys)
    wrong = {journey: o for journey, o in outcomes.items() if o.result != EXPECTED[name][journey]}
    details = "\n\n".join(f"--- {journey}: expected {_cell(EXPECTED[name][journey])}, its output's end:\n"
                          + "\n".join(o.output.splitlines()[-25:]) for journey, o in wrong.items())
    assert not wrong, f"{len(wrong)} journeys in [{name}] did not end as expected:\n{_TABLES[name]}\n\n{details}"


MESSAGE = 'keras-vit predict: error: keras_vit.data needs TensorFlow: pip install "keras-vision-transformer[data]"'


@pytest.mark.backend_independent
@pytest.mark.parametrize("journey, returncode, stdout, stderr, expected", [
    ("predict", 0, "tiny.png: 1 (50.0%)\nOK the model's probabilities\n", "", OK),
    ("predict", 0, "tiny.png: 1 (50.0%)\n", "", None),                      # its checks did not end
    ("predict", 2, "", f"a warning\n{MESSAGE}\n\n", "data"),
    ("predict", 1, "", f"Traceback (most recent call last):\n  ...\n{MESSAGE}\n", None),
    ("evaluate", 2, "", f"{MESSAGE}\n", None),                               # another command's
    ("predict", 2, "", f"{MESSAGE}\nRun `keras-vit predict --help` for its flags.\n", None),
    ("naflex", 1, "", "Traceback (most recent call last):\n  ...\nkeras_vit.extras.MissingDependency: "
                      'x needs y: pip install "keras-vision-transformer[text]"\n', "text"),
    ("naflex", 1, "", 'ModuleNotFoundError: No module named "y"\n', None),
])
def test_the_table_reads_a_journey_as_ok_the_extra_or_an_error(journey, returncode, stdout, stderr, expected):
    assert outcome(journey, returncode, stdout, stderr)[0] == expected
