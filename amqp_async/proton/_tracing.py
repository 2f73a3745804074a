"""OpenTelemetry tracing in the callback API: the awaitable API's spans and trace context, for proton's programs.

proton has no tracing of its own; ours is switched on by ``Container(handler, tracing=True)`` (OpenTelemetry's
global tracer provider) or ``tracing=provider`` for every connection of the container, or per connection by
``container.connect(url, tracing=...)`` (``False`` turns it off for one connection; ``BlockingConnection(url,
tracing=...)`` passes it on). Proton programs that never name it run as before: the option is a keyword proton's
``Container`` and ``connect`` would not be given.

The spans, their attributes and the message properties are the awaitable API's, made by the same code
(:class:`~amqp_async.client._tracing.MessageSpans`), so a message sent by one API and received by the other stays
in one trace:

* **send** ``send {target}``, kind PRODUCER, from :meth:`Sender.send` (or :meth:`Transaction.send`) until the
  peer's outcome (the first final one: accepted, rejected, released, modified, or a settlement) or, for a link that
  sends settled, at once. Its parent is the current context: within ``on_message`` that is the receive span of the
  message being handled, so a reply is part of the request's trace. The trace context goes into the message's
  application properties (``traceparent``, ``tracestate``, ``Diagnostic-Id``) before it is encoded.
* **receive** ``receive {source}``, kind CONSUMER, from the arrival of the delivery (it is handed to the handler at
  once) until this end settles it (``accept()``, auto-accept, ``reject()``...), or, for a message that arrived
  settled and that the handler did not settle, once its callbacks return. Its parent is the context the message
  carries. While the delivery's events are dispatched the span is the current one; :attr:`Delivery.span` gives it.

A transport that ends leaves the spans of its transferred, unsettled deliveries in doubt: they end then, a send
span as an error (``DeliveryInDoubt``), a receive span with the state ``unsettled``.

No cost when off: a sender and a delivery check one attribute per message.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..client._tracing import DIAGNOSTIC_ID, TRACEPARENT, TRACESTATE, MessageSpans
from ..client._tracker import _outcome_error
from ..codec.delivery_states import Received
from ..codec.transactions import TransactionalState
from ..errors import AMQPError, DeliveryInDoubt
from ..message import Message

if TYPE_CHECKING:
    from ._delivery import Delivery
    from ._endpoints import Connection, Receiver, Sender

__all__ = ["ContainerTracing", "tracing_for"]

_IN_DOUBT = "the connection ended before the outcome of the delivery was known"
COORDINATOR = 3  # proton's Terminus.COORDINATOR (§4.5.1: the target of a transaction's control link)
#: The application properties that carry a trace context (see MessageSpans).
_TRACE_PROPERTIES = (TRACEPARENT, TRACESTATE, DIAGNOSTIC_ID)


def _unreadable_trace_properties(properties: Any) -> list[Any]:
    """The trace context properties in ``properties`` (a message's application properties) that OpenTelemetry's
    W3C propagator cannot read: any value not a string (binary, a number, a list). The propagator raises
    ``TypeError`` on one (it takes ``len()`` of what it reads, or matches it against a pattern); such a message
    comes from any peer or program, and is valid AMQP (§3.2.5: application-properties values are simple types)."""
    if not properties:
        return []
    return [key for key in _TRACE_PROPERTIES if key in properties and not isinstance(properties[key], str)]


class ContainerTracing(MessageSpans):
    """The tracing of a container's connections for one tracer provider (see the module's documentation).

    Spans not yet ended are kept on their deliveries (``Delivery._span``) and, until they end, here, so that a
    transport that ends can end those of its deliveries in doubt.
    """

    def __init__(self, provider: Any) -> None:
        super().__init__(provider)
        self.provider = provider  # kept: the containers' caches know it by its id
        self._context = importlib.import_module("opentelemetry.context")
        self._open: dict[Delivery, None] = {}

    def _common(self, connection: Connection, operation: str, destination: str | None) -> dict[str, Any]:
        host = port = None
        url = connection.url
        if url is not None and getattr(connection, "_options", None) is not None:  # one we connected to
            host = url.host
            port = None if url.port is None else int(url.port)
        return self.attributes(operation, destination, connection.container, host, port)

    # --- send --------------------------------------------------------------------------------------------

    def send(self, sender: Sender, message: Message, tag: Any, state: Any = None) -> Delivery:
        """:meth:`Sender.send` of a message with a send span: the context goes into the message before it is
        encoded; ``state`` is the transfer's (a transaction's, §4.4.1)."""
        if sender.target.type == COORDINATOR:  # a transaction's declare or discharge: no application message
            return sender._send_payload(message._encode_payload(), tag, None, state)
        if _unreadable_trace_properties(message.properties):
            # The program set a trace context that is not W3C Trace Context text: sent untraced and unchanged, as
            # with tracing off (OpenTelemetry raised TypeError out of send()).
            return sender._send_payload(message._encode_payload(), tag, None, state)
        destination = sender.target.address or sender.remote_target.address or message.address
        span = self.send_span(message, destination, self._common(sender.connection, "send", destination))
        try:
            payload = message._encode_payload()
            delivery = sender._send_payload(payload, tag, None, state)
        except BaseException as exc:
            self.end_send(span, None, exc if isinstance(exc, AMQPError) else AMQPError(repr(exc)))
            raise
        if delivery._settled_here:  # sent settled (at-most-once): no outcome will come
            self.end_send(span, None, None, len(payload))
        else:
            delivery._span = span
            delivery._span_size = len(payload)
            self._open[delivery] = None
        return delivery

    def updated(self, delivery: Delivery) -> None:
        """The peer changed the state of a delivery with an open span: end a send span once the outcome is final
        (as the awaitable API's tracker: a transactional state's outcome counts, a received state does not)."""
        impl = delivery._impl
        if impl is None or not delivery.link.is_sender:
            return
        state = impl.remote_state
        if state.__class__ is TransactionalState:
            state = state.outcome
        if not impl.remote_settled and (state is None or isinstance(state, Received)):
            return
        self._end_send(delivery, state, _outcome_error(state))

    def _end_send(self, delivery: Delivery, outcome: Any, error: AMQPError | None) -> None:
        span = delivery._span
        delivery._span = None
        self._open.pop(delivery, None)
        self.end_send(span, outcome, error, delivery._span_size)

    # --- receive -----------------------------------------------------------------------------------------

    def received(self, receiver: Receiver, delivery: Delivery, payload: bytes | bytearray | memoryview) -> None:
        """A complete delivery arrived: start its receive span (the parent is the context its message carries)."""
        source = receiver.source.address or receiver.remote_source.address
        message = Message()
        try:
            message.decode(payload)
        except Exception:  # a malformed message: traced without its context; the handler meets the error
            parsed = None
        else:
            parsed = message
            properties = message.properties
            unreadable = _unreadable_trace_properties(properties)
            if properties and unreadable:
                # A peer's trace context that is not W3C Trace Context text: the message is traced without it
                # (the properties of this copy, decoded for the span only). OpenTelemetry's TypeError escaped
                # the container's read and ended its run, every connection with it.
                message.properties = {key: value for key, value in properties.items() if key not in unreadable}
        delivery._span = self.receive_span(
            parsed, source, len(payload), self._common(receiver.connection, "receive", source)
        )
        self._open[delivery] = None

    def dispatch(self, delivery: Delivery, calls: Sequence[Callable[[Any], Any]], event: Any) -> None:
        """Call the handlers of a delivery's event, the receive span current (a send from ``on_message`` is its
        child); a message that arrived settled and was not settled by them has its span ended then."""
        span = delivery._span
        if not delivery.link.is_receiver:
            for call in calls:
                call(event)
            return
        context = self._context
        token = context.attach(self._trace.set_span_in_context(span))
        try:
            for call in calls:
                call(event)
        finally:
            context.detach(token)
        if delivery._span is span and delivery.settled:
            self._end_receive(delivery, None)

    def _end_receive(self, delivery: Delivery, state: Any) -> None:
        span = delivery._span
        delivery._span = None
        self._open.pop(delivery, None)
        self.end_receive(span, state)

    # --- both --------------------------------------------------------------------------------------------

    def settled(self, delivery: Delivery) -> None:
        """This end settled a delivery with an open span: a receive span ends with the state given; a send span
        (given up before its outcome came) with the peer's state so far."""
        if delivery.link.is_receiver:
            from ._delivery import local_state_object

            self._end_receive(delivery, local_state_object(delivery))
        else:
            impl = delivery._impl
            state = None if impl is None else impl.remote_state
            self._end_send(delivery, state, _outcome_error(state))

    def transport_ended(self, connection: Connection) -> None:
        """The transport of ``connection`` ended: the spans of its transferred, unsettled deliveries end in doubt
        (the messages still waiting for credit keep theirs: they go on a new transport)."""
        for delivery in [d for d in self._open if d._impl is not None and d.connection is connection]:
            if delivery.link.is_receiver:
                span = delivery._span
                delivery._span = None
                self._open.pop(delivery, None)
                span.set_attribute("amqp.delivery.state", "unsettled")
                span.end()
            else:
                self._end_send(delivery, None, DeliveryInDoubt(_IN_DOUBT))

    def in_current_context(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, to be called on the container's thread in the OpenTelemetry context current on this one
        (the blocking API's sends are children of the caller's span)."""
        context = self._context
        current = context.get_current()

        def in_context(*args: Any) -> Any:
            token = context.attach(current)
            try:
                return function(*args)
            finally:
                context.detach(token)

        return in_context


def tracing_for(cache: dict[Any, ContainerTracing], option: Any) -> ContainerTracing | None:
    """The :class:`ContainerTracing` for a ``tracing`` option (None or False: off; True: the global provider; a
    tracer provider), one per provider in ``cache``.

    Raises:
        TypeError: another value.
    """
    from ..client._config import tracing_option

    provider = tracing_option(option)
    if provider is None:
        return None
    key = True if provider is True else id(provider)
    tracing = cache.get(key)
    if tracing is None:
        tracing = cache[key] = ContainerTracing(provider)
    return tracing
