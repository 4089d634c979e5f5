"""The rule that keeps the fast tier fast (tests/conftest.py): a test that
took more than `SLOW_SECONDS` in any backend's pass of either tier, or that
started a process of its own, is marked ``slow``, so that ``make test``
leaves it to ``make test-slow``.

Neither test times anything: they read the seconds and the processes that
the last `make test-durations` recorded for each test
(`tests/durations.json`), and the markers of the tests this session
collected. A test not recorded yet is counted in each pass's summary, until
`make test-durations` measures it.
"""

import pytest
from conftest import COLLECTED
from conftest import DURATIONS
from conftest import SLOW_SECONDS
from conftest import read_durations

pytestmark = pytest.mark.backend_independent


def _not_marked_slow(request, kind):
    """The entries of the record's `kind` ("seconds" or "processes": {backend:
    {test: value}}) whose test this session collected without the ``slow``
    marker, as (backend, test, value).
    Skips where this session collected only some of the recorded files (a
    file or a node id given to pytest): the rule is read over the whole
    suite (``pytest tests``, any ``-k`` or ``-m``)."""
    collected = request.config.stash[COLLECTED]
    files = {test.split("::")[0] for test in collected}
    recorded = read_durations()
    missing = {test.split("::")[0] for tests in recorded["seconds"].values() for test in tests} - files
    if missing:
        pytest.skip(f"the rule of the tiers reads the whole suite's markers, and this session collected "
                    f"{len(files)} of the {len(files | missing)} test files: run pytest tests")
    return [(backend, test, value) for backend, tests in recorded[kind].items() for test, value in tests.items()
            if collected.get(test) is False]


def test_every_test_over_the_limit_is_marked_slow(request):
    over = sorted(((seconds, backend, test) for backend, test, seconds in
                   _not_marked_slow(request, "seconds") if seconds > SLOW_SECONDS), reverse=True)
    lines = [f"  {test}: {seconds:.1f} s on {backend}" for seconds, backend, test in over]
    assert not over, (f"Tests over {SLOW_SECONDS:g} s in a pass of {DURATIONS} without the slow marker "
                      f"({len(over)}): mark each @pytest.mark.slow, or make it faster and run "
                      "`make test-durations`\n" + "\n".join(lines))


def test_every_test_that_starts_a_process_is_marked_slow(request):
    starts = sorted((test, backend, programs) for backend, test, programs in
                    _not_marked_slow(request, "processes"))
    lines = [f"  {test}: started {', '.join(programs)} on {backend}" for test, backend, programs in starts]
    assert not starts, (f"Tests that started a process of their own in a pass of {DURATIONS} without the "
                        f"slow marker ({len(starts)}; a process costs seconds before its first step): mark each "
                        "@pytest.mark.slow, or test in this process\n" + "\n".join(lines))
