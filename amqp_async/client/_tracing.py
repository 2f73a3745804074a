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

No cost when off: a sender or receiver checks one attribute per message, and the traced variants of the tracker
and the delivery (:class:`TracedTracker`, :class:`TracedDelivery`) are used only when on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import AMQPError
from ..message import Message
from ._delivery import Delivery

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery as EngineDelivery
    from ._connection import Connection
    from ._links import Receiver, Sender

__all__ = ["MessageTracing", "TracedDelivery"]

#: The application properties carrying the trace context.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
DIAGNOSTIC_ID = "Diagnostic-Id"

_INSTRUMENTATION = "amqp_async"


def _outcome_name(state: Any) -> str:
    return "none" if state is None else type(state).__name__.lower()


class MessageTracing:
    """The tracer of one connection (made once, when the connection is made with ``tracing`` on)."""

    def __init__(self, connection: Connection, provider: Any) -> None:
        try:
            trace = importlib.import_module("opentelemetry.trace")
            tracecontext = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("tracing needs opentelemetry-api: pip install 'amqp-async[otel]'") from exc
        self._trace = trace
        self._connection = connection
        provider = trace.get_tracer_provider() if provider is True else provider
        from .. import __version__

        self._tracer = provider.get_tracer(_INSTRUMENTATION, __version__)
        # W3C Trace Context itself, not the globally configured propagator: the property names are fixed.
        self._propagator = tracecontext.TraceContextTextMapPropagator()
        self._producer = trace.SpanKind.PRODUCER
        self._consumer = trace.SpanKind.CONSUMER

    def _common(self, operation: str, destination: str | None) -> dict[str, Any]:
        connection = self._connection
        attributes: dict[str, Any] = {
            "messaging.system": "amqp",
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
            "messaging.client.id": connection.container_id,
        }
        if destination:
            attributes["messaging.destination.name"] = destination
        address = connection.address
        if address is not None:
            attributes["server.address"] = address.host
            attributes["server.port"] = address.port
        return attributes

    @staticmethod
    def _message_attributes(attributes: dict[str, Any], message: Message) -> None:
        if message.id is not None:
            attributes["messaging.message.id"] = str(message.id)
        if message.correlation_id is not None:
            attributes["messaging.message.conversation_id"] = str(message.correlation_id)

    # --- send --------------------------------------------------------------------------------------------

    def start_send(self, sender: Sender[Any], message: Message) -> Any:
        """Start the send span of ``message`` and put its context in the message (unless it carries one)."""
        destination = sender.address or message.address
        attributes = self._common("send", destination)
        self._message_attributes(attributes, message)
        properties = message.properties
        carried = None
        if properties is not None and properties.get(TRACEPARENT):
            carried = self._propagator.extract(properties)
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

    def delivery(self, receiver: Receiver, engine_delivery: EngineDelivery) -> TracedDelivery:
        """The delivery, with its receive span started (and ended at once when it arrived settled)."""
        delivery = TracedDelivery(receiver, engine_delivery)
        destination = receiver.address
        attributes = self._common("receive", destination)
        attributes["messaging.message.envelope.size"] = len(engine_delivery.payload)
        parent = None
        try:
            message = delivery.message
        except Exception:  # a malformed message: traced without its context; the application meets the error
            message = None
        if message is not None:
            self._message_attributes(attributes, message)
            properties = message.properties
            if properties:
                carrier = properties
                if not properties.get(TRACEPARENT) and properties.get(DIAGNOSTIC_ID):
                    carrier = {TRACEPARENT: properties[DIAGNOSTIC_ID]}
                parent = self._propagator.extract(carrier)
        span = self._tracer.start_span(
            f"receive {destination}" if destination else "receive",
            context=parent,
            kind=self._consumer,
            attributes=attributes,
        )
        delivery._span = span
        delivery._tracing = self
        if delivery.settled:
            self.end_receive(delivery, None)
        return delivery

    def end_receive(self, delivery: TracedDelivery, state: Any) -> None:
        span = delivery._span
        if span is None:
            return
        delivery._span_open = False
        span.set_attribute("amqp.delivery.state", "settled" if state is None else _outcome_name(state))
        span.end()


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
                self._tracing.end_receive(self, getattr(self._delivery, "state", state))
