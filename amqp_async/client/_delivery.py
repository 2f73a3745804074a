"""A received message and the means to settle it (§3.4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec.delivery_states import Accepted, Modified, Rejected, Released
from ..codec.performatives import RCV_SECOND, Error
from ..errors import LinkDetached
from ..message import Message
from ..protocol.endpoint import EndpointState
from ..types import symbol

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery as EngineDelivery
    from ._links import Receiver
    from ._transaction import Transaction

__all__ = ["Delivery"]

_ACCEPTED = Accepted()
_RELEASED = Released()


class Delivery:
    """One received message: ``.message``, and the four ways to settle it.

    With the receiver settle mode *first* (at-most-once and at-least-once), settling sends the outcome and the
    delivery is done. With mode *second* (``delivery="exactly-once"``), the outcome goes out unsettled and
    ``accept()`` (or the other three) returns once the sender has settled: the message is then neither lost nor
    duplicated.

    Attributes:
        tag: the delivery tag.
        payload: the encoded message bytes.
    """

    __slots__ = ("_delivery", "_message", "receiver")

    def __init__(self, receiver: Receiver, delivery: EngineDelivery) -> None:
        self.receiver = receiver
        self._delivery = delivery
        self._message: Message | None = None

    @property
    def message(self) -> Message:
        """The message, decoded on first access (raises DecodeError for a malformed one)."""
        message = self._message
        if message is None:
            message = self._message = Message()
            message.decode(self._delivery.payload)
        return message

    @property
    def payload(self) -> bytes:
        """The message's encoded bytes."""
        return self._delivery.payload

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
    def span(self) -> Any:
        """The OpenTelemetry span of this delivery's receipt when the connection traces messages
        (``connect(..., tracing=True)``), else None: see docs/client.md, "Tracing"."""
        return None

    @property
    def state(self) -> Any:
        """The outcome we gave it, if any."""
        return self._delivery.state

    async def accept(self, *, transaction: Transaction | None = None) -> None:
        """Accept the message (§3.4.2): it was processed.

        With ``transaction`` (a declared :class:`~amqp_async.Transaction` of this connection), the acceptance
        is within it (§4.4.2): the message is consumed only if the transaction commits, and returned to its
        source if it rolls back.
        """
        await self._settle(_ACCEPTED, transaction)

    async def reject(
        self,
        condition: str = "amqp:internal-error",
        description: str | None = None,
        info: dict[Any, Any] | None = None,
        *,
        transaction: Transaction | None = None,
    ) -> None:
        """Reject the message (§3.4.3): it is invalid and must not be delivered again; the error says why.
        ``transaction``: as for :meth:`accept`."""
        error = Error(condition=symbol(condition), description=description, info=info)
        await self._settle(Rejected(error=error), transaction)

    async def release(self, delivered: bool = False, *, transaction: Transaction | None = None) -> None:
        """Release the message (§3.4.4): not processed, deliver it again (to anyone). With ``delivered=True``, as
        proton's ``release(delivered=True)``, it is a modified outcome with delivery-failed set.
        ``transaction``: as for :meth:`accept`."""
        if delivered:
            await self._settle(Modified(delivery_failed=True), transaction)
        else:
            await self._settle(_RELEASED, transaction)

    async def modify(
        self,
        delivery_failed: bool = True,
        undeliverable_here: bool = False,
        annotations: dict[Any, Any] | None = None,
        *,
        transaction: Transaction | None = None,
    ) -> None:
        """Modify the message (§3.4.5): not processed; count a failed attempt, keep it away from this receiver,
        and/or add message annotations before it is delivered again. ``transaction``: as for :meth:`accept`."""
        await self._settle(
            Modified(
                delivery_failed=delivery_failed,
                undeliverable_here=undeliverable_here,
                message_annotations={symbol(key): value for key, value in annotations.items()} if annotations else None,
            ),
            transaction,
        )

    async def _settle(self, state: Any, transaction: Transaction | None = None) -> None:
        delivery = self._delivery
        receiver = self.receiver
        if delivery.settled:
            return
        if transaction is not None:
            if transaction.connection is not receiver.connection:
                raise ValueError("the transaction belongs to another connection")
            # §4.4.2: the outcome, given within the transaction, takes effect at its discharge
            state = transaction._outcome_state(state)
        link = delivery.link
        if link is not receiver._engine_link or link.local_state is not EndpointState.ACTIVE:
            receiver._check()  # closed by the application (ClosedByApplication), or failed: that error
            gone = LinkDetached(
                "the link this delivery came on is gone (detached or reconnected): the peer will deliver it again"
            )
            if link is not receiver._engine_link:
                gone.__cause__ = receiver.connection._loss  # reconnected: the loss that took the old link
            raise gone
        connection = receiver.connection
        if delivery.remote_settled:
            delivery.settled = True  # the sender settled first (at-most-once): nothing to say
            delivery.state = state
            return
        second = link.rcv_settle_mode == RCV_SECOND
        receiver._engine_link.settle(delivery, state, settled=not second)
        connection._kick()
        if second:
            # §2.6.12: mode second: wait for the sender's settlement, then settle (nothing more is sent).
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

    def __repr__(self) -> str:
        return f"<amqp_async.Delivery tag={self.tag!r} settled={self.settled}>"
