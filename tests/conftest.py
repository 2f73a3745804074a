"""Shared pytest configuration.

Hypothesis profiles: ``dev`` (Hypothesis' defaults) for local runs; ``ci`` (more examples, no deadline, as
shared CI machines have noisy timings), selected when the environment variable ``CI`` is ``true``.
``HYPOTHESIS_PROFILE`` overrides the choice.

At the end of the session, a python-qpid-proton reactor thread still running fails the run with its name (see
:func:`pytest_sessionfinish`).

Markers given here (:data:`MARKERS`) rather than in the test files keep the interpreter matrix's policy in one
place: noxfile.py runs the whole suite on one interpreter and ``-m SUBSET`` on the others (docs/development.md),
so a file that needs PySpark, or a test that repeats on every interpreter what one run proves, carries the marker
that keeps it to the full-suite interpreter, and an interop file that is the Python-version-sensitive test of an
area carries ``matrix``, which brings it into the subset.

Fixtures for every test file: ``rabbitmq_broker`` (tests/rabbitmq.py), registered here once, so that each
pytest-xdist worker starts one RabbitMQ node for all its files. A session fixture that a test file imports is that
file's own: imported into the twelve files that use it, it started a node per file (eleven in one run of the whole
suite, each kept until the session ended); with one node per worker, Erlang's CPU in a run fell from 134 to 60
CPU-seconds.

Installs: what the fixtures install for themselves (RabbitMQ, Java, Qpid Proton's examples, rhea) is announced on
the terminal as it starts and listed in the summary; ``AMQP_ASYNC_TEST_NO_INSTALL=1`` skips the tests that need
what is missing instead (tests/installs.py).
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

try:
    import installs
    import rewrite_cache
    from rabbitmq import rabbitmq_broker  # the fixture, for every test file (see above)
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import installs, rewrite_cache
    from tests.rabbitmq import rabbitmq_broker  # noqa: F401

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev")
_default = "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))


#: "file" or "file::test" -> (marker, why it carries it).
MARKERS: dict[str, tuple[str, str]] = {
    "test_spark_units.py": ("spark", "imports pyspark and pyarrow, installed for the full-suite interpreter only"),
    "test_spark_log.py": ("spark", "imports pyarrow (the write-ahead log's filesystems), full-suite interpreter only"),
    "test_spark_stream_task.py": ("spark", "imports pyspark and pyarrow, full-suite interpreter only"),
    "test_spark_batch_budget.py": ("spark", "imports pyspark and pyarrow, full-suite interpreter only"),
    "test_spark_byte_window.py": ("spark", "imports pyspark and pyarrow, full-suite interpreter only"),
    "test_spark_task_end_credit.py": ("spark", "imports pyspark and pyarrow, full-suite interpreter only"),
    "test_network_fuzz.py": ("network_fuzz", "mutated recorded sessions against our broker: long, version-neutral"),
    "test_network_fuzz_client.py": ("network_fuzz", "mutated recorded sessions against our client"),
    "test_network_fuzz_proton.py": (
        "network_fuzz",
        "mutated recorded sessions against the callback API's programs (the hostile-peer tests of "
        "test_proton_hostile.py run on every Python)",
    ),
    "test_network_fuzz_proton_server.py": (
        "network_fuzz",
        "mutated recorded sessions against a listening Container (test_proton_hostile.py runs on every Python)",
    ),
    "test_cli.py": ("processes", "an `amqp-async` program (0.3 CPU-seconds to start) for each step"),
    "test_cli.py::test_help_lists_the_commands_and_exit_codes": ("matrix", "the command line starts on every Python"),
    "test_cli.py::test_send_and_receive_exact_counts": ("matrix", "send and receive, end to end"),
    "test_cli.py::test_unreachable_host_exits_3": ("matrix", "a connect failure's exit code (OSError's errno)"),
    "test_cli.py::test_tls_options": ("matrix", "the ssl module's contexts"),
    "test_broker_cli.py": ("processes", "a `python -m amqp_async.broker` program for each case"),
    "test_broker_cli.py::test_prints_its_url_serves_a_client_and_logs_connections_and_links": (
        "matrix",
        "the broker as a program serves a client",
    ),
    "test_broker_cli.py::test_exits_cleanly_on_a_signal_with_a_client_connected": (
        "matrix",
        "signal handling under anyio, which changed with the Python version",
    ),
    "test_broker_cli.py::test_tls_cert_and_key": ("matrix", "the ssl module's server contexts"),
    "test_cli_files.py": ("processes", "`amqp-async send --file` and `receive --output-dir` programs"),
    "test_cli_files.py::test_files_go_as_streamed_messages_and_come_back_byte_for_byte": (
        "matrix",
        "streaming through the command line, end to end",
    ),
    "test_client_proton.py": ("matrix", "the awaitable client on asyncio, uvloop and trio against proton, in-process"),
    "test_proton_api.py": ("matrix", "the callback API's Container (threads, asyncio, trio) against proton"),
    "test_installs.py": (
        "slow",
        "the suite's own install announcements, each case a nested pytest session (2 CPU-seconds): the same on every "
        "Python",
    ),
    "test_suite_rules.py::test_the_workers_read_the_test_modules_rewritten_before_they_start": (
        "slow",
        "two nested pytest sessions with a worker each (5 CPU-seconds): the same on every Python",
    ),
    "test_docs.py::test_the_site_builds_in_strict_mode": (
        "slow",
        "mkdocs reads the sources without importing them: the same site on every Python",
    ),
    "test_broker_durable.py::test_20000_confirmed_durable_sends_survive_two_kill_9"
    "_with_duplicates_only_of_those_in_doubt": (
        "slow",
        "20,000 sends and two kill -9: the store's every path also runs in the file's shorter tests",
    ),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give the tests of :data:`MARKERS` their markers (before ``-m`` deselects), then put the long files first."""
    for item in items:
        for key in (item.path.name, f"{item.path.name}::{getattr(item, 'originalname', item.name)}"):
            entry = MARKERS.get(key)
            if entry is not None:
                item.add_marker(entry[0])
    items[:] = _long_files_first(items)


def _long_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items, file by file, the files that take longest first; each file's own order kept.

    noxfile.py runs the suite on pytest-xdist workers, which take the units of :func:`pytest_xdist_make_scheduler`
    in this order (``--no-loadscope-reorder``): the run ends when its longest unit ends, so that unit must start
    first. Rank: the files that start Spark (``spark`` and ``slow``: JVMs and Spark jobs of minutes), then the
    files with other ``slow`` tests, then the ``interop`` files (peers to start), then the rest."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)

    def rank(file_items: list[pytest.Item]) -> int:
        markers = {marker.name for item in file_items for marker in item.iter_markers()}
        if {"spark", "slow"} <= markers:
            return 0
        if "slow" in markers:
            return 1
        return 2 if "interop" in markers else 3

    return [item for file_items in sorted(files.values(), key=rank) for item in file_items]


#: The files whose tests start Spark applications (JVMs), and the pytest-xdist unit of work they make together
#: (:func:`pytest_xdist_make_scheduler`). The other test_spark_*.py files run no JVM (the write-ahead log, a read
#: task without Spark, the schema): they are units of their own, off the run's longest unit.
SPARK_APPLICATION_FILES = frozenset({"test_spark.py", "test_spark_cluster.py", "test_spark_drivers.py"})
SPARK_UNIT = "the files that start Spark"


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: how the controller hands tests to its workers
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadfile``: one file per unit of work (a file's module fixtures, such as a RabbitMQ node,
    start once), except the files that start Spark (:data:`SPARK_APPLICATION_FILES`), which make one unit and so run
    one after the other on one worker. Spark's JVM gives each Python worker it starts 10 s to connect back, a bound
    no setting changes (``PythonWorkerFactory``); Spark applications starting side by side on two cores loaded by
    the other tests miss it. (``--dist loadgroup`` with ``xdist_group`` markers would say the same, but pytest-xdist
    3.8 groups by rewriting node ids, which pytest 9.2 no longer reads.) Any other ``--dist`` keeps pytest-xdist's
    own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkFilesTogether(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            return SPARK_UNIT if Path(scope).name in SPARK_APPLICATION_FILES else scope

    return SparkFilesTogether(config, log)


def _deselected_by_markexpr(config: pytest.Config, *markers: str) -> bool:
    """Whether ``-m`` deselects a test that carries ``markers`` (and no other marker)."""
    markexpr = config.option.markexpr
    if not markexpr:
        return False
    try:
        from _pytest.mark.expression import Expression  # pytest's own -m parser; private, hence the fallback
    except ImportError:  # pragma: no cover - then the file is collected, and -m deselects its tests
        return False
    return not Expression.compile(markexpr).evaluate(lambda name, **_: name in markers)


def _file_deselected(config: pytest.Config, name: str) -> bool:
    """Whether ``-m`` deselects every test of the file ``name`` by :data:`MARKERS` alone: its marker is deselected,
    and no test of it that MARKERS names carries a marker that brings it back (``matrix``)."""
    entry = MARKERS.get(name)
    if entry is None or not _deselected_by_markexpr(config, entry[0]):
        return False
    prefix = f"{name}::"
    return all(
        _deselected_by_markexpr(config, entry[0], marker)
        for key, (marker, _) in MARKERS.items()
        if key.startswith(prefix)
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Do not import a file of :data:`MARKERS` whose marker ``-m`` deselects (with all its tests): test_spark_units.py
    (and the other test_spark_*.py files) import PySpark, which only the full-suite interpreter has. Reported by
    :func:`pytest_report_collectionfinish`."""
    return True if _file_deselected(config, collection_path.name) else None


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """Name the files left out above, so that nothing is left out unsaid."""
    return [
        f"not collected (-m deselects their marker): {name} [{marker}: {why}]"
        for name, (marker, why) in MARKERS.items()
        if "::" not in name and _file_deselected(config, name)
    ]


def pytest_configure(config: pytest.Config) -> None:
    installs.configure(config)
    # Before pytest-xdist starts its workers: they then read the rewritten test modules instead of each rewriting.
    not_collected = {name for name in MARKERS if "::" not in name and _file_deselected(config, name)}
    rewrite_cache.rewrite_before_the_workers_start(config, not_collected)


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


#: What pytest-xdist's workers reported when they ended (:func:`pytest_testnodedown`): leaked proton threads.
_workers_leaked: list[str] = []


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the controller hears that a worker ended
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Take over what a worker reported from its :func:`pytest_sessionfinish`: its installs, for the summary, and
    its leaked proton threads, which fail the run here (a worker's own exit status does not)."""
    output = getattr(node, "workeroutput", {})
    installs.record(output.get("amqp_async_installed", []))
    worker = getattr(getattr(node, "gateway", None), "id", "a worker")  # gw0, gw1...
    _workers_leaked.extend(f"{name} (in {worker})" for name in output.get("amqp_async_leaked_threads", []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a real-proton reactor thread outlives the tests: at interpreter exit, proton's cffi
    cleanup frees the handles such a thread still uses and the process aborts (exit -6) after every test passed,
    with no hint of which test left it. Named here instead.

    In a pytest-xdist worker, what it installed and the threads it leaked go to the controller (``workeroutput``),
    which reports them."""
    leaked = _proton_threads()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["amqp_async_installed"] = installs.installed_this_run()
        workeroutput["amqp_async_leaked_threads"] = leaked
    leaked += _workers_leaked
    if leaked:
        sys.stderr.write("\nthreads running python-qpid-proton outlived the tests (stop the peers you start):\n")
        for description in leaked:
            sys.stderr.write(f"  {description}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
