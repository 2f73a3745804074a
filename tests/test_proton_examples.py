"""Our broker proven by clients we did not write: Qpid Proton's own Python examples, run unchanged.

The examples come from the Debian package ``libqpid-proton11-dev-examples`` (``/usr/share/proton/examples/python/``,
installed here when missing and we may), run with this interpreter (which has python-qpid-proton) against
``python -m amqp_async.broker``, and their output is compared as proton's own ``test_examples.py`` there compares it.

They hard-code ``localhost:5672``, where a RabbitMQ may already listen. So each test runs its scenario in a network
namespace of its own, where that port is free: this file, run as a script (``python test_proton_examples.py
--inside SPEC``) under ``unshare -rn`` (or ``sudo -n unshare -n``, dropping back to our user, where unprivileged
user namespaces are not allowed), brings ``lo`` up, starts the broker on 127.0.0.1:5672, waits for its ``listening
on`` line, runs the scenario's steps (programs in the foreground or the background, each with a timeout, outputs to
files), stops the broker with SIGTERM and prints a JSON report: every program's exit status and outputs, and the
broker's log.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest

try:
    import installs
    from proton_examples_support import _bring_loopback_up, _stop, launch_program, run_steps
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import installs
    from tests.proton_examples_support import _bring_loopback_up, _stop, launch_program, run_steps

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = Path("/usr/share/proton/examples/python")
PACKAGE = "libqpid-proton11-dev-examples"
PROCESS_TIMEOUT = 15.0  # seconds, for any one program
BROKER_START_TIMEOUT = 15.0

pytestmark = [pytest.mark.interop]

REQUESTS = [
    "Twas brillig, and the slithy toves",
    "Did gire and gymble in the wabe.",
    "All mimsy were the borogroves,",
    "And the mome raths outgrabe.",
]
SEQUENCE = [f"{{'sequence': {i + 1}}}" for i in range(100)]


# ---------------------------------------------------------------------------------------------------------------
# Inside the namespace (this file run as a script): no pytest, no proton needed here.


def _inside(spec_path: str) -> None:
    import socket

    spec = json.loads(Path(spec_path).read_text())
    _bring_loopback_up()
    if spec.get("drop_to"):  # run by root through sudo: the namespace is made, back to the test's user
        uid, gid = spec["drop_to"]
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    work = Path(spec["work"])
    python, examples = spec["python"], spec["examples"]
    report: dict[str, Any] = {"interfaces": sorted(name for _, name in socket.if_nameindex()), "processes": {}}

    def launch(name: str, argv: list[str], stdin: str | None) -> subprocess.Popen[bytes]:
        if argv[0].endswith(".py"):
            argv = [python, os.path.join(examples, argv[0]), *argv[1:]]
        return launch_program(work, name, argv, spec["env"], stdin)

    broker_env = dict(spec["env"], PYTHONPATH=spec["root"])
    with open(work / "broker.stdout", "wb") as out, open(work / "broker.stderr", "wb") as err:
        broker = subprocess.Popen(
            [python, "-m", "amqp_async.broker", "--host", "127.0.0.1", "--port", "5672"],
            cwd=work,
            env=broker_env,
            stdout=out,
            stderr=err,
        )
    deadline = time.monotonic() + spec["broker_start_timeout"]
    while b"listening on" not in (work / "broker.stdout").read_bytes():
        if broker.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    report["broker_listening"] = (work / "broker.stdout").read_text(errors="replace").strip()
    if "listening on" in report["broker_listening"]:
        run_steps(spec, work, report, launch)
    report["broker_killed"] = _stop(broker, signal.SIGTERM, 10.0)
    report["broker_returncode"] = broker.returncode
    report["broker_log"] = (work / "broker.stderr").read_text(errors="replace")
    print(json.dumps(report))


if __name__ == "__main__" and sys.argv[1:2] == ["--inside"]:
    _inside(sys.argv[2])
    sys.exit(0)


# ---------------------------------------------------------------------------------------------------------------
# The test side: find or install the examples, find a way into a network namespace, run scenarios there.


def _loud(reason: str) -> str:
    warnings.warn(reason, stacklevel=2)
    print(f"\n!!! {reason}", file=sys.stderr)
    return reason


def _as_root() -> list[str] | None:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


@cache
def _examples() -> tuple[Path | None, str]:
    """The examples' directory (installing the package, idempotently, if missing), or None and why."""
    if (EXAMPLES / "helloworld.py").is_file():
        return EXAMPLES, ""
    root = _as_root()
    if root is None or not shutil.which("apt-get"):
        return None, f"{EXAMPLES} is missing and apt-get cannot install {PACKAGE} here (no apt-get, or not root)"
    install = [*root, "apt-get", "install", "-y", "--no-install-recommends", PACKAGE]
    if not installs.installs_allowed():
        return None, f"{EXAMPLES} is missing and {installs.NO_INSTALL} is set (to install it: {shlex.join(install)})"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")

    def run() -> subprocess.CompletedProcess[str]:
        result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
        if result.returncode != 0:  # perhaps the package lists were never fetched
            subprocess.run([*root, "apt-get", "update"], capture_output=True, env=env, timeout=600)
            result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
        return result

    what = f"{PACKAGE} (Qpid Proton's examples)"
    result = installs.install(what, "the proton examples tests", install, run=run)
    if (EXAMPLES / "helloworld.py").is_file():
        return EXAMPLES, ""
    return None, f"`{' '.join(install)}` failed (exit {result.returncode}): {result.stderr.strip()[-500:]}"


@cache
def _namespace() -> tuple[list[str] | None, bool, str]:
    """The command prefix that runs a command in a new network namespace, whether to drop back to our user from
    root inside it, or None and why not."""
    if not sys.platform.startswith("linux") or not shutil.which("unshare"):
        return None, False, "network namespaces need Linux and unshare(1) (util-linux)"
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, text=True)
    if probe.returncode == 0:
        return ["unshare", "-rn", "--"], False, ""
    why = f"`unshare -rn true` failed: {probe.stderr.strip()}"
    root = _as_root()
    if root:
        if subprocess.run([*root, "unshare", "-n", "true"], capture_output=True).returncode == 0:
            return [*root, "unshare", "-n", "--"], True, ""
        why += "; `sudo -n unshare -n true` failed too"
    return None, False, why


@pytest.fixture(scope="module")
def examples() -> Path:
    pytest.importorskip("proton", reason="python-qpid-proton runs the examples; CI installs it")
    directory, why = _examples()
    if directory is None:
        pytest.skip(_loud(f"PROTON'S EXAMPLES NOT RUN: {why}"))
    return directory


class Report:
    def __init__(self, data: dict[str, Any], stderr: str) -> None:
        self.data = data
        self.stderr = stderr

    def __getitem__(self, name: str) -> dict[str, Any]:
        process: dict[str, Any] = self.data["processes"][name]
        return process

    def lines(self, name: str) -> list[str]:
        return [line.strip() for line in self[name]["stdout"].splitlines()]

    def check(self, condition: object, what: str) -> None:
        """Fail with ``what`` and everything the run showed (pytest.fail: not truncated as assertion messages
        are)."""
        if not condition:
            pytest.fail(f"{what}\n{self!r}")

    def __repr__(self) -> str:
        parts = [f"broker: {self.data.get('broker_listening')!r}, exit {self.data.get('broker_returncode')}"]
        for name, process in self.data.get("processes", {}).items():
            status = "TIMED OUT, " if process["timed_out"] else ""
            status += "killed, " if process["killed"] else ""
            parts.append(f"--- {name}: {status}exit {process['returncode']}")
            parts.append(f"--- {name} stdout\n{process['stdout']}--- {name} stderr\n{process['stderr']}")
        log = self.data.get("broker_log", "").splitlines()
        parts.append("--- broker log" + (f" (last 80 of {len(log)} lines)" if len(log) > 80 else ""))
        parts.extend(log[-80:])
        if self.stderr:
            parts.append(f"--- runner stderr\n{self.stderr}")
        return "\n".join(parts)


def run_scenario(work: Path, examples: Path, steps: Sequence[dict[str, Any]]) -> Report:
    """Run ``steps`` next to a fresh broker on 127.0.0.1:5672 in a network namespace of their own."""
    prefix, drop, why = _namespace()
    if prefix is None:
        pytest.skip(_loud(f"PROTON'S EXAMPLES NOT RUN: no network namespace for localhost:5672: {why}"))
    path = os.pathsep.join([str(examples), os.environ.get("PATH", os.defpath)])
    spec = {
        "work": str(work),
        "python": sys.executable,
        "examples": str(examples),
        "root": str(ROOT),
        "env": {"PATH": path, "PYTHONUNBUFFERED": "1", "LC_ALL": "C.UTF-8"},
        "timeout": PROCESS_TIMEOUT,
        "broker_start_timeout": BROKER_START_TIMEOUT,
        "drop_to": [os.getuid(), os.getgid()] if drop else None,
        "steps": list(steps),
    }
    (work / "spec.json").write_text(json.dumps(spec))
    budget = BROKER_START_TIMEOUT + 30 + sum(s.get("timeout", PROCESS_TIMEOUT) for s in steps if s["kind"] != "sleep")
    result = subprocess.run(
        [*prefix, sys.executable, str(Path(__file__).resolve()), "--inside", str(work / "spec.json")],
        capture_output=True,
        text=True,
        timeout=budget,
        cwd=work,
    )
    assert result.returncode == 0 and result.stdout.strip(), (
        f"the namespace runner failed (exit {result.returncode})\n{result.stdout}\n{result.stderr}"
    )
    report = Report(json.loads(result.stdout.strip().splitlines()[-1]), result.stderr)
    report.check("listening on amqp://127.0.0.1:5672" in report.data["broker_listening"], "the broker did not start")
    return report


def check_broker_stopped_cleanly(report: Report) -> None:
    """The broker logged no traceback, and SIGTERM stopped it with exit status 0."""
    report.check("Traceback" not in report.data["broker_log"], "the broker logged a traceback")
    report.check(
        not report.data["broker_killed"] and report.data["broker_returncode"] == 0,
        "the broker did not shut down cleanly on SIGTERM",
    )


def run(name: str, *argv: str, stdin: str | None = None, timeout: float | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"kind": "run", "name": name, "argv": list(argv)}
    if stdin is not None:
        step["stdin"] = stdin
    if timeout is not None:
        step["timeout"] = timeout
    return step


def start(name: str, *argv: str) -> dict[str, Any]:
    return {"kind": "start", "name": name, "argv": list(argv)}


def wait(name: str) -> dict[str, Any]:
    return {"kind": "wait", "name": name}


def stop(name: str) -> dict[str, Any]:
    return {"kind": "stop", "name": name}


def sleep(seconds: float) -> dict[str, Any]:
    return {"kind": "sleep", "seconds": seconds}


def check_ran(report: Report, name: str, expected: list[str]) -> None:
    """``name`` exited by itself with status 0, printing ``expected`` (lines, stripped)."""
    process = report[name]
    report.check(not process["timed_out"], f"{name} did not finish within {PROCESS_TIMEOUT} s")
    actual = report.lines(name)
    diff = "\n".join(difflib.unified_diff(expected, actual, "expected", "actual", lineterm="", n=1))
    report.check(actual == expected, f"{name} printed something else than expected:\n{diff}")
    report.check(process["returncode"] == 0, f"{name} failed (exit {process['returncode']})")


# ---------------------------------------------------------------------------------------------------------------
# The scenarios, as proton's test_examples.py runs them.


def test_the_namespace_is_our_own(tmp_path: Path, examples: Path) -> None:
    """The runner itself: only ``lo`` (up), and our broker, not another one, on localhost:5672."""
    report = run_scenario(tmp_path, examples, [run("helloworld", "helloworld.py")])
    report.check(report.data["interfaces"] == ["lo"], f"interfaces {report.data['interfaces']}, not just lo")
    report.check("amqp_async.broker" in report.data["broker_log"], "the broker logged nothing")
    check_broker_stopped_cleanly(report)


@pytest.mark.parametrize("example", ["helloworld.py", "helloworld_blocking.py"])
def test_helloworld(tmp_path: Path, examples: Path, example: str) -> None:
    report = run_scenario(tmp_path, examples, [run("hello", example)])
    check_ran(report, "hello", ["Hello World!"])
    check_broker_stopped_cleanly(report)


def test_simple_send_recv(tmp_path: Path, examples: Path) -> None:
    """As proton's test: the receiver starts first, then the sender sends 100 messages; all are received."""
    report = run_scenario(
        tmp_path, examples, [start("recv", "simple_recv.py"), run("send", "simple_send.py"), wait("recv")]
    )
    check_ran(report, "send", ["all messages confirmed"])
    check_ran(report, "recv", SEQUENCE)
    check_broker_stopped_cleanly(report)


def test_simple_send_then_recv(tmp_path: Path, examples: Path) -> None:
    """The sender first: the queue keeps the 100 messages until the receiver comes."""
    report = run_scenario(tmp_path, examples, [run("send", "simple_send.py"), run("recv", "simple_recv.py")])
    check_ran(report, "send", ["all messages confirmed"])
    check_ran(report, "recv", SEQUENCE)
    check_broker_stopped_cleanly(report)


@pytest.mark.parametrize("client", ["client.py", "sync_client.py"])
def test_client_server(tmp_path: Path, examples: Path, client: str) -> None:
    """Request/response: the client's replies come over a dynamic queue (reply-to), the server's through an
    anonymous sender (ANONYMOUS-RELAY, routed by ``to``)."""
    report = run_scenario(tmp_path, examples, [start("server", "server.py"), run("client", client), stop("server")])
    check_ran(report, "client", [f"{line} => {line.upper()}" for line in REQUESTS])
    server = report.lines("server")
    report.check(server[:1] == ["Listening on amqp://localhost:5672/examples"], "server.py did not start")
    received = [line for line in server if line.startswith("Received Message(")]
    report.check(len(received) == len(REQUESTS), f"server.py received {len(received)} requests")
    check_broker_stopped_cleanly(report)


def test_tx_send_tx_recv(tmp_path: Path, examples: Path) -> None:
    """As proton's test_tx_send_tx_recv: 100 messages sent in transactions of 10 and accepted in transactions of
    10 (our broker's coordinator), all received once, in order."""
    report = run_scenario(tmp_path, examples, [start("recv", "tx_recv.py"), run("send", "tx_send.py"), wait("recv")])
    check_ran(report, "send", ["all messages committed"])
    check_ran(report, "recv", SEQUENCE)
    report.check("committed" in report.data["broker_log"], "the broker logged no commit")
    check_broker_stopped_cleanly(report)


def test_tx_recv_interactive_abort_then_commit(tmp_path: Path, examples: Path) -> None:
    """tx_recv_interactive.py (settle_before_discharge), fed its commands 0.6 s apart: two messages
    accepted (and settled) in a transaction that is aborted come back, the first one again, committed;
    simple_recv.py then gets the other 19."""
    commands = ["fetch", "fetch", "abort", "fetch", "commit", "quit"]
    # (the first command waits for the transaction to be declared: the example needs one before a message comes)
    feed = "sleep 2; " + "; ".join(f"echo {command}; sleep 0.6" for command in commands)
    program = f"({feed}) | {shlex.quote(sys.executable)} {shlex.quote(str(examples / 'tx_recv_interactive.py'))}"
    report = run_scenario(
        tmp_path,
        examples,
        [
            run("send", "tx_send.py", "-m", "20"),
            run("interactive", "sh", "-c", program),
            run("recv", "simple_recv.py", "-m", "19"),
        ],
    )
    check_ran(report, "send", ["all messages committed"])
    check_ran(
        report,
        "interactive",
        [
            "Enter 'fetch', 'commit' or 'abort'",
            "transaction declared",
            "{'sequence': 1}",
            "{'sequence': 2}",
            "transaction aborted",
            "transaction declared",
            "{'sequence': 1}",
            "transaction committed",
            "transaction declared",
        ],
    )
    check_ran(report, "recv", SEQUENCE[1:20])
    check_broker_stopped_cleanly(report)


@pytest.mark.parametrize("client", ["client.py", "sync_client.py"])
def test_client_server_tx(tmp_path: Path, examples: Path, client: str) -> None:
    """As proton's test_client_server_tx / test_sync_client_server_tx: server_tx.py answers each request in a
    transaction (the response sent and the request accepted within it, then committed)."""
    report = run_scenario(
        tmp_path, examples, [start("server", "server_tx.py"), sleep(0.5), run("client", client), stop("server")]
    )
    check_ran(report, "client", [f"{line} => {line.upper()}" for line in REQUESTS])
    report.check(
        report.lines("server") == ["Request processed successfully"] * len(REQUESTS),
        "server_tx.py did not commit each request once",
    )
    check_broker_stopped_cleanly(report)


def test_db_send_recv(tmp_path: Path, examples: Path) -> None:
    """Records from one sqlite database to another, acknowledged once inserted (proton's test, step by step)."""
    fill = "".join(f"Message-{i + 1}\n" for i in range(100))
    report = run_scenario(
        tmp_path,
        examples,
        [
            run("init-src", "db_ctrl.py", "init", "./src_db"),
            run("init-dst", "db_ctrl.py", "init", "./dst_db"),
            run("fill", "db_ctrl.py", "insert", "./src_db", stdin=fill),
            start("recv", "db_recv.py", "-m", "100"),
            run("send", "db_send.py", "-m", "100"),
            wait("recv"),
            run("list-dst", "db_ctrl.py", "list", "./dst_db"),
            run("list-src", "db_ctrl.py", "list", "./src_db"),
        ],
    )
    for name in ("init-src", "init-dst", "fill"):
        check_ran(report, name, [])
    report.check(not report["send"]["timed_out"] and report["send"]["returncode"] == 0, "db_send.py failed")
    settled = sorted(line for line in report.lines("send") if line.startswith("settled message "))
    report.check(settled == sorted(f"settled message {i + 1}" for i in range(100)), "db_send.py: not all settled")
    check_ran(report, "recv", [f"inserted message {i + 1}" for i in range(100)])
    check_ran(report, "list-dst", [f"({i + 1}, 'Message-{i + 1}')" for i in range(100)])
    check_ran(report, "list-src", [])  # db_send deletes each record once its delivery settles
    check_broker_stopped_cleanly(report)


def test_selected_recv(tmp_path: Path, examples: Path) -> None:
    """A JMS selector ``colour = 'green'``: only the green ones; a plain receiver then gets the red ones."""
    report = run_scenario(
        tmp_path,
        examples,
        [
            run("send", "colour_send.py"),
            run("selected", "selected_recv.py", "-m", "50"),
            run("rest", "simple_recv.py", "-m", "50"),
        ],
    )
    check_ran(report, "send", ["all messages confirmed"])
    check_ran(report, "selected", [f"green {i + 1}" for i in range(100) if i % 2 == 0])
    check_ran(report, "rest", [f"red {i + 1}" for i in range(100) if i % 2 == 1])
    check_broker_stopped_cleanly(report)


def test_queue_browser(tmp_path: Path, examples: Path) -> None:
    """Browsing (distribution-mode copy, proton's ``Copy()``) shows the messages and leaves them in the queue.

    queue_browser.py closes as soon as it has nothing more buffered, so it prints the first few messages (at least
    one, all in order); browsing twice shows the same head; a consumer then still gets all 100."""
    report = run_scenario(
        tmp_path,
        examples,
        [
            run("send", "simple_send.py"),
            run("browse-1", "queue_browser.py"),
            run("browse-2", "queue_browser.py"),
            run("recv", "simple_recv.py"),
        ],
    )
    check_ran(report, "send", ["all messages confirmed"])
    expected = [f"Message(priority=4, id={i + 1}, body={{'sequence': {i + 1}}})" for i in range(100)]
    for name in ("browse-1", "browse-2"):
        browsed = report.lines(name)
        report.check(not report[name]["timed_out"] and report[name]["returncode"] == 0, f"{name} failed")
        report.check(browsed and browsed == expected[: len(browsed)], f"{name}: not the head of the queue, in order")
    check_ran(report, "recv", SEQUENCE)
    check_broker_stopped_cleanly(report)
