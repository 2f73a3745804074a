"""Network fuzz of the callback API in the server role (issue 25): a listening ``Container`` fed mutated client
sessions.

The server is a proton-style program (``QueueServer``: ``container.listen()``, a ``MessagingHandler`` that keeps a
queue per address, answers the links its clients attach, gives each receiver what its queue holds, and answers
requests sent to ``requests``), run by ``Container.run()`` on a thread of its own for the whole module. The
sessions are recorded through ``tests/network_fuzz.py``'s recording proxy: the client programs of
``tests/proton_fuzz_programs.py`` (a Container sending and receiving, a message of several frames, a request; the
blocking API receiving and requesting) and python-qpid-proton's blocking client. Each fuzz case mutates one of them
(``network_fuzz.mutate``) and replays it over a raw socket, paced like the original (two in three) or all at once,
then half-closes: the container must end every session within :data:`DEADLINE`, keep running (its handler raises
nothing; ``run()`` does not return), and then still serve a normal client. Once all sessions are done it holds no
connection and no socket more than before.

``AMQP_FUZZ_PROTON_SERVER_SESSIONS`` sets how many mutated sessions run (default 300), ``AMQP_FUZZ_PROTON_SERVER_SEED``
the base seed. Inputs that once failed are kept in ``tests/fuzz_corpus/proton-server/`` (``NAME.bin``, and
``NAME.boundaries`` for a paced one), replayed by :func:`test_corpus_input`.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqp_async.proton import Message
from amqp_async.proton.handlers import MessagingHandler
from amqp_async.proton.reactor import Container

try:
    import proton_fuzz_programs as programs
    from network_fuzz import Recorded, RecordingProxy, mutate, replay
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import proton_fuzz_programs as programs
    from tests.network_fuzz import Recorded, RecordingProxy, mutate, replay

CORPUS = Path(__file__).parent / "fuzz_corpus" / "proton-server"
SESSIONS = int(os.environ.get("AMQP_FUZZ_PROTON_SERVER_SESSIONS", "300"))
BASE_SEED = int(os.environ.get("AMQP_FUZZ_PROTON_SERVER_SEED", "25"))
DEADLINE = 5.0  # seconds for the container to end a replayed session once we half-closed
TIMEOUT = 20.0
#: The client programs recorded (those the server can serve: no transactions, no SASL PLAIN).
CLIENTS = ("send-receive", "large", "request", "blocking-receive", "blocking-request")


class QueueServer(MessagingHandler):
    """A proton program that serves clients: a queue per address, requests to ``requests`` answered."""

    def __init__(self) -> None:
        super().__init__()
        self.queues: dict[str, collections.deque[Message]] = collections.defaultdict(collections.deque)
        self.consumers: dict[str, list[Any]] = collections.defaultdict(list)
        self.dynamic = itertools.count(1)
        self.acceptor: Any = None
        self.listening = threading.Event()
        self.errors: list[str] = []
        self.queues["fuzz-preloaded"].extend(Message(body=f"preloaded-{index}") for index in range(2))

    def on_start(self, event: Any) -> None:
        self.acceptor = event.container.listen("127.0.0.1:0")
        self.listening.set()

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_sender:
            if link.remote_source.dynamic:
                link.source.address = f"dynamic-{next(self.dynamic)}"
            else:
                link.source.copy(link.remote_source)
            if link.source.address:
                self.consumers[link.source.address].append(link)
        else:
            link.target.copy(link.remote_target)

    def _forget(self, link: Any) -> None:
        for senders in self.consumers.values():
            if link in senders:
                senders.remove(link)

    def on_link_closing(self, event: Any) -> None:
        self._forget(event.link)

    def on_connection_closing(self, event: Any) -> None:
        self._forget_connection(event.connection)

    def on_disconnected(self, event: Any) -> None:
        self._forget_connection(event.connection)

    def _forget_connection(self, connection: Any) -> None:
        for address, senders in self.consumers.items():
            self.consumers[address] = [link for link in senders if link.connection is not connection]

    def on_sendable(self, event: Any) -> None:
        self._deliver(event.link.source.address)

    def _deliver(self, address: str | None) -> None:
        if not address:
            return
        queue = self.queues[address]
        for link in list(self.consumers[address]):
            while queue and link.credit > 0 and link.state & link.LOCAL_ACTIVE:
                link.send(queue.popleft())

    def on_message(self, event: Any) -> None:
        message = event.message
        address = event.link.target.address or message.address
        if address == "requests" and message.reply_to:
            reply = Message(body="pong", address=message.reply_to, correlation_id=message.correlation_id)
            self.queues[message.reply_to].append(reply)
            self._deliver(message.reply_to)
        elif address:
            self.queues[address].append(message)
            self._deliver(address)

    def on_transport_error(self, event: Any) -> None:
        pass  # hostile clients: a protocol error ends their connection, and is no error of the server's


class Server:
    """The server program on its own thread, for the module."""

    def __init__(self) -> None:
        self.handler = QueueServer()
        self.container = Container(self.handler)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="fuzz-proton-server", daemon=True)
        self.thread.start()
        assert self.handler.listening.wait(TIMEOUT)
        self.port = int(self.handler.acceptor.port)

    def _run(self) -> None:
        try:
            self.container.run()
        except BaseException as exc:  # the test reports it
            self.error = exc

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.thread.is_alive()

    def connections(self) -> int:
        """The connections the container still runs (one task each)."""
        return len(self.container._channels)

    def stop(self) -> None:
        self.container.call_threadsafe(self.container.stop)
        self.thread.join(TIMEOUT)


def _open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return count


def _settled(server: Server, sockets: int) -> tuple[int, int]:
    """The server's connections and the sockets beyond ``sockets``, once what is closing had a moment to (fewer
    than ``sockets`` is as good as none beyond: the process may close a socket of its own meanwhile, as a
    pytest-xdist worker does)."""
    for _ in range(100):
        extra = (server.connections(), _open_sockets() - sockets)
        if extra[0] == 0 and extra[1] <= 0:
            break
        time.sleep(0.05)
    return extra


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server()
    try:
        yield running
    finally:
        running.stop()
        assert not running.thread.is_alive(), "the server's container did not stop"
        assert running.error is None, repr(running.error)


def _proton_client(url: str) -> None:
    """python-qpid-proton's blocking client: a send, then a receive with accept."""
    from proton import Message as ProtonMessage
    from proton.utils import BlockingConnection

    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        conn.create_sender("fuzz-proton").send(ProtonMessage(body="from proton", properties={"n": 1}))
        receiver = conn.create_receiver("fuzz-proton", credit=1)
        receiver.receive(TIMEOUT)
        receiver.accept()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def sessions(server: Server) -> list[Recorded]:
    """The bytes of real client sessions: our proton programs', then python-qpid-proton's."""
    api = programs.api("ours")
    with RecordingProxy(("127.0.0.1", server.port)) as proxy:
        for name in CLIENTS:
            run = programs.Run()
            assert programs.PROGRAMS[name](api, proxy.url, run) == "completed", (name, run.events)
        count = len(proxy.wait_sessions(len(CLIENTS)))
        pytest.importorskip("proton", reason="python-qpid-proton is one of the recorded clients; CI installs it")
        _proton_client(proxy.url)
        recorded = proxy.wait_sessions(count + 1)
    assert all(session.data for session in recorded), "an empty recorded session"
    return recorded


def assert_serves(server: Server) -> None:
    assert server.alive(), repr(server.error)
    run = programs.Run()
    assert programs.send_receive(programs.api("ours"), server.url, run) == "completed", run.events


def test_recorded_sessions_replay_cleanly(server: Server, sessions: list[Recorded]) -> None:
    """Control: each recorded session, replayed unchanged and paced, is served to its end (the server closes it)."""
    for index, session in enumerate(sessions):
        result = replay(
            "127.0.0.1", server.port, session.data, seed=index, deadline=DEADLINE, boundaries=session.boundaries
        )
        assert result.ended == "closed", index
        assert server.alive(), repr(server.error)
    assert_serves(server)


def test_mutated_sessions(server: Server, sessions: list[Recorded], tmp_path: Path) -> None:
    """``SESSIONS`` mutated sessions (two in three paced like the original, the rest pipelined): the container ends
    each within the deadline, keeps running, holds no connection or socket after, and still serves."""
    failures: list[str] = []
    sockets = _open_sockets()
    started = time.monotonic()
    longest = 0.0
    for index in range(SESSIONS):
        seed = BASE_SEED * 1_000_003 + index
        base = sessions[index % len(sessions)]
        mutated = mutate(base.data, seed)
        boundaries = base.boundaries if index % 3 else None
        result = replay("127.0.0.1", server.port, mutated.data, seed=seed, deadline=DEADLINE, boundaries=boundaries)
        longest = max(longest, result.seconds)
        if result.ended != "closed" or not server.alive():
            path = tmp_path / f"seed-{seed}.bin"
            path.write_bytes(mutated.data)
            if boundaries is not None:
                path.with_suffix(".boundaries").write_text(",".join(map(str, boundaries)))
            failures.append(f"{path} ({result.ended}, alive={server.alive()}): {mutated.mutations}")
            if not server.alive():
                break
    print(f"{SESSIONS} sessions in {time.monotonic() - started:.1f} s, the longest {longest:.2f} s")
    assert not failures, "\n".join(failures) + f"\n{server.error!r}"
    connections, beyond = _settled(server, sockets)
    assert connections == 0, f"the container still holds {connections} connections"
    assert beyond <= 0, f"{beyond} sockets more than before the sessions"
    assert_serves(server)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.bin")), ids=lambda path: path.stem)
def test_corpus_input(server: Server, path: Path) -> None:
    """Every input that once failed: it is served to its end and the container goes on."""
    paced = path.with_suffix(".boundaries")
    boundaries = [int(offset) for offset in paced.read_text().split(",")] if paced.exists() else None
    result = replay("127.0.0.1", server.port, path.read_bytes(), deadline=DEADLINE, boundaries=boundaries)
    assert result.ended == "closed"
    assert_serves(server)
