"""A received message and the means to settle it (§3.4)."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from ..codec.delivery_states import Accepted, Modified, Rejected, Released
from ..codec.performatives import RCV_SECOND, Error
from ..codec.transactions import TransactionalState
from ..errors import AMQPError, DeliveryAlreadySettled, LinkDetached
from ..message import Message
from ..protocol.endpoint import ACTIVE
from ..types import symbol
from ._arguments import check_outcome, check_thread, check_transaction, get_ident

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..protocol.delivery import Delivery as EngineDelivery
    from ._link_options import Outcome
    from ._links import Receiver, _ReceivingLink
    from ._transaction import Transaction

__all__ = ["Delivery"]

log = logging.getLogger("amqp_async.connection")

_new_message = Message.__new__
_ACCEPTED = Accepted()
_RELEASED = Released()
_FAILED = Modified(delivery_failed=True)
_MODIFIED = Modified.descriptor_name

#: How long leaving ``async with delivery`` on an exception may wait for the sender's settlement (receiver settle
#: mode second) before it lets the exception go on: the outcome is sent either way.
_SETTLE_ON_ERROR_TIMEOUT = 10.0
#: The longest error description a rejection made from an exception carries (a frame must fit the peer's
#: max-frame-size, at least 512 bytes, §2.7.1).
_MAX_DESCRIPTION = 400


class _Unsettled:
    """The outcome slot of a delivery nobody settled yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unsettled>"


_UNSETTLED: Any = _Unsettled()


def _outcome_name(state: object) -> str:
    if isinstance(state, TransactionalState):
        return f"{_outcome_name(state.outcome)} within a transaction"
    return "settled by the sender" if state is None else type(state).__name__.lower()


class _Settlement:
    """What every received delivery has: its tag and state, and the four ways to settle it, once (§3.4), also on
    leaving ``async with``. :class:`Delivery` and :class:`~amqp_async.StreamDelivery` are ones; each sets the three
    attributes of ``__slots__`` in its own ``__init__`` (none here: a Delivery is made per message received)."""

    __slots__ = ("_delivery", "_outcome", "receiver")

    receiver: _ReceivingLink
    _delivery: EngineDelivery
    _outcome: Any
    #: True for a class whose settling is _Settlement's own (``accept()`` then inlines it); a class that overrides
    #: ``_settle`` (to end a span, to drop an unread body) has it False, set by ``__init_subclass__``.
    _plain_settle = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._plain_settle = cls._settle is _Settlement._settle

    @property
    def tag(self) -> bytes:
        """The delivery tag."""
        return self._delivery.tag

    @property
    def settled(self) -> bool:
        """True once settled: by us, or by the sender (at-most-once deliveries arrive settled)."""
        return self._delivery.settled or self._delivery.remote_settled

    @property
    def aborted(self) -> bool:
        """True when the sender aborted the delivery (its payload is empty)."""
        return self._delivery.aborted

    @property
    def state(self) -> Outcome | TransactionalState | None:
        """The outcome we gave it, if any (within a transaction: the transactional state carrying it)."""
        return self._delivery.state  # type: ignore[no-any-return]

    async def accept(self, *, transaction: Transaction | None = None) -> None:
        """Accept the message (§3.4.2): it was processed.

        With ``transaction`` (a declared :class:`~amqp_async.Transaction` of this connection), the acceptance
        is within it (§4.4.2): the message is consumed only if the transaction commits, and returned to its
        source if it rolls back.

        Raises:
            DeliveryAlreadySettled: the delivery was settled already (by one of the four settling methods).
            LinkDetached: the link it came on is gone (the peer delivers it again).
        """
        if not self._plain_settle:
            await self._settle(_ACCEPTED, transaction)
        elif self._settle_now(_ACCEPTED, transaction):  # _settle() inline: one coroutine less per message
            await self._wait_sender_settled()

    async def reject(
        self,
        condition: str = "amqp:internal-error",
        description: str | None = None,
        info: dict[str, Any] | None = None,
        *,
        transaction: Transaction | None = None,
    ) -> None:
        """Reject the message (§3.4.3): it is invalid and must not be delivered again; the error says why.
        ``transaction``, errors: as for :meth:`accept`.

        Raises:
            TypeError: ``condition`` is not a str, ``description`` neither a str nor None, ``info`` not a dict.
            EncodeError: ``info`` holds a value AMQP cannot carry.
            ValueError: the error does not fit in one frame of the peer's (a disposition is one frame).
        """
        if not isinstance(condition, str):
            raise TypeError(f"condition must be a str (a symbolic name, e.g. 'amqp:invalid-field'), got {condition!r}")
        if description is not None and not isinstance(description, str):
            raise TypeError(f"description must be a str or None, got {type(description).__name__}")
        if info is not None and not isinstance(info, dict):
            raise TypeError(f"info must be a dict or None, got {type(info).__name__}")
        outcome = Rejected(error=Error(condition=symbol(condition), description=description, info=info))
        check_outcome(outcome, self.receiver.connection, "the rejection")
        await self._settle(outcome, transaction)

    async def release(self, delivered: bool = False, *, transaction: Transaction | None = None) -> None:
        """Release the message (§3.4.4): not processed, deliver it again (to anyone). With ``delivered=True``, as
        proton's ``release(delivered=True)``, it is a modified outcome with delivery-failed set.
        ``transaction``, errors: as for :meth:`accept`; TypeError: ``delivered`` is not a bool."""
        if not isinstance(delivered, bool):  # a truthy string would otherwise count a failed delivery
            raise TypeError(f"delivered must be a bool, not {type(delivered).__name__}")
        if delivered:
            await self._settle(_FAILED, transaction)
        else:
            await self._settle(_RELEASED, transaction)

    async def modify(
        self,
        delivery_failed: bool = True,
        undeliverable_here: bool = False,
        annotations: dict[str, Any] | None = None,
        *,
        transaction: Transaction | None = None,
    ) -> None:
        """Modify the message (§3.4.5): not processed; count a failed attempt, keep it away from this receiver,
        and/or add message annotations before it is delivered again. ``transaction``, errors: as for
        :meth:`accept`.

        Raises:
            TypeError: ``delivery_failed`` or ``undeliverable_here`` is not a bool, ``annotations`` not a dict with
                str keys.
            EncodeError: ``annotations`` holds a value AMQP cannot carry.
            ValueError: the annotations do not fit in one frame of the peer's (a disposition is one frame).
        """
        if not isinstance(delivery_failed, bool) or not isinstance(undeliverable_here, bool):
            raise TypeError(
                "delivery_failed and undeliverable_here must be bools, "
                f"got {delivery_failed!r} and {undeliverable_here!r}"
            )
        if annotations is not None and (
            not isinstance(annotations, dict) or not all(isinstance(key, str) for key in annotations)
        ):
            raise TypeError(f"annotations must be a dict with str keys or None, got {annotations!r}")
        outcome = Modified(
            delivery_failed=delivery_failed,
            undeliverable_here=undeliverable_here,
            message_annotations={symbol(key): value for key, value in annotations.items()} if annotations else None,
        )
        check_outcome(outcome, self.receiver.connection, "the modified outcome")
        await self._settle(outcome, transaction)

    async def _settle(self, state: Any, transaction: Transaction | None = None) -> None:
        if self._settle_now(state, transaction):
            await self._wait_sender_settled()

    def _settle_now(self, state: Any, transaction: Transaction | None) -> bool:
        """Give the delivery its outcome (queued for the next write); True when it is settled only once the sender
        has settled (receiver settle mode second: :meth:`_wait_sender_settled`)."""
        delivery = self._delivery
        receiver = self.receiver
        if self._outcome is not _UNSETTLED:
            raise DeliveryAlreadySettled(
                f"delivery {delivery.tag!r} is settled already ({_outcome_name(self._outcome)}): "
                "a delivery has one outcome (§3.4)",
                outcome=self._outcome,
            )
        connection = receiver.connection
        if get_ident() != connection._thread:
            check_thread(connection)  # another thread than the connection's loop: refused
        if transaction is not None:
            check_transaction(transaction, connection)
            # §4.4.2: the outcome, given within the transaction, takes effect at its discharge
            state = transaction._outcome_state(state)
        link = delivery.link
        if transaction is None and delivery.remote_settled and not delivery.settled:
            # the sender settled first (at-most-once): nothing to say, so nothing a lost link could take
            self._outcome = state
            delivery.settled = True
            delivery.state = state
            return False
        # A connection that failed for good leaves its engine's links as they were (attached): its error, not a
        # settlement that no frame will ever carry. So does a connection lost and reconnecting: until a new
        # transport is up its engine's links still read attached (a settlement then returned, and was never sent:
        # the peer delivered the message again after the reconnect).
        if (
            link is not receiver._engine_link
            or connection._reconnecting
            or link.local_state is not ACTIVE
            or connection._error is not None
        ):
            lost = link is not receiver._engine_link or connection._reconnecting
            receiver._check()  # closed by the application (ClosedByApplication), or failed: that error
            gone = LinkDetached(
                "the link this delivery came on is gone (detached, or the connection lost): the peer will deliver "
                "it again"
            )
            if lost:
                gone.__cause__ = connection._loss  # the loss that took the link
            raise gone
        self._outcome = state
        if delivery.settled:
            return False  # settled without us (nothing is left to say)
        if delivery.remote_settled:
            delivery.settled = True  # the sender settled first (at-most-once): nothing to say
            delivery.state = state
            return False
        second = link.rcv_settle_mode == RCV_SECOND
        link.settle(delivery, state, settled=not second)
        receiver.connection._kick()
        return second

    async def _wait_sender_settled(self) -> None:
        # §2.6.12: mode second: wait for the sender's settlement, then settle (nothing more is sent).
        delivery = self._delivery
        receiver = self.receiver
        link = delivery.link
        connection = receiver.connection
        while not delivery.remote_settled:
            receiver._check()
            if link is not receiver._engine_link:  # reconnected: the sender's settlement will never come
                lost = LinkDetached(
                    "the connection was lost before the sender settled the delivery: whether the outcome took "
                    "effect is unknown; the peer may deliver the message again"
                )
                lost.__cause__ = connection._loss
                raise lost
            await connection._wait_state()
        delivery.settled = True

    # --- as a context manager ----------------------------------------------------------------------------

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._outcome is not _UNSETTLED:
            return  # the block settled it
        if exc is None:
            try:
                await self._settle(_ACCEPTED)
            except LinkDetached as gone:  # with the connection, or by the peer: the peer delivers it again
                log.warning("delivery %r not accepted on leaving its block: %s", self.tag, gone)
            return
        # The block failed: settle as the receiver says, shielded from a cancellation (and bounded), then let the
        # exception go on. A cancellation, Ctrl-C or exit is no fault of the message: it is released.
        state = self._failure_outcome(exc) if isinstance(exc, Exception) else _RELEASED
        with anyio.CancelScope(shield=True), anyio.move_on_after(_SETTLE_ON_ERROR_TIMEOUT):
            try:
                await self._settle(state)
            except AMQPError as settle_error:  # the link is gone: the peer delivers it again anyway
                log.debug("delivery %r not settled on leaving its block: %s", self.tag, settle_error)

    def _failure_outcome(self, exc: Exception) -> Modified | Released | Rejected:
        on_error = self.receiver.on_error
        if on_error == "release":
            return _RELEASED
        if on_error == "modify":
            # §3.5.3: only an outcome the sender's source lists may be chosen (RabbitMQ 3.x lists no modified, and
            # ends the session on one): released, then, which also has the message delivered again.
            return _FAILED if self._source_supports(_MODIFIED) else _RELEASED
        if isinstance(exc, AMQPError):
            condition, text = exc.condition, exc.description
        else:
            condition, text = "amqp:internal-error", str(exc)
        description = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        if len(description) > _MAX_DESCRIPTION:
            description = f"{description[: _MAX_DESCRIPTION - 3]}..."
        return Rejected(error=Error(condition=symbol(condition), description=description))

    def _source_supports(self, outcome: str) -> bool:
        """Whether the sender's source allows ``outcome`` (a descriptor name); a source that lists none allows
        the standard ones."""
        source = self.receiver._engine_link.remote_source
        outcomes = getattr(source, "outcomes", None)
        return not outcomes or outcome in outcomes


class Delivery(_Settlement):
    """One received message: ``.message``, and the four ways to settle it.

    With the receiver settle mode *first* (at-most-once and at-least-once), settling sends the outcome and the
    delivery is done. With mode *second* (``delivery="exactly-once"``), the outcome goes out unsettled and
    ``accept()`` (or the other three) returns once the sender has settled: the message is then neither lost nor
    duplicated.

    A delivery has one outcome: settling it a second time (``accept()`` twice, ``reject()`` after ``accept()``...)
    raises :class:`~amqp_async.DeliveryAlreadySettled`. A delivery the sender settled already (at-most-once: it
    arrives settled) takes its first settlement quietly, nothing being sent (§2.6.12), so that code written for
    confirmed deliveries runs unchanged; a second one raises as well.

    ``async with delivery:`` settles it when the block ends: accepted when it ends normally; when it raises, by the
    receiver's ``on_error`` (modified with delivery-failed by default; released when the sender's source lists no
    modified outcome, §3.5.3, as RabbitMQ 3.x's does not), and the exception goes on; when it is cancelled (or ends
    by KeyboardInterrupt or SystemExit), released. A block that settled the delivery itself is left as it settled
    it.

    Attributes:
        receiver: the receiver it came on.
    """

    __slots__ = ("_message",)

    receiver: Receiver

    def __init__(self, receiver: Receiver, delivery: EngineDelivery) -> None:
        self.receiver = receiver
        self._delivery = delivery
        self._message: Message | None = None
        self._outcome = _UNSETTLED

    @property
    def message(self) -> Message:
        """The message, decoded on first access (raises DecodeError for a malformed one)."""
        message = self._message
        if message is None:
            message = _new_message(Message)  # decode() sets every field: __init__ would only set defaults
            message.decode(self._delivery.payload)
            self._message = message
        return message

    @property
    def payload(self) -> bytes:
        """The message's encoded bytes."""
        return self._delivery.payload

    @property
    def span(self) -> Span | None:
        """The OpenTelemetry span of this delivery's receipt when the connection traces messages
        (``connect(..., tracing=True)``), else None: see docs/client.md, "Tracing"."""
        return None

    async def __aenter__(self) -> Delivery:
        return self

    def __repr__(self) -> str:
        return f"<amqp_async.Delivery tag={self.tag!r} settled={self.settled}>"
