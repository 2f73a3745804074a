"""Shared pytest configuration.

Hypothesis profiles: ``dev`` (Hypothesis' defaults) for local runs; ``ci`` (more examples, no deadline, as
shared CI machines have noisy timings), selected when the environment variable ``CI`` is ``true``.
``HYPOTHESIS_PROFILE`` overrides the choice.

At the end of the session, a python-qpid-proton reactor thread still running fails the run with its name (see
:func:`pytest_sessionfinish`).

Installs: what the fixtures install for themselves (RabbitMQ, Java, Qpid Proton's examples, rhea) is announced on
the terminal as it starts and listed in the summary; ``AMQP_ASYNC_TEST_NO_INSTALL=1`` skips the tests that need
what is missing instead (tests/installs.py).
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from typing import Any

import pytest
from hypothesis import settings

try:
    import installs
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import installs

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev")
_default = "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))


def pytest_configure(config: pytest.Config) -> None:
    installs.configure(config)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """List what the fixtures installed during the run (each was announced as it started)."""
    done = installs.installed_this_run()
    if done:
        terminalreporter.section("installed by the tests")
        for line in done:
            terminalreporter.write_line(line)
    if not installs.installs_allowed():
        terminalreporter.write_line(f"{installs.NO_INSTALL} is set: tests needing what is missing were skipped")


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
