"""What the journeys share (tests/test_install.py runs them).

Each journey is a script that a virtual environment's own Python runs, in a
fresh working folder, with keras_vit installed from the wheel and
``KERAS_BACKEND`` set: it does what a user does, checks what the user would
look at, and ends with one line ``OK <what was checked>`` on stdout, exit
status 0. A check that fails raises (a traceback, exit status 1). A
command's failure is passed on as the user sees it (`keras_vit_command`).

This module imports numpy and the standard library alone: what a journey
imports of Keras and keras_vit, and when, is up to the journey.
"""

import os
import re
import struct
import subprocess
import sys
import zlib

import numpy as np

# The ViT of the journeys: one block of D 8 over a 2x2 grid of 8-px patches.
TINY = dict(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
            num_classes=3)
TOLERANCE = dict(rtol=1e-5, atol=1e-5)
SPREAD = 1e-3  # logits compared must differ by more than this: a zero head gives all zeros
# TensorFlow's information lines (absl's format: I, MMDD, time) and absl's
# preamble, which the command leaves out unless asked (keras-vit --verbose)
START_UP = re.compile(r"^I\d{4} \d\d:\d\d:\d+\.\d+ .*$|^WARNING: All log messages before absl::InitializeLog.*$",
                      re.MULTILINE)


def tiny_vit(**changes):
    """A `TINY` ViT (with `changes`) from seed 0, its head given random
    weights: the ViT's head starts at zero (the paper's), and logits of 0
    everywhere would match any other model's."""
    import keras
    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(**{**TINY, **changes})
    head, rng = model.get_layer("head"), np.random.default_rng(1)
    head.kernel.assign(rng.normal(0, 1, head.kernel.shape).astype("float32"))
    head.bias.assign(rng.normal(0, 1, head.bias.shape).astype("float32"))
    return model


def installed():
    """keras_vit, checked to be the installed one (the environment's
    site-packages, not a source tree on the path)."""
    import keras_vit

    where = os.path.realpath(keras_vit.__file__)
    assert where.startswith(os.path.realpath(sys.prefix) + os.sep), (
        f"keras_vit comes from {where}, not from this environment ({sys.prefix})")
    return keras_vit


def images(count=2, size=16, seed=0):
    """`count` random images, float32 in [-1, 1], as the model takes them."""
    return np.random.default_rng(seed).uniform(-1, 1, (count, size, size, 3)).astype("float32")


def logits(model, x):
    """The model's output on `x` as a numpy array."""
    import keras

    return keras.ops.convert_to_numpy(model(x))


def assert_same(actual, expected, what):
    """`actual` equals `expected` within 1e-5, and `expected` is not
    constant; returns the largest difference."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert np.ptp(expected) > SPREAD, f"{what}: the expected values are all {expected.flat[0]}, nothing to compare"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    difference = float(np.abs(actual - expected).max())
    assert np.allclose(actual, expected, **TOLERANCE), (
        f"{what}: differs by up to {difference:.1e} (rtol=atol={TOLERANCE['atol']:g}): "
        f"{actual.ravel()[:3].tolist()} ... for {expected.ravel()[:3].tolist()} ...")
    return difference


def program(name):
    """The path of an entry point of this environment (``keras-vit``)."""
    return os.path.join(os.path.dirname(sys.executable), name)


def keras_vit_command(*args):
    """Runs ``keras-vit ARGS`` (this environment's) as a user does and
    returns its stdout. Its stdout and stderr are passed on as they are; a
    failure ends this journey with the command's own exit status, so that
    what the test sees is what the user saw. A command that succeeds wrote
    none of TensorFlow's and absl's start-up lines (`START_UP`) and, into
    this pipe, no progress bar's ANSI escape codes."""
    process = subprocess.run([program("keras-vit"), *args], capture_output=True, text=True)
    out = passed_on(process)
    noise = START_UP.findall(process.stdout + process.stderr)
    assert not noise and "\x1b[" not in process.stdout + process.stderr, (
        f"keras-vit {' '.join(args)} wrote {noise or 'ANSI escape codes'}")
    return out


def passed_on(process):
    """`process`'s output written to this one's; exits with its status if
    it failed. Returns its stdout."""
    sys.stdout.write(process.stdout)
    sys.stderr.write(process.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    if process.returncode:
        sys.exit(process.returncode)
    return process.stdout


def write_png(path, pixels):
    """`pixels` (uint8, (height, width, 3)) as an RGB PNG file, written with
    zlib and struct: the environment may have no image library."""
    height, width, channels = pixels.shape
    assert channels == 3 and pixels.dtype == np.uint8

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    rows = b"".join(b"\x00" + row.tobytes() for row in pixels)  # filter type 0 on each row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB
    with open(path, "wb") as file:
        file.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
                   + chunk(b"IEND", b""))


def ok(message):
    """The journey's last line: it worked, and what it checked."""
    print(f"OK {message}", flush=True)
