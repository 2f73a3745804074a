"""Trackers: the outcome of a sent message, to await (:meth:`Sender.submit`, and ``send()`` underneath)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Generic

import anyio

from ..codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from ..codec.transactions import TransactionalState
from ..errors import (
    SESSION_ENDED,
    AMQPError,
    ClosedByApplication,
    DeliveryError,
    DeliveryInDoubt,
    MessageModified,
    MessageRejected,
    MessageReleased,
    SessionError,
)
from ..message import Message

if TYPE_CHECKING:
    # A type parameter with a default (PEP 696) for type checkers: a bare ``Sender`` or ``Tracker`` is a confirmed
    # one. At run time it is a plain TypeVar (``typing.TypeVar`` takes ``default=`` only from Python 3.13).
    from typing_extensions import TypeVar

    from ..protocol.delivery import Delivery as EngineDelivery
    from ._link_options import Outcome
    from ._links import Sender
    from ._tracing import MessageTracing

    _R = TypeVar("_R", default=Accepted)
else:
    from typing import TypeVar

    _R = TypeVar("_R")

__all__ = ["Tracker"]

_ACCEPTED = Accepted()


class Tracker(Generic[_R]):
    """The outcome of one sent message, to await later (:meth:`Sender.submit`).

    ``await tracker`` returns the outcome: ``Accepted()`` for a confirmed sender (``Tracker[Accepted]``; a delivery
    the peer settled without stating an outcome counts as accepted, as in python-qpid-proton's ``BlockingSender``),
    None for an at-most-once one (``Tracker[None]``). It raises :class:`~amqp_async.MessageRejected`,
    :class:`~amqp_async.MessageReleased`, :class:`~amqp_async.MessageModified`, or
    :class:`~amqp_async.DeliveryInDoubt` when the connection or link ended before the outcome was known.

    The rule for an ending (a close that timed out, a lost transport, the peer's detach, end or close): a message
    of which some or all was written is in doubt (it may have arrived); a message of which nothing was written (it
    waited whole for the peer's session window, §2.5.6) was never sent, and fails with the error of what ended it,
    of the same kind and condition (:class:`~amqp_async.ClosedByApplication`, :class:`~amqp_async.ConnectionLost`,
    :class:`~amqp_async.ConnectionClosed`, :class:`~amqp_async.SessionError` or :class:`~amqp_async.LinkDetached`),
    its description saying it was never sent: it may be sent again safely.

    Attributes:
        delivery: the engine's delivery (for advanced use, on the connection's event loop only).
        done: True once the outcome is known (or the delivery is in doubt).
        outcome: the delivery state the peer settled it with, as it came: an outcome, or a received state (§3.4.1)
            the peer settled with; None until then, and for a delivery settled without one or sent settled.
    """

    __slots__ = ("_error", "_sender", "_waiters", "delivery", "done", "outcome")

    def __init__(self, sender: Sender[Any] | None, delivery: EngineDelivery | None) -> None:
        self._sender = sender
        self.delivery = delivery
        self.done = False
        self.outcome: Outcome | Received | None = None
        self._error: AMQPError | None = None
        # One wake-up per waiting task (a bare future on asyncio: a tenth of the cost of an event), made only
        # once someone waits.
        self._waiters: list[asyncio.Future[None] | anyio.Event] | None = None

    @property
    def tag(self) -> bytes | None:
        """The delivery tag."""
        return None if self.delivery is None else self.delivery.tag

    @property
    def settled(self) -> bool:
        """True once the delivery is settled (and the outcome known)."""
        return self.done and self._error is None

    def _update(self, delivery: EngineDelivery) -> None:
        state = delivery.remote_state
        if state.__class__ is TransactionalState:
            # §4.4.1: the outcome of a transfer within a transaction, provisional until the discharge
            state = state.outcome
            if state is None and not delivery.remote_settled:
                return
        if not (delivery.remote_settled or delivery.settled) and (state is None or isinstance(state, Received)):
            return  # not final yet (a received state, or an unsettled disposition without outcome)
        if state.__class__ is Accepted:
            self._finish(state, None)
        elif self._sender is not None and isinstance(state, self._sender._more_outcomes):
            self._finish(state, None)  # a transaction controller's declared (§4.5.3)
        else:
            error = _outcome_error(state)
            if isinstance(error, DeliveryError):
                error.address = self._address()  # worked out only for a refusal (it may decode the message)
            self._finish(state, error)

    def _address(self) -> str | None:
        """Where the message went, for the error of a refusal: the sender's target address, or on the anonymous
        relay (no target) the message's ``to``, read from the bytes sent (only when a refusal comes)."""
        sender = self._sender
        if sender is None:
            return None
        address = sender.address
        if address is not None or self.delivery is None:
            return address
        return _message_to(self.delivery.payload)

    def _finish(self, outcome: Any, error: AMQPError | None) -> None:
        if self.done:
            return
        self.done = True
        self.outcome = outcome
        self._error = error
        if self.delivery is not None:
            self.delivery.user_data = None
        if self._sender is not None:
            self._sender._pending.discard(self)
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for waiter in waiters:
                if isinstance(waiter, anyio.Event):
                    waiter.set()
                elif not waiter.done():
                    waiter.set_result(None)

    def _in_doubt(self, reason: str, cause: BaseException | None = None) -> None:
        # The connection's error, when it ended or was lost: chained, and its condition kept.
        error = DeliveryInDoubt(reason, condition=cause.condition if isinstance(cause, AMQPError) else None)
        error.__cause__ = cause
        self._finish(None, error)

    async def wait(self) -> _R:
        """Wait for the outcome: return it, or raise the error it stands for."""
        return await self

    def __await__(self) -> Generator[Any, None, _R]:
        # A generator rather than a coroutine: ``await tracker`` (as ``send()`` does on every confirmed message)
        # then suspends one frame deep, on the waiter itself.
        if not self.done:
            loop = None if self._sender is None else self._sender.connection._loop
            waiter = anyio.Event() if loop is None else loop.create_future()  # no loop: not asyncio (trio)
            waiters = self._waiters
            if waiters is None:
                waiters = self._waiters = []
            waiters.append(waiter)
            try:
                yield from (waiter.wait().__await__() if isinstance(waiter, anyio.Event) else waiter.__await__())
            finally:
                if not self.done:  # cancelled: forget this waiter (a task may wait again and again, in timeouts)
                    waiters.remove(waiter)
        if self._error is not None:
            raise self._error
        outcome = self.outcome
        if (
            outcome.__class__ is not Accepted
            and self._sender is not None
            and (outcome is None or outcome.__class__ is Received)
        ):
            # Confirmed, and settled by the peer without a terminal outcome (§3.4: the source's default outcome
            # applies; ours names none): not refused, so accepted, as python-qpid-proton's BlockingSender has it.
            outcome = _ACCEPTED
        return outcome  # type: ignore[return-value]  # Accepted on a confirmed sender, None at most once

    def __repr__(self) -> str:
        error = self._error
        if isinstance(error, DeliveryInDoubt):
            state = "in doubt"
        elif error is not None and not isinstance(error, DeliveryError):
            state = "not sent"  # _unwritten.not_sent_error
        else:
            state = repr(self.outcome) if self.done else "pending"
        return f"<amqp_async.Tracker tag={self.tag!r} {state}>"


class _TracedTracker(Tracker[_R]):
    """A :class:`Tracker` whose outcome also ends the message's send span (tracing on: ``_tracing``)."""

    __slots__ = ("_size", "_span", "_tracing")

    def __init__(
        self, sender: Sender[Any], delivery: EngineDelivery, tracing: MessageTracing, span: Any, size: int
    ) -> None:
        super().__init__(sender, delivery)
        self._tracing = tracing
        self._span = span
        self._size = size

    def _finish(self, outcome: Any, error: AMQPError | None) -> None:
        if self.done:
            return
        super()._finish(outcome, error)
        self._tracing.end_send(self._span, outcome, error, self._size)


def _message_to(payload: Any) -> str | None:
    """The ``to`` of the message encoded in ``payload`` (bytes, or a Gathered's parts); None when it has none or
    the bytes are gone (a streamed message's)."""
    parts = getattr(payload, "parts", None)
    data = b"".join(parts) if parts is not None else payload
    if not data:
        return None
    message = Message()
    try:
        message.decode(data)
    except AMQPError:
        return None
    return message.address


def _outcome_error(state: Any) -> AMQPError | None:
    if state is None or isinstance(state, Accepted):
        return None
    if isinstance(state, Rejected):
        error = state.error
        if error is None:
            return MessageRejected("the message was rejected", outcome=state, condition="amqp:rejected")
        return MessageRejected(error.description or "", outcome=state, condition=str(error.condition))
    if isinstance(state, Released):
        return MessageReleased("the message was released", outcome=state)
    if isinstance(state, Modified):
        return MessageModified(
            f"the message was modified (delivery_failed={bool(state.delivery_failed)}, "
            f"undeliverable_here={bool(state.undeliverable_here)})",
            outcome=state,
        )
    # §3.4: the outcomes are accepted, rejected, released and modified (and the extensions a sender lists in its
    # source's outcomes, which ours never does); a declared (§4.5.3: a coordinator's) or a received state is not
    # the end of a message's transfer. send() returned it as if it were, where the typed API says Accepted().
    return DeliveryError(
        f"the peer settled the message with {type(state).__name__}, which is not an outcome (§3.4)",
        outcome=state,
        condition="amqp:invalid-field",
    )


def session_ended_cause(error: AMQPError | None, closed_by_application: bool) -> AMQPError:
    """What ended a session, for the deliveries it leaves in doubt: the peer's error, the application's close, or
    the peer's end without an error (without a cause their condition read ``amqp:connection:forced``, as if the
    connection had been forced)."""
    if error is not None:
        return error
    if closed_by_application:
        return ClosedByApplication("the application closed the session")
    return SessionError("the peer ended the session without an error", condition=SESSION_ENDED)


def session_ended_reason(error: AMQPError | None) -> str:
    """Why a delivery is in doubt when its session ended (§2.5.1): in the peer's words, when it gave an error."""
    reason = "the session ended before the outcome was known"
    return f"{reason}: {error.description}" if error is not None and error.description else reason
