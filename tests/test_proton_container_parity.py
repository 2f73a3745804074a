"""The container (reactor) path of amqp_async.proton beside python-qpid-proton 0.40: the same program on each, the
same record.

Each scenario below is written once against the ``proton``, ``proton.handlers`` and ``proton.reactor`` modules it is
given and run in a subprocess of its own (``python this_file.py SCENARIO IMPL``: a hang fails the test, it never
blocks the suite), once on real proton and once on ours; the test asserts that ours recorded what proton recorded.

Covered:

* the transport settings of a container's connection (``max_frame_size``, ``idle_timeout``, ``channel_max`` and the
  peer's): what ``connect(max_frame_size=..., heartbeat=..., channel_max=...)`` and a handler's
  ``on_connection_bound`` make of them, as read back on each side and as the open frame announced them (what a
  python-qpid-proton peer reads in ``transport.remote_*``), for a client and for an accepted connection;
* the events of a TCP connection the peer drops without an AMQP close: a reset (the error before the head closes)
  and a plain end of stream (head, tail, closed, then the error);
* event types: ``str()``, ``repr()``, ``name``, ``number`` of ``Event.*``, and of ``event.type`` in callbacks;
* ``on_transport`` (after the program gives a transport something to write) and ``on_reactor_quiesced`` (before
  the container waits), compared on what a program can rely on: their count varies with I/O batching in proton
  itself.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

IMPLEMENTATIONS = ["proton", "amqp_async.proton"]
SUBPROCESS_TIMEOUT = 8.0


def _modules(name: str) -> tuple[Any, Any, Any]:
    base = importlib.import_module(name)
    return base, importlib.import_module(name + ".handlers"), importlib.import_module(name + ".reactor")


def _transport_settings(transport: Any) -> dict[str, Any]:
    return {
        "max_frame_size": transport.max_frame_size,
        "idle_timeout": repr(transport.idle_timeout),  # repr: 4.0 and 4 differ
        "channel_max": transport.channel_max,
        "remote_max_frame_size": transport.remote_max_frame_size,
        "remote_channel_max": transport.remote_channel_max,
        "remote_idle_timeout": repr(transport.remote_idle_timeout),
    }


def _proton_listener_port(acceptor: Any) -> int:
    return int(acceptor._selectable.getsockname()[1])


class _ProtonPeer:
    """A python-qpid-proton listener in a thread: records the transport of each connection it accepts once the
    client's open came (what the client's open frame announced is its ``remote_*``)."""

    def __init__(self) -> None:
        import proton.handlers
        import proton.reactor

        peer = self
        self.seen: list[dict[str, Any]] = []
        ready = threading.Event()

        class Server(proton.handlers.MessagingHandler):  # type: ignore[misc]
            def on_start(self, event: Any) -> None:
                self.acceptor = event.container.listen("127.0.0.1:0")
                peer.port = _proton_listener_port(self.acceptor)
                ready.set()

            def on_connection_opened(self, event: Any) -> None:
                peer.seen.append(_transport_settings(event.connection.transport))

            def on_connection_closed(self, event: Any) -> None:
                self.acceptor.close()

        self.thread = threading.Thread(target=proton.reactor.Container(Server()).run, daemon=True)
        self.thread.start()
        ready.wait(5)


# --- scenarios (run in the subprocess) ------------------------------------------------------------------------


def client_settings(name: str, options: dict[str, Any]) -> Any:
    """A client connects to a python-qpid-proton listener with ``options`` (``bound``: its handler sets the
    transport's settings in on_connection_bound) and closes once open."""
    _, handlers, reactor = _modules(name)
    bound = options.pop("bound", False)
    peer = _ProtonPeer()
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            event.container.connect(f"127.0.0.1:{peer.port}", reconnect=False, **options)

        def on_connection_bound(self, event: Any) -> None:
            record.append(["bound", _transport_settings(event.transport)])
            if bound:
                event.transport.channel_max = 100
                event.transport.max_frame_size = 1000
                event.transport.idle_timeout = 3
                record.append(["bound, set", _transport_settings(event.transport)])

        def on_connection_opened(self, event: Any) -> None:
            record.append(["opened", _transport_settings(event.transport)])
            event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            record.append(["closed", _transport_settings(event.transport)])

    reactor.Container(Client()).run()
    peer.thread.join(5)
    return {"client": record, "peer saw": peer.seen}


def server_settings(name: str, options: dict[str, Any]) -> Any:
    """A listener of ``name`` accepts a python-qpid-proton client (``bound``: its handler sets the accepted
    transport's settings in on_connection_bound)."""
    import proton.handlers
    import proton.reactor

    _, handlers, reactor = _modules(name)
    bound = options.get("bound", False)
    record: list[Any] = []
    ready = threading.Event()
    port: list[int] = []

    class Server(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen("127.0.0.1:0")
            port.append(self.acceptor.port if name != "proton" else _proton_listener_port(self.acceptor))
            ready.set()

        def on_connection_bound(self, event: Any) -> None:
            record.append(["bound", _transport_settings(event.transport)])
            if bound:
                event.transport.channel_max = 100
                event.transport.max_frame_size = 1000
                event.transport.idle_timeout = 3

        def on_connection_opened(self, event: Any) -> None:
            record.append(["opened", _transport_settings(event.connection.transport)])

        def on_connection_closed(self, event: Any) -> None:
            self.acceptor.close()

    thread = threading.Thread(target=reactor.Container(Server()).run, daemon=True)
    thread.start()
    ready.wait(5)
    seen: list[Any] = []

    class Client(proton.handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            event.container.connect(f"127.0.0.1:{port[0]}", reconnect=False)

        def on_connection_opened(self, event: Any) -> None:
            seen.append(_transport_settings(event.transport))
            event.connection.close()

    proton.reactor.Container(Client()).run()
    thread.join(5)
    return {"server": record, "client saw": seen}


class _Proxy:
    """A TCP relay to ``upstream`` whose :meth:`drop` closes both sides without a word of AMQP: with ``reset``, the
    client's side is reset (SO_LINGER 0), else closed (end of stream)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(5)
        self.port = self.sock.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.pairs.append((client, server))
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                readable, _, _ = select.select([client, server], [], [], 0.05)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (server if sock is client else client).sendall(data)
        except (OSError, ValueError):
            return

    def drop(self, reset: bool) -> None:
        # No second connection: a reconnect attempt is refused (shutdown wakes the accepting thread; close alone
        # would not, on Linux).
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        pairs, self.pairs = self.pairs, []
        for client, server in pairs:
            if reset:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            server.close()


#: Left out of the records of raw events: their count follows I/O batching in proton itself (see the on_transport
#: and on_reactor_quiesced scenario for what is compared of them).
_VARYING = ("on_transport", "on_reactor_quiesced", "on_link_flow")


def dropped(name: str, options: dict[str, Any]) -> Any:
    """A client opens a sender through a relay to our broker; once the link is open the relay drops the TCP
    connection (``reset`` or a plain close). The handler closes the connection at its second on_disconnected, or
    with reconnect at its third: the first of the refused attempt to reconnect (the relay is gone). Recorded: the
    raw events and MessagingHandler's callbacks, in order."""
    from amqp_async.broker import BrokerThread

    _, handlers, reactor = _modules(name)
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            self.disconnects = 0
            connection = event.container.connect(f"127.0.0.1:{proxy.port}", reconnect=options["reconnect"])
            event.container.create_sender(connection, "q", name="snd")

        def on_unhandled(self, method: str, event: Any) -> None:
            if method not in _VARYING and not method.startswith("on_selectable"):
                record.append(method)

        def on_link_opened(self, event: Any) -> None:
            record.append("on_link_opened")
            proxy.drop(options["reset"])

        def on_transport_error(self, event: Any) -> None:
            record.append(["on_transport_error", event.transport.condition.name])
            super().on_transport_error(event)

        def on_disconnected(self, event: Any) -> None:
            record.append("on_disconnected")
            self.disconnects += 1
            if self.disconnects == (2 if options["reconnect"] is False else 3):
                event.connection.close()

        def on_connection_error(self, event: Any) -> None:
            record.append("on_connection_error")

        def on_connection_closed(self, event: Any) -> None:
            record.append("on_connection_closed")

    with BrokerThread() as broker:
        host_port = broker.url.rsplit("@", 1)[-1].split("//")[-1]
        host, port = host_port.rsplit(":", 1)
        proxy = _Proxy((host, int(port)))
        reactor.Container(Client()).run()
    return record


def event_types(name: str, options: dict[str, Any]) -> Any:
    """One message to our broker: the type of the events the callbacks see (``str``, ``repr``, ``name``,
    ``number``, equality with ``Event.*``), and an application event's."""
    from amqp_async.broker import BrokerThread

    base, handlers, reactor = _modules(name)
    record: list[Any] = []

    def describe(callback: str, event: Any, expected: Any) -> None:
        kind = event.type
        record.append(
            [callback, str(kind), repr(kind), kind.name, kind.number, kind.method, kind == expected, kind is expected]
        )

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            describe("on_start", event, base.Event.REACTOR_INIT)
            self.sent = False
            event.container.create_sender(event.container.connect(url, reconnect=False), "q")

        def on_connection_opened(self, event: Any) -> None:
            describe("on_connection_opened", event, base.Event.CONNECTION_REMOTE_OPEN)

        def on_sendable(self, event: Any) -> None:
            describe("on_sendable", event, base.Event.LINK_FLOW)
            if not self.sent:
                self.sent = True
                event.sender.send(base.Message(body="x"))

        def on_accepted(self, event: Any) -> None:
            describe("on_accepted", event, base.Event.DELIVERY)
            event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            describe("on_connection_closed", event, base.Event.CONNECTION_REMOTE_CLOSE)

    with BrokerThread() as broker:
        url = broker.url
        reactor.Container(Client()).run()
    application = reactor.ApplicationEvent("my_event")
    again = reactor.ApplicationEvent("my_event")
    record.append(["application", str(application.type), application.type.method, application.type is again.type])
    record.append(["application named as a core type", application.type is base.Event.DELIVERY])
    return record


def transport_and_quiesced(name: str, options: dict[str, Any]) -> Any:
    """Two messages to our broker from a handler that defines on_transport and on_reactor_quiesced; facts about
    where they come that hold on every run of proton (their count follows I/O batching)."""
    from amqp_async.broker import BrokerThread

    base, handlers, reactor = _modules(name)
    log: list[str] = []
    checks: dict[str, Any] = {}

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            log.append("start")
            self.sent = 0
            event.container.create_sender(event.container.connect(url, reconnect=False), "q")

        def on_connection_bound(self, event: Any) -> None:
            log.append("bound")

        def on_sendable(self, event: Any) -> None:
            if self.sent < 2:
                self.sent += 1
                event.sender.send(base.Message(body="x"))
                log.append("send")

        def on_accepted(self, event: Any) -> None:
            log.append("accepted")
            if self.sent == 2 and log.count("accepted") == 2:
                event.connection.close()

        def on_transport(self, event: Any) -> None:
            log.append("T")
            checks["transport type"] = [str(event.type), event.type is base.Event.TRANSPORT]
            connection = event.connection  # (None on proton's last one: the transport was unbound)
            checks["transport context"] = [
                event.context is event.transport,
                connection is None or event.transport is connection.transport,
            ]

        def on_reactor_quiesced(self, event: Any) -> None:
            log.append("Q")
            checks["quiesced type"] = [str(event.type), event.type is base.Event.REACTOR_QUIESCED]
            checks["quiesced context"] = [event.context is event.container, event.connection is None]

        def on_transport_closed(self, event: Any) -> None:
            log.append("closed")

        def on_reactor_final(self, event: Any) -> None:
            log.append("final")

    with BrokerThread() as broker:
        url = broker.url
        reactor.Container(Client()).run()

    def between(first: str, then: str) -> list[bool]:
        """For each ``first``, whether a T comes after it and before the next ``then``."""
        found = []
        for index, entry in enumerate(log):
            if entry == first:
                rest = log[index + 1 :]
                end = rest.index(then) if then in rest else len(rest)
                found.append("T" in rest[:end])
        return found

    start, bound = log.index("start"), log.index("bound")
    checks["a Q before the peer answers"] = "Q" in log[bound : log.index("accepted")]
    checks["no Q or T between start and bound"] = not {"Q", "T"} & set(log[start:bound])
    checks["a T after each send, before its outcome"] = between("send", "accepted")
    checks["no Q once the transport closed"] = "Q" not in log[log.index("closed") :]
    checks["the last event"] = log[-1]
    return checks


def timer_quiesced(name: str, options: dict[str, Any]) -> Any:
    """A program with two timers and no connection: the container is quiesced before each timer fires (runs of Q
    made one: proton raises one per select that times out)."""
    _, handlers, reactor = _modules(name)
    log: list[str] = []

    class Timers(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            log.append("start")
            event.container.schedule(0.05, self)

        def on_timer_task(self, event: Any) -> None:
            log.append("timer")
            if log.count("timer") < 2:
                event.container.schedule(0.05, self)

        def on_reactor_quiesced(self, event: Any) -> None:
            if log[-1] != "Q":
                log.append("Q")

        def on_reactor_final(self, event: Any) -> None:
            log.append("final")

    reactor.Container(Timers()).run()
    return log


def connection_scoped_transport(name: str, options: dict[str, Any]) -> Any:
    """on_transport goes to the connection's own handler (the container's has none)."""
    from amqp_async.broker import BrokerThread

    _, handlers, reactor = _modules(name)
    seen: list[str] = []

    class Scoped(handlers.MessagingHandler):  # type: ignore[misc]
        def on_transport(self, event: Any) -> None:
            if not seen:
                seen.append(type(event.context).__name__)

        def on_connection_opened(self, event: Any) -> None:
            event.connection.close()

    class Main(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            event.container.connect(url, reconnect=False, handler=Scoped())

    with BrokerThread() as broker:
        url = broker.url
        reactor.Container(Main()).run()
    return seen


def connection_user(name: str, options: dict[str, Any]) -> Any:
    """``connection.user`` in on_connection_opened, for a user given to connect() and one in the URL; the clock of
    ``container.now`` and ``mark()`` (proton's is the time since the epoch: a program stamps messages with it)."""
    import time

    from amqp_async.broker import BrokerThread

    _, handlers, reactor = _modules(name)
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            container = event.container
            record.append(["clock", abs(container.now - time.time()) < 60, abs(container.mark() - time.time()) < 60])
            common = {"allowed_mechs": "PLAIN", "allow_insecure_mechs": True, "reconnect": False}
            self.first = container.connect(url, user="alice", password="pw", **common)
            record.append(["after connect()", self.first.user])
            host = url.split("://", 1)[1]
            self.second = container.connect(f"amqp://bob:pw@{host}", **common)

        def on_connection_opened(self, event: Any) -> None:
            which = "option" if event.connection == self.first else "url"  # (proton wraps it anew: not `is`)
            record.append([which, event.connection.user, event.transport.user])
            event.connection.close()

    with BrokerThread(users={"alice": "pw", "bob": "pw"}) as broker:
        url = broker.url
        reactor.Container(Client()).run()
    return sorted(record, key=str)


def refused_credentials(name: str, options: dict[str, Any]) -> Any:
    """A wrong password: the transport's condition, as a container's handler sees it, and the text of
    BlockingConnection's ConnectionException (a program may look for "Authentication failed" in either)."""
    from amqp_async.broker import BrokerThread

    base, handlers, reactor = _modules(name)
    utils = importlib.import_module(name + ".utils")
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            event.container.connect(wrong, allowed_mechs="PLAIN", allow_insecure_mechs=True, reconnect=False)

        def on_transport_error(self, event: Any) -> None:
            condition = event.transport.condition
            record.append(["transport error", condition.name, condition.description])

    with BrokerThread(users={"alice": "secret"}) as broker:
        host = broker.url.split("://", 1)[1]
        wrong = f"amqp://alice:wrong@{host}"
        reactor.Container(Client()).run()
        try:
            utils.BlockingConnection(wrong, timeout=5, allowed_mechs="PLAIN", allow_insecure_mechs=True)
        except base.ConnectionException as exc:
            record.append(["blocking", str(exc).replace(host, "HOST").replace("%2A%2A%2A", "wrong")])
    return record


def unresolvable_host(name: str, options: dict[str, Any]) -> Any:
    """A host name that does not resolve, reconnect left at its default: run() raises the resolver's error, as
    BlockingConnection() does (it retried for ever, in silence)."""
    import socket

    _, handlers, reactor = _modules(name)
    utils = importlib.import_module(name + ".utils")
    url = "amqp://no-such-host.invalid:5672"
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            event.container.connect(url)

    for attempt in (lambda: reactor.Container(Client()).run(), lambda: utils.BlockingConnection(url, timeout=5)):
        try:
            attempt()
        except socket.gaierror as exc:
            record.append(["raised", type(exc).__name__])
        else:
            record.append(["returned"])
    return record


SCENARIOS = {
    "client_settings": client_settings,
    "server_settings": server_settings,
    "dropped": dropped,
    "event_types": event_types,
    "transport_and_quiesced": transport_and_quiesced,
    "timer_quiesced": timer_quiesced,
    "connection_scoped_transport": connection_scoped_transport,
    "connection_user": connection_user,
    "refused_credentials": refused_credentials,
    "unresolvable_host": unresolvable_host,
}


def _run(scenario: str, impl: str, options: dict[str, Any] | None = None) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [sys.executable, __file__, scenario, impl, json.dumps(options or {})]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{scenario} on {impl} timed out; stderr: {exc.stderr!r}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"{scenario} on {impl}: no result (exit {done.returncode}); stderr:\n{done.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def _same(scenario: str, options: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """Run ``scenario`` on proton and on ours; return (proton's record, ours)."""
    return _run(scenario, "proton", options), _run(scenario, "amqp_async.proton", options)


pytestmark = [pytest.mark.interop]
pytest.importorskip("proton")


# --- 1. transport settings and the open frame -------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"max_frame_size": 10000, "heartbeat": 4},
        {"channel_max": 100},  # proton's connect() takes it and ignores it
        {"bound": True},
    ],
    ids=["defaults", "max_frame_size-heartbeat", "channel_max-ignored", "set-when-bound"],
)
def test_client_transport_settings_and_open_frame_as_protons(options: dict[str, Any]) -> None:
    reference, ours = _same("client_settings", options)
    assert ours == reference


@pytest.mark.parametrize("options", [{}, {"bound": True}], ids=["defaults", "set-when-bound"])
def test_accepted_transport_settings_and_open_frame_as_protons(options: dict[str, Any]) -> None:
    reference, ours = _same("server_settings", options)
    assert ours == reference


# --- 2. a TCP connection dropped without an AMQP close ----------------------------------------------------------


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "end-of-stream"])
@pytest.mark.parametrize("reconnect", [False, True], ids=["no-reconnect", "reconnect"])
def test_dropped_connection_events_as_protons(reset: bool, reconnect: bool) -> None:
    # With reconnect, the attempt after the drop is refused (the relay is gone): proton's connection-refused order.
    options = {"reset": reset, "reconnect": None if reconnect else False}
    reference, ours = _same("dropped", options)
    assert ours == reference


# --- 3. event types ---------------------------------------------------------------------------------------------


def test_event_types_as_protons() -> None:
    import proton

    import amqp_async.proton as ours

    def table(module: Any) -> dict[str, Any]:
        kinds = {
            n: getattr(module.Event, n)
            for n in dir(module.Event)
            if isinstance(getattr(module.Event, n), module.EventType)
        }
        return {n: [str(k), repr(k), k.name, k.number, k.method] for n, k in kinds.items()}

    assert table(ours) == table(proton)


def test_event_types_in_callbacks_as_protons() -> None:
    reference, ours = _same("event_types")
    assert ours == reference


# --- 4. on_transport and on_reactor_quiesced --------------------------------------------------------------------


def test_on_transport_and_on_reactor_quiesced_as_protons() -> None:
    reference, ours = _same("transport_and_quiesced")
    assert ours == reference


def test_quiesced_before_each_timer_as_protons() -> None:
    reference, ours = _same("timer_quiesced")
    assert reference == ["start", "Q", "timer", "Q", "timer", "final"]
    assert ours == reference


def test_on_transport_goes_to_the_connection_handler_as_protons() -> None:
    reference, ours = _same("connection_scoped_transport")
    assert reference == ["Transport"]
    assert ours == reference


# --- 5. credentials, clock, names -------------------------------------------------------------------------------


def test_connection_user_and_the_containers_clock_as_protons() -> None:
    reference, ours = _same("connection_user")
    assert ["url", "bob", "bob"] in reference and ["clock", True, True] in reference
    assert ours == reference


def test_refused_credentials_are_described_as_protons() -> None:
    reference, ours = _same("refused_credentials")
    assert ["transport error", "amqp:unauthorized-access", "Authentication failed [mech=PLAIN]"] in reference
    assert ours == reference


def test_a_host_name_that_does_not_resolve_raises_as_protons() -> None:
    reference, ours = _same("unresolvable_host")
    assert reference == [["raised", "gaierror"]] * 2
    assert ours == reference


if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](sys.argv[2], json.loads(sys.argv[3]))
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # proton's peer threads are daemons: do not wait for them
