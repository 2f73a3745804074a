"""OpenTelemetry tracing of messages: a send span and a receive span per message, the trace carried in the message.

Off by default; ``connect(url, tracing=True)`` (the global tracer provider) or ``tracing=provider`` (a
``TracerProvider``) turns it on for the connection's senders and receivers. Needs only ``opentelemetry-api``
(``pip install 'amqp-async[otel]'``); the application installs the SDK and exporters it wants.

What is recorded, following the OpenTelemetry messaging semantic conventions:

* **send** ``send {destination}``, kind PRODUCER, from :meth:`Sender.send` / :meth:`Sender.submit` until the
  outcome arrives (at once for an at-most-once sender): ``messaging.system`` ``amqp`` (the conventions list no
  value for AMQP 1.0 itself: the name of the protocol, as the conventions ask for a system they do not list),
  ``messaging.operation.type`` and ``messaging.operation.name`` ``send``, ``messaging.destination.name`` (the
  link's target, or the message's ``to`` on an anonymous sender), ``messaging.message.id``,
  ``messaging.message.conversation_id`` (the correlation-id), ``messaging.message.envelope.size`` (the encoded
  message), ``messaging.client.id`` (our container id), ``server.address``, ``server.port``; the outcome as
  ``amqp.delivery.state``; a rejected, released or modified message or one in doubt sets the span's status to
  error with ``error.type`` (the AMQP condition, or the exception's name).
* **receive** ``receive {source}``, kind CONSUMER, from the moment the application takes the delivery
  (:meth:`Receiver.receive`) until it settles it (``accept``, ``reject``, ``release``, ``modify``; at once for a
  message that arrived settled): the same attributes with ``messaging.operation.type`` ``receive``, and the
  outcome given. Its parent is the context the message carries, so the trace goes on across the broker; the
  application continues it with ``trace.use_span(delivery.span)`` around what it does for the message (a reply
  sent there is a child, and a request/reply is one trace).

The trace context travels in the message's application properties as W3C Trace Context, as other AMQP clients
(Azure's among them) carry it: ``traceparent`` and ``tracestate``, and ``Diagnostic-Id`` (the same value as
``traceparent``) for Azure's older clients. A message that already carries a ``traceparent`` keeps it (it is the
context in which the message was created: a forwarded message stays in its trace) and its send span links to it.
On receipt ``traceparent`` is read (``Diagnostic-Id`` when there is none).

The spans and the properties are made by :class:`MessageSpans`, which the callback API (``amqp_async.proton``,
``Container(..., tracing=...)``) shares, so that a message sent by one API and received by the other stays in its
trace.

No cost when off: a sender or receiver checks one attribute per message, and the traced variants of the tracker
and the delivery (:class:`TracedTracker`, :class:`TracedDelivery`) are used only when on.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import AMQPError
from ..message import Message
from ._delivery import Delivery

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery as EngineDelivery
    from ._connection import Connection
    from ._links import Receiver, Sender

__all__ = ["MessageSpans", "MessageTracing", "TracedDelivery"]

#: The application properties carrying the trace context.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
DIAGNOSTIC_ID = "Diagnostic-Id"

_INSTRUMENTATION = "amqp_async"


def _outcome_name(state: Any) -> str:
    return "none" if state is None else type(state).__name__.lower()


def _trace_context(properties: Mapping[Any, Any]) -> dict[str, str]:
    """The trace context a message's application properties carry, for OpenTelemetry's W3C propagator to read:
    ``traceparent`` (else ``Diagnostic-Id``) and ``tracestate``, those that are text.

    Any other value (a number, binary: valid AMQP, §3.2.5, from any peer or program) made the propagator raise
    ``TypeError`` out of ``send()`` and ``receive()`` with tracing on (it takes their ``len()``, or matches them
    against a pattern); such a message is traced as one without a context."""
    carrier = {key: properties[key] for key in (TRACEPARENT, TRACESTATE) if isinstance(properties.get(key), str)}
    if not carrier.get(TRACEPARENT):
        diagnostic_id = properties.get(DIAGNOSTIC_ID)
        if isinstance(diagnostic_id, str) and diagnostic_id:
            carrier[TRACEPARENT] = diagnostic_id
    return carrier


class MessageSpans:
    """The spans of messages and the trace context they carry, whichever API sends and receives them.

    One per tracer provider and API face: the awaitable API's :class:`MessageTracing` and the callback API's
    (``amqp_async.proton``) tracing build on it, so that both record the same spans with the same attributes and
    carry the same properties (a message sent by one and received by the other stays in its trace).

    Args:
        provider: True (OpenTelemetry's global tracer provider) or a ``TracerProvider``.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed.
    """

    def __init__(self, provider: Any) -> None:
        try:
            trace = importlib.import_module("opentelemetry.trace")
            tracecontext = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("tracing needs opentelemetry-api: pip install 'amqp-async[otel]'") from exc
        self._trace = trace
        provider = trace.get_tracer_provider() if provider is True else provider
        from .. import __version__

        self._tracer = provider.get_tracer(_INSTRUMENTATION, __version__)
        # W3C Trace Context itself, not the globally configured propagator: the property names are fixed.
        self._propagator = tracecontext.TraceContextTextMapPropagator()
        self._producer = trace.SpanKind.PRODUCER
        self._consumer = trace.SpanKind.CONSUMER

    @staticmethod
    def attributes(
        operation: str, destination: str | None, client_id: str | None, host: str | None, port: int | None
    ) -> dict[str, Any]:
        """The attributes every span of ``operation`` ("send" or "receive") has, after the messaging semantic
        conventions."""
        attributes: dict[str, Any] = {
            "messaging.system": "amqp",
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
        }
        if client_id is not None:
            attributes["messaging.client.id"] = client_id
        if destination:
            attributes["messaging.destination.name"] = destination
        if host is not None:
            attributes["server.address"] = host
            if port is not None:
                attributes["server.port"] = port
        return attributes

    @staticmethod
    def _message_attributes(attributes: dict[str, Any], message: Message) -> None:
        if message.id is not None:
            attributes["messaging.message.id"] = str(message.id)
        if message.correlation_id is not None:
            attributes["messaging.message.conversation_id"] = str(message.correlation_id)

    # --- send --------------------------------------------------------------------------------------------

    def send_span(self, message: Message, destination: str | None, attributes: dict[str, Any]) -> Any:
        """Start the send span of ``message`` (a child of the current context) and put its context in the
        message, unless the message carries one already (its send span then links to it).

        Args:
            message: the message about to be encoded.
            destination: the link's target, or the message's ``to``.
            attributes: from :meth:`attributes` (completed here with the message's).
        """
        self._message_attributes(attributes, message)
        properties = message.properties
        carried = None
        if properties is not None and properties.get(TRACEPARENT):
            carried = self._propagator.extract(_trace_context(properties))
        links = None
        if carried is not None:
            span_context = self._trace.get_current_span(carried).get_span_context()
            if span_context.is_valid:
                links = [self._trace.Link(span_context)]
        span = self._tracer.start_span(
            f"send {destination}" if destination else "send",
            kind=self._producer,
            attributes=attributes,
            links=links,
        )
        if links is None:
            headers: dict[str, str] = {}
            self._propagator.inject(headers, context=self._trace.set_span_in_context(span))
            if headers:
                updated = dict(properties) if properties else {}
                updated.update(headers)
                if TRACEPARENT in headers:
                    updated[DIAGNOSTIC_ID] = headers[TRACEPARENT]
                message.properties = updated
        return span

    def end_send(self, span: Any, outcome: Any, error: AMQPError | None, size: int | None = None) -> None:
        """The outcome of a traced message is known (or the transfer was settled on sending)."""
        if size is not None:
            span.set_attribute("messaging.message.envelope.size", size)
        span.set_attribute("amqp.delivery.state", _outcome_name(outcome) if error is None else type(error).__name__)
        if error is not None:
            condition = getattr(error, "condition", None)
            span.set_attribute("error.type", str(condition) if condition else type(error).__name__)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end()

    # --- receive -----------------------------------------------------------------------------------------

    def receive_span(
        self, message: Message | None, destination: str | None, size: int, attributes: dict[str, Any]
    ) -> Any:
        """Start the receive span of a delivery: its parent is the context ``message`` carries (``traceparent``,
        else ``Diagnostic-Id``); None for a message that could not be decoded (traced without its context)."""
        attributes["messaging.message.envelope.size"] = size
        parent = None
        if message is not None:
            self._message_attributes(attributes, message)
            properties = message.properties
            if properties:
                parent = self._propagator.extract(_trace_context(properties))
        return self._tracer.start_span(
            f"receive {destination}" if destination else "receive",
            context=parent,
            kind=self._consumer,
            attributes=attributes,
        )

    @staticmethod
    def end_receive(span: Any, state: Any) -> None:
        """The delivery of a receive span is settled with ``state`` (a delivery state; None: settled without)."""
        span.set_attribute("amqp.delivery.state", "settled" if state is None else _outcome_name(state))
        span.end()


class MessageTracing(MessageSpans):
    """The tracer of one connection of the awaitable API (made once, when the connection is made with ``tracing``
    on)."""

    def __init__(self, connection: Connection, provider: Any) -> None:
        super().__init__(provider)
        self._connection = connection

    def _common(self, operation: str, destination: str | None) -> dict[str, Any]:
        connection = self._connection
        address = connection.address
        return self.attributes(
            operation,
            destination,
            connection.container_id,
            None if address is None else address.host,
            None if address is None else address.port,
        )

    def start_send(self, sender: Sender[Any], message: Message) -> Any:
        """Start the send span of ``message`` and put its context in the message (unless it carries one)."""
        destination = sender.address or message.address
        return self.send_span(message, destination, self._common("send", destination))

    def delivery(self, receiver: Receiver, engine_delivery: EngineDelivery) -> TracedDelivery:
        """The delivery, with its receive span started (and ended at once when it arrived settled)."""
        delivery = TracedDelivery(receiver, engine_delivery)
        destination = receiver.address
        try:
            message = delivery.message
        except Exception:  # a malformed message: traced without its context; the application meets the error
            message = None
        span = self.receive_span(
            message, destination, len(engine_delivery.payload), self._common("receive", destination)
        )
        delivery._span = span
        delivery._tracing = self
        if delivery.settled:
            self.end_delivery(delivery, None)
        return delivery

    def end_delivery(self, delivery: TracedDelivery, state: Any) -> None:
        """The delivery is settled: end its receive span (once)."""
        span = delivery._span
        if span is None or not delivery._span_open:
            return
        delivery._span_open = False
        self.end_receive(span, state)


class TracedDelivery(Delivery):
    """A :class:`Delivery` with its receive span, ended when the delivery is settled."""

    __slots__ = ("_span", "_span_open", "_tracing")

    def __init__(self, receiver: Receiver, delivery: EngineDelivery) -> None:
        super().__init__(receiver, delivery)
        self._span: Any = None
        self._span_open = True
        self._tracing: MessageTracing | None = None

    @property
    def span(self) -> Any:
        """The OpenTelemetry span of this delivery's receipt (until it is settled): use it as the parent of what is
        done for the message (``with trace.use_span(delivery.span): ...``)."""
        return self._span

    async def _settle(self, state: Any, transaction: Any = None) -> None:
        try:
            await super()._settle(state, transaction)
        finally:
            if self._span_open and self._tracing is not None:
                self._tracing.end_delivery(self, getattr(self._delivery, "state", state))
