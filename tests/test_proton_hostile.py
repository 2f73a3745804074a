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
    from frames import AMQP_HEADER, frame, take_complete_frames
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame, take_complete_frames

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


# --- a frame on a handle that is not attached ------------------------------------------------------------------


@contextmanager
def peer_using_an_unattached_handle(mode: str) -> Iterator[tuple[int, threading.Event]]:
    """A peer (no SASL) that opens, begins and attaches as the client's receiver, then sends a frame on a handle
    nothing is attached on, and keeps the socket open until the client closes it (set on the yielded event)."""
    from amqp_async.codec.performatives import Attach, Begin, Detach, Flow, Transfer
    from amqp_async.codec.terminus import Source, Target

    listener = socket.create_server(("127.0.0.1", 0))
    client_closed = threading.Event()

    def serve() -> None:
        client, _ = listener.accept()
        with client:
            client.settimeout(TIMEOUT)
            received = b""
            while received.count(b"\x00\x53\x12") == 0:  # wait for the client's attach
                data = client.recv(65536)
                if not data:
                    return
                received += data
            out = AMQP_HEADER + frame(Open(container_id="peer"))
            out += frame(Begin(remote_channel=0, next_outgoing_id=0, incoming_window=1000, outgoing_window=1000))
            out += frame(
                Attach(name="link", handle=0, role=True, source=Source(address="q"), target=Target(address="q"))
            )
            if mode == "transfer":
                out += frame(
                    Transfer(handle=7, delivery_id=0, delivery_tag=b"t", message_format=0), payload=b"\x00Sw\xa1\x01x"
                )
            elif mode == "flow":
                window = {
                    "next_incoming_id": 0,
                    "incoming_window": 1000,
                    "next_outgoing_id": 0,
                    "outgoing_window": 1000,
                }
                out += frame(Flow(**window, handle=9, delivery_count=0, link_credit=10))
            else:
                out += frame(Detach(handle=5, closed=True))
            client.sendall(out)
            try:
                while client.recv(65536):
                    pass
                client_closed.set()
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], client_closed
    finally:
        listener.close()
        thread.join(TIMEOUT)


@pytest.mark.parametrize("mode", ["transfer", "flow", "detach"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_frame_on_an_unattached_handle_ends_the_connection_with_a_transport_error(flavour: str, mode: str) -> None:
    """Proton closes the connection (amqp:invalid-field; ours says amqp:session:unattached-handle, §2.7) and the
    program sees on_transport_error then on_disconnected, and run() returns though the peer keeps its socket."""

    def start(container: Any, port: int) -> None:
        connection = container.connect(f"127.0.0.1:{port}", reconnect=False, sasl_enabled=False)
        container.create_sender(connection, "q")

    with peer_using_an_unattached_handle(mode) as (port, client_closed):
        assert end_events(flavour, lambda container: start(container, port))[:2] == ["transport_error", "disconnected"]
        assert client_closed.wait(5), "the socket was left open"


def _answer_opening(body: Any) -> bytes:
    """A raw peer's answer (no SASL) to the client's open, begin or attach, as the peer of its sender or of its
    receiver (the node "q"); nothing to any other frame."""
    from amqp_async.codec.performatives import Attach, Begin
    from amqp_async.codec.terminus import Source, Target

    if isinstance(body, Open):
        return AMQP_HEADER + frame(Open(container_id="peer", max_frame_size=65536))
    if isinstance(body, Begin):
        window = {"incoming_window": 2**31 - 1, "outgoing_window": 2**31 - 1}
        return frame(Begin(remote_channel=0, next_outgoing_id=0, **window))
    if isinstance(body, Attach):
        sends = body.role  # the client receives: this peer sends
        return frame(
            Attach(
                name=body.name,
                handle=0,
                role=not sends,
                source=Source(address="q"),
                target=Target(address="q"),
                initial_delivery_count=0 if sends else None,
            )
        )
    return b""


@contextmanager
def peer_detaching_an_unattached_handle_later(link_open: threading.Event) -> Iterator[tuple[int, threading.Event]]:
    """A peer (no SASL) that answers the client's open, begin and attach as they come (as the peer of its sender or
    of its receiver), then, once ``link_open`` is set (the program saw its link open), sends in a write of its own a
    detach for a handle nothing is attached on; it keeps the socket open until the client closes it (set on the
    yielded event)."""
    from amqp_async.codec.performatives import Attach, Detach

    listener = socket.create_server(("127.0.0.1", 0))
    client_closed = threading.Event()

    def serve() -> None:
        client, _ = listener.accept()
        with client:
            client.settimeout(TIMEOUT)
            received = bytearray()
            attached = False
            try:
                while not attached:
                    data = client.recv(65536)
                    if not data:
                        return
                    received += data
                    for body in take_complete_frames(received):
                        client.sendall(_answer_opening(body))
                        attached = attached or isinstance(body, Attach)
                if not link_open.wait(TIMEOUT):
                    return
                client.sendall(frame(Detach(handle=5, closed=True)))
                while client.recv(65536):
                    pass
                client_closed.set()
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], client_closed
    finally:
        listener.close()
        thread.join(TIMEOUT)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_detach_on_an_unattached_handle_read_later_names_the_condition_to_a_blocking_connection(
    flavour: str,
) -> None:
    """The peer's detach for a handle nothing is attached on, in a read after the link opened: the blocking call
    raises ConnectionException naming the condition (proton: amqp:invalid-field; ours
    amqp:session:unattached-handle, §2.7). Ours said "disconnected: unknown": the engine's close, carrying the
    condition, was made while the read's events were translated and was lost when the transport then ended."""
    base, _, _, utils = modules(flavour)
    link_open = threading.Event()
    with peer_detaching_an_unattached_handle_later(link_open) as (port, client_closed):
        connection = utils.BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT, sasl_enabled=False)
        try:
            receiver = connection.create_receiver("q")
            link_open.set()
            with pytest.raises(base.ConnectionException) as raised:
                receiver.receive(timeout=TIMEOUT)
        finally:
            try:
                connection.close()
            except Exception:  # closing a connection that failed may raise the failure again
                pass
        expected = "amqp:invalid-field" if flavour == "proton" else str(conditions.SESSION_UNATTACHED_HANDLE)
        assert expected in str(raised.value)
        assert client_closed.wait(5), "the socket was left open"


def test_a_detach_on_an_unattached_handle_read_later_is_a_transport_error_in_a_container() -> None:
    """The same on a Container (ours only: python-qpid-proton's run() does not return then, though it closes the
    connection): on_transport_error with the condition, before on_disconnected, where the program saw the transport
    closed without an error."""
    _, reactor, handlers, _ = modules("ours")
    link_open = threading.Event()
    seen: list[Any] = []

    class Program(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(f"127.0.0.1:{port}", reconnect=False, sasl_enabled=False)
            event.container.create_sender(connection, "q")

        def on_link_opened(self, event: Any) -> None:
            link_open.set()

        def on_transport_error(self, event: Any) -> None:
            seen.append(("transport_error", event.transport.condition.name))

        def on_disconnected(self, event: Any) -> None:
            seen.append("disconnected")

    with peer_detaching_an_unattached_handle_later(link_open) as (port, client_closed):
        runner = threading.Thread(target=reactor.Container(Program()).run, daemon=True)
        runner.start()
        runner.join(TIMEOUT)
        assert not runner.is_alive(), "the program did not end"
        assert seen[:2] == [("transport_error", str(conditions.SESSION_UNATTACHED_HANDLE)), "disconnected"]
        assert client_closed.wait(5), "the socket was left open"


# --- the order of a transport failure's events -----------------------------------------------------------------


@pytest.mark.parametrize("greeting", [b"", AMQP_HEADER], ids=["silent", "header_only"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_transport_failure_the_protocol_layer_sees_reports_the_error_before_the_disconnect(
    flavour: str, greeting: bytes
) -> None:
    """Proton dispatches transport_error, then tail closed, head closed, closed: on_transport_error runs before
    on_disconnected for an idle timeout and for a peer that answers with a header only."""
    with silent_server(greeting) as (port, _):
        seen = end_events(
            flavour, lambda container: container.connect(f"amqp://127.0.0.1:{port}", heartbeat=0.5, reconnect=False)
        )
        assert seen[:2] == ["transport_error", "disconnected"]


def end_events(flavour: str, start: Any) -> list[str]:
    """Run a program whose ``on_start`` calls ``start(container)`` until it ends (asserted within TIMEOUT); the
    transport_error and disconnected events it saw, in order."""
    _, reactor, handlers, _ = modules(flavour)
    seen: list[str] = []

    class Program(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def on_start(self, event: Any) -> None:
            start(event.container)

        def on_transport_error(self, event: Any) -> None:
            seen.append("transport_error")

        def on_disconnected(self, event: Any) -> None:
            seen.append("disconnected")

    runner = threading.Thread(target=reactor.Container(Program()).run, daemon=True)
    runner.start()
    runner.join(TIMEOUT)
    assert not runner.is_alive(), "the program did not end"
    return seen


def test_the_library_logs_under_proton_s_logger_which_has_a_null_handler() -> None:
    """Proton logs under ``proton``, which has a NullHandler: nothing reaches stderr unless the program configures
    logging (ours used ``amqp_async.proton``, so a warning went to stderr through logging's last resort)."""
    import logging

    import proton._reactor

    from amqp_async.proton import _io, _reactor, _utils

    assert proton._reactor._logger.name == "proton"
    assert {_io.log.name, _reactor.log.name, _utils.log.name} == {"proton"}
    assert any(isinstance(handler, logging.NullHandler) for handler in logging.getLogger("proton").handlers)


# --- a handler that raises -------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_handler_that_raises_ends_run_without_reactor_final(flavour: str) -> None:
    """Proton raises out of run() at once: on_reactor_final is not dispatched after a handler raised."""
    _, reactor, handlers, _ = modules(flavour)
    seen: list[str] = []

    class Program(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def on_start(self, event: Any) -> None:
            event.container.schedule(0.05, self)

        def on_timer_task(self, event: Any) -> None:
            raise KeyError("in the timer")

        def on_reactor_final(self, event: Any) -> None:
            seen.append("reactor_final")

    with pytest.raises(KeyError):
        reactor.Container(Program()).run()
    assert seen == []


# --- a message that never ends -----------------------------------------------------------------------------------


@contextmanager
def peer_sending_a_message_that_never_ends(bytes_to_send: int) -> Iterator[tuple[int, list[Any]]]:
    """A peer (no SASL) that answers the client's open, begin and attach as the sender of its receiver, and once
    given credit sends one message whose transfers say ``more`` for ever (``bytes_to_send`` of it, then it waits);
    the frames the client sends after that are collected in the yielded list (a detach is answered)."""
    from amqp_async.codec.performatives import Detach, Flow, Transfer

    listener = socket.create_server(("127.0.0.1", 0))
    after: list[Any] = []

    def serve() -> None:
        client, _ = listener.accept()
        with client:
            client.settimeout(TIMEOUT)
            received = bytearray()
            credit = False
            try:
                while not credit:
                    data = client.recv(65536)
                    if not data:
                        return
                    received += data
                    for body in take_complete_frames(received):
                        client.sendall(_answer_opening(body))
                        credit = credit or (isinstance(body, Flow) and bool(body.link_credit))
                first = Transfer(handle=0, delivery_id=0, delivery_tag=b"t", message_format=0, more=True)
                client.sendall(frame(first, payload=b"\x00\x53\x75\xb0\x7f\xff\xff\xff"))  # data of 2 GiB - 1
                piece = frame(Transfer(handle=0, more=True), payload=b"x" * 16000)
                for _ in range(bytes_to_send // 16000):
                    client.sendall(piece)
                while True:
                    data = client.recv(65536)
                    if not data:
                        return
                    received += data
                    for body in take_complete_frames(received):
                        after.append(body)
                        if isinstance(body, Detach):
                            client.sendall(frame(Detach(handle=0, closed=True)))
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], after
    finally:
        listener.close()
        thread.join(TIMEOUT)


def test_a_message_that_never_ends_detaches_the_link_at_the_held_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver without a max_message_size (proton's default: none, not announced) holds at most
    HELD_MESSAGE_BOUND bytes of one message: a peer whose transfers say ``more`` for ever made the process grow
    without bound (2.7 GB in 5 s). Past the bound the link is detached with amqp:link:message-size-exceeded, the
    blocking receiver told so, and the attach still announces no max-message-size (as proton's)."""
    from amqp_async.codec.performatives import Detach
    from amqp_async.proton import _engine_links

    monkeypatch.setattr(_engine_links, "HELD_MESSAGE_BOUND", 1 << 20)
    base, _, _, utils = modules("ours")
    with peer_sending_a_message_that_never_ends(4 << 20) as (port, after):
        connection = utils.BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT, sasl_enabled=False)
        try:
            receiver = connection.create_receiver("q")
            assert receiver.link._impl.max_message_size is None  # nothing announced
            with pytest.raises(base.LinkException) as raised:
                receiver.receive(timeout=TIMEOUT)
        finally:
            try:
                connection.close()
            except Exception:  # closing a connection that failed may raise the failure again
                pass
    assert str(conditions.LINK_MESSAGE_SIZE_EXCEEDED) in str(raised.value)
    detaches = [body for body in after if isinstance(body, Detach)]
    assert detaches and detaches[0].error.condition == conditions.LINK_MESSAGE_SIZE_EXCEEDED
