"""The suite's shared set-up: markers, the pass that runs what does not depend
on the backend, the compilation caches, and fixtures every file shares.

`make test` runs the suite once per backend (KERAS_BACKEND=tensorflow, jax,
torch). Four markers decide where a test runs and which loop it is in:

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
- ``slow``: kept out of ``make test-fast`` (``pytest -m "not slow"``), the
  edit-run loop; ``make test`` runs it.

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
    """A folder in the user's cache folder, never in the work tree."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "keras_vit", name)


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


def pytest_configure(config):
    config.addinivalue_line("markers", f"backend_independent: runs in the KERAS_BACKEND={HOME_BACKEND} pass only")
    config.addinivalue_line("markers", f"cross_backend: starts the other backends; runs in the "
                                       f"KERAS_BACKEND={HOME_BACKEND} pass only")
    config.addinivalue_line("markers", "one_pass(backend): runs in that backend's pass only")
    config.addinivalue_line("markers", "slow: left out of `make test-fast` (-m 'not slow'); `make test` runs it")


def pytest_report_header(config):
    from importlib.metadata import version

    lines = [f"keras {version('keras')}, backend: {BACKEND}"]
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
    parser.addoption("--write-durations", action="store_true",
                     help=f"store this pass's seconds per test file in {os.path.basename(DURATIONS)}")


def _elsewhere(item):
    """Whether `item` runs in another backend's pass."""
    turn = item.get_closest_marker("one_pass")
    if turn is not None:
        return turn.args[0] != BACKEND
    return BACKEND != HOME_BACKEND and any(item.get_closest_marker(m) for m in ONCE)


def pytest_collection_modifyitems(config, items):
    kept, elsewhere = [], []
    for item in items:
        (elsewhere if _elsewhere(item) else kept).append(item)
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = kept
    config.stash[_ONCE_KEY] = len(elsewhere)
    _longest_files_first(items)


# The seconds each test file took in the last measured pass of each backend
# (`make test-durations` rewrites them). xdist's `--dist loadscope` keeps a
# file on one worker and, with `--no-loadscope-reorder`, hands the files out
# in collection order: longest first, two workers finish within seconds of
# each other (the default order, by number of tests, put the cross-backend
# file, 3 long tests, last, and the workers ended far apart).
DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")
UNMEASURED_SECONDS_PER_TEST = 0.5  # a file not in DURATIONS yet


def _longest_files_first(items):
    import json

    with open(DURATIONS) as file:
        measured = json.load(file).get(BACKEND, {})
    counts = {}
    for item in items:
        counts[item.location[0]] = counts.get(item.location[0], 0) + 1
    seconds = {path: measured.get(path, UNMEASURED_SECONDS_PER_TEST * n) for path, n in counts.items()}
    items.sort(key=lambda item: -seconds[item.location[0]])  # stable: each file keeps its order


_SECONDS = {}  # test file -> seconds in this pass, for `--write-durations`


def pytest_runtest_logreport(report):
    """Adds up each file's seconds (set-up, call, tear-down) for `--write-durations`."""
    path = report.nodeid.split("::")[0]
    _SECONDS[path] = _SECONDS.get(path, 0.0) + report.duration


def pytest_sessionfinish(session):
    config = session.config
    if not config.getoption("--write-durations") or hasattr(config, "workerinput"):
        return  # only the process that saw every file's reports writes
    import json

    with open(DURATIONS) as file:
        stored = json.load(file)
    root = os.path.dirname(os.path.dirname(DURATIONS))
    kept = {path: s for path, s in stored.get(BACKEND, {}).items() if os.path.exists(os.path.join(root, path))}
    stored[BACKEND] = {**kept, **{path: round(s, 1) for path, s in _SECONDS.items()}}  # a part run keeps the rest
    with open(DURATIONS, "w") as file:
        json.dump(stored, file, indent=1, sort_keys=True)
        file.write("\n")


def pytest_unconfigure(config):
    """The objects alive at the end (each backend's, every module's) are
    moved out of the cyclic collector's reach, as `keras_vit.cli.run` does,
    so that the interpreter's shutdown does not spend 1-2 s collecting them."""
    import gc

    gc.freeze()


def pytest_terminal_summary(terminalreporter, config):
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
