"""OpenTelemetry tracing (``connect(..., tracing=provider)``), checked with the SDK's in-memory exporter.

Through our broker (in-process): a request/reply across two connections is one trace (the requester's span, the
request's send and receive spans, the reply's send and receive spans, each the child of the one before, the
context carried in the messages' ``traceparent``); the spans follow the messaging semantic conventions; a rejected
message's send span is an error; at-most-once spans end at once; tracing is off by default (no span, nothing
added to the message); the receiving side also continues a trace carried in ``Diagnostic-Id`` only (Azure's older
clients), and a message that already carries a ``traceparent`` keeps it (its send span links to it).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.errors import MessageRejected

trace = pytest.importorskip("opentelemetry.trace", reason="tracing needs opentelemetry-api (the otel extra)")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="the tests use the OpenTelemetry SDK")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

pytestmark = pytest.mark.anyio
TIMEOUT = 15.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def exporter() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    provider = sdk_trace.TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider, memory
    provider.shutdown()


@asynccontextmanager
async def broker_url() -> AsyncIterator[str]:
    async with Broker(port=0) as broker:
        yield broker.url


def _by_name(spans: Any) -> dict[str, Any]:
    named: dict[str, Any] = {}
    for span in spans:
        assert span.name not in named, f"two spans named {span.name!r}"
        named[span.name] = span
    return named


async def test_request_reply_across_two_connections_is_one_trace(exporter: tuple[Any, InMemorySpanExporter]) -> None:
    provider, memory = exporter
    tracer = provider.get_tracer("test")
    with anyio.fail_after(TIMEOUT):
        async with (
            broker_url() as url,
            amqp_async.connect(url, tracing=provider) as requester,
            amqp_async.connect(url, tracing=provider) as responder,
        ):
            requests = await responder.open_receiver("requests")
            replies = await requester.open_receiver("replies")
            request_sender = await requester.open_sender("requests")
            reply_sender = await responder.open_sender(None)  # the anonymous relay: routed by the reply's "to"

            with tracer.start_as_current_span("request-reply") as root:
                request = Message(body="ping", id="req-1", reply_to="replies")
                await request_sender.send(request)
                assert request.properties is not None and request.properties["traceparent"].startswith("00-")

                delivery = await requests.receive()
                assert delivery.span is not None
                with trace.use_span(delivery.span, end_on_exit=False):
                    reply = Message(body="pong", correlation_id=delivery.message.id, address=delivery.message.reply_to)
                    await reply_sender.send(reply)
                await delivery.accept()

                answer = await replies.receive()
                assert answer.message.body == "pong"
                await answer.accept()

    spans = _by_name(memory.get_finished_spans())
    assert set(spans) == {"request-reply", "send requests", "receive requests", "send replies", "receive replies"}
    trace_id = root.get_span_context().trace_id
    assert {span.context.trace_id for span in spans.values()} == {trace_id}, "one trace"
    chain = ["request-reply", "send requests", "receive requests", "send replies", "receive replies"]
    for parent, child in itertools.pairwise(chain):
        assert spans[child].parent is not None and spans[child].parent.span_id == spans[parent].context.span_id, (
            f"{child} is not the child of {parent}"
        )
    send, receive = spans["send requests"], spans["receive requests"]
    assert send.kind == trace.SpanKind.PRODUCER and receive.kind == trace.SpanKind.CONSUMER
    assert send.attributes["messaging.system"] == "amqp"
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.destination.name"] == "requests"
    assert send.attributes["messaging.message.id"] == "req-1"
    assert send.attributes["server.address"] == "127.0.0.1"
    assert send.attributes["server.port"] > 0
    assert send.attributes["messaging.message.envelope.size"] > 0
    assert send.attributes["amqp.delivery.state"] == "accepted"
    assert receive.attributes["messaging.operation.type"] == "receive"
    assert receive.attributes["messaging.destination.name"] == "requests"
    assert receive.attributes["amqp.delivery.state"] == "accepted"
    assert spans["send replies"].attributes["messaging.destination.name"] == "replies"  # the relay: the message's to
    assert spans["send replies"].attributes["messaging.message.conversation_id"] == "req-1"


async def test_rejected_message_makes_an_error_send_span(exporter: tuple[Any, InMemorySpanExporter]) -> None:
    provider, memory = exporter
    with anyio.fail_after(TIMEOUT):
        async with (
            Broker(port=0, max_queue_depth=1, when_full="reject") as broker,
            amqp_async.connect(broker.url, tracing=provider) as conn,
        ):
            sender = await conn.open_sender("rejects")
            await sender.send(Message(body="fits"))
            with pytest.raises(MessageRejected):
                await sender.send(Message(body="beyond the queue's depth"))  # the broker rejects it
            receiver = await conn.open_receiver("rejects")
            delivery = await receiver.receive()
            await delivery.reject("amqp:precondition-failed", "no")
    spans = memory.get_finished_spans()
    sends = [span for span in spans if span.name == "send rejects"]
    assert [span.status.status_code for span in sends] == [trace.StatusCode.UNSET, trace.StatusCode.ERROR]
    assert sends[1].attributes["error.type"] == "amqp:resource-limit-exceeded"
    (received,) = [span for span in spans if span.name == "receive rejects"]
    assert received.attributes["amqp.delivery.state"] == "rejected"


async def test_at_most_once_spans_end_at_once(exporter: tuple[Any, InMemorySpanExporter]) -> None:
    provider, memory = exporter
    with anyio.fail_after(TIMEOUT):
        async with broker_url() as url, amqp_async.connect(url, tracing=provider) as conn:
            receiver = await conn.open_receiver("fire", delivery="at-most-once")
            sender = await conn.open_sender("fire", delivery="at-most-once")
            await sender.send(Message(body="and forget"))
            delivery = await receiver.receive()
            assert delivery.settled
            names = {span.name for span in memory.get_finished_spans()}
            assert names == {"send fire", "receive fire"}  # both ended without any settlement by us


async def test_off_by_default(exporter: tuple[Any, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch) -> None:
    provider, memory = exporter
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)  # even a global provider is not used
    with anyio.fail_after(TIMEOUT):
        async with broker_url() as url, amqp_async.connect(url) as conn:
            receiver = await conn.open_receiver("quiet")
            sender = await conn.open_sender("quiet")
            message = Message(body="untraced")
            await sender.send(message)
            delivery = await receiver.receive()
            await delivery.accept()
    assert message.properties is None
    assert delivery.message.properties is None and delivery.span is None
    assert memory.get_finished_spans() == ()


async def test_tracing_true_uses_the_global_provider(
    exporter: tuple[Any, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, memory = exporter
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    with anyio.fail_after(TIMEOUT):
        async with broker_url() as url, amqp_async.connect(url, tracing=True) as conn:
            sender = await conn.open_sender("global")
            await sender.send(Message(body="x"))
    assert [span.name for span in memory.get_finished_spans()] == ["send global"]


async def test_diagnostic_id_is_read_and_an_existing_traceparent_kept(
    exporter: tuple[Any, InMemorySpanExporter],
) -> None:
    provider, memory = exporter
    upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with anyio.fail_after(TIMEOUT):
        async with broker_url() as url, amqp_async.connect(url, tracing=provider) as conn:
            receiver = await conn.open_receiver("carried")
            plain = await amqp_async.connect(url)  # an untraced client: the property travels as it was set
            try:
                legacy = await plain.open_sender("carried")
                await legacy.send(Message(body="azure", properties={"Diagnostic-Id": upstream}))
            finally:
                await plain.close()
            delivery = await receiver.receive()
            await delivery.accept()
            sender = await conn.open_sender("carried")
            forwarded = Message(body="again", properties={"traceparent": upstream})
            await sender.send(forwarded)
            assert forwarded.properties == {"traceparent": upstream}  # the creation context is kept
    spans = _by_name(memory.get_finished_spans())
    received = spans["receive carried"]
    assert received.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert received.parent is not None and received.parent.span_id == 0xB7AD6B7169203331
    (link,) = spans["send carried"].links
    assert link.context.span_id == 0xB7AD6B7169203331


@pytest.mark.parametrize(
    "carried",
    [{"traceparent": 5}, {"traceparent": b"00-0af7"}, {"tracestate": 7}, {"Diagnostic-Id": [1, 2]}],
    ids=["int", "binary", "tracestate-int", "diagnostic-list"],
)
async def test_a_trace_context_that_is_not_text_is_traced_without_it(
    exporter: tuple[Any, InMemorySpanExporter], carried: dict[str, Any]
) -> None:
    """Valid AMQP (§3.2.5: any simple type) that OpenTelemetry's propagator cannot read: it raised TypeError out of
    receive() and send() with tracing on. The message is received and sent, traced as one without a context."""
    provider, memory = exporter
    with anyio.fail_after(TIMEOUT):
        async with broker_url() as url:
            async with amqp_async.connect(url) as plain:  # an untraced client: the property travels as it was set
                await (await plain.open_sender("odd")).send(Message(body="in", properties=dict(carried)))
            async with amqp_async.connect(url, tracing=provider) as conn:
                receiver = await conn.open_receiver("odd")
                delivery = await receiver.receive()
                assert delivery.message.properties == carried
                await delivery.accept()
                sender = await conn.open_sender("odd")
                await sender.send(Message(body="out", properties=dict(carried)))
                again = await receiver.receive()
                await again.accept()
                assert again.message.body == "out"
    spans = _by_name(memory.get_finished_spans()[:2])
    assert spans["receive odd"].parent is None


def test_bad_tracing_option() -> None:
    with pytest.raises(TypeError, match="tracing must be"):
        amqp_async.client._config.resolve_options("amqp://h", {"tracing": "yes"})
