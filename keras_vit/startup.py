"""How the command line and the recipes start and what they write: a quiet
start (`quiet_start`) and progress fit for where stdout goes
(`progress_verbose`).

TensorFlow's C++ code logs information while it loads: "This TensorFlow
binary is optimized to use available CPU instructions ...", and where oneDNN
is on (by default on CPUs with AVX-512 VNNI, bfloat16 or AMX units) "oneDNN
custom operations are on ..." twice, each after absl's "WARNING: All log
messages before absl::InitializeLog() is called are written to STDERR".
`quiet_start` leaves these lines out unless the user asks for them; it does
not change what TensorFlow computes (``TF_ENABLE_ONEDNN_OPTS`` is left as
it is).
"""

import contextlib
import os
import re
import sys
import tempfile

from keras_vit.lazy import ImportHook

# TensorFlow's C++ logs, by TF_CPP_MIN_LOG_LEVEL: 0 all, 1 all but INFO, 2 no
# WARNING either, 3 no ERROR either. The start-up lines are INFO.
QUIET_LEVEL = "1"

# A line of absl's log: severity, MMDD, time (before absl::InitializeLog
# "00:00:" and the seconds since 1970), thread, file:line.
_LOG_LINE = re.compile(rb"([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] ")
_SEVERITIES = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_ABSL_PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def quiet_start():
    """Keeps TensorFlow's start-up lines off stderr, unless the user asked for
    them: the command line (`keras_vit.cli.run`, unless given
    ``--verbose``) and each script in ``recipes/`` call it before they
    import a backend.

    TF_CPP_MIN_LOG_LEVEL becomes 1 (TensorFlow's C++ warnings and errors,
    not its information) unless it is set already. TensorFlow 2.21 logs the
    oneDNN line whatever that level says, so the lines it logs while it is
    imported are filtered by the same level here: the first ``import
    tensorflow`` of the process writes its stderr to a temporary file, and
    the lines the level keeps (every line that is not TensorFlow's log, and
    its warnings and errors) go to stderr when the import is done. With
    TF_CPP_MIN_LOG_LEVEL=0 nothing is filtered (to see what a crash while
    TensorFlow loads wrote, say).
    """
    level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_LEVEL)
    if level.strip() in ("", "0") or "tensorflow" in sys.modules:
        return
    if not any(isinstance(finder, _QuietTensorFlowImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlowImport())


def progress_verbose():
    """Keras's `verbose` for a progress bar on stdout: 1, the bar redrawn
    in place, on a terminal (or in a notebook); 2, one plain line as each
    bar ends, into a file or a pipe. Keras draws its bar with ANSI escape
    codes and carriage returns wherever stdout goes, and in a log
    (``keras-vit evaluate ... | tee log``) they come out as they are."""
    interactive = "ipykernel" in sys.modules or (sys.stdout is not None and sys.stdout.isatty())
    return 1 if interactive else 2


def _level():
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def _shown(line, level):
    """Whether TF_CPP_MIN_LOG_LEVEL `level` shows this line of stderr."""
    if line.rstrip(b"\r\n") == _ABSL_PREAMBLE:
        return level < 1
    match = _LOG_LINE.match(line)
    return match is None or _SEVERITIES[match[1]] >= level


@contextlib.contextmanager
def _filtered_stderr(level):
    """The file descriptor 2 into a temporary file meanwhile; then the lines
    `level` shows written to it."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to filter
        yield
        return
    with tempfile.TemporaryFile() as captured:
        if sys.stderr is not None:
            sys.stderr.flush()
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            if sys.stderr is not None:
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = memoryview(b"".join(line for line in captured if _shown(line, level)))
            while kept:
                kept = kept[os.write(2, kept):]


class _QuietTensorFlowImport(ImportHook):
    """TensorFlow's first import, with stderr filtered by the level of
    TF_CPP_MIN_LOG_LEVEL (`_filtered_stderr`)."""

    def __init__(self):
        super().__init__("tensorflow", around=lambda: _filtered_stderr(_level()))
