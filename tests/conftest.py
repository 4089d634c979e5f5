"""The suite's shared set-up: the tiers, markers, the pass that runs what
does not depend on the backend, the compilation caches, and fixtures every
file shares.

`make test` runs the suite once per backend (KERAS_BACKEND=tensorflow, jax,
torch) in tiers, as transformers (``@slow``, ``RUN_SLOW``) and keras-hub
(``large``, ``--run_large``) run theirs: the plain command is the fast tier,
and the slow tier is asked for by name.

- ``slow``: a test that took more than `SLOW_SECONDS` in some backend's pass
  (`tests/durations.json`), starts a process of its own, trains more than a
  few steps, or exports to more than one runtime. Plain ``pytest`` leaves it
  out and says so in its header (`make test`); ``pytest -m slow`` runs these
  alone (`make test-slow`), ``--run-slow`` runs both tiers.
  `test_suite.py` holds every test to the first two rules.
  ``slow_cases(*ids)`` marks some cases of a parametrized test slow.
- ``install``: a user's install from the wheel (`test_install.py`), the tier
  of `make test-install`; ``-m "slow and not install"`` is `make test-slow`.

Three more markers decide in which backend's pass a test runs, in each tier:

- ``backend_independent``: its subject does not go through a Keras backend
  (a catalogue, a config, an argument check, a tf.data stream, a docs
  build); it runs in the `HOME_BACKEND` pass only.
- ``cross_backend``: it starts the other backends itself and compares them
  with this one, every pair once; it runs in the `HOME_BACKEND` pass only.
- ``one_pass(backend)``: it runs in that backend's pass only. The examples
  of the docs and docstrings take turns (`take_turns`): each runs once, on
  one backend, and every backend runs a third of them; so do the tiny
  benchmark's rows beside the fixed model (`test_benchmark.NAFLEX_PASS`,
  `TOKEN_MERGING_PASS`). What they call is tested on every backend by the
  other files.

The other passes deselect the first two kinds and say so in their header
(and, without xdist, with the count in their summary).
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _backend():
    """This pass's backend, as `make test` names it (KERAS_BACKEND), without
    importing Keras: pytest-xdist's controller, which runs no test, loads
    this file before it starts the workers, and importing Keras and its
    backend there held them back 2-4 s in each pass. Unnamed, Keras says."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    import keras

    return keras.backend.backend()


BACKEND = _backend()
# The pass that runs the backend-independent and cross-backend tests: the
# backend whose pass is otherwise the shortest.
HOME_BACKEND = "torch"
ONCE = ("backend_independent", "cross_backend")
_ONCE_KEY = pytest.StashKey[int]()  # how many tests this pass deselected


def _cache_folder(name):
    """A folder in the user's cache folder, never in the work tree, of this
    CPU's own (`_cpu_key`): XLA:CPU's compiled programs use the instructions
    of the CPU that compiled them, and a program from another CPU (a cache
    kept between machines) may hold instructions this one lacks."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "keras_vit", f"{name}-{_cpu_key()}")


def _cpu_key():
    """Twelve hex digits naming this CPU: its model name and instruction-set flags."""
    import hashlib

    fields = {}
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                key, sep, value = line.partition(":")
                if not sep and fields:
                    break  # the first processor's block
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        import platform

        fields = {"model name": platform.processor() or platform.machine()}
    text = f"{fields.get('model name')}|{fields.get('flags')}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# XLA:CPU settings for the JAX and TensorFlow passes that compile small
# programs faster: LLVM's cheapest optimization level, and XLA's elemental
# emitters for fusions instead of its MLIR fusion emitters: together they
# more than halve the compile time of a small eager JAX program and cut the
# JAX pass by about a quarter (docs/getting_started.md#tests has the suite's
# times). Results may differ in float32's last bits (another
# instruction order), which every test's tolerance holds but one: XLA's tanh
# at the cheapest level leaves TensorFlow's own by more than the 5e-6 that
# test_kernels.py holds XLA's GELU gradient to (and on JAX saturates past -1),
# so that check runs in a process of its own with XLA's defaults (`DEFAULT_XLA`).
FAST_XLA_COMPILES = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
DEFAULT_XLA = "KERAS_VIT_TESTS_DEFAULT_XLA"  # set: this process compiles with XLA's defaults


def fast_xla_compiles():
    """Whether this process compiles with `FAST_XLA_COMPILES`."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    return all(flag in flags for flag in FAST_XLA_COMPILES)


def _compiler_settings():
    """Compiled programs are kept in a persistent cache in the user's cache
    folder, which the two workers, the command-line runs the tests start
    (the five runs of the killed-run test compile the same training step) and
    later runs share; ``make test`` holds its time budget with the folders
    empty. XLA compiles with `FAST_XLA_COMPILES` on JAX, which compiles
    hundreds of small programs each once, and on TensorFlow, whose training
    steps are compiled by XLA (`jit_compile`), unless `DEFAULT_XLA` is set.
    Set in the environment, the settings reach the subprocesses too."""
    if BACKEND == "torch":
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    fast = {flag.split("=")[0] for flag in FAST_XLA_COMPILES}
    if os.environ.get(DEFAULT_XLA):
        flags = [flag for flag in flags if flag.split("=")[0] not in fast]
    else:  # a setting of the user's own stays
        given = {flag.split("=")[0] for flag in flags}
        flags += [flag for flag in FAST_XLA_COMPILES if flag.split("=")[0] not in given]
    os.environ["XLA_FLAGS"] = " ".join(flags)
    if BACKEND == "tensorflow":
        # TensorFlow's cache keys leave XLA_FLAGS out: one folder per setting.
        folder = _cache_folder("tf-xla-tests-default" if os.environ.get(DEFAULT_XLA) else "tf-xla-tests")
        tf_flags = [f for f in os.environ.get("TF_XLA_FLAGS", "").split()
                    if not f.startswith("--tf_xla_persistent_cache_directory=")]
        os.environ["TF_XLA_FLAGS"] = " ".join([*tf_flags, f"--tf_xla_persistent_cache_directory={folder}"])
        return
    settings = {"jax_compilation_cache_dir": _cache_folder("jax-tests"),
                "jax_persistent_cache_min_compile_time_secs": 0, "jax_persistent_cache_min_entry_size_bytes": 0}
    for name, value in settings.items():  # read by JAX when it is imported (workers, their subprocesses)
        os.environ[name.upper()] = str(value)
    if "jax" in sys.modules:  # imported before this file (by a plugin): too late for the environment
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)


_compiler_settings()


def _one_thread_per_worker():
    """Under pytest-xdist each worker computes with one intra-op thread, so
    that the workers share the cores instead of each spinning a thread pool
    the size of the machine: on 2 cores with 2 workers, PyTorch's OpenMP
    threads waiting on each other made one torch test 20x slower (83 s
    against 4 s alone). Processes the tests start keep the backend's
    default."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if BACKEND == "torch":
        import torch

        torch.set_num_threads(1)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(2)


_one_thread_per_worker()


def _shared_imports():
    """Each pytest-xdist worker imports, before its first test, what the
    tests of most files import: TensorFlow (tf.data, exports) and
    transformers' PyTorch models (the parity references), 5 s on the JAX
    and TensorFlow passes. So a test's seconds in `DURATIONS` are its own,
    not those of the first import in whichever file its worker took first,
    and the rule of the tiers (test_suite.py) reads the same seconds
    whatever the order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import tensorflow  # noqa: F401
    from transformers import PreTrainedModel  # noqa: F401


_shared_imports()


def pytest_collection_finish(session):
    """Keras calls ``gc.collect()`` each time a layer attribute is deleted
    (``Layer.__delattr__``): ``quantize`` and ``enable_lora`` delete one per
    projection, and a full collection over everything TensorFlow, JAX and
    PyTorch have imported takes 0.25 s or more, so ``quantize`` took 6.5 s
    on a 4-block ViT (0.15 s with this). The objects alive once every test
    module is imported live as long as the process: the collector need not
    scan them again."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin, which sends faults to stderr
def pytest_configure(config):
    _record_faults()
    config.addinivalue_line("markers", f"backend_independent: runs in the KERAS_BACKEND={HOME_BACKEND} pass only")
    config.addinivalue_line("markers", f"cross_backend: starts the other backends; runs in the "
                                       f"KERAS_BACKEND={HOME_BACKEND} pass only")
    config.addinivalue_line("markers", "one_pass(backend): runs in that backend's pass only")
    config.addinivalue_line("markers", f"slow: over {SLOW_SECONDS:g} s in some pass, or starts a process, trains "
                                       "more than a few steps, exports to more than one runtime; left out of plain "
                                       "pytest (make test), run by -m slow (make test-slow) or --run-slow")
    config.addinivalue_line("markers", "install: a user's install from the wheel; make test-install's tier")
    config.addinivalue_line("markers", "slow_cases(*ids): the cases of a parametrized test with these ids are slow")


def pytest_report_header(config):
    from importlib.metadata import version

    lines = [f"keras {version('keras')}, backend: {BACKEND}"]
    if _fast_tier(config):
        lines.append("the fast tier: tests marked slow are deselected (make test-slow, pytest -m slow, runs them; "
                     "--run-slow runs both tiers)")
    if BACKEND != HOME_BACKEND:  # printed by xdist's controller too, whose workers deselect
        lines.append(f"backend-independent and cross-backend tests are deselected: they run once, "
                     f"in the KERAS_BACKEND={HOME_BACKEND} pass")
    lines.append(f"the docs' examples take turns: this pass runs those marked one_pass({BACKEND!r}), "
                 "the other passes the rest")
    return lines


BACKENDS = ("tensorflow", "jax", "torch")


def take_turns(params):
    """`params` (pytest.param each) marked ``one_pass`` by turns: the first
    in the TensorFlow pass, the second in the JAX pass, the third in the
    PyTorch pass, and so on."""
    return [pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.one_pass(BACKENDS[i % 3])])
            for i, p in enumerate(params)]


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true",
                     help="run the tests marked slow too; plain pytest leaves them out, -m slow runs them alone")
    parser.addoption("--write-durations", action="store_true",
                     help=f"store this pass's seconds per test in {os.path.basename(DURATIONS)}")


def _fast_tier(config):
    """Whether this run is the fast tier: no ``-m`` expression of the
    user's (which then decides alone) and no ``--run-slow``."""
    return not config.getoption("markexpr") and not config.getoption("--run-slow")


def _elsewhere(item):
    """Whether `item` runs in another backend's pass."""
    turn = item.get_closest_marker("one_pass")
    if turn is not None:
        return turn.args[0] != BACKEND
    return BACKEND != HOME_BACKEND and any(item.get_closest_marker(m) for m in ONCE)


# Every test this session collected, before any was deselected: its node id
# -> whether it is marked slow (`test_suite.py` reads it).
COLLECTED = pytest.StashKey[dict]()


def _mark_slow_cases(items):
    """``@pytest.mark.slow_cases("id", ...)`` marks the cases of a
    parametrized test with those ids ``slow``; an id that names no case is
    an error, so that a renamed case cannot leave the fast tier unnoticed."""
    named, found = {}, {}
    for item in items:
        marker = item.get_closest_marker("slow_cases")
        if marker is None:
            continue
        function = item.nodeid.split("[")[0]
        named[function] = set(marker.args)
        case = item.callspec.id
        found.setdefault(function, set()).add(case)
        if case in marker.args:
            item.add_marker(pytest.mark.slow)
    missing = {function: ids - found[function] for function, ids in named.items() if ids - found[function]}
    if missing:
        raise pytest.UsageError("slow_cases names cases that are not there: " + "; ".join(
            f"{function}: {', '.join(sorted(ids))} (its cases: {', '.join(sorted(found[function]))})"
            for function, ids in missing.items()))


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m and -k deselect
def pytest_collection_modifyitems(config, items):
    _mark_slow_cases(items)
    config.stash[COLLECTED] = {item.nodeid: item.get_closest_marker("slow") is not None for item in items}
    fast = _fast_tier(config)
    kept, elsewhere, slow = [], [], []
    for item in items:
        if _elsewhere(item):
            elsewhere.append(item)
        elif fast and item.get_closest_marker("slow"):
            slow.append(item)
        else:
            kept.append(item)
    if elsewhere or slow:
        config.hook.pytest_deselected(items=elsewhere + slow)
        items[:] = kept
    config.stash[_ONCE_KEY] = len(elsewhere)
    _longest_files_first(items)


# The seconds each test took (set-up, call and tear-down) in the last
# measured pass of each backend and tier, and the programs it started
# (`make test-durations` rewrites them): {"seconds": {backend: {test:
# seconds}}, "processes": {backend: {test: [program, ...]}}}. The rule of
# the tiers reads them (`test_suite.py`), and xdist's `--dist loadscope`,
# which keeps a file on one worker and, with `--no-loadscope-reorder`, hands
# the files out in collection order, gets them longest first, so that the
# two workers finish within seconds of each other.
DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")
UNMEASURED_SECONDS = 0.5  # a test not in DURATIONS yet
# A test over this in any pass is marked slow (test_suite.py). The tiers were
# cut tighter, at 3 s, to hold `make test` within 12 minutes on a 2-core AMD
# EPYC (Zen 3), keeping under this limit one quick check of each capability
# (docs/getting_started.md#tests lists them).
SLOW_SECONDS = 5.0


def read_durations():
    """`DURATIONS`, read."""
    import json

    with open(DURATIONS) as file:
        return json.load(file)


def _longest_files_first(items):
    measured = read_durations()["seconds"].get(BACKEND, {})
    seconds = {}
    for item in items:
        path = item.location[0]
        seconds[path] = seconds.get(path, 0.0) + measured.get(item.nodeid, UNMEASURED_SECONDS)
    items.sort(key=lambda item: -seconds[item.location[0]])  # stable: each file keeps its order


_RUNNING = []  # the item running in this process, for `_note_processes`
_STARTS = frozenset(("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork"))


def _note_processes(event, args):
    """An audit hook (`sys.addaudithook`): a process started during a test
    (``subprocess.Popen``, ``os.posix_spawn``, ``os.exec*``, ``os.fork``)
    is noted in its report's ``user_properties``, which pytest-xdist sends
    to the process that writes `DURATIONS`."""
    if not _RUNNING or event not in _STARTS:
        return
    if event == "os.fork":
        program = "fork"
    elif event == "subprocess.Popen":  # (executable, args, cwd, env)
        executable, argv = args[0], args[1]
        program = executable or (argv if isinstance(argv, (str, bytes, os.PathLike)) else argv[0])
    else:  # (path, argv, env)
        program = args[0]
    program = os.fsdecode(program) if isinstance(program, (bytes, os.PathLike)) else str(program)
    _RUNNING[-1].user_properties.append(("process", os.path.basename(program.split()[0])))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING.append(item)
    try:
        return (yield)
    finally:
        _RUNNING.pop()


sys.addaudithook(_note_processes)
_SECONDS = {}  # test -> seconds in this pass, for `--write-durations`
_PROCESSES = {}  # test -> the programs it started


def pytest_runtest_logreport(report):
    """Adds up each test's seconds (set-up, call, tear-down) and the
    processes it started, for `--write-durations`."""
    _SECONDS[report.nodeid] = _SECONDS.get(report.nodeid, 0.0) + report.duration
    programs = [value for key, value in report.user_properties if key == "process"]
    if programs:
        _PROCESSES.setdefault(report.nodeid, set()).update(programs)


def _fault_log(run, worker):
    """The file where worker `worker` of the xdist run `run` writes what
    `faulthandler` says of a crash (the signal, every thread's Python stack)."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"keras_vit-faults-{run}-{worker}.log")


_FAULTS = pytest.StashKey[list]()  # (worker, what its fault log says), of crashed workers


def _record_faults():
    """In an xdist worker: a native crash (a segfault or an illegal
    instruction in a backend) is written to `_fault_log`, which the
    controller prints in its summary (`pytest_testnodedown`); xdist itself
    only says that the worker went down."""
    worker, run = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if worker and run:
        import faulthandler

        faulthandler.enable(open(_fault_log(run, worker), "w"), all_threads=True)  # noqa: SIM115, kept open



@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller, which collects nothing itself, gets each
    worker's `COLLECTED` (sent by `pytest_sessionfinish`), and keeps what
    the fault log of a worker that crashed says."""
    collected = getattr(node, "workeroutput", {}).get("collected", {})
    node.config.stash[COLLECTED] = {**node.config.stash.get(COLLECTED, {}), **collected}
    worker, run = node.gateway.id, node.workerinput.get("testrunuid")
    path = _fault_log(run, worker)
    if os.path.exists(path):
        with open(path, errors="replace") as file:
            text = file.read().strip()
        os.remove(path)
        if error and text:
            node.config.stash.setdefault(_FAULTS, []).append((worker, text))


def pytest_sessionfinish(session):
    """With `--write-durations`, this pass's seconds replace the stored ones
    of the tests it ran; the tests of this pass's other tier, or of files
    it did not collect, keep theirs, and a test no longer collected from a
    file it collected whole (not by node id) is dropped."""
    config = session.config
    if hasattr(config, "workerinput"):  # a worker: its collection goes to the controller
        config.workeroutput["collected"] = config.stash.get(COLLECTED, {})
        return
    if not config.getoption("--write-durations"):
        return
    import json

    stored = read_durations()
    collected = config.stash.get(COLLECTED, {})
    # A file collected whole drops its tests that are gone; one given by node id keeps the rest.
    files = {test.split("::")[0] for test in collected} if not any("::" in arg for arg in config.args) else set()
    root = os.path.dirname(os.path.dirname(DURATIONS))

    def kept(test):
        path = test.split("::")[0]
        return os.path.exists(os.path.join(root, path)) and (path not in files or test in collected)

    seconds = {test: s for test, s in stored["seconds"].get(BACKEND, {}).items() if kept(test)}
    seconds.update({test: round(s, 2) for test, s in _SECONDS.items()})
    processes = {test: p for test, p in stored["processes"].get(BACKEND, {}).items()
                 if kept(test) and test not in _SECONDS}
    processes.update({test: sorted(p) for test, p in _PROCESSES.items()})
    stored["seconds"][BACKEND], stored["processes"][BACKEND] = seconds, processes
    with open(DURATIONS, "w") as file:
        json.dump(stored, file, indent=0, sort_keys=True)
        file.write("\n")


def pytest_unconfigure(config):
    """The objects alive at the end (each backend's, every module's) are
    moved out of the cyclic collector's reach, as `keras_vit.cli.run` does,
    so that the interpreter's shutdown does not spend 1-2 s collecting them."""
    import gc

    gc.freeze()


def pytest_terminal_summary(terminalreporter, config):
    measured = read_durations()["seconds"].get(BACKEND, {})
    unmeasured = [test for test in _SECONDS if test not in measured]
    if unmeasured and not config.getoption("--write-durations"):
        terminalreporter.write_line(
            f"{len(unmeasured)} tests of this pass are not in {os.path.basename(DURATIONS)} (as "
            f"{unmeasured[0]}): `make test-durations` measures them for the rule of the tiers (test_suite.py)")
    for worker, text in config.stash.get(_FAULTS, []):
        terminalreporter.section(f"worker {worker} crashed: what faulthandler wrote")
        terminalreporter.write_line(text[:20000])
    count = config.stash.get(_ONCE_KEY, 0)
    if count:
        terminalreporter.write_line(
            f"{count} deselected: backend-independent and cross-backend tests run once, in the "
            f"KERAS_BACKEND={HOME_BACKEND} pass, and each of the docs' examples in one pass")


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends with the float32 policy and a fixed seed."""
    import keras

    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")


def digits(split, size):
    """The embedded digits of `split` at `size` px in [-1, 1], and their labels."""
    import tensorflow as tf

    from keras_vit.data.sources import load_source

    batch = next(iter(load_source("digits", split).dataset.batch(2000)))
    images = tf.image.resize(tf.cast(batch["image"], "float32"), (size, size)).numpy() / 127.5 - 1
    return images, np.asarray(batch["label"])


def fit_digits(x, y, **options):
    """The demo's model (`helpers.DIGITS_MODEL`, with `options`) trained for
    8 epochs of Adam on `x`, `y` from seed 0, the learning rate warmed up to
    3e-3 over the first tenth of the steps and then cosine-decayed to 0.

    The decay makes the end accuracy a property of the run rather than of
    the epoch it stops at: at a constant 3e-3 for 10 epochs the held-out
    accuracy moved by up to 5 points from one epoch to the next (0.947 at
    epoch 7, 0.894 at epoch 10 on PyTorch); with the decay the last three
    epochs stayed within 1.5 points, at 0.928-0.933 in float32 and
    0.933-0.947 in mixed_bfloat16 on the three backends, in 8 epochs
    instead of 10."""
    import keras
    from helpers import DIGITS_MODEL

    from keras_vit import ViT

    epochs, batch_size = 8, 64
    steps = epochs * -(-len(x) // batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, steps - steps // 10, warmup_target=3e-3, warmup_steps=steps // 10)
    keras.utils.set_random_seed(0)
    model = ViT(**DIGITS_MODEL, **options)
    model.compile(optimizer=keras.optimizers.Adam(schedule),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0)
    return model


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory, worker_id):
    """The demo's model (`helpers.DIGITS_MODEL`) trained for 8 epochs on the
    digits' train split (`fit_digits`), with the train and held-out digits:
    one model for every test that needs a trained one (quantization, LoRA,
    bfloat16). Under pytest-xdist the first worker to need it trains it and
    saves it in the pass's common temporary folder; the other loads that
    file (the same weights) instead of training its own."""
    import filelock
    import keras
    from helpers import to_numpy

    (x, y), (x_test, y_test) = digits("train", 16), digits("test", 16)
    if worker_id == "master":  # no workers: nothing to share
        model = fit_digits(x, y)
    else:
        path = tmp_path_factory.getbasetemp().parent / "trained_digits.keras"
        with filelock.FileLock(f"{path}.lock"):
            if path.exists():
                model = keras.saving.load_model(path)
            else:
                model = fit_digits(x, y)
                model.save(path)
    accuracy = (to_numpy(model.predict(x_test, batch_size=len(x_test), verbose=0)).argmax(-1) == y_test).mean()
    assert accuracy > 0.85, f"the float32 model must have learned the digits: {accuracy:.1%}"
    return model, (x, y), (x_test, y_test)


@pytest.fixture
def images():
    return np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
