"""What the network fuzz of the callback API found (``tests/test_network_fuzz_proton.py``), each fixed behaviour on
its own, beside python-qpid-proton doing the same:

* a peer that accepts the connection and says nothing (or stops before its open) is given up after the idle timeout
  the program asked for (``heartbeat``), with ``amqp:resource-limit-exceeded``, as proton's transport does: it
  counts from its first tick, not from the peer's open (the engine's ``idle_from_start``);
* a terminus of a type we do not know in the peer's attach reads as an unspecified terminus, as in proton, instead
  of raising ``AttributeError``;
* bytes that are not a message raise proton's ``MessageException`` (condition ``amqp:decode-error``) from
  ``Message.decode``, where they raised our codec's ``DecodeError``; a received message that does not decode is
  rejected with ``amqp:decode-error`` by ``MessagingHandler`` (no ``on_message``; the sender learns of it) and the
  container goes on, where the ``DecodeError`` stopped it (and a hostile client stopped a server). A deliberate
  difference from proton, which decodes what it can and hands over an empty (or partial) message without a word,
  or raises and stops (docs/proton.md): the tests pin both.
"""

from __future__ import annotations

import importlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from amqp_async import AMQPError
from amqp_async.codec import conditions
from amqp_async.protocol import CLIENT
from amqp_async.protocol.connection import Connection as Engine
from amqp_async.protocol.events import ConnectionClosed, ConnectionOpened

try:
    from frames import AMQP_HEADER, frame
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame

from amqp_async.codec.performatives import Open
from amqp_async.types import Described, symbol, ulong

pytest.importorskip("proton", reason="python-qpid-proton is the reference implementation; CI installs it")

TIMEOUT = 20.0
FLAVOURS = ["proton", "ours"]
UNDECODABLE = b"\x00\x53\x77\xa1\x05hel"  # an amqp-value section whose string is cut short


def modules(flavour: str) -> tuple[Any, Any, Any, Any]:
    package = "proton" if flavour == "proton" else "amqp_async.proton"
    return tuple(  # type: ignore[return-value]
        importlib.import_module(f"{package}{suffix}") for suffix in ("", ".reactor", ".handlers", ".utils")
    )


# --- the engine: idle_from_start -------------------------------------------------------------------------------


def _conditions(engine: Engine) -> list[str]:
    return [str(event.error.condition) for event in engine.next_events() if isinstance(event, ConnectionClosed)]


def test_idle_from_start_runs_the_idle_timeout_before_the_peers_open() -> None:
    engine = Engine(role=CLIENT, container_id="c", idle_timeout=2.0, idle_from_start=True)
    engine.open()
    assert engine.input_deadline is None  # the clock starts at the first tick
    assert engine.tick(100.0) == 102.0
    assert engine.input_deadline == 102.0
    engine.receive_data(AMQP_HEADER[:4], 101.5)  # any input moves it: the peer is not silent
    assert engine.input_deadline == 103.5
    assert engine.tick(103.0) == 103.5
    assert _conditions(engine) == []
    assert engine.tick(103.5) is None  # silent for the whole idle timeout
    assert _conditions(engine) == [conditions.RESOURCE_LIMIT_EXCEEDED]
    assert engine.input_deadline is None


def test_idle_from_start_changes_nothing_once_the_peer_opened() -> None:
    engine = Engine(role=CLIENT, container_id="c", idle_timeout=2.0, idle_from_start=True)
    engine.open()
    assert engine.tick(100.0) == 102.0
    engine.receive_data(AMQP_HEADER + frame(Open(container_id="peer")), 101.0)
    assert any(isinstance(event, ConnectionOpened) for event in engine.next_events())
    assert engine.input_deadline == 103.0  # from the last input, as without the option
    assert engine.tick(102.9) == 103.0
    assert engine.tick(103.0) is None
    assert _conditions(engine) == [conditions.RESOURCE_LIMIT_EXCEEDED]


def test_without_idle_from_start_there_is_no_deadline_before_the_open() -> None:
    engine = Engine(role=CLIENT, container_id="c", idle_timeout=2.0)
    engine.open()
    assert engine.tick(100.0) is None
    assert engine.input_deadline is None
    assert engine.tick(1e9) is None
    assert _conditions(engine) == []


# --- a terminus of a type we do not know ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, Described(ulong(0x99), ["fuzz-queue"]), Described(symbol("vendor:target"), []), "fuzz-queue", 7],
    ids=["none", "unknown-code", "unknown-symbol", "string", "int"],
)
def test_a_terminus_the_peer_sent_of_an_unknown_type_reads_as_unspecified(value: Any) -> None:
    """Attach's source and target are ``*`` fields (§2.7.3): what the peer puts there that is no source, target or
    coordinator is an unspecified terminus without an address, as proton reads it (the fuzz found an
    AttributeError there, from ``BlockingConnection.create_sender``)."""
    ours, *_ = modules("ours")
    terminus = ours.Terminus._from_composite(value, ours.Terminus.TARGET)
    assert (terminus.type, terminus.address, terminus.dynamic) == (ours.Terminus.UNSPECIFIED, None, False)


# --- a silent peer ---------------------------------------------------------------------------------------------


@contextmanager
def silent_server(greeting: bytes = b"") -> Iterator[tuple[int, list[socket.socket]]]:
    """A TCP server that accepts, writes ``greeting`` (maybe nothing) and then says nothing more, reading what it is
    sent until the client closes; yields its port and the accepted sockets."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(client)
            if greeting:
                client.sendall(greeting)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for client in accepted:
            client.close()


def _client_closed(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except (TimeoutError, OSError):
        return False
    return True


@pytest.mark.parametrize("greeting", [b"", AMQP_HEADER[:5], b"AMQP\x03\x01\x00\x00"], ids=["nothing", "half", "sasl"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_silent_peer_is_given_up_after_the_idle_timeout(flavour: str, greeting: bytes) -> None:
    _, reactor, handlers, _ = modules(flavour)
    seen: list[str] = []

    class Program(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def on_start(self, event: Any) -> None:
            event.container.connect(url, heartbeat=0.5, reconnect=False)

        def on_connection_opened(self, event: Any) -> None:
            seen.append("opened")

        def on_transport_error(self, event: Any) -> None:
            seen.append(f"transport_error {event.transport.condition.name}")

    with silent_server(greeting) as (port, accepted):
        url = f"amqp://127.0.0.1:{port}"
        container = reactor.Container(Program())
        started = time.monotonic()
        runner = threading.Thread(target=container.run, daemon=True)
        runner.start()
        runner.join(TIMEOUT)
        assert not runner.is_alive(), "the program did not end"
        assert time.monotonic() - started < 5.0
        assert seen == ["transport_error amqp:resource-limit-exceeded"]
        assert len(accepted) == 1 and _client_closed(accepted[0], 5.0), "the socket was left open"


# --- a message that does not decode ----------------------------------------------------------------------------


def test_message_decode_raises_proton_s_message_exception() -> None:
    proton, *_ = modules("proton")
    message = proton.Message(body="kept?")
    message.decode(UNDECODABLE)  # proton: no error, an empty message
    assert message.body is None
    ours, *_ = modules("ours")
    with pytest.raises(ours.MessageException) as raised:
        ours.Message().decode(UNDECODABLE)
    assert isinstance(raised.value, AMQPError) and raised.value.condition == "amqp:decode-error"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def proton_sending_undecodable() -> Iterator[tuple[str, list[str]]]:
    """python-qpid-proton listening; it sends one delivery of undecodable bytes on every link it is asked for, and
    records the outcome it gets (then closes the connection)."""
    _, proton_reactor, proton_handlers, _ = modules("proton")
    listening = threading.Event()
    port = _free_port()
    outcomes: list[str] = []

    class Peer(proton_handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(f"127.0.0.1:{port}")
            listening.set()

        def on_link_opening(self, event: Any) -> None:
            event.link.source.copy(event.link.remote_source)  # the node asked for is the one given
            event.link.target.copy(event.link.remote_target)

        def on_sendable(self, event: Any) -> None:
            sender = event.sender
            if not getattr(sender, "done", False):
                sender.done = True
                sender.delivery(b"bad")
                sender.send(UNDECODABLE)
                sender.advance()

        def on_accepted(self, event: Any) -> None:
            outcomes.append("accepted")
            event.connection.close()

        def on_rejected(self, event: Any) -> None:
            condition = event.delivery.remote.condition
            outcomes.append(f"rejected {condition.name}: {condition.description}")
            event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            self.acceptor.close()

        def on_transport_closed(self, event: Any) -> None:
            self.acceptor.close()

    container = proton_reactor.Container(Peer())
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    assert listening.wait(TIMEOUT)
    try:
        yield f"amqp://127.0.0.1:{port}", outcomes
    finally:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "proton's peer did not end"


REJECTED = "rejected amqp:decode-error: needs 5 more bytes but only 3 remain (at offset 5)"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_undecodable_message_is_rejected_and_the_container_goes_on(flavour: str) -> None:
    """Ours: no on_message, the message rejected with amqp:decode-error (the sender learns of it), the container
    going on (the peer closes the connection once it has the outcome). proton: an empty message, accepted."""
    _, reactor, handlers, _ = modules(flavour)
    messages: list[Any] = []

    class Program(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def on_start(self, event: Any) -> None:
            event.container.create_receiver(event.container.connect(url, reconnect=False), "anything")

        def on_message(self, event: Any) -> None:
            messages.append(event.message)

    with proton_sending_undecodable() as (url, outcomes):
        reactor.Container(Program()).run()
    if flavour == "ours":
        assert (messages, outcomes) == ([], [REJECTED])
    else:
        assert ([message.body for message in messages], outcomes) == ([None], ["accepted"])


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_blocking_receiver_skips_an_undecodable_message(flavour: str) -> None:
    core, _, _, utils = modules(flavour)
    with proton_sending_undecodable() as (url, outcomes):
        connection = utils.BlockingConnection(url, timeout=TIMEOUT)
        try:
            receiver = connection.create_receiver("anything")
            if flavour == "ours":
                with pytest.raises(core.ConnectionException):  # rejected; then the peer closed the connection
                    receiver.receive(timeout=TIMEOUT)
            else:
                assert receiver.receive().body is None
                receiver.accept()
        finally:
            connection.close()
    assert outcomes == ([REJECTED] if flavour == "ours" else ["accepted"])
