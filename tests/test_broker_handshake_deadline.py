"""Connections that never speak are not kept for ever: the broker's handshake deadline and idle timeout.

Before, a socket that connected and sent nothing (or only a protocol header, or stopped in SASL) was kept for ever:
under ``--max-connections 2`` two such sockets refused every real client with ``amqp:resource-limit-exceeded``,
at 1 s and still at 61 s. And the broker's open asked for no idle-time-out (§2.4.5), so a frozen or vanished client
was never noticed: its unsettled messages stayed held, its connection slot taken.

Checked, with the deadlines made small through the broker's own options:

- raw sockets that send nothing, a header only, a SASL header only, or a header one byte at a time (busy, never
  done) are closed once ``handshake_timeout`` has passed, with one log line naming the peer; they take no place
  under ``max_connections=2`` (only opened connections do): a python-qpid-proton client gets in meanwhile;
- the broker's open asks for half its ``idle_timeout`` (python-qpid-proton reads 30 s by default);
- a raw peer that opens, takes a message and then falls silent is closed with ``amqp:resource-limit-exceeded``
  once ``idle_timeout`` has passed, and the message it held goes to a python-qpid-proton receiver;
- clients that answer the idle-time-out asked (ours with no heartbeat of its own, python-qpid-proton's container)
  stay connected across several idle timeouts;
- the options: constructor checks, ``--handshake-timeout`` and ``--idle-timeout`` on the command line.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker.__main__ import make_broker, parse_arguments
from amqp_async.codec.performatives import RECEIVER, Attach, Begin, Close, Flow, Open, Transfer
from amqp_async.codec.terminus import Source, Target

try:
    from frames import AMQP_HEADER, SASL_HEADER, frame, frames_only
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, SASL_HEADER, frame, frames_only

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import utils as proton_utils  # noqa: E402 - after the importorskip that explains its absence
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

TIMEOUT = 10.0
#: The handshake deadline and idle timeout the tests give the broker (seconds): small, so that each test is short.
DEADLINE = 1.0
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _read_until_closed(sock: socket.socket, seconds: float) -> tuple[bytes, bool]:
    """What arrives on ``sock`` within ``seconds``, and whether the broker closed it meanwhile."""
    data = bytearray()
    sock.settimeout(0.05)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return bytes(data), True
        if not chunk:
            return bytes(data), True
        data += chunk
    return bytes(data), False


def _proton_client(url: str) -> str:
    """A python-qpid-proton client's attempt: "ok", or the error it got."""
    try:
        connection = proton_utils.BlockingConnection(url, timeout=TIMEOUT)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        connection.create_sender("q")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()
    return "ok"


def test_silent_sockets_are_closed_at_the_handshake_deadline_and_free_their_place(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="amqp_async.broker")
    with BrokerThread(max_connections=2, handshake_timeout=DEADLINE) as broker:
        port = _port(broker.url)
        started = time.monotonic()
        silent = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)  # says nothing at all
        header_only = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        header_only.sendall(AMQP_HEADER)  # a protocol header, then nothing
        try:
            time.sleep(0.2)
            # they hold no place under max-connections (only opened connections do): a real client gets in at once
            # (it was refused until the deadline, and a peer reconnecting its silent sockets kept it out for ever)
            assert _proton_client(broker.url) == "ok"
            peers = {f"127.0.0.1:{sock.getsockname()[1]}" for sock in (silent, header_only)}
            received, closed = _read_until_closed(silent, TIMEOUT)
            assert closed and received == b""
            received, closed = _read_until_closed(header_only, TIMEOUT)
            assert closed and received == AMQP_HEADER  # the broker's header answered its own, then the end
            assert time.monotonic() - started >= DEADLINE * 0.9  # not before the deadline
            assert _proton_client(broker.url) == "ok"
        finally:
            silent.close()
            header_only.close()
    lines = [record.getMessage() for record in caplog.records if "handshake timeout" in record.getMessage()]
    for peer in peers:
        # one line each, naming the peer (not a second "closed" line for the same connection)
        assert len([line for line in lines if peer in line]) == 1, lines
        others = [r.getMessage() for r in caplog.records if peer in r.getMessage() and r.getMessage() not in lines]
        assert others == [], others


def test_a_handshake_stopped_in_sasl_or_dribbled_a_byte_at_a_time_is_closed_at_the_deadline() -> None:
    with BrokerThread(users={"alice": "secret"}, handshake_timeout=DEADLINE) as broker:
        port = _port(broker.url)
        sasl = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        sasl.sendall(SASL_HEADER)  # the broker offers its mechanisms; no sasl-init ever comes
        dribble = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        stop = threading.Event()

        def dribble_header() -> None:
            # busy all the time (a byte every 0.1 s), never done: the deadline is the handshake's, not an idle one
            data = SASL_HEADER * 100
            for index in range(len(data)):
                if stop.wait(0.1):
                    return
                try:
                    dribble.sendall(data[index : index + 1])
                except OSError:
                    return

        sender = threading.Thread(target=dribble_header, daemon=True)
        sender.start()
        started = time.monotonic()
        try:
            received, closed = _read_until_closed(sasl, TIMEOUT)
            assert closed
            assert received.startswith(SASL_HEADER)  # the mechanisms were offered; nothing came back
            received, closed = _read_until_closed(dribble, TIMEOUT)
            assert closed
            assert time.monotonic() - started < TIMEOUT
        finally:
            stop.set()
            sender.join(TIMEOUT)
            sasl.close()
            dribble.close()


def test_a_client_that_opens_in_time_is_not_closed_by_the_deadline() -> None:
    with BrokerThread(handshake_timeout=DEADLINE) as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            sender = connection.create_sender("kept")
            time.sleep(DEADLINE * 2)  # well past the deadline, open: kept (the broker's idle timeout is 60 s)
            sender.send(proton.Message(body="after the deadline"))
            receiver = connection.create_receiver("kept")
            assert receiver.receive(timeout=TIMEOUT).body == "after the deadline"
            receiver.accept()
        finally:
            connection.close()


def test_the_broker_asks_for_half_its_idle_timeout_in_its_open() -> None:
    seen: dict[str, float] = {}

    class Handler(MessagingHandler):  # type: ignore[misc]  # proton is untyped
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url

        def on_start(self, event: Any) -> None:
            event.container.connect(self.url)

        def on_connection_opened(self, event: Any) -> None:
            seen["asked"] = event.transport.remote_idle_timeout
            event.connection.close()

    with BrokerThread() as broker:  # the default: 60 s, asked as 30 s (§2.4.5: half)
        Container(Handler(broker.url)).run()
    assert seen["asked"] == 30.0
    with BrokerThread(idle_timeout=4.0) as broker:
        Container(Handler(broker.url)).run()
    assert seen["asked"] == 2.0
    with BrokerThread(idle_timeout=None) as broker:  # none: none asked, as before
        Container(Handler(broker.url)).run()
    assert seen["asked"] == 0.0


def test_a_peer_that_falls_silent_is_closed_and_its_unsettled_message_goes_to_another() -> None:
    with BrokerThread(idle_timeout=DEADLINE) as broker:
        producer = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            producer.create_sender("held").send(proton.Message(body="held by the frozen one"))
        finally:
            producer.close()
        with socket.create_connection(("127.0.0.1", _port(broker.url)), timeout=TIMEOUT) as frozen:
            # a consumer that opens (asking for no idle-time-out of its own), takes a message, never settles it, and
            # says nothing more: a frozen process, or a host gone without a FIN
            frozen.sendall(
                AMQP_HEADER
                + frame(Open(container_id="frozen"))
                + frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))
                + frame(Attach(name="r", handle=0, role=RECEIVER, source=Source(address="held"), target=Target()))
                + frame(
                    Flow(
                        next_incoming_id=0,
                        incoming_window=100,
                        next_outgoing_id=0,
                        outgoing_window=100,
                        handle=0,
                        delivery_count=0,
                        link_credit=10,
                    )
                )
            )
            started = time.monotonic()
            received, closed = _read_until_closed(frozen, TIMEOUT)
            elapsed = time.monotonic() - started
        assert closed
        items = frames_only(received[len(AMQP_HEADER) :])
        bodies = [item.body for item in items]
        opens = [body for body in bodies if isinstance(body, Open)]
        assert opens[0].idle_time_out == int(DEADLINE * 1000 / 2)
        assert any(isinstance(body, Transfer) for body in bodies)  # it had the message
        closes = [body for body in bodies if isinstance(body, Close)]
        assert len(closes) == 1 and closes[0].error is not None
        assert closes[0].error.condition == RESOURCE_LIMIT_EXCEEDED  # §2.4.5
        assert elapsed >= DEADLINE * 0.5  # not at once: after its silence lasted the idle timeout
        # the message it held is back in its queue, for the next consumer
        consumer = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            receiver = consumer.create_receiver("held")
            assert receiver.receive(timeout=TIMEOUT).body == "held by the frozen one"
            receiver.accept()
        finally:
            consumer.close()


@pytest.mark.anyio
async def test_our_client_without_a_heartbeat_of_its_own_stays_connected_across_idle_timeouts() -> None:
    broker = Broker(port=0, idle_timeout=DEADLINE)
    async with broker, amqp_async.connect(broker.url, heartbeat=None, reconnect=False) as conn:
        sender = await conn.open_sender("alive")
        await anyio.sleep(DEADLINE * 3)  # three idle timeouts: it writes every half of the half asked
        await sender.send(amqp_async.Message(body="still here"))
        receiver = await conn.open_receiver("alive", credit=1)
        with anyio.fail_after(TIMEOUT):
            delivery = await receiver.receive()
        assert delivery.message.body == "still here"
        await delivery.accept()


def test_python_qpid_proton_waiting_in_its_container_stays_connected_across_idle_timeouts() -> None:
    outcome: dict[str, Any] = {}

    class Handler(MessagingHandler):  # type: ignore[misc]  # proton is untyped
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(self.url)
            self.sender = event.container.create_sender(self.connection, "alive")
            event.container.schedule(DEADLINE * 3, self)  # idle meanwhile: only proton's empty frames go

        def on_timer_task(self, event: Any) -> None:
            outcome["sent"] = self.sender.send(proton.Message(body="still here")) is not None

        def on_accepted(self, event: Any) -> None:
            outcome["accepted"] = True
            self.connection.close()

        def on_disconnected(self, event: Any) -> None:
            outcome.setdefault("disconnected", str(event.transport.condition))
            event.container.stop()

        def on_transport_error(self, event: Any) -> None:
            outcome["error"] = str(event.transport.condition)
            event.container.stop()

    with BrokerThread(idle_timeout=DEADLINE) as broker:
        Container(Handler(broker.url)).run()
    assert outcome.get("accepted") is True, outcome
    assert "error" not in outcome, outcome


def test_the_timeouts_are_checked_and_set_from_the_command_line() -> None:
    broker = Broker()
    assert (broker.handshake_timeout, broker.idle_timeout) == (30.0, 60.0)
    for bad in ({"handshake_timeout": 0}, {"handshake_timeout": -1.0}, {"idle_timeout": 0.1}, {"idle_timeout": 0}):
        with pytest.raises(ValueError, match="timeout must be"):
            Broker(**bad)  # type: ignore[arg-type]
    broker = make_broker(parse_arguments(["--handshake-timeout", "5", "--idle-timeout", "120"]))
    assert (broker.handshake_timeout, broker.idle_timeout) == (5.0, 120.0)
    broker = make_broker(parse_arguments(["--handshake-timeout", "0", "--idle-timeout", "0"]))
    assert (broker.handshake_timeout, broker.idle_timeout) == (None, None)
    broker = make_broker(parse_arguments([]))
    assert (broker.handshake_timeout, broker.idle_timeout) == (30.0, 60.0)
    for argv in (["--idle-timeout", "0.1"], ["--handshake-timeout", "-1"], ["--idle-timeout", "soon"]):
        with pytest.raises(SystemExit) as exited:
            parse_arguments(argv)
        assert exited.value.code == 2
