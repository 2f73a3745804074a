"""What the test suite installs for itself (tests/installs.py): announced first, and ``AMQP_ASYNC_TEST_NO_INSTALL=1``
skips instead of installing.

Each case runs pytest in a subprocess (the project's conftest loaded as a plugin, so its hooks are the real ones) on
a small test file written for it, with ``apt-get`` and ``npm`` on the PATH replaced by fakes that record their
arguments: nothing is installed on this machine, and the test sees exactly which commands ran.

- a test needing a missing tool: the install is announced on the terminal (output capture on) before it runs, and
  listed in the summary; with the variable set it is skipped with the reason and the command never runs;
- the suite's real install points, with the variable set and what they install made to look missing: RabbitMQ
  (tests/rabbitmq.py), Java for Spark (tests/spark_support.py), Qpid Proton's examples (test_proton_examples.py),
  the Proton C examples and rhea (test_interop_matrix.py): each skips with its reason, no apt-get nor npm runs;
- a failing install fails the test that needed it, with the command's output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TIMEOUT = 120.0

FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
exit {status}
"""


def fakes(tmp_path: Path, status: int = 0) -> Path:
    """A directory with fake ``apt-get`` and ``npm`` that log their arguments to ``calls.log``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("apt-get", "npm"):
        path = bin_dir / name
        path.write_text(FAKE.format(log=tmp_path / "calls.log", status=status))
        path.chmod(0o755)
    return bin_dir


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def run_pytest(tmp_path: Path, source: str, *, no_install: bool, status: int = 0) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``source`` (a test file) with the project's conftest and the fakes first on the PATH."""
    (tmp_path / "test_case.py").write_text(textwrap.dedent(source))
    env = {key: value for key, value in os.environ.items() if key != "AMQP_ASYNC_TEST_NO_INSTALL"}
    env["PATH"] = os.pathsep.join([str(fakes(tmp_path, status)), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), str(REPO), env.get("PYTHONPATH")]))
    if no_install:
        env["AMQP_ASYNC_TEST_NO_INSTALL"] = "1"
    plugins = ["-p", "conftest", "-p", "no:cacheprovider", "-p", "no:randomly"]
    where = ["--rootdir", str(tmp_path), str(tmp_path / "test_case.py")]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-ra", "-q", *where],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=TIMEOUT,
    )


NEEDS_A_TOOL = """
    import installs

    def test_needs_a_tool():
        installs.install("fake-tool", "the fake-tool tests", ["apt-get", "install", "-y", "fake-tool"])
"""
ANNOUNCEMENT = (
    "amqp_async tests: installing fake-tool for the fake-tool tests: apt-get install -y fake-tool "
    "(set AMQP_ASYNC_TEST_NO_INSTALL=1 to skip them instead)"
)


def test_an_install_is_announced_on_the_terminal_before_it_runs_and_listed_in_the_summary(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, NEEDS_A_TOOL, no_install=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^1 passed", result.stdout, re.MULTILINE), result.stdout
    lines = result.stdout.splitlines()
    assert lines.count(ANNOUNCEMENT) == 1, result.stdout  # shown although pytest captured the test's output
    assert "fake-tool (apt-get install -y fake-tool) for the fake-tool tests" in lines  # the summary's list
    assert calls(tmp_path) == ["apt-get install -y fake-tool"]


def test_with_the_variable_the_test_is_skipped_with_its_reason_and_nothing_runs(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, NEEDS_A_TOOL, no_install=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^1 skipped", result.stdout, re.MULTILINE), result.stdout
    assert (
        "fake-tool is missing and AMQP_ASYNC_TEST_NO_INSTALL is set: the fake-tool tests skipped "
        "(to install it: apt-get install -y fake-tool)"
    ) in result.stdout
    assert ANNOUNCEMENT not in result.stdout
    assert "AMQP_ASYNC_TEST_NO_INSTALL is set: tests needing what is missing were skipped" in result.stdout
    assert calls(tmp_path) == []


def test_a_failing_install_fails_the_test_with_the_commands_output(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, NEEDS_A_TOOL, no_install=False, status=100)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"^1 failed", result.stdout, re.MULTILINE), result.stdout
    assert "InstallFailed: `apt-get install -y fake-tool` failed (exit 100)" in result.stdout
    assert calls(tmp_path) == ["apt-get install -y fake-tool"]


REAL_INSTALL_POINTS = """
    import os
    import shutil
    from pathlib import Path

    import pytest


    @pytest.fixture
    def nothing_installed(monkeypatch, tmp_path):
        monkeypatch.setattr(os, "geteuid", lambda: 0)  # as root, so that only the variable stops the installs
        real_which = shutil.which
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "java" else real_which(name))
        return tmp_path / "missing"


    def test_rabbitmq(nothing_installed, monkeypatch):
        import rabbitmq
        monkeypatch.setattr(rabbitmq, "SCRIPTS_DIR", nothing_installed)
        rabbitmq.ensure_installed()


    def test_java(nothing_installed):
        import spark_support
        spark_support.ensure_java()


    def test_proton_examples(nothing_installed, monkeypatch):
        import test_proton_examples as examples
        monkeypatch.setattr(examples, "EXAMPLES", nothing_installed)
        examples._examples.cache_clear()
        directory, why = examples._examples()
        assert directory is None
        pytest.skip(why)


    def test_proton_c_examples(nothing_installed, monkeypatch):
        import test_interop_matrix as matrix
        peers = matrix._load_bench_peers()
        monkeypatch.setattr(matrix, "_load_bench_peers", lambda: peers)
        monkeypatch.setattr(peers, "EXAMPLES", nothing_installed)
        matrix._c_broker_binary()


    def test_rhea(nothing_installed, monkeypatch):
        import test_interop_matrix as matrix
        monkeypatch.setattr(matrix, "RHEA_CACHE", nothing_installed)
        matrix._npm_install("rhea", "rhea@3")
"""


def test_every_install_point_of_the_suite_skips_with_the_variable(tmp_path: Path) -> None:
    pytest.importorskip("proton", reason="test_interop_matrix.py imports python-qpid-proton (in the test group)")
    result = run_pytest(tmp_path, REAL_INSTALL_POINTS, no_install=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^5 skipped", result.stdout, re.MULTILINE), result.stdout
    reasons = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    expected = [
        "rabbitmq-server is missing and AMQP_ASYNC_TEST_NO_INSTALL is set: the RabbitMQ interop tests skipped",
        "Java 17 (openjdk-17-jre-headless) is missing and AMQP_ASYNC_TEST_NO_INSTALL is set: the Spark tests",
        "is missing and AMQP_ASYNC_TEST_NO_INSTALL is set (to install it: apt-get install -y",
        "Qpid Proton's C examples is missing and AMQP_ASYNC_TEST_NO_INSTALL is set: the Proton C interop tests",
        "rhea@3 (npm, into",
    ]
    assert len(reasons) == 5, reasons
    for text in expected:
        assert sum(text in line for line in reasons) == 1, (text, reasons)
    assert calls(tmp_path) == []  # no apt-get, no npm
