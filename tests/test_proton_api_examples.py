"""``amqp_async.proton`` proven a drop-in replacement: Qpid Proton's own Python examples, unchanged but for their
imports, run on it against real proton and against our broker.

The examples come from the Debian package ``libqpid-proton11-dev-examples`` (``/usr/share/proton/examples/python/``,
installed as ``test_proton_examples.py`` installs it). At test time each is copied into a temporary directory with
``from proton...`` / ``import proton...`` rewritten to ``amqp_async.proton...`` (nothing else changes; no copy is
kept in the repository), and run with a ``proton`` package on its path that refuses to import, so that what runs
is ours alone. The output is compared as proton's own ``test_examples.py`` there compares it, and more: senders'
and servers' output too (a server prints each request as proton's ``Message.__repr__`` writes it), every exit
status, no traceback, servers and brokers stopping cleanly on their signal.

Each scenario pairs programs of two flavours: ``ours`` (the rewritten copy, on amqp_async.proton) and ``proton``
(the example as shipped, on python-qpid-proton), with a peer where the examples need a broker:

* ``proton-broker.py``: proton's ``broker.py`` example, unchanged, on real proton;
* ``amqp_async.broker``: our embedded broker (``python -m amqp_async.broker``);
* ``broker.py-on-ours``: proton's ``broker.py`` on amqp_async.proton (our API in the server role).

Every example of ours runs against both brokers, and each exchange also runs mixed: ours talking to proton's
example, both ways (simple_send / simple_recv, simple_send / direct_recv, direct_send / simple_recv, client /
server, sync_client / server, client / abstract_server, client / server_direct). selected_recv and queue_browser
need selectors and browsing, which proton's broker.py has not: they run against our broker only; so do the
transaction examples (tx_send / tx_recv, client / server_tx, sync_client / server_tx), as proton's broker.py has no
transaction coordinator. The tornado examples are not run (no tornado here).

The examples hard-code ``localhost:5672`` and ``localhost:8888``, so each scenario runs in a network namespace of
its own (``unshare -rn``, or ``sudo -n unshare -n``; skipped, loudly, where neither works), played by
``proton_examples_support.py``. Scenarios run in parallel (``AMQP_ASYNC_EXAMPLES_PARALLEL``, default 4): the first
test to need a report starts every selected scenario, each test then waits for its own.

``AMQP_ASYNC_PROTON_EXAMPLES_IDENTITY=1`` leaves the ``ours`` copies unchanged (real proton): the harness proven on
its own, whatever the state of amqp_async.proton.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

try:
    import proton_examples_support as support
    from test_proton_examples import _examples, _loud, _namespace
except ImportError:  # pragma: no cover - run as ``tests.test_proton_api_examples``
    from tests import proton_examples_support as support
    from tests.test_proton_examples import _examples, _loud, _namespace

ROOT = Path(__file__).resolve().parent.parent
PROCESS_TIMEOUT = 20.0  # seconds, for any one program (scenarios run side by side)
PEER_START_TIMEOUT = 20.0
IDENTITY = os.environ.get("AMQP_ASYNC_PROTON_EXAMPLES_IDENTITY", "") not in ("", "0")
PARALLEL = int(os.environ.get("AMQP_ASYNC_EXAMPLES_PARALLEL", "4"))

pytestmark = [pytest.mark.interop]

REQUESTS = [
    "Twas brillig, and the slithy toves",
    "Did gire and gymble in the wabe.",
    "All mimsy were the borogroves,",
    "And the mome raths outgrabe.",
]
RESPONSES = [f"{line} => {line.upper()}" for line in REQUESTS]
SEQUENCE = [f"{{'sequence': {i + 1}}}" for i in range(100)]
FILL = "".join(f"Message-{i + 1}\n" for i in range(100))  # db_ctrl.py insert's input

OURS, PROTON = "ours", "proton"
PROTON_BROKER, OUR_BROKER, BROKER_PY_ON_OURS = "proton-broker.py", "amqp_async.broker", "broker.py-on-ours"
PEERS: dict[str, dict[str, Any]] = {
    PROTON_BROKER: {"argv": ["proton:broker.py"], "port": 5672, "stop_signal": "SIGINT"},
    OUR_BROKER: {
        "argv": ["engine:", "-m", "amqp_async.broker", "--host", "127.0.0.1", "--port", "5672"],
        "port": 5672,
        "stop_signal": "SIGTERM",
    },
    BROKER_PY_ON_OURS: {"argv": ["ours:broker.py"], "port": 5672, "stop_signal": "SIGINT"},
}
BROKERS = [PROTON_BROKER, OUR_BROKER]
# (first, second) flavours of a pair of examples: ours alone, then each mixed with proton's
MIXES = [(OURS, OURS), (OURS, PROTON), (PROTON, OURS)]


# ---------------------------------------------------------------------------------------------------------------
# Scenarios: steps for the namespace runner, built at collection time so that all can start at once.


def program(flavour: str, example: str, *args: str) -> list[str]:
    return [f"{flavour}:{example}", *args]


def run(name: str, argv: list[str], *, stdin: str | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"kind": "run", "name": name, "argv": argv}
    if stdin is not None:
        step["stdin"] = stdin
    return step


def start(name: str, argv: list[str]) -> dict[str, Any]:
    return {"kind": "start", "name": name, "argv": argv}


def wait(name: str) -> dict[str, Any]:
    return {"kind": "wait", "name": name}


def stop(name: str) -> dict[str, Any]:
    return {"kind": "stop", "name": name}


def listening(port: int) -> dict[str, Any]:
    return {"kind": "listening", "port": port}


def sleep(seconds: float) -> dict[str, Any]:
    return {"kind": "sleep", "seconds": seconds}


@dataclass(eq=False)
class Scenario:
    """Steps played in one namespace, next to ``peer`` (a key of PEERS, or None)."""

    key: str
    peer: str | None
    steps: list[dict[str, Any]]
    flavours: set[str] = field(init=False)

    def __post_init__(self) -> None:
        argvs = [step["argv"] for step in self.steps if "argv" in step]
        if self.peer:
            argvs.append(PEERS[self.peer]["argv"])
        self.flavours = {argv[0].partition(":")[0] for argv in argvs}


def scenarios(function_name: str, items: Iterator[tuple[str, str | None, list[dict[str, Any]]]]) -> Any:
    """``pytest.mark.parametrize("scenario", ...)`` over the scenarios ``items`` gives as (id, peer, steps)."""
    params = [pytest.param(Scenario(f"{function_name}[{key}]", peer, steps), id=key) for key, peer, steps in items]
    return pytest.mark.parametrize("scenario", params)


def mixes(*roles: str) -> Iterator[tuple[str, str, str]]:
    """(id part, first flavour, second flavour) for ``roles`` (two names) in each of MIXES."""
    for first, second in MIXES:
        yield f"{roles[0]}:{first}-{roles[1]}:{second}", first, second


# ---------------------------------------------------------------------------------------------------------------
# Running: one thread pool for the module; the first report asked for starts every selected scenario.


class Report:
    def __init__(self, scenario: Scenario, data: dict[str, Any], stderr: str) -> None:
        self.scenario = scenario
        self.data = data
        self.stderr = stderr

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in self.data["processes"]:
            pytest.fail(f"{name} never ran\n{self!r}", pytrace=False)
        process: dict[str, Any] = self.data["processes"][name]
        return process

    def lines(self, name: str) -> list[str]:
        return [line.strip() for line in self[name]["stdout"].splitlines()]

    def check(self, condition: object, what: str) -> None:
        """Fail with ``what`` and everything the run showed (pytest.fail: not truncated as assertion messages
        are)."""
        if not condition:
            pytest.fail(f"{what}\n{self!r}", pytrace=False)

    def __repr__(self) -> str:
        parts = [f"=== {self.scenario.key} (peer {self.scenario.peer}, identity mode {IDENTITY})"]
        if self.scenario.peer:
            parts.append(f"peer listening: {self.data.get('peer_listening')}")
        if "listening" in self.data:
            parts.append(f"ports listening: {self.data['listening']}")
        for name, process in self.data.get("processes", {}).items():
            status = "TIMED OUT, " if process["timed_out"] else ""
            status += "killed, " if process["killed"] else ""
            parts.append(f"--- {name}: {status}exit {process['returncode']}")
            stdout, stderr = process["stdout"], process["stderr"]
            if len(stdout) > 6000:
                stdout = f"{stdout[:3000]}\n[... {len(stdout) - 6000} characters ...]\n{stdout[-3000:]}"
            parts.append(f"--- {name} stdout\n{stdout}--- {name} stderr\n{stderr[-8000:]}")
        if self.stderr:
            parts.append(f"--- runner stderr\n{self.stderr}")
        return "\n".join(parts)


def _runnable(scenario: Scenario) -> bool:
    """Whether what ``scenario`` runs is installed (the proton flavour needs python-qpid-proton)."""
    return PROTON not in scenario.flavours or importlib.util.find_spec("proton") is not None


class Runner:
    def __init__(self, request: pytest.FixtureRequest, examples: Path, work: Path) -> None:
        self.request = request
        self.examples = examples
        self.work = work
        self.pool = ThreadPoolExecutor(max_workers=max(1, PARALLEL), thread_name_prefix="namespace")
        self.futures: dict[str, Future[tuple[dict[str, Any], str]]] = {}
        self.lock = threading.Lock()
        self.ours = support.rewrite_examples(examples, work / "ours", identity=IDENTITY)
        self.blocker = support.write_proton_blocker(work / "blocker")
        base = {
            "PATH": os.pathsep.join([str(examples), os.environ.get("PATH", os.defpath)]),
            "PYTHONUNBUFFERED": "1",
            "LC_ALL": "C.UTF-8",
        }
        ours_path = [str(ROOT)] if IDENTITY else [str(self.blocker), str(ROOT)]
        self.flavours = {
            PROTON: {"directory": str(examples), "env": base},
            OURS: {"directory": str(self.ours), "env": dict(base, PYTHONPATH=os.pathsep.join(ours_path))},
            "engine": {"directory": "", "env": dict(base, PYTHONPATH=str(ROOT))},
        }

    def report(self, scenario: Scenario) -> Report:
        prefix, drop, why = _namespace()
        if prefix is None:
            pytest.skip(_loud(f"PROTON'S EXAMPLES NOT RUN ON amqp_async.proton: no network namespace: {why}"))
        if PROTON in scenario.flavours:
            pytest.importorskip("proton", reason="python-qpid-proton runs the proton side; CI installs it")
        with self.lock:
            if not self.futures:  # start every selected scenario of this module, in the order of the tests
                for item in self.request.session.items:
                    selected = getattr(item, "callspec", None) and item.callspec.params.get("scenario")
                    if isinstance(selected, Scenario) and item.module is self.request.module and _runnable(selected):
                        self._submit(selected, prefix, bool(drop))
            if scenario.key not in self.futures:
                self._submit(scenario, prefix, bool(drop))
        data, stderr = self.futures[scenario.key].result()
        return Report(scenario, data, stderr)

    def _submit(self, scenario: Scenario, prefix: list[str], drop: bool) -> None:
        if scenario.key in self.futures:
            return
        work = self.work / "runs" / scenario.key.replace("/", "_").replace("[", "-").rstrip("]")
        work.mkdir(parents=True)
        self.futures[scenario.key] = self.pool.submit(self._play, scenario, work, prefix, drop)

    def _play(self, scenario: Scenario, work: Path, prefix: list[str], drop: bool) -> tuple[dict[str, Any], str]:
        spec = {
            "work": str(work),
            "python": sys.executable,
            "flavours": self.flavours,
            "peer": PEERS[scenario.peer] if scenario.peer else None,
            "timeout": PROCESS_TIMEOUT,
            "peer_start_timeout": PEER_START_TIMEOUT,
            "drop_to": [os.getuid(), os.getgid()] if drop else None,
            "steps": scenario.steps,
        }
        (work / "spec.json").write_text(json.dumps(spec))
        steps = sum(s["seconds"] if s["kind"] == "sleep" else s.get("timeout", PROCESS_TIMEOUT) for s in scenario.steps)
        budget = PEER_START_TIMEOUT + 30 + steps
        try:
            result = subprocess.run(
                [*prefix, sys.executable, support.__file__, "--inside", str(work / "spec.json")],
                capture_output=True,
                text=True,
                timeout=budget,
                cwd=work,
            )
        except subprocess.TimeoutExpired as error:
            return {"processes": {}, "runner_timed_out": True}, f"the namespace runner timed out: {error}"
        output = result.stdout.strip().splitlines()
        if result.returncode != 0 or not output:
            return {"processes": {}, "runner_failed": result.returncode}, f"{result.stdout}\n{result.stderr}"
        return json.loads(output[-1]), result.stderr

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def runner(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    directory, why = _examples()
    if directory is None:
        pytest.skip(_loud(f"PROTON'S EXAMPLES NOT RUN ON amqp_async.proton: {why}"))
    played = Runner(request, directory, tmp_path_factory.mktemp("proton-api-examples"))
    yield played
    played.close()


def played(runner: Runner, scenario: Scenario) -> Report:
    """The report of ``scenario``: the runner itself worked, and the peer (if any) came up."""
    report = runner.report(scenario)
    report.check(
        not report.data.get("runner_timed_out") and "runner_failed" not in report.data, "the namespace runner failed"
    )
    if scenario.peer:
        report.check(report.data.get("peer_listening"), f"the peer {scenario.peer} did not come up on :5672")
    return report


# ---------------------------------------------------------------------------------------------------------------
# Checks, as proton's test_examples.py checks.


def check_quiet(report: Report, name: str) -> None:
    """``name`` (an example) wrote nothing to stderr, as none of proton's does in these runs: no traceback, and no
    log record either (proton's ``proton`` logger has a NullHandler unless the program configures logging)."""
    stderr = report[name]["stderr"]
    report.check("Traceback" not in stderr, f"{name} printed a traceback")
    report.check(stderr == "", f"{name} wrote to stderr")


def check_ran(report: Report, name: str, expected: list[str] | None) -> None:
    """``name`` exited by itself with status 0, writing nothing to stderr, printing ``expected`` (lines, stripped;
    None: anything)."""
    process = report[name]
    report.check(not process["timed_out"], f"{name} did not finish within {PROCESS_TIMEOUT} s")
    if expected is not None:
        actual = report.lines(name)
        diff = "\n".join(difflib.unified_diff(expected, actual, "expected", "actual", lineterm="", n=1))
        report.check(actual == expected, f"{name} printed something else than expected:\n{diff}")
    report.check(process["returncode"] == 0, f"{name} failed (exit {process['returncode']})")
    check_quiet(report, name)


def check_stopped(report: Report, name: str) -> None:
    """``name``, run in the background and stopped with SIGINT, was still running, and stopped cleanly."""
    process = report[name]
    report.check(not process.get("exited_by_itself"), f"{name} had exited before it was stopped")
    report.check(not process["killed"] and process["returncode"] == 0, f"{name} did not stop cleanly on SIGINT")
    check_quiet(report, name)


def check_peer(report: Report) -> None:
    """The broker printed no traceback (broker.py: nothing on stderr; ours logs there) and stopped cleanly on its
    signal."""
    if report.scenario.peer:
        peer = report["peer"]
        if report.scenario.peer == OUR_BROKER:
            report.check("Traceback" not in peer["stderr"], "the broker printed a traceback")
        else:
            check_quiet(report, "peer")
        report.check(not peer["killed"] and peer["returncode"] == 0, "the broker did not stop cleanly")


def check_server(report: Report, name: str, first_line: str) -> None:
    """A request/response server announced itself, printed the four requests as proton prints a Message (its
    ``repr``: the fields that are set, ``priority=4`` among them; sync_client.py's correlation ids are "1", "2",
    ...), all with the one reply address, and stopped cleanly."""
    lines = report.lines(name)
    report.check(lines[:1] == [first_line], f"{name} did not start with {first_line!r}")
    correlated = "sync_client.py" in report.scenario.key
    reply_to = re.match(r"Received Message\(reply_to='([^']+)'", lines[1] if len(lines) > 1 else "")
    address = reply_to.group(1) if reply_to else "<the reply address>"
    expected = [first_line]
    for number, request in enumerate(REQUESTS, 1):
        correlation = f"correlation_id='{number}', " if correlated else ""
        expected.append(f"Received Message(reply_to={address!r}, priority=4, {correlation}body={request!r})")
    diff = "\n".join(difflib.unified_diff(expected, lines, "expected", "actual", lineterm="", n=1))
    report.check(lines == expected, f"{name} printed something else than expected:\n{diff}")
    check_stopped(report, name)


# ---------------------------------------------------------------------------------------------------------------
# The rewrite itself (no namespace needed).


def test_rewrite_changes_only_the_imports() -> None:
    source = (
        "import optparse\n"
        "from proton import Message, Url\n"
        "from proton.handlers import MessagingHandler\n"
        "from proton.reactor import Container, Selector\n"
        "from proton_server import Server\n"
        "import proton\n"
        "import proton.utils\n"
        "import proton.reactor as reactor\n"
        "print('from proton import nothing')\n"
    )
    assert support.rewrite_imports(source) == (
        "import optparse\n"
        "from amqp_async.proton import Message, Url\n"
        "from amqp_async.proton.handlers import MessagingHandler\n"
        "from amqp_async.proton.reactor import Container, Selector\n"
        "from proton_server import Server\n"
        "import amqp_async.proton as proton\n"
        "import amqp_async.proton.utils; from amqp_async import proton\n"
        "import amqp_async.proton.reactor as reactor\n"
        "print('from proton import nothing')\n"
    )


def test_every_example_rewritten(tmp_path: Path) -> None:
    """Each example copied, nothing but its proton imports changed, none left; the blocker keeps proton out."""
    directory, why = _examples()
    if directory is None:
        pytest.skip(_loud(f"PROTON'S EXAMPLES NOT RUN ON amqp_async.proton: {why}"))
    ours = support.rewrite_examples(directory, tmp_path / "ours")
    for original in sorted(directory.glob("*.py")):
        before, after = original.read_text().splitlines(), (ours / original.name).read_text().splitlines()
        assert len(before) == len(after)
        for old, new in zip(before, after, strict=True):
            assert old == new or new.replace("amqp_async.proton", "proton") == old, (original.name, old, new)
            assert not re.match(r"\s*(from|import)\s+proton\b(?!_)", new), (original.name, new)
    blocker = support.write_proton_blocker(tmp_path / "blocker")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), str(ROOT)]))
    blocked = subprocess.run([sys.executable, "-c", "import proton"], env=env, capture_output=True, text=True)
    assert blocked.returncode != 0 and "the real proton is not available" in blocked.stderr


# ---------------------------------------------------------------------------------------------------------------
# Through a broker.


@scenarios(
    "test_helloworld",
    (
        (f"{example}-broker:{peer}", peer, [run("hello", program(OURS, example))])
        for example in ("helloworld.py", "helloworld_blocking.py")
        for peer in BROKERS
    ),
)
def test_helloworld(runner: Runner, scenario: Scenario) -> None:
    """One message to ``examples`` and back, with the MessagingHandler and with BlockingConnection."""
    report = played(runner, scenario)
    check_ran(report, "hello", ["Hello World!"])
    check_peer(report)


def _simple_send_recv() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for peer in [*BROKERS, BROKER_PY_ON_OURS]:
        for key, send, recv in mixes("send", "recv"):
            steps = [start("recv", program(recv, "simple_recv.py")), run("send", program(send, "simple_send.py"))]
            yield f"{key}-broker:{peer}", peer, [*steps, wait("recv")]


@scenarios("test_simple_send_recv", _simple_send_recv())
def test_simple_send_recv(runner: Runner, scenario: Scenario) -> None:
    """As proton's test: the receiver starts first, the sender sends 100 messages; all are confirmed and
    received, in order. Also through broker.py on amqp_async.proton."""
    report = played(runner, scenario)
    check_ran(report, "send", ["all messages confirmed"])
    check_ran(report, "recv", SEQUENCE)
    check_peer(report)


def _client_server() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for client in ("client.py", "sync_client.py"):
        for peer in BROKERS:
            for key, client_flavour, server_flavour in mixes("client", "server"):
                steps = [
                    start("server", program(server_flavour, "server.py")),
                    run("client", program(client_flavour, client)),
                    stop("server"),
                ]
                yield f"{client}-{key}-broker:{peer}", peer, steps


@scenarios("test_client_server", _client_server())
def test_client_server(runner: Runner, scenario: Scenario) -> None:
    """Request/response: replies over a dynamic queue (reply-to), sent through an anonymous sender; client.py
    with the MessagingHandler, sync_client.py with SyncRequestResponse."""
    report = played(runner, scenario)
    check_ran(report, "client", RESPONSES)
    check_server(report, "server", "Listening on amqp://localhost:5672/examples")
    check_peer(report)


def _tx_send_recv() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for key, send, recv in mixes("send", "recv"):
        steps = [start("recv", program(recv, "tx_recv.py")), run("send", program(send, "tx_send.py"))]
        yield f"{key}-broker:{OUR_BROKER}", OUR_BROKER, [*steps, wait("recv")]


@scenarios("test_tx_send_tx_recv", _tx_send_recv())
def test_tx_send_tx_recv(runner: Runner, scenario: Scenario) -> None:
    """As proton's test_tx_send_tx_recv: tx_send.py sends 100 messages in transactions of 10 (declare, send,
    commit), tx_recv.py accepts them in transactions of 10; all are committed, and received once, in order."""
    report = played(runner, scenario)
    check_ran(report, "send", ["all messages committed"])
    check_ran(report, "recv", SEQUENCE)
    check_peer(report)


# tx_recv_interactive.py reads commands from stdin while its container runs in a thread: fed at once, they would
# race the broker's answers (a fetch before the transaction is declared crashes it), so a small driver (run in the
# flavour's environment, from the scenario's directory, which is ``runs/KEY`` beside the rewritten examples in
# ``ours``) writes each command once the example has printed the line that must come before it (echoing what the
# example prints), never on a timer: a loaded machine only makes it slower.
INTERACTIVE_STEPS = [
    ("transaction declared", "fetch"),
    ("{'sequence': 1}", "fetch"),
    ("{'sequence': 2}", "abort"),
    ("transaction declared", "fetch"),
    ("{'sequence': 1}", "commit"),
    ("transaction declared", "quit"),
]
INTERACTIVE_DRIVER = f"""
import subprocess, sys
example = "../../ours/tx_recv_interactive.py"
child = subprocess.Popen([sys.executable, "-u", example], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
for awaited, command in {INTERACTIVE_STEPS!r}:
    for line in child.stdout:
        print(line, end="", flush=True)
        if line.strip() == awaited:
            break
    else:
        break  # the example ended early: its output (and exit status) tell the test what went wrong
    child.stdin.write(command + "\\n")
    child.stdin.flush()
child.stdin.close()
for line in child.stdout:
    print(line, end="", flush=True)
sys.exit(child.wait())
"""


@scenarios(
    "test_tx_recv_interactive",
    [
        (
            f"broker:{OUR_BROKER}",
            OUR_BROKER,
            [
                run("send", program(PROTON, "tx_send.py", "-m", "20")),
                run("interactive", ["ours:", "-c", INTERACTIVE_DRIVER]),
                run("recv", program(OURS, "simple_recv.py", "-m", "19")),
            ],
        )
    ],
)
def test_tx_recv_interactive(runner: Runner, scenario: Scenario) -> None:
    """tx_recv_interactive.py on ours (an EventInjector feeding a container in a thread; settle_before_discharge):
    two messages accepted in a transaction that is aborted come back, the first again, committed; the other 19
    remain."""
    report = played(runner, scenario)
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
    check_peer(report)


def _client_server_tx() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for client in ("client.py", "sync_client.py"):
        for key, client_flavour, server_flavour in mixes("client", "server"):
            steps = [
                start("server", program(server_flavour, "server_tx.py")),
                sleep(0.5),
                run("client", program(client_flavour, client)),
                stop("server"),
            ]
            yield f"{client}-{key}-broker:{OUR_BROKER}", OUR_BROKER, steps


@scenarios("test_client_server_tx", _client_server_tx())
def test_client_server_tx(runner: Runner, scenario: Scenario) -> None:
    """As proton's test_client_server_tx and test_sync_client_server_tx: server_tx.py answers each request in a
    transaction of its own (the response sent and the request accepted within it, then committed)."""
    report = played(runner, scenario)
    check_ran(report, "client", RESPONSES)
    report.check(
        report.lines("server") == ["Request processed successfully"] * len(REQUESTS),
        "server_tx.py did not commit each request once",
    )
    check_stopped(report, "server")
    check_peer(report)


@scenarios(
    "test_db_send_recv",
    (
        (
            f"broker:{peer}",
            peer,
            [
                run("init-src", program(PROTON, "db_ctrl.py", "init", "./src_db")),
                run("init-dst", program(PROTON, "db_ctrl.py", "init", "./dst_db")),
                run("fill", program(PROTON, "db_ctrl.py", "insert", "./src_db"), stdin=FILL),
                start("recv", program(OURS, "db_recv.py", "-m", "100")),
                run("send", program(OURS, "db_send.py", "-m", "100")),
                wait("recv"),
                run("list-dst", program(PROTON, "db_ctrl.py", "list", "./dst_db")),
                run("list-src", program(PROTON, "db_ctrl.py", "list", "./src_db")),
            ],
        )
        for peer in BROKERS
    ),
)
def test_db_send_recv(runner: Runner, scenario: Scenario) -> None:
    """Records from one sqlite database to another (EventInjector, ApplicationEvent, timers, tags, settlement)
    as proton's test runs it; db_ctrl.py does not use proton."""
    report = played(runner, scenario)
    for name in ("init-src", "init-dst", "fill"):
        check_ran(report, name, [])
    check_ran(report, "send", None)
    settled = sorted(line for line in report.lines("send") if line.startswith("settled message "))
    report.check(settled == sorted(f"settled message {i + 1}" for i in range(100)), "db_send.py: not all settled")
    check_ran(report, "recv", [f"inserted message {i + 1}" for i in range(100)])
    check_ran(report, "list-dst", [f"({i + 1}, 'Message-{i + 1}')" for i in range(100)])
    check_ran(report, "list-src", [])  # db_send deletes each record once its delivery settles
    check_peer(report)


@scenarios(
    "test_selected_recv",
    [
        (
            f"broker:{OUR_BROKER}",
            OUR_BROKER,
            [
                run("send", program(OURS, "colour_send.py")),
                run("selected", program(OURS, "selected_recv.py", "-m", "50")),
                run("rest", program(OURS, "simple_recv.py", "-m", "50")),
            ],
        )
    ],
)
def test_selected_recv(runner: Runner, scenario: Scenario) -> None:
    """The ``Selector`` link option (a JMS selector ``colour = 'green'``): only the green ones; a plain receiver
    then gets the red ones. proton's broker.py has no selectors: our broker only."""
    report = played(runner, scenario)
    check_ran(report, "send", ["all messages confirmed"])
    check_ran(report, "selected", [f"green {i + 1}" for i in range(100) if i % 2 == 0])
    check_ran(report, "rest", [f"red {i + 1}" for i in range(100) if i % 2 == 1])
    check_peer(report)


@scenarios(
    "test_queue_browser",
    [
        (
            f"broker:{OUR_BROKER}",
            OUR_BROKER,
            [
                run("send", program(OURS, "simple_send.py")),
                run("browse-1", program(OURS, "queue_browser.py")),
                run("browse-2", program(OURS, "queue_browser.py")),
                run("recv", program(OURS, "simple_recv.py")),
            ],
        )
    ],
)
def test_queue_browser(runner: Runner, scenario: Scenario) -> None:
    """The ``Copy`` link option (browsing) shows the messages and leaves them in the queue. queue_browser.py
    closes once nothing more is buffered, so it prints the head of the queue (at least one, in order); a consumer
    then still gets all 100. proton's broker.py cannot browse: our broker only."""
    report = played(runner, scenario)
    check_ran(report, "send", ["all messages confirmed"])
    expected = [f"Message(priority=4, id={i + 1}, body={{'sequence': {i + 1}}})" for i in range(100)]
    for name in ("browse-1", "browse-2"):
        check_ran(report, name, None)
        browsed = report.lines(name)
        report.check(browsed and browsed == expected[: len(browsed)], f"{name}: not the head of the queue, in order")
    check_ran(report, "recv", SEQUENCE)
    check_peer(report)


def _abstract_server() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for peer in BROKERS:
        for key, client_flavour, server_flavour in mixes("client", "server"):
            steps = [
                start("server", program(server_flavour, "abstract_server.py")),
                run("client", program(client_flavour, "client.py")),
                stop("server"),
            ]
            yield f"{key}-broker:{peer}", peer, steps


@scenarios("test_abstract_server", _abstract_server())
def test_abstract_server(runner: Runner, scenario: Scenario) -> None:
    """abstract_server.py on proton_server.py (also rewritten): a MessagingHandler that makes its own Container and
    connects, attaching its links, before ``run()``; it replies through an anonymous sender."""
    report = played(runner, scenario)
    check_ran(report, "client", RESPONSES)
    lines = report.lines("server")
    reply_to = lines[0].removeprefix("Request from: ") if lines else "<the reply address>"
    expected = [f"Request from: {reply_to}"] * len(REQUESTS)
    diff = "\n".join(difflib.unified_diff(expected, lines, "expected", "actual", lineterm="", n=1))
    report.check(lines == expected and reply_to, f"server printed something else than expected:\n{diff}")
    check_stopped(report, "server")
    check_peer(report)


# ---------------------------------------------------------------------------------------------------------------
# Peer to peer: Container.listen.


@scenarios("test_helloworld_direct", [("ours", None, [run("hello", program(OURS, "helloworld_direct.py"))])])
def test_helloworld_direct(runner: Runner, scenario: Scenario) -> None:
    """Listening and connecting in one container: the message goes to itself on localhost:8888."""
    report = played(runner, scenario)
    check_ran(report, "hello", ["Hello World!"])


def _direct_recv() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for key, send, recv in mixes("send", "recv"):
        steps = [
            start("recv", program(recv, "direct_recv.py", "-a", "localhost:8888")),
            listening(8888),
            run("send", program(send, "simple_send.py", "-a", "localhost:8888")),
            wait("recv"),
        ]
        yield key, None, steps


@scenarios("test_simple_send_direct_recv", _direct_recv())
def test_simple_send_direct_recv(runner: Runner, scenario: Scenario) -> None:
    """direct_recv.py listens on localhost:8888, simple_send.py connects to it and sends 100 messages."""
    report = played(runner, scenario)
    check_ran(report, "recv", SEQUENCE)
    check_ran(report, "send", ["all messages confirmed"])


def _direct_send() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for key, send, recv in mixes("send", "recv"):
        steps = [
            start("send", program(send, "direct_send.py", "-a", "localhost:8888")),
            listening(8888),
            run("recv", program(recv, "simple_recv.py", "-a", "localhost:8888")),
            wait("send"),
        ]
        yield key, None, steps


@scenarios("test_direct_send_simple_recv", _direct_send())
def test_direct_send_simple_recv(runner: Runner, scenario: Scenario) -> None:
    """direct_send.py listens on localhost:8888, simple_recv.py connects to it and receives 100 messages."""
    report = played(runner, scenario)
    check_ran(report, "recv", SEQUENCE)
    check_ran(report, "send", ["all messages confirmed"])


def _server_direct() -> Iterator[tuple[str, str | None, list[dict[str, Any]]]]:
    for client in ("client.py", "sync_client.py"):
        for key, client_flavour, server_flavour in mixes("client", "server"):
            steps = [
                start("server", program(server_flavour, "server_direct.py")),
                listening(8888),
                run("client", program(client_flavour, client, "-a", "localhost:8888/examples")),
                stop("server"),
            ]
            yield f"{client}-{key}", None, steps


@scenarios("test_client_server_direct", _server_direct())
def test_client_server_direct(runner: Runner, scenario: Scenario) -> None:
    """server_direct.py listens on 0.0.0.0:8888, gives each dynamic source an address of its own and replies
    on it; client.py and sync_client.py connect straight to it."""
    report = played(runner, scenario)
    check_ran(report, "client", RESPONSES)
    check_server(report, "server", "Listening on 0.0.0.0:8888")


# ---------------------------------------------------------------------------------------------------------------
# Proton's broker.py on amqp_async.proton: our API in the server role, serving proton's examples.


@scenarios(
    "test_broker_py_on_ours",
    [
        ("helloworld.py", BROKER_PY_ON_OURS, [run("hello", program(PROTON, "helloworld.py"))]),
        ("helloworld_blocking.py", BROKER_PY_ON_OURS, [run("hello", program(PROTON, "helloworld_blocking.py"))]),
        (
            "simple_send-simple_recv",
            BROKER_PY_ON_OURS,
            [
                start("recv", program(PROTON, "simple_recv.py")),
                run("send", program(PROTON, "simple_send.py")),
                wait("recv"),
            ],
        ),
        (
            "client.py-server.py",
            BROKER_PY_ON_OURS,
            [
                start("server", program(PROTON, "server.py")),
                run("client", program(PROTON, "client.py")),
                stop("server"),
            ],
        ),
    ],
)
def test_broker_py_on_ours(runner: Runner, scenario: Scenario) -> None:
    """proton's broker.py rewritten (on_link_opening, dynamic sources, Endpoint states, link_head) serves proton's
    own examples."""
    report = played(runner, scenario)
    if "hello" in report.data["processes"]:
        check_ran(report, "hello", ["Hello World!"])
    if "send" in report.data["processes"]:
        check_ran(report, "send", ["all messages confirmed"])
        check_ran(report, "recv", SEQUENCE)
    if "client" in report.data["processes"]:
        check_ran(report, "client", RESPONSES)
        check_server(report, "server", "Listening on amqp://localhost:5672/examples")
    check_peer(report)


# ---------------------------------------------------------------------------------------------------------------
# Timers.


@scenarios(
    "test_recurring_timer",
    [("ours", None, [start("timer", program(OURS, "recurring_timer.py")), sleep(4.5), stop("timer")])],
)
def test_recurring_timer(runner: Runner, scenario: Scenario) -> None:
    """``Container.schedule`` from ``on_reactor_init``, every second, until SIGINT: then ``container.stop()`` and
    an empty line. Started 4.5 s before SIGINT: two to four ticks, whatever the start-up time."""
    report = played(runner, scenario)
    lines = report.lines("timer")
    ticks = len(lines) - 1
    report.check(2 <= ticks <= 4 and lines == ["Tick..."] * ticks + [""], "not 2 to 4 ticks, then an empty line")
    check_stopped(report, "timer")
