"""OpenTelemetry tracing in the callback API (``Container(..., tracing=provider)``, ``connect(..., tracing=...)``,
``BlockingConnection(..., tracing=...)``), checked with the SDK's in-memory exporter against our broker.

The spans must be the awaitable API's (``tests/test_tracing.py``): the same names, kinds, attributes and parent
links, the context carried in the same message properties, so that a message sent by one API and received by the
other stays in one trace (both ways). A request/reply between two proton programs is one trace without any call
to OpenTelemetry in the responder: the receive span is current while ``on_message`` runs. The blocking API's sends
are children of the caller's span (on the caller's thread). Off by default, per connection on or off, transactions
(the transfer traced, the coordinator's control messages not), at-most-once, rejections, a transport lost before
the outcome (in doubt), python-qpid-proton's programs unchanged (they never name the option).
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest

import amqp_async
from amqp_async.broker import Broker
from amqp_async.errors import MessageRejected
from amqp_async.proton import Delivery, Message
from amqp_async.proton.handlers import MessagingHandler, TransactionalClientHandler
from amqp_async.proton.reactor import AtMostOnce, Container
from amqp_async.proton.utils import BlockingConnection, SendException, SyncRequestResponse

trace = pytest.importorskip("opentelemetry.trace", reason="tracing needs opentelemetry-api (the otel extra)")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="the tests use the OpenTelemetry SDK")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

pytestmark = pytest.mark.anyio
TIMEOUT = 20.0

Exporter = tuple[Any, InMemorySpanExporter]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    provider = sdk_trace.TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider, memory
    provider.shutdown()


def _by_name(spans: Any) -> dict[str, Any]:
    named: dict[str, Any] = {}
    for span in spans:
        assert span.name not in named, f"two spans named {span.name!r}"
        named[span.name] = span
    return named


def _assert_chain(spans: dict[str, Any], chain: list[str]) -> None:
    assert len({spans[name].context.trace_id for name in chain}) == 1, "one trace"
    for parent, child in itertools.pairwise(chain):
        assert spans[child].parent is not None and spans[child].parent.span_id == spans[parent].context.span_id, (
            f"{child} is not the child of {parent}"
        )


async def _run(container: Container) -> None:
    with anyio.fail_after(TIMEOUT):
        await anyio.to_thread.run_sync(container.run)


async def _blocking(function: Callable[[], Any]) -> Any:
    with anyio.fail_after(TIMEOUT):
        return await anyio.to_thread.run_sync(function)


# ---------------------------------------------------------------------------------------------------------------
# The callback API


class Requester(MessagingHandler):
    """Sends one request (in the span ``root``) with ``reply_to`` its own queue, and waits for the reply."""

    def __init__(self, url: str, root: Any) -> None:
        super().__init__()
        self.url = url
        self.root = root
        self.reply: Message | None = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, handler=self)
        event.container.create_receiver(self.conn, "replies")
        self.sender = event.container.create_sender(self.conn, "requests")

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            with trace.use_span(self.root, end_on_exit=False):
                event.sender.send(Message(body="ping", id="req-1", reply_to="replies"))

    def on_message(self, event: Any) -> None:
        self.reply = event.message
        event.connection.close()


class Responder(MessagingHandler):
    """Answers one request on the anonymous relay; no OpenTelemetry call of its own."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.span_in_callback: Any = None

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, handler=self)
        event.container.create_receiver(self.conn, "requests")
        self.relay = event.container.create_sender(self.conn, None)

    def on_message(self, event: Any) -> None:
        self.span_in_callback = (trace.get_current_span(), event.delivery.span)
        request = event.message
        correlation = request.correlation_id if request.correlation_id is not None else request.id
        self.relay.send(Message(body="pong", address=request.reply_to, correlation_id=correlation))
        event.receiver.close()

    def on_accepted(self, event: Any) -> None:
        if event.sender is self.relay:  # the broker took the reply: done
            event.connection.close()


async def test_request_reply_between_two_programs_is_one_trace(exporter: Exporter) -> None:
    provider, memory = exporter
    root = provider.get_tracer("test").start_span("request-reply")
    async with Broker(port=0) as broker:
        responder = Responder(broker.url)
        requester = Requester(broker.url, root)
        container = Container(responder, requester, tracing=provider)
        container.container_id = "tracing-container"
        await _run(container)
        port = int(broker.url.rsplit(":", 1)[1])
    root.end()
    assert requester.reply is not None and requester.reply.body == "pong"
    spans = _by_name(memory.get_finished_spans())
    assert set(spans) == {"request-reply", "send requests", "receive requests", "send replies", "receive replies"}
    _assert_chain(spans, ["request-reply", "send requests", "receive requests", "send replies", "receive replies"])
    current, of_delivery = responder.span_in_callback
    assert current is of_delivery
    assert current.get_span_context().span_id == spans["receive requests"].context.span_id
    send, receive = spans["send requests"], spans["receive requests"]
    assert send.kind == trace.SpanKind.PRODUCER and receive.kind == trace.SpanKind.CONSUMER
    assert dict(send.attributes) == {
        "messaging.system": "amqp",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.client.id": "tracing-container",
        "messaging.destination.name": "requests",
        "messaging.message.id": "req-1",
        "server.address": "127.0.0.1",
        "server.port": port,
        "messaging.message.envelope.size": send.attributes["messaging.message.envelope.size"],
        "amqp.delivery.state": "accepted",
    }
    assert send.attributes["messaging.message.envelope.size"] > 0
    assert receive.attributes["messaging.operation.type"] == "receive"
    assert receive.attributes["messaging.destination.name"] == "requests"
    assert receive.attributes["amqp.delivery.state"] == "accepted"  # auto-accept ended it
    assert receive.attributes["messaging.message.envelope.size"] == send.attributes["messaging.message.envelope.size"]
    reply = spans["send replies"]
    assert reply.attributes["messaging.destination.name"] == "replies"  # the relay: the message's to
    assert reply.attributes["messaging.message.conversation_id"] == "req-1"
    # The properties the message carried: W3C traceparent, and Diagnostic-Id with the same value.
    properties = requester.reply.properties
    assert properties is not None and properties["traceparent"] == properties["Diagnostic-Id"]
    assert properties["traceparent"].split("-")[2] == f"{reply.context.span_id:016x}"


class OneShot(MessagingHandler):
    """Receives ``expect`` messages from ``source`` (settling each with ``outcome``), and/or sends ``send`` to
    ``target``; closes its connection when both are done."""

    def __init__(
        self,
        url: str,
        *,
        source: str | None = None,
        expect: int = 0,
        target: str | None = None,
        send: list[Message] | None = None,
        outcome: str = "accept",
        connect_options: dict[str, Any] | None = None,
        sender_options: Any = None,
        receiver_options: Any = None,
    ) -> None:
        super().__init__(auto_accept=False)
        self.url, self.source, self.expect, self.target = url, source, expect, target
        self.to_send = list(send or [])
        self.outcome = outcome
        self.connect_options = connect_options or {}
        self.sender_options = sender_options
        self.receiver_options = receiver_options
        self.received: list[Message] = []
        self.settled = 0
        self.results: list[str] = []

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, handler=self, **self.connect_options)
        if self.source:
            event.container.create_receiver(self.conn, self.source, options=self.receiver_options)
        if self.target:
            event.container.create_sender(self.conn, self.target, options=self.sender_options)

    def on_sendable(self, event: Any) -> None:
        while self.to_send and event.sender.credit:
            event.sender.send(self.to_send.pop(0))
            if event.sender.snd_settle_mode == event.sender.SND_SETTLED:
                self.settled += 1
        self._maybe_done(event)

    def on_message(self, event: Any) -> None:
        self.received.append(event.message)
        if self.outcome == "reject":
            self.reject(event.delivery)
        elif self.outcome == "accept":
            self.accept(event.delivery)
        self._maybe_done(event)

    def on_accepted(self, event: Any) -> None:
        self.results.append("accepted")
        self.settled += 1
        self._maybe_done(event)

    def on_rejected(self, event: Any) -> None:
        self.results.append("rejected")
        self.settled += 1
        self._maybe_done(event)

    def _maybe_done(self, event: Any) -> None:
        sent_all = not self.target or (not self.to_send and self.settled >= 1)
        if sent_all and len(self.received) >= self.expect:
            event.connection.close()


async def test_the_awaitable_api_and_the_callback_api_share_one_trace_both_ways(exporter: Exporter) -> None:
    provider, memory = exporter
    tracer = provider.get_tracer("test")
    async with Broker(port=0) as broker:
        # awaitable -> callback
        async with amqp_async.connect(broker.url, tracing=provider) as conn:
            sender = await conn.open_sender("to-proton")
            with tracer.start_as_current_span("awaitable-root"):
                await sender.send(amqp_async.Message(body="from the awaitable API"))
        proton_receiver = OneShot(broker.url, source="to-proton", expect=1)
        await _run(Container(proton_receiver, tracing=provider))
        # callback -> awaitable
        proton_sender = OneShot(broker.url, target="to-awaitable", send=[Message(body="from the callback API")])
        await _run(Container(proton_sender, tracing=provider))
        async with amqp_async.connect(broker.url, tracing=provider) as conn:
            receiver = await conn.open_receiver("to-awaitable")
            delivery = await receiver.receive()
            await delivery.accept()
    spans = _by_name(memory.get_finished_spans())
    assert set(spans) == {
        "awaitable-root",
        "send to-proton",
        "receive to-proton",
        "send to-awaitable",
        "receive to-awaitable",
    }
    _assert_chain(spans, ["awaitable-root", "send to-proton", "receive to-proton"])
    _assert_chain(spans, ["send to-awaitable", "receive to-awaitable"])
    assert spans["send to-awaitable"].parent is None  # a new trace: sent with no span current
    for name in ("receive to-proton", "receive to-awaitable"):
        assert spans[name].attributes["amqp.delivery.state"] == "accepted"
    assert proton_receiver.received[0].body == "from the awaitable API"
    assert delivery.message.body == "from the callback API"


async def test_off_by_default_and_per_connection(exporter: Exporter, monkeypatch: pytest.MonkeyPatch) -> None:
    provider, memory = exporter
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)  # even a global provider is not used
    async with Broker(port=0) as broker:
        quiet = Message(body="untraced")
        program = OneShot(broker.url, source="quiet", expect=1, target="quiet", send=[quiet])
        await _run(Container(program))
        assert quiet.properties is None and program.received[0].properties is None
        assert memory.get_finished_spans() == ()

        # on for the container, off for one connection
        off = OneShot(broker.url, target="mixed", send=[Message(body="off")], connect_options={"tracing": False})
        on = OneShot(broker.url, target="mixed", send=[Message(body="on")])
        await _run(Container(off, on, tracing=provider))
        assert [span.name for span in memory.get_finished_spans()] == ["send mixed"]
        memory.clear()

        # off for the container, on for one connection (True: the global provider)
        one = OneShot(broker.url, source="mixed", expect=2, connect_options={"tracing": True})
        await _run(Container(one))
        assert sorted(message.body for message in one.received) == ["off", "on"]
    received = memory.get_finished_spans()
    assert [span.name for span in received] == ["receive mixed", "receive mixed"]
    # the untraced message carried no context: its receive span starts a trace
    assert [span.parent is not None for span in received] == [message.body == "on" for message in one.received]


def test_bad_tracing_options() -> None:
    with pytest.raises(TypeError, match="tracing must be"):
        Container(tracing="yes")
    container = Container()
    with pytest.raises(TypeError, match="tracing must be"):
        container.connect("amqp://127.0.0.1:1", tracing=42)


async def test_rejections_at_most_once_and_transactions(exporter: Exporter) -> None:
    provider, memory = exporter
    async with Broker(port=0, max_queue_depth=1, when_full="reject") as broker:
        two = [Message(body="fits"), Message(body="beyond the queue's depth")]
        sender = OneShot(broker.url, target="full", send=two)
        sender._maybe_done = lambda event: event.connection.close() if sender.settled == 2 else None  # type: ignore[method-assign]
        await _run(Container(sender, tracing=provider))
        assert sender.results == ["accepted", "rejected"]
        rejecter = OneShot(broker.url, source="full", expect=1, outcome="reject")
        await _run(Container(rejecter, tracing=provider))
        spans = memory.get_finished_spans()
        sends = [span for span in spans if span.name == "send full"]
        assert [span.status.status_code for span in sends] == [trace.StatusCode.UNSET, trace.StatusCode.ERROR]
        assert sends[1].attributes["amqp.delivery.state"] == "MessageRejected"
        assert sends[1].attributes["error.type"] == "amqp:resource-limit-exceeded"
        (received,) = [span for span in spans if span.name == "receive full"]
        assert received.attributes["amqp.delivery.state"] == "rejected"
        memory.clear()

        # at-most-once: the send span ends at once, the receive span once on_message returns
        fire = OneShot(broker.url, target="fire", send=[Message(body="and forget")], sender_options=AtMostOnce())
        await _run(Container(fire, tracing=provider))
        sent = memory.get_finished_spans()
        assert [(span.name, span.attributes["amqp.delivery.state"]) for span in sent] == [("send fire", "none")]
        # a message that arrived settled, which the handler does not settle: its span ends after on_message
        keeper = OneShot(broker.url, source="fire", expect=1, outcome="keep", receiver_options=AtMostOnce())
        await _run(Container(keeper, tracing=provider))
        spans = memory.get_finished_spans()
        assert [(span.name, span.attributes["amqp.delivery.state"]) for span in spans[1:]] == [
            ("receive fire", "settled")
        ]
        assert spans[1].parent is not None and spans[1].parent.span_id == spans[0].context.span_id
    memory.clear()

    async with Broker(port=0) as broker:
        calls: list[str] = []

        class Transactional(TransactionalClientHandler):
            def on_start(self, event: Any) -> None:
                self.conn = event.container.connect(broker.url)
                self.sender = event.container.create_sender(self.conn, "tx")
                event.container.declare_transaction(self.conn, handler=self)

            def on_transaction_declared(self, event: Any) -> None:
                event.transaction.send(self.sender, Message(body="in the transaction"))
                event.transaction.commit()

            def on_transaction_committed(self, event: Any) -> None:
                calls.append("committed")
                event.connection.close()

        await _run(Container(Transactional(), tracing=provider))
        assert calls == ["committed"]
        (entry,) = broker.queue("tx").entries
        assert entry.message.properties is not None and "traceparent" in entry.message.properties
    (span,) = memory.get_finished_spans()  # the declare and the discharge are not traced
    assert span.name == "send tx"
    assert span.attributes["amqp.delivery.state"] == "accepted"  # the transactional state's outcome


async def test_a_transport_lost_before_the_outcome_ends_the_send_span_in_doubt(exporter: Exporter) -> None:
    """The peer is python-qpid-proton's container: it takes the message without settling it and drops the
    connection."""
    proton_reactor = pytest.importorskip("proton.reactor", reason="python-qpid-proton is the peer")
    proton_handlers = pytest.importorskip("proton.handlers")
    provider, memory = exporter
    listening = threading.Event()

    class Dropper(proton_handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self, port: int) -> None:
            super().__init__(auto_accept=False)
            self.port = port

        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(f"127.0.0.1:{self.port}")
            listening.set()

        def on_message(self, event: Any) -> None:
            event.transport.close_tail()  # the socket goes, the message unsettled
            event.transport.close_head()
            self.acceptor.close()  # and proton's container ends

    port = _free_port()
    dropper = Dropper(port)
    peer = proton_reactor.Container(dropper)
    thread = threading.Thread(target=peer.run, daemon=True)
    thread.start()
    assert listening.wait(TIMEOUT)
    program = OneShot(
        f"amqp://127.0.0.1:{port}", target="void", send=[Message(body="lost")], connect_options={"reconnect": False}
    )
    await _run(Container(program, tracing=provider))
    await _blocking(lambda: thread.join(TIMEOUT))
    assert not thread.is_alive()
    (span,) = memory.get_finished_spans()
    assert span.name == "send void"
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.attributes["amqp.delivery.state"] == "DeliveryInDoubt"


async def test_a_transport_lost_before_the_settlement_ends_the_receive_span(exporter: Exporter) -> None:
    provider, memory = exporter

    class Dropper(OneShot):
        def on_message(self, event: Any) -> None:
            self.received.append(event.message)  # not settled...
            event.transport.close_head()  # ...when the socket goes

    async with Broker(port=0) as broker:
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("kept")
            await sender.send(amqp_async.Message(body="unsettled"))
        program = Dropper(broker.url, source="kept", expect=1, connect_options={"reconnect": False})
        await _run(Container(program, tracing=provider))
        assert [message.body for message in program.received] == ["unsettled"]
    (span,) = memory.get_finished_spans()
    assert (span.name, span.attributes["amqp.delivery.state"]) == ("receive kept", "unsettled")


#: A W3C trace context a message may carry in its ``traceparent`` (trace id, parent span id, flags).
_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
_CARRIED = f"00-{_TRACE_ID}-b7ad6b7169203331-01"

#: Application properties with a trace context that is not W3C Trace Context text (valid AMQP all the same: any
#: peer or program may send them); OpenTelemetry's propagator raises TypeError on each.
_NOT_TEXT = [
    {"traceparent": 5},
    {"traceparent": b"00-binary"},
    {"Diagnostic-Id": 7},
    {"traceparent": _CARRIED, "tracestate": 3},
]


async def test_a_trace_context_that_is_not_text_stops_neither_the_container_nor_the_send(exporter: Exporter) -> None:
    """A received message whose ``traceparent``, ``tracestate`` or ``Diagnostic-Id`` is not a string (binary, a
    number) is traced without that property: OpenTelemetry's ``TypeError`` escaped the container's read and ended
    ``run()``, the container's other connections with it. A program that sends such a message has it sent untraced
    and unchanged (``send()`` raised the ``TypeError``). The same program without tracing, and proton's, deliver
    them all."""
    provider, memory = exporter
    async with Broker(port=0) as broker:
        plain = OneShot(
            broker.url, target="odd-context", send=[Message(body=i, properties=p) for i, p in enumerate(_NOT_TEXT)]
        )
        await _run(Container(plain))
        traced_sender = OneShot(
            broker.url, target="odd-context", send=[Message(body="sent traced", properties={"traceparent": 9})]
        )
        receiver = OneShot(broker.url, source="odd-context", expect=len(_NOT_TEXT) + 1)
        # another connection of the same container, traced too, with a message of its own
        other = OneShot(broker.url, source="normal", expect=1, target="normal", send=[Message(body="normal")])
        await _run(Container(traced_sender, receiver, other, tracing=provider))
    assert sorted(map(str, (message.body for message in receiver.received))) == ["0", "1", "2", "3", "sent traced"]
    assert [message.properties for message in receiver.received if message.body == "sent traced"] == [
        {"traceparent": 9}
    ]  # sent unchanged
    assert other.received[0].body == "normal"
    spans = memory.get_finished_spans()
    assert sorted(span.name for span in spans) == ["receive normal"] + ["receive odd-context"] * 5 + ["send normal"]
    # the readable traceparent beside an unreadable tracestate still parents its receive span
    parented = [span for span in spans if span.name == "receive odd-context" and span.parent is not None]
    assert [format(span.context.trace_id, "032x") for span in parented] == [_TRACE_ID]


async def test_a_blocking_receiver_reads_a_message_whose_trace_context_is_not_text(exporter: Exporter) -> None:
    """The blocking API's traced receive of such a message: the message, and its receive span without a parent."""
    provider, memory = exporter
    async with Broker(port=0) as broker:
        await _run(
            Container(
                OneShot(broker.url, target="odd-blocking", send=[Message(body="x", properties={"traceparent": 5})])
            )
        )

        def blocking() -> Any:
            with BlockingConnection(broker.url, tracing=provider) as conn:
                receiver = conn.create_receiver("odd-blocking")
                message = receiver.receive(timeout=TIMEOUT)
                receiver.accept()
                return message

        message = await _blocking(blocking)
    assert message.body == "x" and message.properties == {"traceparent": 5}
    [span] = memory.get_finished_spans()
    assert span.name == "receive odd-blocking" and span.parent is None


def _free_port() -> int:
    """A port free a moment ago (proton's acceptor does not tell the port it bound for port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------------------------------------------------------
# The blocking API


async def test_blocking_connection_send_receive_and_request_response(exporter: Exporter) -> None:
    provider, memory = exporter
    tracer = provider.get_tracer("test")
    async with Broker(port=0) as broker:

        def blocking() -> tuple[Any, Any, Any]:
            with BlockingConnection(broker.url, tracing=provider) as conn:
                sender = conn.create_sender("blocking")
                receiver = conn.create_receiver("blocking", credit=5)
                with tracer.start_as_current_span("blocking-root") as root:
                    sender.send(Message(body="one", id="b-1"))
                message = receiver.receive(timeout=TIMEOUT)
                span = receiver.span
                receiver.accept()
                after = receiver.span
                return root, (message, span, after), None

        root, (message, span, after), _ = await _blocking(blocking)
        assert message.body == "one" and span is not None and after is None
    spans = _by_name(memory.get_finished_spans())
    assert set(spans) == {"blocking-root", "send blocking", "receive blocking"}
    _assert_chain(spans, ["blocking-root", "send blocking", "receive blocking"])
    assert spans["receive blocking"].context.span_id == span.get_span_context().span_id
    assert spans["receive blocking"].attributes["amqp.delivery.state"] == "accepted"
    assert root.get_span_context().trace_id == spans["send blocking"].context.trace_id


async def test_sync_request_response_against_a_traced_proton_server(exporter: Exporter) -> None:
    provider, memory = exporter
    tracer = provider.get_tracer("test")
    async with Broker(port=0) as broker:
        responder = Responder(broker.url)
        server = Container(responder, tracing=provider)
        server_thread = threading.Thread(target=server.run, daemon=True)
        server_thread.start()

        def client() -> Message:
            with BlockingConnection(broker.url, tracing=provider) as conn:
                rpc = SyncRequestResponse(conn, "requests")
                with tracer.start_as_current_span("rpc-root"):
                    return rpc.call(Message(body="ping", id="rpc-1"))

        answer = await _blocking(client)
        await _blocking(lambda: server_thread.join(TIMEOUT))
        assert answer.body == "pong"
    spans = _by_name(memory.get_finished_spans())
    (reply_node,) = [name[len("send ") :] for name in spans if name.startswith("send temp-queue://")]
    assert set(spans) == {
        "rpc-root",
        "send requests",
        "receive requests",
        f"send {reply_node}",
        f"receive {reply_node}",
    }
    _assert_chain(
        spans, ["rpc-root", "send requests", "receive requests", f"send {reply_node}", f"receive {reply_node}"]
    )


async def test_blocking_send_rejected_is_an_error_span(exporter: Exporter) -> None:
    provider, memory = exporter
    async with Broker(port=0, max_queue_depth=1, when_full="reject") as broker:

        def blocking() -> None:
            with BlockingConnection(broker.url, tracing=provider) as conn:
                sender = conn.create_sender("full")
                sender.send(Message(body="fits"))
                with pytest.raises(SendException):
                    sender.send(Message(body="rejected"))

        await _blocking(blocking)
    spans = memory.get_finished_spans()
    assert [span.attributes["amqp.delivery.state"] for span in spans] == ["accepted", "MessageRejected"]
    assert spans[1].attributes["error.type"] == "amqp:resource-limit-exceeded"
    assert issubclass(MessageRejected, amqp_async.AMQPError)
    assert Delivery.REJECTED == 0x25
