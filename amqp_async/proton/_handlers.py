"""proton's handlers: :class:`MessagingHandler` and the helpers it is made of.

A :class:`MessagingHandler` turns the engine-level events (``on_link_flow``, ``on_delivery``,
``on_connection_remote_open``...) into the callbacks applications write (``on_sendable``, ``on_message``,
``on_accepted``, ``on_connection_opened``...). As in proton it does so through four child handlers, which receive every
event after it: :class:`FlowController` (keeps ``prefetch`` credit on receivers), :class:`EndpointStateHandler`
(opened/opening/closing/closed/error callbacks, and answers the peer's opens and closes),
:class:`IncomingMessageHandler` (decodes messages, accepts them when ``auto_accept``) and
:class:`OutgoingMessageHandler` (sendable and outcome callbacks, settles when ``auto_settle``). Each child calls back
into the messaging handler, so overriding a callback there is all an application does.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from ..codec.delivery_states import Accepted, Modified, Rejected, Released
from ..errors import DecodeError
from ..message import Message as _CoreMessage
from ..protocol.endpoint import ACTIVE
from ._condition import Condition
from ._delivery import Delivery
from ._endpoints import Connection, Endpoint, Link, Receiver, Session
from ._events import DELIVERY_ROLES, FUSED_DELIVERY_CALLS, NOOP_CALLBACKS, Event, Handler, _route, dispatch, shadows
from ._exceptions import MessageException, ProtonException, _MessageDecodeError
from ._message import Message

__all__ = [
    "Acking",
    "CFlowController",
    "CHandshaker",
    "EndpointStateHandler",
    "FlowController",
    "Handshaker",
    "IOHandler",
    "IncomingMessageHandler",
    "MessagingHandler",
    "OutgoingMessageHandler",
    "PythonIO",
    "Reject",
    "Release",
    "TransactionHandler",
    "TransactionalClientHandler",
]

# What opens and closes (the endpoints of EndpointStateHandler's rules), and a callback it calls.
_Opening = Connection | Session | Link
_Callback = Callable[[Event], None]

log = logging.getLogger("proton")

_LOCAL_UNINIT, _LOCAL_ACTIVE, _LOCAL_CLOSED = Endpoint.LOCAL_UNINIT, Endpoint.LOCAL_ACTIVE, Endpoint.LOCAL_CLOSED
_REMOTE_ACTIVE, _REMOTE_CLOSED = Endpoint.REMOTE_ACTIVE, Endpoint.REMOTE_CLOSED
_ACTIVE = ACTIVE
_new_message = Message.__new__
_decode_message = _CoreMessage.decode  # Message.decode's work, raising the codec's DecodeError as it is
_ACCEPTED, _REJECTED, _RELEASED, _MODIFIED = Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED


class Reject(ProtonException):
    """Raise from ``on_message`` to reject the message (the sender sees ``on_rejected``)."""


class Release(ProtonException):
    """Raise from ``on_message`` to release the message, modified (delivery-failed)."""


class Acking:
    """The settling methods shared by message handlers."""

    def accept(self, delivery: Delivery) -> None:
        """Accept a received message and settle it."""
        self.settle(delivery, Delivery.ACCEPTED)

    def reject(self, delivery: Delivery) -> None:
        """Reject a received message (it is invalid or unprocessable) and settle it."""
        self.settle(delivery, Delivery.REJECTED)

    def release(self, delivery: Delivery, delivered: bool = True) -> None:
        """Give a received message back to the source: ``delivered=True`` counts this as a delivery attempt
        (the modified outcome with delivery-failed), ``False`` does not (the released outcome)."""
        if delivered:
            delivery.local.failed = True
            self.settle(delivery, Delivery.MODIFIED)
        else:
            self.settle(delivery, Delivery.RELEASED)

    def settle(self, delivery: Delivery, state: int | None = None) -> None:
        """Settle a delivery, first setting its state when one is given."""
        if state:
            delivery.update(state)
        delivery.settle()


_OUTCOME_OF_STATE: dict[type, str] = {
    Accepted: "on_accepted",
    Rejected: "on_rejected",
    Released: "on_released",
    Modified: "on_released",
}


class OutgoingMessageHandler(Handler):
    """Sendable and outcome callbacks for messages this end sends.

    Args:
        auto_settle: settle a delivery once the peer has settled it.
        delegate: the handler to call back (``on_sendable``, ``on_accepted``...).
    """

    def __init__(self, auto_settle: bool = True, delegate: Any = None) -> None:
        self.auto_settle = auto_settle
        self.delegate = delegate
        # The delegate's outcome callbacks, looked up once per delegate (see _resolve_callbacks). An attribute, not
        # an entry written into ``__dict__`` (see _events.shadows for why).
        self._callbacks: tuple[Any, dict[type, Any], Any] | None = None

    def on_link_flow(self, event: Event) -> None:
        link = event.link
        if link is not None and link.is_sender and link.credit:
            state = link.state
            if state & _LOCAL_ACTIVE and state & _REMOTE_ACTIVE:
                self.on_sendable(event)

    def on_delivery(self, event: Event) -> None:
        delivery = event._context
        if type(delivery) is not Delivery:
            delivery = event.delivery
            if delivery is None:
                return
        impl = delivery._impl
        if impl is None or not delivery._updated or not delivery.link.is_sender:
            return
        state = impl.remote_state
        if self.__class__ is OutgoingMessageHandler:
            # Nothing is overridden here: hand the outcome straight to the delegate's own callbacks.
            callbacks = self._callbacks
            if callbacks is None or callbacks[0] is not self.delegate:
                callbacks = self._resolve_callbacks()
            if state is not None:
                callback = callbacks[1].get(state.__class__)
                if callback is not None:
                    callback(event)
            if impl.remote_settled:
                callback = callbacks[2]
                if callback is not None:
                    callback(event)
                if self.auto_settle and not delivery._settled_here:
                    link = delivery.link
                    if link._connection._reactor is not None:
                        # delivery.settle(), inline (every message sent): a container dispatches on its own thread
                        delivery._settled_here = True
                        if impl.settled and delivery._span is None:
                            # link._settle(delivery), inline: settled by the peer, it has nothing left to send
                            link._unsettled.pop(delivery, None)  # type: ignore[attr-defined]  # (a sender's)
                        else:
                            link._settle(delivery)
                        impl.user_data = None
                    else:
                        delivery.settle()
            return
        outcome = None if state is None else _OUTCOME_OF_STATE.get(state.__class__)
        if outcome is not None:
            getattr(self, outcome)(event)
        if impl.remote_settled:
            self.on_settled(event)
            if self.auto_settle:
                delivery.settle()

    def _resolve_callbacks(self) -> tuple[Any, dict[type, Any], Any]:
        """The delegate's outcome callbacks as :func:`dispatch` would call them (None: nothing to call), looked up
        once per delegate."""
        delegate = self.delegate
        outcomes = {state: _resolved(delegate, name) for state, name in _OUTCOME_OF_STATE.items()}
        callbacks = (delegate, outcomes, _resolved(delegate, "on_settled"))
        self._callbacks = callbacks
        return callbacks

    def on_sendable(self, event: Event) -> None:
        """The link has credit: messages may be sent."""
        dispatch(self.delegate, "on_sendable", event)

    def on_accepted(self, event: Event) -> None:
        """The peer accepted a message."""
        dispatch(self.delegate, "on_accepted", event)

    def on_rejected(self, event: Event) -> None:
        """The peer rejected a message."""
        dispatch(self.delegate, "on_rejected", event)

    def on_released(self, event: Event) -> None:
        """The peer released a message (released or modified outcome)."""
        dispatch(self.delegate, "on_released", event)

    def on_settled(self, event: Event) -> None:
        """The peer settled a message: it will never be sent again."""
        dispatch(self.delegate, "on_settled", event)


def _resolved(handler: Any, method: str) -> Any:
    """What :func:`dispatch` calls for ``method`` on ``handler``, as one callable (None: nothing). A handler whose
    instance shadows its callbacks gets a dispatch on every call, as proton looks them up each time."""
    if handler is None:
        return None
    if shadows(handler, method):
        return functools.partial(dispatch, handler, method)
    route = _route(handler, method)
    if route == 1:
        return getattr(handler, method)
    if route == 2:
        return functools.partial(handler.on_unhandled, method)
    return None


def reject_undecodable(delivery: Delivery, error: MessageException) -> None:
    """A received message that does not decode: there is no message for ``on_message``, so it is rejected with
    ``amqp:decode-error`` (§3.4.3: the receiver found it invalid), for the sender to learn of it, and logged on the
    ``proton`` logger as transport errors are; the link goes on with the next delivery. (proton hands over an empty
    or partial message, or its handler raises and stops the container: a hostile peer would stop a server.)"""
    log.error("rejected a received message that does not decode: %s", error.description)
    delivery.local.condition = Condition("amqp:decode-error", error.description)
    delivery.update(Delivery.REJECTED)
    delivery.settle()


class IncomingMessageHandler(Handler, Acking):
    """Message callbacks for messages this end receives.

    Args:
        auto_accept: accept (and settle) each message once ``on_message`` returns without raising.
        delegate: the handler to call back (``on_message``...).
    """

    def __init__(self, auto_accept: bool = True, delegate: Any = None) -> None:
        self.delegate = delegate
        self.auto_accept = auto_accept
        # The delegate and its on_message as dispatch would call it, looked up once per delegate (see _receive).
        self._on_message: tuple[Any, Any] | None = None

    def on_delivery(self, event: Event) -> None:
        _receive(None, self, event)

    def on_message(self, event: Event) -> None:
        """A message arrived: ``event.message``; settle it through ``event.delivery``."""
        dispatch(self.delegate, "on_message", event)

    def on_settled(self, event: Event) -> None:
        """The peer settled a delivery this end received."""
        dispatch(self.delegate, "on_settled", event)

    def on_aborted(self, event: Event) -> None:
        """The sender aborted a delivery."""
        dispatch(self.delegate, "on_aborted", event)


def _receive(flow: FlowController | None, handler: IncomingMessageHandler, event: Event) -> None:
    """``handler.on_delivery(event)``; with ``flow``, what ``flow.on_delivery(event)`` does first, in the same call.

    A container's plan for MessagingHandler's receivers makes the two calls one (:data:`FUSED_DELIVERY_CALLS`): for
    every message received, that saves a call and the checks both repeat: about 3% of the receive's instructions
    (``benchmarks/callback.py``'s program, from C ``direct``).
    """
    delivery = event._context
    if type(delivery) is not Delivery:
        delivery = event.delivery
        if delivery is None:
            return
    link: Any = delivery.link
    if flow is not None:
        # flow.on_delivery(event), inline (the plan is a receiver's: this is a receiver's delivery)
        link_impl = link._impl
        if (
            link_impl is not None
            and not flow._drained
            and not link_impl.drained_credit
            and link_impl.local_state is _ACTIVE
        ):
            window = flow._window
            delta = window - link_impl.link_credit
            if delta > 0 and delta * 4 >= window:
                link.flow(delta)
            # link._prefetch_topped(window), inline: the credit the program reads is proton's (see there)
            link._credit_offset = window - link_impl.link_credit - len(link._incoming) - link._arrived
        else:
            flow._flow(link)
    elif not isinstance(link, Receiver):
        return
    impl = delivery._impl
    if delivery._aborted_here or (impl is not None and impl.aborted):  # delivery.aborted, inline
        handler.on_aborted(event)
        delivery.settle()
        return
    incoming = link._incoming
    if incoming and incoming[0] is delivery:  # readable: the link's current delivery
        # Decoded (whole, once, with the complete delivery's bytes; else what recv() gives), then the link advanced
        # past it.
        message = _new_message(Message)  # decode() sets every field: __init__ would only set defaults
        payload = delivery._payload
        try:
            if payload is not None and delivery._read == 0:
                delivery._read = len(payload)
                _decode_message(message, payload)  # Message.decode without its call (every message received)
            else:
                message.decode(link.recv(delivery.pending) or b"")
        except DecodeError as exc:
            reject_undecodable(delivery, _MessageDecodeError(exc.description))
            return
        except MessageException as exc:
            reject_undecodable(delivery, exc)
            return
        if link._connection._reactor is None:
            link.advance()  # proton's engine API: its own model
        else:
            incoming.popleft()  # link.advance(), inline: a container's receiver, this its current delivery
        event.message = message
        if link._local == _LOCAL_CLOSED:
            if handler.auto_accept:
                delivery._settle_as(_RELEASED)
            return
        try:
            if handler.__class__ is IncomingMessageHandler and handler.delegate is not None:
                # Nothing is overridden here: call the delegate's on_message directly.
                callback = handler._on_message
                if callback is None or callback[0] is not handler.delegate:
                    callback = handler._on_message = (
                        handler.delegate,
                        _resolved(handler.delegate, "on_message"),
                    )
                if callback[1] is not None:
                    callback[1](event)
            else:
                handler.on_message(event)
            if handler.auto_accept:
                delivery._settle_as(_ACCEPTED)
        except Reject:
            delivery._settle_as(_REJECTED)
        except Release:
            delivery._settle_as(_MODIFIED)
    elif delivery._updated and delivery.settled:
        handler.on_settled(event)


class EndpointStateHandler(Handler):
    """Opened/opening/closing/closed/error callbacks for connections, sessions and links.

    ``..._opened`` is called when both ends have opened; ``..._opening`` when the peer opened first (the endpoint is
    then opened here too); ``..._closing`` when the peer closed first (it is then closed here too); ``..._closed``
    when both have closed; ``..._error`` when the peer closed with an error condition.

    Args:
        peer_close_is_error: treat the peer closing first as an error (``..._error`` instead of ``..._closing``).
        delegate: the handler to call back.
    """

    def __init__(self, peer_close_is_error: bool = False, delegate: Any = None) -> None:
        self.delegate = delegate
        self.peer_close_is_error = peer_close_is_error

    @classmethod
    def is_local_open(cls, endpoint: Endpoint) -> bool:
        """True when this end has opened ``endpoint``."""
        return bool(endpoint.state & _LOCAL_ACTIVE)

    @classmethod
    def is_local_uninitialised(cls, endpoint: Endpoint) -> bool:
        """True when this end has not opened ``endpoint``."""
        return bool(endpoint.state & _LOCAL_UNINIT)

    @classmethod
    def is_local_closed(cls, endpoint: Endpoint) -> bool:
        """True when this end has closed ``endpoint``."""
        return bool(endpoint.state & _LOCAL_CLOSED)

    @classmethod
    def is_remote_open(cls, endpoint: Endpoint) -> bool:
        """True when the peer has opened ``endpoint``."""
        return bool(endpoint.state & _REMOTE_ACTIVE)

    @classmethod
    def is_remote_closed(cls, endpoint: Endpoint) -> bool:
        """True when the peer has closed ``endpoint``."""
        return bool(endpoint.state & _REMOTE_CLOSED)

    @classmethod
    def print_error(cls, endpoint: Endpoint, endpoint_type: str) -> None:
        """Log why the peer closed ``endpoint``."""
        condition = endpoint.remote_condition
        if condition:
            log.error(condition.description or condition.name)
        elif cls.is_local_open(endpoint) and cls.is_remote_closed(endpoint):
            log.error("%s closed by peer", endpoint_type)

    # --- the state changes, the same rule for connections, sessions and links ---------------------------

    def _local_opened(self, endpoint: _Opening | None, event: Event, opened: _Callback) -> None:
        if endpoint is not None and self.is_remote_open(endpoint):
            opened(event)

    def _remote_opened(
        self,
        endpoint: _Opening | None,
        event: Event,
        opened: _Callback,
        opening: _Callback,
    ) -> None:
        assert endpoint is not None
        if self.is_local_open(endpoint):
            opened(event)
        elif self.is_local_uninitialised(endpoint):
            opening(event)
            endpoint.open()

    def _local_closed(self, endpoint: _Opening | None, event: Event, closed: _Callback) -> None:
        if endpoint is not None and self.is_remote_closed(endpoint):
            closed(event)

    def _remote_closed(
        self,
        endpoint: _Opening | None,
        event: Event,
        error: _Callback,
        closed: _Callback,
        closing: _Callback,
    ) -> None:
        assert endpoint is not None
        if endpoint.remote_condition:
            error(event)
        elif self.is_local_closed(endpoint):
            closed(event)
        else:
            closing(event)
        endpoint.close()

    # --- closes ------------------------------------------------------------------------------------------

    def on_link_remote_close(self, event: Event) -> None:
        self._remote_closed(event.link, event, self.on_link_error, self.on_link_closed, self.on_link_closing)

    def on_link_local_close(self, event: Event) -> None:
        self._local_closed(event.link, event, self.on_link_closed)

    def on_session_remote_close(self, event: Event) -> None:
        self._remote_closed(
            event.session, event, self.on_session_error, self.on_session_closed, self.on_session_closing
        )

    def on_session_local_close(self, event: Event) -> None:
        self._local_closed(event.session, event, self.on_session_closed)

    def on_connection_remote_close(self, event: Event) -> None:
        connection = event.connection
        condition = None if connection is None else connection.remote_condition
        if condition and condition.name == "amqp:connection:forced":
            # As a transport drop: the connection reconnects, if it may, without closing callbacks.
            return
        self._remote_closed(
            connection, event, self.on_connection_error, self.on_connection_closed, self.on_connection_closing
        )

    def on_connection_local_close(self, event: Event) -> None:
        self._local_closed(event.connection, event, self.on_connection_closed)

    # --- opens -------------------------------------------------------------------------------------------

    def on_connection_local_open(self, event: Event) -> None:
        self._local_opened(event.connection, event, self.on_connection_opened)

    def on_connection_remote_open(self, event: Event) -> None:
        self._remote_opened(event.connection, event, self.on_connection_opened, self.on_connection_opening)

    def on_session_local_open(self, event: Event) -> None:
        self._local_opened(event.session, event, self.on_session_opened)

    def on_session_remote_open(self, event: Event) -> None:
        self._remote_opened(event.session, event, self.on_session_opened, self.on_session_opening)

    def on_link_local_open(self, event: Event) -> None:
        self._local_opened(event.link, event, self.on_link_opened)

    def on_link_remote_open(self, event: Event) -> None:
        self._remote_opened(event.link, event, self.on_link_opened, self.on_link_opening)

    # --- the callbacks -----------------------------------------------------------------------------------

    def on_connection_opened(self, event: Event) -> None:
        """Both ends opened the connection."""
        dispatch(self.delegate, "on_connection_opened", event)

    def on_session_opened(self, event: Event) -> None:
        """Both ends opened the session."""
        dispatch(self.delegate, "on_session_opened", event)

    def on_link_opened(self, event: Event) -> None:
        """Both ends opened the link."""
        dispatch(self.delegate, "on_link_opened", event)

    def on_connection_opening(self, event: Event) -> None:
        """The peer opened the connection first (it is opened here when this returns)."""
        dispatch(self.delegate, "on_connection_opening", event)

    def on_session_opening(self, event: Event) -> None:
        """The peer opened the session first (it is opened here when this returns)."""
        dispatch(self.delegate, "on_session_opening", event)

    def on_link_opening(self, event: Event) -> None:
        """The peer opened the link first (it is opened here when this returns)."""
        dispatch(self.delegate, "on_link_opening", event)

    def on_connection_error(self, event: Event) -> None:
        """The peer closed the connection with an error."""
        if self.delegate is not None:
            dispatch(self.delegate, "on_connection_error", event)
        else:
            self.print_error(event.connection, "connection")  # type: ignore[arg-type]

    def on_session_error(self, event: Event) -> None:
        """The peer ended the session with an error."""
        if self.delegate is not None:
            dispatch(self.delegate, "on_session_error", event)
        else:
            self.print_error(event.session, "session")  # type: ignore[arg-type]
            event.connection.close()  # type: ignore[union-attr]

    def on_link_error(self, event: Event) -> None:
        """The peer detached the link with an error."""
        if self.delegate is not None:
            dispatch(self.delegate, "on_link_error", event)
        else:
            self.print_error(event.link, "link")  # type: ignore[arg-type]
            event.link.close()  # type: ignore[union-attr]

    def on_connection_closed(self, event: Event) -> None:
        """Both ends closed the connection."""
        dispatch(self.delegate, "on_connection_closed", event)

    def on_session_closed(self, event: Event) -> None:
        """Both ends ended the session."""
        dispatch(self.delegate, "on_session_closed", event)

    def on_link_closed(self, event: Event) -> None:
        """Both ends closed the link."""
        dispatch(self.delegate, "on_link_closed", event)

    def on_connection_closing(self, event: Event) -> None:
        """The peer closed the connection first (it is closed here when this returns)."""
        if self.delegate is not None:
            dispatch(self.delegate, "on_connection_closing", event)
        elif self.peer_close_is_error:
            self.on_connection_error(event)

    def on_session_closing(self, event: Event) -> None:
        """The peer ended the session first (it is ended here when this returns)."""
        if self.delegate is not None:
            dispatch(self.delegate, "on_session_closing", event)
        elif self.peer_close_is_error:
            self.on_session_error(event)

    def on_link_closing(self, event: Event) -> None:
        """The peer closed the link first (it is closed here when this returns)."""
        if self.delegate is not None:
            dispatch(self.delegate, "on_link_closing", event)
        elif self.peer_close_is_error:
            self.on_link_error(event)

    def on_transport_tail_closed(self, event: Event) -> None:
        self.on_transport_closed(event)

    def on_transport_closed(self, event: Event) -> None:
        """The transport ended: ``on_disconnected`` when the connection was still open here."""
        connection = event.connection
        if self.delegate is not None and connection is not None and self.is_local_open(connection):
            dispatch(self.delegate, "on_disconnected", event)


class MessagingHandler(Handler, Acking):
    """The handler applications subclass: override the callbacks of interest.

    Args:
        prefetch: the credit kept on each receiver (0: none; issue it with ``receiver.flow``).
        auto_accept: accept each message once ``on_message`` returns (raise :class:`Reject` or :class:`Release`
            to do otherwise).
        auto_settle: settle sent messages once the peer settled them.
        peer_close_is_error: the peer closing an endpoint first is reported as an error.
    """

    def __init__(
        self,
        prefetch: int = 10,
        auto_accept: bool = True,
        auto_settle: bool = True,
        peer_close_is_error: bool = False,
    ) -> None:
        self.handlers: list[Any] = []
        if prefetch:
            self.handlers.append(FlowController(prefetch))
        # proton hands its children a weak proxy; a plain reference is faster to call through, and the cycle it
        # makes is collected like any other.
        me = self
        self.handlers.append(EndpointStateHandler(peer_close_is_error, me))
        self.handlers.append(IncomingMessageHandler(auto_accept, me))
        self.handlers.append(OutgoingMessageHandler(auto_settle, me))
        self.fatal_conditions = ["amqp:unauthorized-access"]

    def on_transport_error(self, event: Event) -> None:
        """The transport failed (connection refused, authentication failed, protocol error...): the error is
        logged, and an authentication failure closes the connection (no reconnect)."""
        transport = event.transport
        condition = None if transport is None else transport.condition
        if condition:
            if condition.info:
                log.error("%s: %s: %s", condition.name, condition.description, condition.info)
            else:
                log.error("%s: %s", condition.name, condition.description)
            if condition.name in self.fatal_conditions and event.connection is not None:
                event.connection.close()
        else:
            log.error("Unspecified transport error")

    def on_connection_error(self, event: Event) -> None:
        """The peer closed the connection with an error: logged."""
        EndpointStateHandler.print_error(event.connection, "connection")  # type: ignore[arg-type]

    def on_session_error(self, event: Event) -> None:
        """The peer ended a session with an error: logged, and the connection closed."""
        EndpointStateHandler.print_error(event.session, "session")  # type: ignore[arg-type]
        event.connection.close()  # type: ignore[union-attr]

    def on_link_error(self, event: Event) -> None:
        """The peer detached a link with an error: logged, and the connection closed."""
        EndpointStateHandler.print_error(event.link, "link")  # type: ignore[arg-type]
        event.connection.close()  # type: ignore[union-attr]

    def on_reactor_init(self, event: Event) -> None:
        """The container started: calls :meth:`on_start`."""
        self.on_start(event)

    def on_start(self, event: Event) -> None:
        """The container started."""

    def on_connection_closed(self, event: Event) -> None:
        """Both ends closed the connection."""

    def on_session_closed(self, event: Event) -> None:
        """Both ends ended the session."""

    def on_link_closed(self, event: Event) -> None:
        """Both ends closed the link."""

    def on_connection_closing(self, event: Event) -> None:
        """The peer closed the connection first."""

    def on_session_closing(self, event: Event) -> None:
        """The peer ended the session first."""

    def on_link_closing(self, event: Event) -> None:
        """The peer closed the link first."""

    def on_disconnected(self, event: Event) -> None:
        """The transport ended while the connection was open (a reconnect follows, if allowed)."""

    def on_sendable(self, event: Event) -> None:
        """A sender has credit: send messages."""

    def on_accepted(self, event: Event) -> None:
        """The peer accepted a message."""

    def on_rejected(self, event: Event) -> None:
        """The peer rejected a message."""

    def on_released(self, event: Event) -> None:
        """The peer released a message (released or modified)."""

    def on_settled(self, event: Event) -> None:
        """The peer settled a delivery."""

    def on_message(self, event: Event) -> None:
        """A message arrived: ``event.message``."""


NOOP_CALLBACKS.update(
    getattr(MessagingHandler, name)
    for name in (
        "on_start",
        "on_connection_closed",
        "on_session_closed",
        "on_link_closed",
        "on_connection_closing",
        "on_session_closing",
        "on_link_closing",
        "on_disconnected",
        "on_sendable",
        "on_accepted",
        "on_rejected",
        "on_released",
        "on_settled",
        "on_message",
    )
)


class TransactionHandler:
    """The callbacks of a transaction's handler (see :meth:`Container.declare_transaction`); ``event.transaction``
    is the :class:`~amqp_async.proton.reactor.Transaction`."""

    def on_transaction_declared(self, event: Event) -> None:
        """A transaction was declared: ``event.transaction`` is ready for work."""

    def on_transaction_committed(self, event: Event) -> None:
        """A transaction was committed."""

    def on_transaction_aborted(self, event: Event) -> None:
        """A transaction was aborted (rolled back as asked)."""

    def on_transaction_declare_failed(self, event: Event) -> None:
        """The coordinator refused to declare a transaction."""

    def on_transaction_commit_failed(self, event: Event) -> None:
        """The coordinator refused to commit a transaction (its accepts were released)."""


class TransactionalClientHandler(MessagingHandler, TransactionHandler):
    """A :class:`MessagingHandler` that is also a :class:`TransactionHandler`, whose :meth:`accept` accepts
    within a transaction when given one.

    Args:
        prefetch: as for :class:`MessagingHandler`.
        auto_accept: as for :class:`MessagingHandler`.
        auto_settle: as for :class:`MessagingHandler`.
        peer_close_is_error: as for :class:`MessagingHandler`.
    """

    def __init__(
        self,
        prefetch: int = 10,
        auto_accept: bool = False,
        auto_settle: bool = True,
        peer_close_is_error: bool = False,
    ) -> None:
        super().__init__(prefetch, auto_accept, auto_settle, peer_close_is_error)

    def accept(self, delivery: Delivery, transaction: Any = None) -> None:
        """Accept ``delivery`` within ``transaction`` (a :class:`~amqp_async.proton.reactor.Transaction`), or
        plainly without one."""
        if transaction:
            transaction.accept(delivery)
        else:
            super().accept(delivery)


class TransactionControlHandler(OutgoingMessageHandler):
    """The handler of a connection's link to the coordinator: reports each declare and discharge outcome to its
    transaction once the coordinator settled it, and hands the link's other events to ``handler``."""

    def __init__(self, handler: Any = None) -> None:
        super().__init__(auto_settle=True)
        self._handler = handler

    def on_settled(self, event: Event) -> None:
        """The coordinator settled a declare or discharge: its transaction reports the outcome."""
        transaction = getattr(event.delivery, "transaction", None)
        if transaction is not None:
            event.transaction = transaction  # type: ignore[attr-defined]  # proton's attribute
            transaction.handle_outcome(event)

    def on_unhandled(self, method: str, *args: Any) -> None:
        """Hand the control link's other events to the transaction handler (as proton does)."""
        if self._handler is not None and args:
            args[0].dispatch(self._handler)


class FlowController(Handler):
    """Keeps ``window`` credit on every receiver it sees (the ``prefetch`` of :class:`MessagingHandler`)."""

    def __init__(self, window: int = 1024) -> None:
        self._window = window
        self._drained = 0

    def on_link_local_open(self, event: Event) -> None:
        self._flow(event.link)

    def on_link_remote_open(self, event: Event) -> None:
        self._flow(event.link)

    def on_link_flow(self, event: Event) -> None:
        self._flow(event.link)

    def on_delivery(self, event: Event) -> None:
        context = event._context
        link = context.link if type(context) is Delivery else event.link
        if not isinstance(link, Receiver):  # outcomes of sent messages change no receiver's credit
            return
        impl = link._impl
        if impl is not None and not self._drained and not impl.drained_credit and impl.local_state is _ACTIVE:
            # The common case of _flow, inline: one delivery used one credit.
            window = self._window
            delta = window - impl.link_credit
            if delta > 0 and delta * 4 >= window:
                link.flow(delta)
            # link._prefetch_topped(window), inline (every message received)
            link._credit_offset = window - impl.link_credit - len(link._incoming) - link._arrived
            return
        self._flow(link)

    def _flow(self, link: Any) -> None:
        if link is not None and link.is_receiver:
            # As proton: once any receiver was drained, this controller stops topping up (the application drains).
            impl = link._impl
            if impl is not None and impl.drained_credit:
                self._drained += link.drained()
            if self._drained == 0:
                # Topped up once a quarter of the window is used (proton tops up on every delivery; the peer sees
                # the same credit granted, in fewer and larger steps). Half would let a fast sender use up its credit
                # and wait for ours while we are still handling what it sent.
                delta = self._window - link._credit_given()
                if delta > 0 and delta * 4 >= self._window:
                    link.flow(delta)
                link._prefetch_topped(self._window)  # the credit read is proton's: the window
            else:
                link._prefetch_stopped()


class Handshaker(Handler):
    """Opens and closes what the peer opens and closes (for handlers that are not a :class:`MessagingHandler`)."""

    @staticmethod
    def on_connection_remote_open(event: Event) -> None:
        connection = event.connection
        if connection is not None and connection.state & _LOCAL_UNINIT:
            connection.open()

    @staticmethod
    def on_session_remote_open(event: Event) -> None:
        session = event.session
        if session is not None and session.state & _LOCAL_UNINIT:
            session.open()

    @staticmethod
    def on_link_remote_open(event: Event) -> None:
        link = event.link
        if link is not None and link.state & _LOCAL_UNINIT:
            link.source.copy(link.remote_source)
            link.target.copy(link.remote_target)
            link.open()

    @staticmethod
    def on_connection_remote_close(event: Event) -> None:
        connection = event.connection
        if connection is not None and not connection.state & _LOCAL_CLOSED:
            connection.close()

    @staticmethod
    def on_session_remote_close(event: Event) -> None:
        session = event.session
        if session is not None and not session.state & _LOCAL_CLOSED:
            session.close()

    @staticmethod
    def on_link_remote_close(event: Event) -> None:
        link = event.link
        if link is not None and not link.state & _LOCAL_CLOSED:
            link.close()


CFlowController = FlowController
CHandshaker = Handshaker


class IOHandler(Handler):
    """proton's socket handler. Here the container's driver does the I/O, so this handler has nothing to do; it
    exists so programs that name it (as a ``global_handler`` base) still import and run."""


PythonIO = IOHandler


DELIVERY_ROLES.update(
    {
        FlowController.on_delivery: "receiver",
        IncomingMessageHandler.on_delivery: "receiver",
        OutgoingMessageHandler.on_delivery: "sender",
    }
)
FUSED_DELIVERY_CALLS[(FlowController.on_delivery, IncomingMessageHandler.on_delivery)] = lambda flow, incoming: (
    functools.partial(_receive, flow, incoming)
)
