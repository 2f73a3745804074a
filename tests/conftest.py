"""Shared pytest configuration.

Hypothesis profiles: ``dev`` (Hypothesis' defaults) for local runs; ``ci`` (more examples, no deadline, as
shared CI machines have noisy timings), selected when the environment variable ``CI`` is ``true``.
``HYPOTHESIS_PROFILE`` overrides the choice.

At the end of the session, a python-qpid-proton reactor thread still running fails the run with its name (see
:func:`pytest_sessionfinish`).

Markers that a whole file gets for what it needs rather than what it tests are given here (:data:`FILE_MARKERS`):
noxfile.py runs the whole suite on one interpreter and ``-m "not interop and not slow and not spark and not
network_fuzz"`` on the others (docs/development.md), so a file that needs PySpark, or that only repeats a long
fuzzing run, must carry the marker that keeps it to that one interpreter.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev")
_default = "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))


#: file name -> (marker, why the file carries it).
FILE_MARKERS: dict[str, tuple[str, str]] = {
    "test_spark_units.py": ("spark", "imports pyspark and pyarrow, installed for the full-suite interpreter only"),
    "test_network_fuzz.py": ("network_fuzz", "mutated recorded sessions against our broker: long, version-neutral"),
    "test_network_fuzz_client.py": ("network_fuzz", "mutated recorded sessions against our client"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test of a file in :data:`FILE_MARKERS` that file's marker (before ``-m`` deselects)."""
    for item in items:
        entry = FILE_MARKERS.get(item.path.name)
        if entry is not None:
            item.add_marker(entry[0])


def _proton_threads() -> list[str]:
    """The names of the threads still running python-qpid-proton code (a peer a test started and never stopped)."""
    frames = sys._current_frames()
    leaked = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if thread is threading.main_thread() or frame is None:
            continue
        files = [entry.filename for entry in traceback.extract_stack(frame)]
        if any(f"{os.sep}proton{os.sep}" in name and "amqp_async" not in name for name in files):
            leaked.append(thread.name)
    return leaked


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a real-proton reactor thread outlives the tests: at interpreter exit, proton's cffi
    cleanup frees the handles such a thread still uses and the process aborts (exit -6) after every test passed,
    with no hint of which test left it. Named here instead."""
    leaked = _proton_threads()
    if leaked:
        sys.stderr.write("\nthreads running python-qpid-proton outlived the tests (stop the peers you start):\n")
        for description in leaked:
            sys.stderr.write(f"  {description}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
