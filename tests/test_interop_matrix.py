"""The interop matrix: our awaitable client against five independent peers, and rhea as a client of our broker.

Peers (columns), each started by this module on free ports, never on 5672, every start and scenario bounded in time:

* ``rabbitmq``: RabbitMQ 3.10 with its AMQP 1.0 plugin, a private node for the session (`tests/rabbitmq.py`,
  installed with apt when missing). Addresses are ``/queue/NAME``; the client logs in as guest (SASL PLAIN).
* ``proton-c``: the Qpid Proton C ``broker`` example (``/usr/share/proton/examples/c/broker.c``, built by
  ``benchmarks/_peers.py``; the Debian packages are installed with apt when missing), run as
  ``broker 127.0.0.1 0``: it prints ``listening on PORT``; its output is drained in a thread. A fresh process per
  scenario (it starts in milliseconds).
* ``proton-python``: a python-qpid-proton listener, `tests/proton_broker.py` (`ProtonBroker`), fresh per scenario.
* ``rhea``: ``tests/interop/rhea_broker.js``, a small broker on rhea (npm, pure JavaScript), run with node; rhea
  is installed with npm into ``~/.cache/amqp_async/rhea`` when missing. Fresh per scenario.
* ``amqp_async``: our own broker, ``python -m amqp_async.broker --port 0`` in a subprocess, fresh per scenario.
* ``rhea-client``: rhea as the *client* (``tests/interop/rhea_client.js``) of our broker (the subprocess above);
  for request/reply our client is the responder.

Scenarios (rows): 10,000 messages at-least-once (no loss, no duplicates, every outcome accepted; 2,000 through
python-qpid-proton's broker, a Python one), 10,000 at-most-once, each outcome a receiver can give (reject, release,
modify: the peer must honour it, checked by what it delivers next), a 4 MiB message, drain, a dynamic receiver,
request/reply, SASL PLAIN (right and wrong password), and a peer that detaches or closes with an error (the client
raises a clear `AMQPError` with the peer's condition).

A cell is ``pass``, ``fail`` (the pytest test fails too: a bug of ours, or of the peer, said in the detail), or
``not supported by that peer`` *as observed*: a refusal by the peer (an error condition such as
``amqp:not-implemented``, a SASL mechanism list without PLAIN, a message delivered pre-settled so that no outcome
can reach the peer, a dynamic attach answered with no address). A mere timeout counts as "not supported" only where
the peer's source shows why (``Peer.limits``, with the reason); anywhere else it is a failure.

The matrix is printed at the end of the module (a module-scoped fixture's teardown, through pytest's terminal
reporter) and, when every cell ran, written to ``docs/interop.md`` (the whole file is generated from
`DOC_HEADER` below and the results; the text holds no timings or ports, so reruns leave it unchanged unless a
result changes).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import queue as queue_module
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from terminal import write_lines

import amqp_async
from amqp_async import Message
from amqp_async.codec.delivery_states import Accepted
from amqp_async.errors import AMQPError, AuthenticationError, LinkError, SessionError
from amqp_async.errors import ConnectionError as AMQPConnectionError

try:
    import installs
    from proton_broker import ProtonBroker
    from rabbitmq import RabbitMQNode
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import installs
    from tests.proton_broker import ProtonBroker
    from tests.rabbitmq import RabbitMQNode

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parent.parent
INTEROP = Path(__file__).resolve().parent / "interop"
DOC = ROOT / "docs" / "interop.md"
RHEA_CACHE = Path(os.environ.get("AMQP_ASYNC_RHEA", Path.home() / ".cache" / "amqp_async" / "rhea"))
START_TIMEOUT = 30.0
COUNT = 10_000
#: Messages each way through python-qpid-proton's broker (tests/proton_broker.py: a handler in Python on proton's
#: reactor): about 1,000 a second on the idle 2-core machine, a quarter of that under the suite's load, where
#: COUNT outgrew the scenario's 90 s bound.
PROTON_PYTHON_COUNT = 2_000
WINDOW = 500
DRAIN_WAIT = 5.0
#: Error conditions by which a peer says "I do not do that".
REFUSALS = {"amqp:not-implemented", "amqp:not-allowed", "amqp:invalid-field", "amqp:precondition-failed"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class NotSupported(Exception):
    """The peer was seen to refuse (or be unable to do) what the scenario needs; the message is the evidence."""


# ---------------------------------------------------------------------------------------------------------------
# the matrix


@dataclass
class Cell:
    status: str  #: "pass", "fail", "not supported", "skipped"
    detail: str
    seconds: float = 0.0


PEERS = {
    "rabbitmq": "RabbitMQ 3.10",
    "proton-c": "Proton C broker",
    "proton-python": "python-qpid-proton",
    "rhea": "rhea listener",
    "amqp_async": "amqp_async broker",
    "rhea-client": "rhea client → amqp_async broker",
}
SCENARIOS = {
    "at-least-once": "at-least-once",
    "at-most-once": "at-most-once",
    "reject": "outcome: reject",
    "release": "outcome: release",
    "modify": "outcome: modify",
    "large": "4 MiB message",
    "drain": "drain",
    "dynamic": "dynamic receiver",
    "request-reply": "request/reply",
    "sasl-plain": "SASL PLAIN",
    "error": "peer error (detach/close)",
    "examples": "examples/ programs",
}
#: Scenarios of our client's own programs: the rhea client column has nothing to run there ("n/a").
OUR_PROGRAMS_ONLY = {"examples"}
RESULTS: dict[tuple[str, str], Cell] = {}
_SYMBOL = {"pass": "pass", "fail": "FAIL", "not supported": "not supported", "skipped": "skipped"}

DOC_HEADER = """\
# Interop matrix

Generated by `tests/test_interop_matrix.py` (run it with
`python -m pytest tests/test_interop_matrix.py -p no:cacheprovider -s`; it rewrites this file when every cell ran;
edit the text in that module, not here). Our awaitable client against independent AMQP 1.0 implementations, the
same scenarios against each, and rhea (JavaScript) as a client of our broker.

"not supported" is never assumed: it is recorded only when the peer was *seen* refusing (an error condition, a
SASL mechanism list without PLAIN, a message delivered pre-settled, a dynamic attach answered without an address),
or, for a peer that simply never answers, where its source code shows why. The evidence is in the notes below.

## Peers

| Peer | What runs | How it is started |
|------|-----------|-------------------|
| RabbitMQ 3.10 | `rabbitmq-server` (Debian) with `rabbitmq_amqp1_0` | a private node on free ports, own epmd, cookie \
(`tests/rabbitmq.py`; `apt-get install rabbitmq-server` when missing); addresses `/queue/NAME`, login guest/guest |
| Proton C broker | `/usr/share/proton/examples/c/broker.c` | built by `benchmarks/_peers.py` \
(`apt-get install libqpid-proton11-dev libqpid-proton11-dev-examples` when missing), run as \
`broker 127.0.0.1 0` (prints `listening on PORT`), fresh per scenario |
| python-qpid-proton | `tests/proton_broker.py` (`ProtonBroker`, a `proton.reactor.Container` listener) | \
in a thread on a free port, fresh per scenario |
| rhea listener | `tests/interop/rhea_broker.js` on rhea 3 (npm) | `node rhea_broker.js --port 0` (rhea installed \
with `npm install --prefix ~/.cache/amqp_async/rhea rhea@3` when missing), fresh per scenario |
| amqp_async broker | `python -m amqp_async.broker --port 0 --quiet` | a subprocess, fresh per scenario |
| rhea client | `tests/interop/rhea_client.js` against the amqp_async broker | one node process per scenario; \
prints one JSON line |

## Scenarios

* **at-least-once**: one sender pipelines 10,000 messages (`submit()`, at most 500 unsettled; 2,000 through \
python-qpid-proton's broker, whose handler is Python) while a receiver with credit 500 takes and accepts them; \
every outcome must be `accepted`, every message received exactly once, unsettled on arrival, and nothing more may \
come.
* **at-most-once**: the same, pre-settled both ways (`delivery="at-most-once"`); no loss or duplicate on \
loopback, every delivery pre-settled.
* **reject / release / modify**: a message is received and given that outcome, then a second one is sent; a \
rejected message must not come back, a released or modified one must (modified with `delivery-failed`: \
`delivery-count` 1).
* **4 MiB message**: one 4 MiB binary body, accepted and received identical.
* **drain**: two messages queued, a receiver grants 5 and drains: the drain must be answered, both messages \
arrive, credit ends at 0 and a third message does not come.
* **dynamic receiver**: a receiver with a dynamic source; a message sent to the address the peer made comes back.
* **request/reply**: 10 requests with `reply-to` (a dynamic node where the peer makes them, else a named queue), \
a responder on another connection answers through the anonymous relay where offered, else a sender per address.
* **SASL PLAIN**: the right password connects (and a message is accepted), a wrong one raises \
`AuthenticationError`.
* **peer error**: the peer detaches a link or closes the connection with an error; the client must raise an \
`AMQPError` subclass carrying the peer's condition.
* **examples/ programs**: the programs users start from, run as users run them (`python examples/NAME.py URL \
ADDRESS`, a subprocess): `send.py` sends 5 messages, `receive.py` takes them (exit 0, each body printed in \
order), then `request_reply.py` gets the answers to its 3 requests (through the anonymous relay or a sender per \
address, to a dynamic node or a named queue, as the peer offers). Our client's programs: n/a for the rhea client.

"""


def _clean(text: str) -> str:
    """Evidence text without run-specific bits (uuids, ports), one line."""
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", str(text))
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    return " ".join(text.split())


def _record(scenario: str, peer: str, status: str, detail: str, seconds: float) -> None:
    RESULTS[(scenario, peer)] = Cell(status, _clean(detail), seconds)


def _table(with_seconds: bool) -> list[str]:
    header = "| Scenario | " + " | ".join(PEERS.values()) + " |"
    lines = [header, "|" + "---|" * (len(PEERS) + 1)]
    for key, title in SCENARIOS.items():
        cells = []
        for peer in PEERS:
            cell = RESULTS.get((key, peer))
            if cell is None:
                cells.append("n/a" if _not_applicable(key, peer) else "not run")
                continue
            text = _SYMBOL[cell.status]
            if with_seconds and cell.status != "skipped":
                text += f" ({cell.seconds:.1f} s)"
            cells.append(text)
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return lines


def _not_applicable(scenario: str, peer: str) -> bool:
    return peer == "rhea-client" and scenario in OUR_PROGRAMS_ONLY


def _notes() -> list[str]:
    lines = []
    for peer, peer_title in PEERS.items():
        entries = [(SCENARIOS[s], RESULTS[(s, peer)]) for s in SCENARIOS if (s, peer) in RESULTS]
        if not entries:
            continue
        lines += ["", f"### {peer_title}", ""]
        for title, cell in entries:
            lines.append(f"* **{title}**: {_SYMBOL[cell.status]}: {cell.detail}")
    return lines


def _write_doc() -> None:
    text = DOC_HEADER + "## Matrix\n\n" + "\n".join(_table(False)) + "\n\n## Notes and evidence\n" + "\n".join(_notes())
    DOC.write_text(text + "\n")


@pytest.fixture(scope="module", autouse=True)
def interop_matrix(request: pytest.FixtureRequest) -> Iterator[dict[tuple[str, str], Cell]]:
    """Prints the matrix after the module's last test, and keeps it in docs/interop.md when every cell ran."""
    yield RESULTS
    if not RESULTS:
        return
    lines = ["", "=" * 30 + " interop matrix " + "=" * 30, *_table(True), *_notes()]
    cells = sum(not _not_applicable(scenario, peer) for scenario in SCENARIOS for peer in PEERS)
    complete = len(RESULTS) == cells and all(cell.status != "skipped" for cell in RESULTS.values())
    if complete:
        _write_doc()
        lines.append(f"(written to {DOC.relative_to(ROOT)})")
    else:
        lines.append(f"(partial run: {DOC.relative_to(ROOT)} left as it is)")
    write_lines(request.config, lines)


# ---------------------------------------------------------------------------------------------------------------
# peers


class _Process:
    """A peer process that prints the port it listens on; the rest of its output is drained in a thread."""

    def __init__(self, argv: list[str], pattern: str, what: str, **popen: Any) -> None:
        self.what = what
        self.lines: deque[str] = deque(maxlen=200)
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, **popen
        )
        found: queue_module.Queue[int | None] = queue_module.Queue()

        def drain() -> None:
            assert self.process.stdout is not None
            reported = False
            for line in self.process.stdout:
                self.lines.append(line.rstrip())
                match = re.search(pattern, line)
                if match and not reported:
                    reported = True
                    found.put(int(match.group(1)))
            found.put(None)

        threading.Thread(target=drain, daemon=True, name=f"drain {what}").start()
        try:
            port = found.get(timeout=START_TIMEOUT)
        except queue_module.Empty:
            port = None
        if port is None:
            self.stop()
            raise RuntimeError(f"{what} did not start:\n{self.tail()}")
        self.port = port

    def tail(self) -> str:
        return "\n".join(list(self.lines)[-20:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@dataclass
class Peer:
    """A running peer as the scenarios see it."""

    key: str
    url: str  #: what the client connects to (with credentials where the peer needs them)
    bare_url: str  #: the same without credentials
    prefix: str = ""  #: address prefix (RabbitMQ: /queue/)
    plain: tuple[str, str] | None = None  #: a user SASL PLAIN authenticates, when the peer runs with one
    limits: dict[str, str] = field(default_factory=dict)  #: why a scenario times out on this peer (its source)
    count: int = COUNT  #: messages each way in the at-least-once and at-most-once scenarios
    rabbit: RabbitMQNode | None = None
    proton: ProtonBroker | None = None
    process: _Process | None = None

    def address(self, name: str) -> str:
        return self.prefix + name

    async def drain_address(self, name: str) -> str:
        if self.rabbit is None:
            return self.address(name)
        # Drain on a classic queue crashes the session of RabbitMQ 3.10.8 (rabbitmq-server#7119); a quorum queue
        # drains (see tests/test_client_rabbitmq.py).
        node = self.rabbit
        out = await anyio.to_thread.run_sync(
            lambda: node.ctl(
                "eval",
                f'rabbit_amqqueue:declare(rabbit_misc:r(<<"/">>, queue, <<"{name}">>), true, false, '
                '[{<<"x-queue-type">>, longstr, <<"quorum">>}], none, <<"guest">>).',
            )
        )
        assert out.startswith(("{new,", "{existing,")), out
        return f"/amq/queue/{name}"  # (/queue/NAME would redeclare it, non-durable, and be refused)


def _load_bench_peers() -> Any:
    spec = importlib.util.spec_from_file_location("_amqp_async_bench_peers", ROOT / "benchmarks" / "_peers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _skip_loudly(reason: str) -> None:
    print(f"\n*** {reason}\n", file=sys.stderr)
    pytest.skip(reason)


def _c_broker_binary() -> Path:
    peers = _load_bench_peers()

    def build() -> Path:
        return Path(peers.build_c_examples(("broker",))["broker"])  # apt-get installs the examples if missing

    try:
        if (peers.EXAMPLES / "broker.c").exists():
            return build()
        # said on the terminal first; skipped instead with AMQP_ASYNC_TEST_NO_INSTALL=1 (tests/installs.py)
        command = ["apt-get", "install", "-y", "--no-install-recommends", *peers.PACKAGES]
        binary: Path = installs.install("Qpid Proton's C examples", "the Proton C interop tests", command, run=build)
        return binary
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        _skip_loudly(f"Proton C interop SKIPPED: the C broker example cannot be installed or built: {exc}")
        raise  # unreachable


def _npm_install(package: str, spec: str) -> None:
    """Install ``spec`` with npm into the cache unless ``package`` is there (once, under a lock: parallel test
    processes share the cache); skip loudly when it cannot be installed."""
    if (RHEA_CACHE / "node_modules" / package / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        _skip_loudly(f"rhea interop SKIPPED: {package} is missing and npm is not installed to install it")
    command = [str(npm), "install", "--no-audit", "--no-fund", "--prefix", str(RHEA_CACHE), spec]

    def run() -> None:
        RHEA_CACHE.mkdir(parents=True, exist_ok=True)
        with (RHEA_CACHE / ".install.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (RHEA_CACHE / "node_modules" / package / "package.json").exists():
                result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
                if result.returncode != 0:
                    _skip_loudly(
                        f"rhea interop SKIPPED: npm install {spec} failed ({result.returncode}):\n"
                        f"{result.stderr[-2000:]}"
                    )

    # said on the terminal first; skipped instead with AMQP_ASYNC_TEST_NO_INSTALL=1 (tests/installs.py)
    installs.install(f"{spec} (npm, into {RHEA_CACHE})", "the rhea interop tests", command, run=run)


def _rhea_env(*, websocket: bool = False) -> dict[str, str]:
    """node's environment with rhea importable, installing rhea with npm into the cache when missing (and, with
    ``websocket``, the ``ws`` package rhea's WebSocket transport runs on)."""
    node = shutil.which("node")
    if node is None:
        _skip_loudly("rhea interop SKIPPED: node is not installed")
    _npm_install("rhea", "rhea@3")
    if websocket:
        _npm_install("ws", "ws@8")
    return {**os.environ, "NODE_PATH": str(RHEA_CACHE / "node_modules")}


def _our_broker(*arguments: str) -> _Process:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return _Process(
        [sys.executable, "-m", "amqp_async.broker", "--port", "0", "--quiet", *arguments],
        r"listening on amqps?://[^\s:]+:(\d+)",
        "python -m amqp_async.broker",
        env=env,
    )


PLAIN_USER = ("alice", "secret")


@contextlib.contextmanager
def start_peer(key: str, request: pytest.FixtureRequest, variant: str | None = None) -> Iterator[Peer]:
    """Start peer ``key`` (``variant``: "plain" runs it with a PLAIN user where it can; "limits" runs our broker
    with ``--max-connections 1``)."""
    if key == "rabbitmq":
        node: RabbitMQNode = request.getfixturevalue("rabbitmq_broker")
        yield Peer(
            key,
            node.url,
            f"amqp://{node.host}:{node.port}",
            prefix="/queue/",
            plain=(node.user, node.password),
            rabbit=node,
        )
    elif key == "proton-c":
        binary = _c_broker_binary()
        process = _Process([str(binary), "127.0.0.1", "0"], r"listening on (\d+)", "the Proton C broker example")
        url = f"amqp://127.0.0.1:{process.port}"
        limits = {"drain": "broker.c never calls pn_link_drained(), so proton-c never answers a drain"}
        try:
            yield Peer(key, url, url, process=process, limits=limits)
        finally:
            process.stop()
    elif key == "proton-python":
        with ProtonBroker() as broker:
            yield Peer(key, broker.url, broker.url, proton=broker, count=PROTON_PYTHON_COUNT)
    elif key == "rhea":
        arguments = ["--user", PLAIN_USER[0], "--password", PLAIN_USER[1]] if variant == "plain" else []
        process = _Process(
            ["node", str(INTEROP / "rhea_broker.js"), "--port", "0", *arguments],
            r"listening on (\d+)",
            "the rhea broker (node tests/interop/rhea_broker.js)",
            env=_rhea_env(),
        )
        url = f"amqp://127.0.0.1:{process.port}"
        try:
            yield Peer(key, url, url, process=process, plain=PLAIN_USER if variant == "plain" else None)
        finally:
            process.stop()
    elif key == "amqp_async":
        arguments = []
        if variant == "plain":
            arguments = ["--user", ":".join(PLAIN_USER)]
        elif variant == "limits":
            arguments = ["--max-connections", "1"]
        process = _our_broker(*arguments)
        url = f"amqp://127.0.0.1:{process.port}"
        try:
            yield Peer(key, url, url, process=process, plain=PLAIN_USER if variant == "plain" else None)
        finally:
            process.stop()
    else:  # pragma: no cover
        raise ValueError(key)


# ---------------------------------------------------------------------------------------------------------------
# helpers


@contextlib.asynccontextmanager
async def connected(url: str, **options: Any) -> AsyncIterator[amqp_async.Connection]:
    """A connection closed at the end whatever happened (a failed connection's close errors are ignored)."""
    connection = await amqp_async.connect(url, **options)
    try:
        yield connection
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5), contextlib.suppress(AMQPError, OSError):
            await connection.close()


async def take(receiver: amqp_async.Receiver, timeout: float) -> amqp_async.Delivery | None:
    """The next delivery, or None after ``timeout`` seconds."""
    with anyio.move_on_after(timeout):
        return await receiver.receive()
    return None


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, AMQPError):
        return f"{type(exc).__name__}({exc.condition}: {exc.description})"
    return f"{type(exc).__name__}: {exc}"


def _refusal(exc: AMQPError, what: str) -> NotSupported:
    return NotSupported(f"{what}: the peer answered {_error_text(exc)}")


# ---------------------------------------------------------------------------------------------------------------
# scenarios: each returns the detail of a pass, raises NotSupported with the evidence, or fails


async def scenario_at_least_once(peer: Peer) -> str:
    count = peer.count
    address = peer.address("interop-at-least-once")
    outcomes: list[Any] = []
    received: Counter[int] = Counter()
    presettled = 0
    async with connected(peer.url) as consumer_conn, connected(peer.url) as producer_conn:
        receiver = await consumer_conn.open_receiver(address, credit=WINDOW)
        sender = await producer_conn.open_sender(address, delivery="at-least-once")

        async def produce() -> None:
            pending: deque[amqp_async.Tracker] = deque()
            for index in range(count):
                pending.append(await sender.submit(Message(body=index)))
                if len(pending) >= WINDOW:
                    outcomes.append(await pending.popleft())
            while pending:
                outcomes.append(await pending.popleft())

        async def consume() -> None:
            nonlocal presettled
            while sum(received.values()) < count:
                delivery = await receiver.receive()
                if delivery.settled:
                    presettled += 1
                received[delivery.message.body] += 1
                await delivery.accept()

        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            group.start_soon(consume)
        extra = await take(receiver, 0.5)
    accepted = sum(1 for outcome in outcomes if outcome == Accepted())
    assert accepted == count, f"{accepted} of {count} outcomes accepted: {Counter(map(repr, outcomes))}"
    missing = count - len(received)
    duplicates = sum(times - 1 for times in received.values())
    assert missing == 0 and duplicates == 0, f"{missing} messages lost, {duplicates} duplicates"
    assert set(received) == set(range(count))
    assert extra is None, f"a message beyond the {count}: {extra.message.body!r}"
    detail = f"{count} sent and accepted, {count} received exactly once"
    if presettled:
        raise NotSupported(
            f"{detail}, but {presettled} of {count} deliveries arrived pre-settled although the receiver asked for "
            "snd-settle-mode unsettled: the peer delivers at most once to consumers"
        )
    return detail


async def scenario_at_most_once(peer: Peer) -> str:
    count = peer.count
    address = peer.address("interop-at-most-once")
    received: Counter[int] = Counter()
    unsettled = 0
    async with connected(peer.url) as consumer_conn, connected(peer.url) as producer_conn:
        receiver = await consumer_conn.open_receiver(address, credit=WINDOW, delivery="at-most-once")
        sender = await producer_conn.open_sender(address, delivery="at-most-once")

        async def produce() -> None:
            for index in range(count):
                tracker = await sender.submit(Message(body=index))
                assert tracker.settled, "an at-most-once transfer must go out settled"

        async def consume() -> None:
            nonlocal unsettled
            while sum(received.values()) < count:
                delivery = await take(receiver, 5.0)
                if delivery is None:
                    return  # at-most-once may lose; counted below
                if not delivery.settled:
                    unsettled += 1
                    await delivery.accept()
                received[delivery.message.body] += 1

        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            group.start_soon(consume)
    duplicates = sum(times - 1 for times in received.values())
    assert duplicates == 0, f"{duplicates} duplicates"
    assert len(received) == count, f"{count - len(received)} of {count} lost (on loopback, with credit)"
    if unsettled:
        raise NotSupported(
            f"{unsettled} of {count} deliveries arrived unsettled although the receiver asked for snd-settle-mode "
            "settled: the peer does not deliver at most once"
        )
    return f"{count} sent pre-settled, {count} received pre-settled, exactly once"


async def _outcome(peer: Peer, kind: str) -> str:
    address = peer.address(f"interop-{kind}")
    # Two connections: a peer that ends the receiver's session over an outcome it refuses must not take the
    # sender with it (the refusal is then seen by the receiver).
    async with connected(peer.url) as conn, connected(peer.url) as producer_conn:
        sender = await producer_conn.open_sender(address)
        receiver = await conn.open_receiver(address, credit=10)
        await sender.send(Message(body="victim", id="victim"))
        first = await take(receiver, 10)
        assert first is not None, "the message did not arrive"
        assert first.message.body == "victim"
        if first.settled:
            raise NotSupported(
                "the message arrived pre-settled although the receiver asked for snd-settle-mode unsettled: "
                f"no outcome can reach the peer ({kind} is a no-op)"
            )
        try:
            if kind == "reject":
                await first.reject("amqp:precondition-failed", "rejected by the interop test")
            elif kind == "release":
                await first.release()
            else:
                await first.modify(delivery_failed=True)
            await sender.send(Message(body="sentinel", id="sentinel"))
            seen: list[amqp_async.Delivery] = []
            with anyio.fail_after(10):
                while True:
                    delivery = await receiver.receive()
                    seen.append(delivery)
                    if not delivery.settled:
                        await delivery.accept()
                    bodies = [d.message.body for d in seen]
                    if "sentinel" in bodies and (kind == "reject" or "victim" in bodies):
                        break
            extra = await take(receiver, 0.5)
            if extra is not None:
                seen.append(extra)
        except AMQPError as exc:
            root = exc
            if exc.condition not in REFUSALS:
                # The peer may end the session over the outcome after a later delivery arrived (RabbitMQ does):
                # settling that one then fails with LinkDetached; the receiver knows the session's error.
                try:
                    await take(receiver, 1.0)
                except AMQPError as deeper:
                    root = deeper
            if root.condition in REFUSALS:
                raise _refusal(root, f"the {kind} disposition") from exc
            raise
    bodies = [d.message.body for d in seen]
    again = [d.message for d in seen if d.message.body == "victim"]
    if kind == "reject":
        assert not again, f"the rejected message came back: {bodies}"
        return f"the rejected message did not come back (next: {bodies})"
    assert len(again) == 1, f"the {kind}d message should come back once, got {bodies}"
    header = f"delivery-count {again[0].delivery_count}, first-acquirer {again[0].first_acquirer}"
    if kind == "modify":
        assert again[0].delivery_count == 1, f"modified (delivery-failed) must increment delivery-count: {header}"
    return f"the message came back ({header})"


async def scenario_reject(peer: Peer) -> str:
    return await _outcome(peer, "reject")


async def scenario_release(peer: Peer) -> str:
    return await _outcome(peer, "release")


async def scenario_modify(peer: Peer) -> str:
    return await _outcome(peer, "modify")


async def scenario_large(peer: Peer) -> str:
    address = peer.address("interop-large")
    body = random.Random(4).randbytes(4 << 20)
    async with connected(peer.url) as consumer_conn, connected(peer.url) as producer_conn:
        receiver = await consumer_conn.open_receiver(address, credit=2)
        sender = await producer_conn.open_sender(address)
        outcome = await sender.send(Message(body=body))
        assert outcome == Accepted(), outcome
        delivery = await take(receiver, 30)
        assert delivery is not None, "the 4 MiB message did not arrive"
        got = delivery.message.body
        await delivery.accept()
    assert isinstance(got, bytes) and got == body, f"received {type(got).__name__} of {len(got)} bytes, different"
    return "4 MiB sent, accepted, received identical"


async def scenario_drain(peer: Peer) -> str:
    address = await peer.drain_address("interop-drain")
    async with connected(peer.url) as conn:
        sender = await conn.open_sender(address)
        for index in range(2):
            await sender.send(Message(body=f"drain {index}"))
        receiver = await conn.open_receiver(address, credit=0)
        receiver.add_credit(5)
        try:
            await receiver.drain(timeout=DRAIN_WAIT)
        except amqp_async.LinkTimeout as exc:
            # the drain is withdrawn and the link stays attached: the peer's silence costs this link nothing more
            assert exc.condition == "amqp:resource-limit-exceeded" and not receiver.is_closed
            observed = f"no drain answer within {DRAIN_WAIT:.0f} s ({receiver.queued} of 2 messages had arrived)"
            if "drain" in peer.limits:
                raise NotSupported(f"{peer.limits['drain']}; observed: {observed}") from exc
            raise AssertionError(observed) from exc
        except (SessionError, LinkError) as exc:
            if exc.condition in REFUSALS:
                raise _refusal(exc, "drain") from exc
            raise
        with anyio.fail_after(5):
            while receiver.queued < 2:
                await anyio.sleep(0.02)  # RabbitMQ may send its drained flow before the last transfers
        assert receiver.credit == 0, f"credit {receiver.credit} after the drain"
        await sender.send(Message(body="after the drain"))
        await anyio.sleep(0.5)
        assert receiver.queued == 2, f"{receiver.queued} messages queued: one arrived without credit"
    return "drain answered; both queued messages arrived, credit 0, nothing more without credit"


async def _dynamic_receiver(conn: amqp_async.Connection, credit: int) -> amqp_async.Receiver:
    try:
        receiver = await conn.open_receiver(None, dynamic=True, credit=0)
        if receiver.address:
            receiver.add_credit(credit)
    except (LinkError, SessionError) as exc:
        if exc.condition in REFUSALS:
            raise _refusal(exc, "a dynamic receiver") from exc
        raise
    if not receiver.address:
        # (no credit granted: broker.c would look up a queue named NULL, and crash, on the first flow)
        raise NotSupported("the peer answered the dynamic attach with a source without address: it made no node")
    return receiver


async def scenario_dynamic(peer: Peer) -> str:
    async with connected(peer.url) as conn:
        receiver = await _dynamic_receiver(conn, 5)
        sender = await conn.open_sender(receiver.address)
        outcome = await sender.send(Message(body="to the dynamic node"))
        assert outcome == Accepted(), outcome
        delivery = await take(receiver, 10)
        assert delivery is not None, f"nothing came from the dynamic node {receiver.address!r}"
        assert delivery.message.body == "to the dynamic node"
        await delivery.accept()
    return "the peer made a node; a message sent to its address came back"


async def _respond(conn: amqp_async.Connection, requests: str, count: int) -> str:
    """Answer ``count`` requests on ``requests``: through the anonymous relay when offered, else a sender each."""
    relay = "ANONYMOUS-RELAY" in {str(c) for c in conn.remote_offered_capabilities}
    receiver = await conn.open_receiver(requests, credit=20)
    senders: dict[str | None, amqp_async.Sender] = {}
    for _ in range(count):
        delivery = await receiver.receive()
        request = delivery.message
        target = None if relay else request.reply_to
        if target not in senders:
            senders[target] = await conn.open_sender(target)
        reply = Message(body=f"reply to {request.body}", correlation_id=request.id)
        if relay:
            reply.address = request.reply_to
        await senders[target].send(reply)
        await delivery.accept()
    return "the anonymous relay" if relay else "a sender per reply-to address"


async def scenario_request_reply(peer: Peer) -> str:
    count = 10
    requests = peer.address("interop-requests")
    async with connected(peer.url) as requester, connected(peer.url) as responder:
        try:
            replies = await _dynamic_receiver(requester, 20)
            kind = "a dynamic node"
        except NotSupported:
            replies = await requester.open_receiver(peer.address("interop-replies"), credit=20)
            kind = "a named queue (no dynamic nodes)"
        reply_to = replies.address
        async with anyio.create_task_group() as group:
            how: list[str] = []

            async def serve() -> None:
                how.append(await _respond(responder, requests, count))

            group.start_soon(serve)
            sender = await requester.open_sender(requests)
            for index in range(count):
                await sender.send(Message(body=f"request {index}", id=f"req-{index}", reply_to=reply_to))
            answers = {}
            for _ in range(count):
                delivery = await replies.receive()
                answers[delivery.message.correlation_id] = delivery.message.body
                await delivery.accept()
    wrong = [i for i in range(count) if answers.get(f"req-{i}") != f"reply to request {i}"]
    assert not wrong, f"wrong or missing replies: {wrong}: {answers}"
    return f"{count} requests answered, reply-to {kind}, replies through {how[0]}"


async def scenario_sasl_plain(peer: Peer) -> str:
    if peer.plain is None:
        try:
            async with connected(peer.bare_url, user=PLAIN_USER[0], password=PLAIN_USER[1], allowed_mechs="PLAIN"):
                pass
        except AuthenticationError as exc:
            raise NotSupported(f"the peer offers no PLAIN: {_error_text(exc)}") from exc
        except AMQPConnectionError as exc:
            raise AssertionError(
                f"no common SASL mechanism must raise AuthenticationError, got {_error_text(exc)}"
            ) from exc
        raise AssertionError("PLAIN connected to a peer that was started without users")
    user, password = peer.plain
    async with connected(peer.bare_url, user=user, password=password, allowed_mechs="PLAIN") as conn:
        sender = await conn.open_sender(peer.address("interop-sasl"))
        assert await sender.send(Message(body="authenticated")) == Accepted()
    with pytest.raises(AuthenticationError) as refused:
        async with connected(peer.bare_url, user=user, password=password + "-wrong", allowed_mechs="PLAIN"):
            pass
    return f"PLAIN as {user} connected and sent; a wrong password: {_error_text(refused.value)}"


async def _expect_error(attempt: Callable[[], Awaitable[None]], timeout: float = 15) -> AMQPError:
    try:
        with anyio.fail_after(timeout):
            await attempt()
    except AMQPError as exc:
        return exc
    raise AssertionError("no error raised")


async def _receive_from(url: str, address: str | None, **options: Any) -> None:
    async with connected(url) as conn:
        receiver = await conn.open_receiver(address, credit=1, **options)
        await receiver.receive()


async def scenario_error(peer: Peer) -> str:
    """Provoke the peer into detaching or closing with an error; expected: an AMQPError with its condition."""
    checks: list[tuple[str, AMQPError, str]] = []
    if peer.key == "rabbitmq":
        exc = await _expect_error(lambda: _receive_from(peer.url, "/amq/queue/interop-missing"))
        checks.append(("a receiver from /amq/queue/interop-missing", exc, "amqp:not-found"))
    elif peer.key == "proton-c":
        # broker.c itself never detaches or closes with an error; its proton-c transport does, on a protocol
        # violation: we append a malformed frame (data offset 1) to our connection's output.
        async def violate() -> None:
            async with connected(peer.url) as conn:
                receiver = await conn.open_receiver("interop-error", credit=1)
                conn.engine._out += b"\x00\x00\x00\x08\x01\x00\x00\x00"
                conn._kick()
                await receiver.receive()

        checks.append(("a malformed frame", await _expect_error(violate), "amqp:connection:framing-error"))
    elif peer.key in ("proton-python", "rhea"):
        if peer.proton is not None:
            peer.proton.detach_on_attach["interop-fault-detach"] = ("amqp:not-allowed", "detached by the test")
            peer.proton.close_connection_on["interop-fault-close"] = ("amqp:connection:forced", "closed by the test")
        exc = await _expect_error(lambda: _receive_from(peer.url, "interop-fault-detach"))
        checks.append(("a link the peer detaches", exc, "amqp:not-allowed"))
        exc = await _expect_error(lambda: _receive_from(peer.url, "interop-fault-close"))
        checks.append(("a connection the peer closes", exc, "amqp:connection:forced"))
    elif peer.key == "amqp_async":
        exc = await _expect_error(lambda: _receive_from(peer.url, "interop-error", selector="a = = 1"))
        checks.append(("a receiver with an invalid selector", exc, "amqp:invalid-field"))
        async with connected(peer.url):  # the broker runs with --max-connections 1
            exc = await _expect_error(lambda: _receive_from(peer.url, "interop-error"))
        checks.append(("a connection beyond --max-connections", exc, "amqp:resource-limit-exceeded"))
    notes = []
    for what, exc, condition in checks:
        assert exc.condition == condition, f"{what}: expected {condition}, got {_error_text(exc)}"
        notes.append(f"{what}: {_error_text(exc)}")
    return "; ".join(notes)


EXAMPLES = ROOT / "examples"
EXAMPLE_MESSAGES = 5


async def _run_example(name: str, *arguments: str) -> list[str]:
    """``python examples/NAME ARGUMENTS`` as a user runs it: its lines (it must exit with 0)."""
    env = {key: value for key, value in os.environ.items() if key != "MESSAGING_CONNECT_FILE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = await anyio.run_process([sys.executable, str(EXAMPLES / name), *arguments], env=env, check=False)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"examples/{name} exited with {done.returncode}\n{out}{err}"
    return out.splitlines()


async def scenario_examples(peer: Peer) -> str:
    address = peer.address("interop-examples")
    sent = await _run_example("send.py", peer.url, address, str(EXAMPLE_MESSAGES))
    assert sent == [f"sent {EXAMPLE_MESSAGES} messages to {address!r}, all accepted"], sent
    received = await _run_example("receive.py", peer.url, address, str(EXAMPLE_MESSAGES))
    bodies = [f"received 'message {number}'" for number in range(EXAMPLE_MESSAGES)]
    assert received == [*bodies, f"received {EXAMPLE_MESSAGES} messages from {address!r}"], received
    answered = await _run_example("request_reply.py", peer.url, peer.address("interop-requests"))
    answers = [line for line in answered if " -> " in line]
    assert answers == [
        "'hello' -> 'HELLO' (correlation 0)",
        "'request' -> 'REQUEST' (correlation 1)",
        "'reply' -> 'REPLY' (correlation 2)",
    ], answered
    # How it talked to the peer, without the reply node's name (generated: the matrix's text stays the same).
    how = "; ".join(re.sub(r"^(replies to a [a-z ]+), .*", r"\1", line) for line in answered if " -> " not in line)
    return f"send.py and receive.py ({EXAMPLE_MESSAGES} messages), request_reply.py ({how})"


SCENARIO_FUNCTIONS: dict[str, Callable[[Peer], Awaitable[str]]] = {
    "at-least-once": scenario_at_least_once,
    "at-most-once": scenario_at_most_once,
    "reject": scenario_reject,
    "release": scenario_release,
    "modify": scenario_modify,
    "large": scenario_large,
    "drain": scenario_drain,
    "dynamic": scenario_dynamic,
    "request-reply": scenario_request_reply,
    "sasl-plain": scenario_sasl_plain,
    "error": scenario_error,
    "examples": scenario_examples,
}
TIMEOUTS = {"at-least-once": 90.0, "at-most-once": 90.0, "large": 60.0}
VARIANTS = {"sasl-plain": "plain", "error": "limits"}


# ---------------------------------------------------------------------------------------------------------------
# the tests

_CLIENT_PEERS = [peer for peer in PEERS if peer != "rhea-client"]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("peer_key", _CLIENT_PEERS)
async def test_interop(peer_key: str, scenario: str, request: pytest.FixtureRequest) -> None:
    """Our client against ``peer_key`` in ``scenario``; the outcome goes into the matrix."""
    started = time.monotonic()
    try:
        with start_peer(peer_key, request, VARIANTS.get(scenario)) as peer:
            with anyio.fail_after(TIMEOUTS.get(scenario, 45.0)):
                detail = await SCENARIO_FUNCTIONS[scenario](peer)
    except NotSupported as exc:
        _record(scenario, peer_key, "not supported", str(exc), time.monotonic() - started)
        return
    except pytest.skip.Exception as exc:
        _record(scenario, peer_key, "skipped", str(exc.msg), time.monotonic() - started)
        raise
    except BaseException as exc:
        _record(scenario, peer_key, "fail", _error_text(exc), time.monotonic() - started)
        raise
    _record(scenario, peer_key, "pass", detail, time.monotonic() - started)


async def _run_rhea_client(port: int, scenario: str, *arguments: str) -> dict[str, Any]:
    argv = ["node", str(INTEROP / "rhea_client.js"), "--port", str(port), "--scenario", scenario, "--timeout", "60"]
    result = await anyio.run_process([*argv, *arguments], env=_rhea_env(), check=False)
    lines = result.stdout.decode(errors="replace").strip().splitlines()
    stderr = result.stderr.decode(errors="replace")[-2000:]
    assert result.returncode == 0 and lines, f"rhea client exited {result.returncode}: {stderr}"
    outcome: dict[str, Any] = json.loads(lines[-1])
    return outcome


@pytest.mark.parametrize("scenario", [scenario for scenario in SCENARIOS if scenario not in OUR_PROGRAMS_ONLY])
async def test_rhea_client(scenario: str) -> None:
    """rhea as a client of our broker (a subprocess); request/reply: rhea asks, our client answers."""
    started = time.monotonic()
    arguments: list[str] = ["--queue", f"rhea-{scenario}"]
    if scenario in ("at-least-once", "at-most-once"):
        arguments += ["--count", str(COUNT)]
    broker_arguments: list[str] = []
    if scenario == "sasl-plain":
        broker_arguments = ["--user", ":".join(PLAIN_USER)]
        arguments += ["--user", PLAIN_USER[0], "--password", PLAIN_USER[1]]
    try:
        _rhea_env()
        process = _our_broker(*broker_arguments)
        try:
            with anyio.fail_after(120):
                if scenario == "request-reply":
                    count = 10
                    url = f"amqp://127.0.0.1:{process.port}"
                    async with connected(url) as responder, anyio.create_task_group() as group:
                        group.start_soon(_respond, responder, f"rhea-{scenario}-requests", count)
                        outcome = await _run_rhea_client(process.port, scenario, *arguments, "--count", str(count))
                        group.cancel_scope.cancel()  # the responder is done, unless rhea failed: stop waiting
                else:
                    outcome = await _run_rhea_client(process.port, scenario, *arguments)
        finally:
            process.stop()
        assert outcome["ok"], f"rhea client: {outcome['detail']}"
    except pytest.skip.Exception as exc:
        _record(scenario, "rhea-client", "skipped", str(exc.msg), time.monotonic() - started)
        raise
    except BaseException as exc:
        _record(scenario, "rhea-client", "fail", _error_text(exc), time.monotonic() - started)
        raise
    _record(scenario, "rhea-client", "pass", str(outcome["detail"]), time.monotonic() - started)
