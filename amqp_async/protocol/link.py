"""Links (§2.6): attach/detach, link credit (§2.6.7) and the per-link side of deliveries.

A :class:`SenderLink` refuses to send without credit (:class:`NoCreditError`): the driver waits for a
:class:`~amqp_async.protocol.events.FlowReceived` instead. A :class:`ReceiverLink` detaches a peer that sends
beyond the credit it was given (``amqp:link:transfer-limit-exceeded``).

Flow-control state follows §2.6.7: the sender's ``link_credit`` is
``delivery-count(receiver) + link-credit(receiver) - delivery-count(sender)``, computed in serial-number arithmetic.
A receiver keeps the same limit as ``delivery_count + link_credit``.
"""

from __future__ import annotations

import abc
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

from ..codec import conditions
from ..codec.performatives import (
    RCV_FIRST,
    RCV_SECOND,
    RECEIVER,
    SENDER,
    SND_MIXED,
    SND_SETTLED,
    SND_UNSETTLED,
    Attach,
    Detach,
    Error,
    Flow,
)
from ..codec.terminus import Source, Target
from ..codec.transactions import Coordinator
from ..types import symbol, uint
from .delivery import Delivery
from .endpoint import ACTIVE, CLOSED, UNINIT, Endpoint
from .errors import LocalProtocolError, NoCreditError, RemoteProtocolError
from .payload import Payload
from .serial import MASK, serial_diff
from .streaming import begin_stream, continue_stream, interrupt_stream

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Link", "ReceiverLink", "SenderLink"]

_pack_I = struct.Struct(">I").pack
_pack_Q = struct.Struct(">Q").pack


class Link(Endpoint, abc.ABC):
    """One end of a link. Create links with :meth:`Session.attach_sender` / :meth:`Session.attach_receiver`;
    links the peer starts arrive in a :class:`~amqp_async.protocol.events.LinkAttached` event.

    Attributes:
        session: the session the link belongs to.
        name: the link name.
        role: :data:`SENDER` (False) or :data:`RECEIVER` (True): our end's role.
        handle: our handle for the link, or None before we attach.
        remote_handle: the peer's handle, or None before its attach.
        source, target: the termini we asked for (or answered with); the target of a link to a transaction
            coordinator is a :class:`~amqp_async.codec.transactions.Coordinator` (§4.5.1).
        remote_source, remote_target: the termini the peer sent (for a dynamic node, the address it made).
        snd_settle_mode, rcv_settle_mode: the settle modes we asked for; ``remote_*`` what the peer sent.
        delivery_count: the link's delivery-count (§2.6.7).
        link_credit: the link credit as this end sees it.
        remote_attach: the peer's attach frame, once received.
    """

    __slots__ = (
        "_initial_delivery_count",
        "delivery_count",
        "desired_capabilities",
        "detach_reported",
        "handle",
        "link_credit",
        "max_message_size",
        "name",
        "offered_capabilities",
        "properties",
        "rcv_settle_mode",
        "remote_attach",
        "remote_closed",
        "remote_handle",
        "role",
        "session",
        "snd_settle_mode",
        "source",
        "target",
        "user_data",
    )

    role: bool

    def __init__(self, session: Session, name: str) -> None:
        super().__init__()
        self.session = session
        self.name = name
        self.handle: int | None = None
        self.remote_handle: int | None = None
        self.source: Source | None = None
        self.target: Target | Coordinator | None = None
        self.snd_settle_mode = SND_MIXED
        self.rcv_settle_mode = RCV_FIRST
        self.properties: dict[Any, Any] | None = None
        self.offered_capabilities: tuple[Any, ...] | None = None
        self.desired_capabilities: tuple[Any, ...] | None = None
        self.max_message_size: int | None = None
        self.remote_attach: Attach | None = None
        self.delivery_count = 0
        self._initial_delivery_count = 0
        self.link_credit = 0
        #: a LinkDetached event has been emitted (once per link).
        self.detach_reported = False
        #: the peer's detach closed the link (False: it only detached it, §2.6.4); read once remote_state is CLOSED.
        self.remote_closed = True
        #: free for the layer above.
        self.user_data: Any = None

    # --- what the peer said ------------------------------------------------------------------------------

    @property
    def remote_source(self) -> Source | None:
        """The source the peer's attach carried."""
        return None if self.remote_attach is None else self.remote_attach.source

    @property
    def remote_target(self) -> Target | Coordinator | None:
        """The target the peer's attach carried."""
        return None if self.remote_attach is None else self.remote_attach.target

    @property
    def coordinator(self) -> bool:
        """True for a link to a transaction coordinator (§4.5.1): its target, ours or the peer's, is one."""
        return isinstance(self.target, Coordinator) or isinstance(self.remote_target, Coordinator)

    @property
    def remote_snd_settle_mode(self) -> int:
        """The sender settle mode in the peer's attach (§2.8.2)."""
        return SND_MIXED if self.remote_attach is None else self.remote_attach.snd_settle_mode

    @property
    def remote_rcv_settle_mode(self) -> int:
        """The receiver settle mode in the peer's attach (§2.8.3)."""
        return RCV_FIRST if self.remote_attach is None else self.remote_attach.rcv_settle_mode

    @property
    def remote_max_message_size(self) -> int | None:
        """The largest message the peer accepts (None or 0: no limit)."""
        return None if self.remote_attach is None else self.remote_attach.max_message_size

    @property
    def locally_attached(self) -> bool:
        """True once we sent our attach."""
        return self.local_state is not UNINIT

    # --- commands ----------------------------------------------------------------------------------------

    def attach(
        self,
        *,
        source: Source | None = None,
        target: Target | Coordinator | None = None,
        snd_settle_mode: int | None = None,
        rcv_settle_mode: int | None = None,
        properties: dict[Any, Any] | None = None,
        offered_capabilities: Any = None,
        desired_capabilities: Any = None,
        max_message_size: int | None = None,
        initial_delivery_count: int = 0,
    ) -> None:
        """Send our attach (§2.6.3): to start the link, or to answer a link the peer started.

        Answering a link the engine has already detached (the peer broke the protocol on it, its session or the
        connection in the same input; the event that says so follows) does nothing.

        Raises:
            LocalProtocolError: the link is already attached on our side, or the session is not usable.
        """
        if self.local_state is CLOSED and self.engine_ended:
            return
        if self.local_state is not UNINIT:
            raise LocalProtocolError(f"link {self.name!r} is already attached")
        self.session._require_usable()
        if source is not None:
            self.source = source
        if target is not None:
            self.target = target
        if snd_settle_mode is not None:
            if snd_settle_mode not in (SND_UNSETTLED, SND_SETTLED, SND_MIXED):
                raise LocalProtocolError(f"invalid sender settle mode {snd_settle_mode!r}")
            self.snd_settle_mode = snd_settle_mode
        if rcv_settle_mode is not None:
            if rcv_settle_mode not in (RCV_FIRST, RCV_SECOND):
                raise LocalProtocolError(f"invalid receiver settle mode {rcv_settle_mode!r}")
            self.rcv_settle_mode = rcv_settle_mode
        if properties is not None:
            self.properties = properties
        if offered_capabilities is not None:
            self.offered_capabilities = offered_capabilities
        if desired_capabilities is not None:
            self.desired_capabilities = desired_capabilities
        if max_message_size is not None:
            self.max_message_size = max_message_size
        self.handle = self.session._allocate_handle(self)
        if self.role is SENDER:
            self.delivery_count = initial_delivery_count & MASK
            self._initial_delivery_count = self.delivery_count
        self.local_state = ACTIVE
        frame = Attach(
            name=self.name,
            handle=self.handle,
            role=self.role,
            snd_settle_mode=self.snd_settle_mode,
            rcv_settle_mode=self.rcv_settle_mode,
            source=self.source,
            target=self.target,
            # §2.7.3: initial-delivery-count MUST be set by the sender and is ignored from a receiver.
            initial_delivery_count=self.delivery_count if self.role is SENDER else None,
            max_message_size=self.max_message_size,
            offered_capabilities=self.offered_capabilities,
            desired_capabilities=self.desired_capabilities,
            properties=self.properties,
        )
        self.session._send_frame(frame)
        self._after_local_attach()

    def detach(self, *, closed: bool = True, error: Error | None = None) -> None:
        """Send our detach (§2.6.4); ``closed=True`` closes the link, ``False`` only suspends it.

        Unsettled deliveries of the link are forgotten by this end (the peer learns their fate, if it cares, when
        the link is resumed, which this engine does not do).
        """
        if self.local_state is CLOSED:
            return
        if self.local_state is UNINIT:
            # §2.6.3: to refuse a link the peer started, attach (with null termini) and detach at once; when its
            # session cannot carry frames (not begun on our side, or ended), there is nothing to write.
            session = self.session
            if self.remote_state is UNINIT or not self._usable_session():
                self.local_state = CLOSED
                session._forget_link_if_done(self)
                return
            self.attach()
        # Queued dispositions and flows go first: an outcome given just before the detach must reach the peer
        # before it (or the peer takes the delivery as unsettled, and sends it again).
        self.session.connection._flush_session(self.session)
        # Transfer frames still waiting for the peer's window die with the link: no frame may name its handle after
        # the detach (§2.6.4), and the receiver drops a delivery left incomplete by a detach.
        self.session._drop_queued_transfers(self)
        self.local_state = CLOSED
        self.local_error = error
        self.session._send_frame(Detach(handle=self.handle, closed=closed, error=error))
        self.session._release_handle(self)

    # --- hooks for the session ---------------------------------------------------------------------------

    def _after_local_attach(self) -> None:
        """Subclass hook: runs once our attach is sent."""

    @abc.abstractmethod
    def _on_flow(self, flow: Flow) -> bool:
        """Take the link part of a flow frame (§2.6.7); return True when it completes a drain we asked for."""

    @abc.abstractmethod
    def _flow_fields(self) -> tuple[int | None, int, int | None, bool]:
        """This end's (delivery-count, link-credit, available, drain) for a flow frame."""

    def _usable_session(self) -> bool:
        """True while frames may be written on the link's session (begun and not ended, connection open)."""
        session = self.session
        return (
            session.local_state is ACTIVE
            and session.remote_state is not CLOSED
            and session.connection.local_state is ACTIVE
        )

    def _usable(self) -> bool:
        """True while frames may be written for this link: attached on our side, session and connection open."""
        return (
            self.local_state is ACTIVE
            and self.session.local_state is ACTIVE
            and self.session.connection.local_state is ACTIVE
        )

    def _write_flow(self, echo: bool = False) -> None:
        """Send a flow frame carrying this link's state (§2.7.4)."""
        delivery_count, link_credit, available, drain = self._flow_fields()
        self.session._send_flow(self, delivery_count, link_credit, available, drain, echo)


class SenderLink(Link):
    """Our end sends messages on this link.

    Attributes:
        available: the number of messages we could send now, told to the receiver (§2.6.7 ``available``).
        drain: the receiver asked us to use up or give back all credit (§2.6.7 ``drain``).
    """

    __slots__ = (
        "_controller",
        "_drain_answered",
        "_next_tag",
        "_streamed_size",
        "_streaming",
        "_transfer_prefix",
        "available",
        "drain",
    )

    role = SENDER

    def __init__(self, session: Session, name: str) -> None:
        super().__init__(session, name)
        self.available = 0
        self.drain = False
        #: the receiver's last drain request was answered (:meth:`drained`): a flow with drain set asks again.
        self._drain_answered = False
        self._next_tag = 0
        self._transfer_prefix = b""
        self._controller = False  # a link to a transaction coordinator (§4.1)
        #: the delivery being sent in parts (``send(..., more=True)``, then :meth:`send_more`), if any.
        self._streaming: Delivery | None = None
        self._streamed_size = 0  # the bytes of its parts so far (against the peer's max-message-size)

    @property
    def credit(self) -> int:
        """How many more deliveries the receiver accepts now (0: wait for a flow)."""
        return self.link_credit

    def _after_local_attach(self) -> None:
        self._transfer_prefix = self.session._transfer_prefix(self.handle or 0)
        self._controller = isinstance(self.target, Coordinator)

    def next_tag(self) -> bytes:
        """A delivery tag unique on this link: a counter, 4 bytes until it passes 2**32, then 8."""
        tag_number = self._next_tag
        self._next_tag = tag_number + 1
        return _pack_I(tag_number) if tag_number <= MASK else _pack_Q(tag_number)

    def send(
        self,
        payload: Payload,
        *,
        tag: bytes | None = None,
        settled: bool | None = None,
        message_format: int = 0,
        state: Any = None,
        more: bool = False,
    ) -> Delivery:
        """Transfer one message (its encoded bytes) as a new delivery (§2.6.12), splitting it across frames
        that fit the peer's max-frame-size; frames beyond the session's outgoing window wait in the session
        until the peer's flow opens it (they are bounded by the credit each one used).

        With ``more=True`` the payload is only the first part of the message: the delivery stays open, and its
        next parts follow with :meth:`send_more` (or it ends with :meth:`abort`); nothing else is sent on the
        link until then (§2.6.14: the frames of one delivery are not interleaved with another's on a link).

        Args:
            payload: the encoded message (a :class:`~amqp_async.protocol.payload.Gathered` sends its parts
                uncopied).
            tag: the delivery tag (default: :meth:`next_tag`).
            settled: send it settled (at-most-once). Default: as the link's sender settle mode says.
            message_format: §2.7.5 message-format (0: the AMQP message format).
            state: the delivery state its transfer frames carry (§2.7.5 ``state``): a
                :class:`~amqp_async.codec.transactions.TransactionalState` sends it within a transaction (§4.4.1).
            more: ``payload`` is only the start of the message: the rest follows with :meth:`send_more` (its frames
                are written as the parts come, ``more`` set until the last, §2.6.14).

        Returns:
            The delivery: unsettled deliveries stay tracked until the peer settles them.

        Raises:
            NoCreditError: the link has no credit (wait for a :class:`FlowReceived`).
            LocalProtocolError: the link or session is not attached, ``settled`` contradicts the settle mode, a
                delivery sent in parts is still open on the link, or the payload exceeds the peer's
                max-message-size (``amqp:link:message-size-exceeded``).
        """
        if self.link_credit <= 0:
            raise NoCreditError(f"link {self.name!r} has no credit")
        if self.local_state is not ACTIVE or self.remote_state is not ACTIVE:
            raise LocalProtocolError(f"link {self.name!r} is not attached")
        if self._streaming is not None:
            raise LocalProtocolError(f"a delivery sent in parts is still open on link {self.name!r}")
        mode = self.snd_settle_mode
        if settled is None:
            settled = mode == SND_SETTLED
        elif (settled and mode == SND_UNSETTLED) or (not settled and mode == SND_SETTLED):
            raise LocalProtocolError(f"settled={settled} contradicts the sender settle mode {mode}")
        remote_max = self.remote_attach.max_message_size  # type: ignore[union-attr]  # attached: checked above
        if remote_max and len(payload) > remote_max:
            raise LocalProtocolError(
                f"message of {len(payload)} bytes exceeds the peer's max-message-size {remote_max}",
                condition=conditions.LINK_MESSAGE_SIZE_EXCEEDED,
            )
        if self._controller:
            # §4.4: a discharge ends the work of its transaction: outcomes given within it (dispositions, queued
            # until the output is taken) must reach the coordinator's side before it.
            self.session.connection.flush()
        if tag is None:
            tag = self.next_tag()
        elif len(tag) > 32:
            raise LocalProtocolError("§2.8.7: a delivery tag is at most 32 bytes")
        self.link_credit -= 1
        self.delivery_count = (self.delivery_count + 1) & MASK
        if self.available:
            self.available -= 1
        if more:
            delivery = self.session._send_transfer(self, payload, tag, settled, message_format, state, True)
            self._streaming = delivery
            self._streamed_size = len(payload)
            return delivery
        return self.session._send_transfer(self, payload, tag, settled, message_format, state)

    def set_state(self, delivery: Delivery, state: Any) -> None:
        """Tell the receiver our state for ``delivery`` without settling it (§2.7.6: a sender's disposition, e.g.
        the outcome it agrees with before it settles); nothing is sent for a delivery already settled."""
        if delivery.link is not self:
            raise LocalProtocolError("the delivery does not belong to this link")
        if delivery.settled:
            return
        delivery.state = state
        self.session._queue_disposition(SENDER, delivery, False, state)

    @property
    def streaming(self) -> Delivery | None:
        """The delivery being sent in parts (its last part not given yet), or None."""
        return self._streaming

    def send_more(self, delivery: Delivery, payload: Payload, *, more: bool = False) -> None:
        """Transfer the next part of a delivery started with ``send(..., more=True)`` (§2.6.14); ``more=False`` (the
        default) makes it the last part, which completes the delivery. No credit is used: the delivery used one when
        it started.

        Raises:
            LocalProtocolError: ``delivery`` is not the one open on this link, the link is not attached, or the
                parts so far exceed the peer's max-message-size (``amqp:link:message-size-exceeded``; the delivery
                stays open: abort it).
        """
        if delivery is not self._streaming or delivery.aborted:
            raise LocalProtocolError(f"the delivery is not the one being sent in parts on link {self.name!r}")
        if self.local_state is not ACTIVE or self.remote_state is not ACTIVE:
            raise LocalProtocolError(f"link {self.name!r} is not attached")
        size = self._streamed_size + len(payload)
        remote_max = self.remote_attach.max_message_size  # type: ignore[union-attr]  # attached: checked above
        if remote_max and size > remote_max:
            # §2.7.3: the peer would detach the link for it; the caller aborts the delivery instead.
            raise LocalProtocolError(
                f"message of at least {size} bytes exceeds the peer's max-message-size {remote_max}",
                condition=conditions.LINK_MESSAGE_SIZE_EXCEEDED,
            )
        self._streamed_size = size
        if not more:
            self._streaming = None
        self.session._send_more(self, delivery, payload, more)

    def abort(self, delivery: Delivery) -> None:
        """Abort a delivery not fully written yet (§2.6.14: its receiver discards it; it counts as settled): one
        sent in parts whose last part was not given, or one whose frames still wait for the peer's window.

        Raises:
            LocalProtocolError: the delivery is fully written (too late to abort), or is not of this link.
        """
        if delivery.link is not self:
            raise LocalProtocolError("the delivery does not belong to this link")
        if delivery.aborted:
            return
        if delivery is self._streaming:
            self._streaming = None
        if not self._usable():
            # Nothing more can be written for the link: the peer drops an incomplete delivery with it (§2.6.4).
            self.session._streaming.pop(delivery, None)
            delivery.aborted = True
            delivery.settled = True
            return
        self.session.abort(delivery)

    def settle(self, delivery: Delivery, state: Any = None) -> None:
        """Settle a delivery we sent before the peer did (§2.6.12): the peer learns it in a disposition.

        A delivery the peer already settled needs nothing more (it has forgotten it); one sent settled was never
        tracked.
        """
        if delivery.link is not self:
            raise LocalProtocolError("the delivery does not belong to this link")
        if delivery.settled:
            return
        delivery.settled = True
        if state is not None:
            delivery.state = state
        self.session._queue_disposition(SENDER, delivery, True, state)

    def drained(self) -> None:
        """Answer a drain request (§2.6.7): give back the credit we will not use, by advancing delivery-count.

        Each request (a flow with drain set) is answered once: called again before the next one (as for each flow of
        one read that finds the drain still set: the broker), with no credit left to give back, it writes nothing;
        the same answer twice had a proton program see two ``on_link_flow`` events for its one drain. A request
        whose credit the transfers used up is answered all the same (credit 0), where proton's pn_link_drained
        writes nothing: rhea's receiver (and the clients built on it) count a drain done only when a flow with drain
        set comes back, not when their credit reaches 0. A no-op when no drain is pending; the flow frame is left
        out when the link is no longer attached.
        """
        if not self.drain or (self._drain_answered and self.link_credit <= 0):
            return
        self._drain_answered = True
        self.delivery_count = (self.delivery_count + self.link_credit) & MASK
        self.link_credit = 0
        if self._usable():
            self._write_flow()

    def _write_flow(self, echo: bool = False) -> None:
        if not self.session._defer_flow(self, echo):  # never ahead of our own queued transfers (§2.6.7)
            super()._write_flow(echo)

    def set_available(self, available: int) -> None:
        """Tell the receiver how many messages we could send now (§2.6.7 ``available``)."""
        self.available = available
        if self._usable():
            self._write_flow()

    def _flow_fields(self) -> tuple[int | None, int, int | None, bool]:
        return self.delivery_count, self.link_credit, self.available, self.drain

    def _on_flow(self, flow: Flow) -> bool:
        # §2.6.7: link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd); a receiver
        # that has not seen our attach yet sends a null delivery-count: use our initial one.
        receiver_count = flow.delivery_count
        if receiver_count is None:
            receiver_count = self.remote_attach_initial_count()
        # Only the deliveries in flight (sent, not yet counted by the receiver) are a serial-number difference; the
        # credit is a plain uint, and any up to 2**32 - 1 is the receiver's to grant.
        in_flight = serial_diff(self.delivery_count, receiver_count)
        self.link_credit = min(max((flow.link_credit or 0) - in_flight, 0), MASK)
        self.drain = bool(flow.drain)
        if self.drain:
            self._drain_answered = False
        return False

    def remote_attach_initial_count(self) -> int:
        """Our initial delivery-count, which the receiver's first flow refers to when it omits its own (§2.7.4)."""
        return self._initial_delivery_count


class ReceiverLink(Link):
    """Our end receives messages on this link.

    Attributes:
        incoming: complete (and aborted) deliveries in arrival order, for the layer above to take.
        available: what the sender last said it could send now.
        drain: we asked the sender to use up or give back all credit, and it has not done so yet.
    """

    __slots__ = (
        "_current",
        "_current_parts",
        "_current_size",
        "_lowered",
        "_overshoot",
        "available",
        "drain",
        "drained_credit",
        "held_message_bound",
        "incoming",
        "overshoot_tolerance",
        "streaming",
    )

    role = RECEIVER

    def __init__(self, session: Session, name: str) -> None:
        super().__init__(session, name)
        self.incoming: deque[Delivery] = deque()
        self.available = 0
        self.drain = False
        #: credit the sender gave back by advancing its delivery-count (a drain); the layer above resets it.
        self.drained_credit = 0
        self._current: Delivery | None = None
        self._current_parts: list[bytes] = []
        self._current_size = 0  # bytes in _current_parts (checked against max-message-size at each frame)
        #: deliveries beyond the credit granted that are accepted anyway (0: the spec's strict rule).
        self.overshoot_tolerance = 0
        #: the largest message held without a max-message-size of ours (None: no bound). Not announced in the
        #: attach (python-qpid-proton's receivers announce none): a peer sending a message that never ends (its
        #: transfers ``more`` for ever) made the holder grow without bound (2.7 GB in 5 s).
        self.held_message_bound: int | None = None
        self._overshoot = 0
        # Credit we took back (a grant lower than the credit the sender had) and it has not used beyond its credit
        # yet: §2.6.7, "If the link-credit is reduced by the receiver when transfers are in-flight, the receiver
        # MAY either handle the excess messages normally or detach the link": they are handled, that many at most.
        self._lowered = 0
        #: hand each delivery over at its first frame, its payload read in parts as frames come (set before
        #: the first transfer; see :mod:`.streaming`).
        self.streaming = False

    @property
    def credit(self) -> int:
        """The credit the sender still has on this link, as far as we know."""
        return self.link_credit

    @property
    def partial(self) -> int | None:
        """The bytes received so far of a delivery under way (its first frames came, not its last: §2.6.14
        ``more``), or None when none is. Its credit is used already: credit 0 does not mean all has come."""
        return None if self._current is None else self._current_size

    def grant_credit(self, credit: int, *, drain: bool = False) -> None:
        """Set the link credit to ``credit`` (§2.6.7) and tell the sender (in the next flow frame).

        With ``drain=True`` the sender must use up the credit or give it back; a :class:`FlowReceived` with
        ``drained=True`` reports that it has.
        """
        if credit < 0 or credit > MASK:
            raise LocalProtocolError(f"link credit must be in [0, 2**32-1], got {credit}")
        if self.local_state is not ACTIVE:
            raise LocalProtocolError(f"link {self.name!r} is not attached")
        self._lowered = max(self._lowered - self._overshoot, 0) + max(self.link_credit - credit, 0)
        self.link_credit = credit
        self.drain = drain
        self._overshoot = 0
        self.session._queue_link_flow(self)

    def add_credit(self, credit: int) -> None:
        """Raise the link credit by ``credit`` (prefetch top-up)."""
        # grant_credit(link_credit + credit, drain=drain) without the call: a receiver tops up once per message.
        total = self.link_credit + credit
        if total < 0 or total > MASK:
            raise LocalProtocolError(f"link credit must be in [0, 2**32-1], got {total}")
        if self.local_state is not ACTIVE:
            raise LocalProtocolError(f"link {self.name!r} is not attached")
        self.link_credit = total
        if self._overshoot:
            self._lowered = max(self._lowered - self._overshoot, 0)
            self._overshoot = 0
        self.session._queue_link_flow(self)

    def settle(self, delivery: Delivery, state: Any = None, *, settled: bool = True) -> None:
        """Set the delivery's state (an outcome such as ``Accepted()``, or ``Received``) and/or settle it.

        The disposition goes out with the next data (consecutive deliveries with the same state and settlement
        share one disposition frame). With receiver settle mode second (§2.6.12), pass ``settled=False`` with
        the outcome first and settle once the sender has settled.
        """
        if delivery.link is not self:
            raise LocalProtocolError("the delivery does not belong to this link")
        if delivery.settled:
            return
        if state is not None:
            delivery.state = state
        if settled:
            delivery.settled = True
        self.session._queue_disposition(RECEIVER, delivery, settled, state)

    def detach(self, *, closed: bool = True, error: Error | None = None) -> None:
        super().detach(closed=closed, error=error)
        if self._current is not None and self.local_state is CLOSED:
            self._drop_current()  # its remaining frames will not be taken (§2.6.4): it is incomplete for good

    def _drop_current(self) -> None:
        """The delivery under way is incomplete for good (the link or its session ended): forget it."""
        current = self._current
        self._current = None
        self._current_parts = []
        if current is not None and self.streaming:
            interrupt_stream(self, current)  # type: ignore[arg-type]  # a streaming link's are StreamingDelivery

    def _flow_fields(self) -> tuple[int | None, int, int | None, bool]:
        # §2.7.4: a receiver's delivery-count is unset until it has the sender's attach (initial-delivery-count).
        delivery_count = self.delivery_count if self.remote_attach is not None else None
        return delivery_count, self.link_credit, None, self.drain

    def _on_flow(self, flow: Flow) -> bool:
        """Update from the sender's flow; return True when a drain we asked for has completed."""
        if flow.delivery_count is not None:
            # §2.6.7: a sender that drains advances its delivery-count past what it sent: that much credit is
            # given back (proton's ``drained``). The credit itself is a plain uint (any up to 2**32 - 1), only
            # the counts are serial numbers.
            advanced = (flow.delivery_count - self.delivery_count) & MASK
            if advanced > self.link_credit:
                # not an advance within the credit we gave (a drain of more than 2**31 is one): a stale count
                advanced = serial_diff(flow.delivery_count & MASK, self.delivery_count)
            if advanced > 0:
                self.drained_credit += advanced
            self.delivery_count = flow.delivery_count & MASK
            self.link_credit = min(max(self.link_credit - advanced, 0), MASK)
        self.available = flow.available or 0
        if self.drain and self.link_credit == 0:
            self.drain = False
            return True
        return False

    def _use_credit(self, count: int = 1) -> None:
        """``count`` deliveries' first frames arrived (§2.6.7): each used a credit and advanced the delivery-count
        (the caller found the credit for all of them). Here for one, and in the receive hot path (transfer_intake)
        for a run of them."""
        self.link_credit -= count
        self.delivery_count = (self.delivery_count + count) & MASK
        if self.drain and self.link_credit == 0:
            self.drain = False  # the credit is used up, so the drain we asked for is complete

    def _on_transfer(self, fields: list[Any], payload: bytes, offset: int) -> Delivery | None:
        """Take one transfer frame (§2.7.5); return the delivery once it is complete or aborted."""
        count = len(fields)
        more = count > 5 and fields[5] is True
        aborted = count > 9 and fields[9] is True
        current = self._current
        if current is None:
            # The first frame of a delivery: it uses a credit (§2.6.7), and must carry id and tag (§2.7.5).
            if self.link_credit <= 0:
                # §2.6.7 forbids it; some peers (RabbitMQ before 4.0, rabbitmq-server#2597) overshoot a credit
                # top-up by up to the credit they had. ``overshoot_tolerance`` (0: strict) bounds what is let by.
                if self._overshoot >= self.overshoot_tolerance + self._lowered:
                    raise RemoteProtocolError(
                        f"transfer on link {self.name!r} beyond the credit granted",
                        condition=conditions.LINK_TRANSFER_LIMIT_EXCEEDED,
                        scope="link",
                    )
                self._overshoot += 1
                self.link_credit = 1  # consumed below
            delivery_id = fields[1] if count > 1 else None
            tag = fields[2] if count > 2 else None
            if delivery_id is None or tag is None:
                raise RemoteProtocolError(
                    "the first transfer of a delivery must carry delivery-id and delivery-tag",
                    condition=conditions.INVALID_FIELD,
                    scope="connection",
                )
            self.session._take_delivery_id(delivery_id)
            message_format = fields[3] if count > 3 and fields[3] is not None else 0
            settled = count > 4 and fields[4] is True
            self._use_credit()
            current = Delivery(self, delivery_id, tag, message_format, b"", False)
            current.remote_settled = settled
            if count > 7 and fields[7] is not None:
                current.remote_state = fields[7]
            self.session._incoming_unsettled[delivery_id] = current  # tracked until settled (§2.6.12)
            if not more or aborted:
                current.payload = payload
                current.aborted = aborted
                if aborted:
                    current.payload = b""
                return current
            if self.streaming:
                return begin_stream(self, current, payload)  # handed over now, its payload read as it comes
            self._current = current
            self._current_parts = [payload]
            self._current_size = len(payload)
            return None
        # A continuation frame (§2.7.5): its delivery-id, delivery-tag and message-format may be omitted, and
        # where present must be the first frame's ("it is an error if the delivery-tag on a continuation transfer
        # differs from the delivery-tag on the first transfer of a delivery"; the same for the message-format).
        if count > 1 and fields[1] is not None and fields[1] != current.delivery_id:
            raise RemoteProtocolError(
                "a transfer interleaves deliveries on one link", condition=conditions.INVALID_FIELD, scope="link"
            )
        if count > 2 and fields[2] is not None and fields[2] != current.tag:
            raise RemoteProtocolError(
                f"a continuation transfer of delivery {current.tag!r} carries another delivery-tag {fields[2]!r}",
                condition=conditions.INVALID_FIELD,
                scope="link",
            )
        if count > 3 and fields[3] is not None and fields[3] != current.message_format:
            raise RemoteProtocolError(
                f"a continuation transfer of delivery {current.tag!r} carries another message-format "
                f"({fields[3]}, the first frame's {current.message_format})",
                condition=conditions.INVALID_FIELD,
                scope="link",
            )
        if count > 4 and fields[4] is True:
            current.remote_settled = True
        if self.streaming:
            continue_stream(self, current, payload, more, aborted)  # type: ignore[arg-type]  # begun as one
            return None
        if aborted:
            self._current = None
            self._current_parts = []
            current.aborted = True
            return current
        parts = self._current_parts
        parts.append(payload)
        self._current_size += len(payload)
        max_size = self.max_message_size
        if max_size and self._current_size > max_size:
            raise RemoteProtocolError(
                f"message on link {self.name!r} exceeds max-message-size {max_size}",
                condition=conditions.LINK_MESSAGE_SIZE_EXCEEDED,
                scope="link",
            )
        bound = self.held_message_bound
        if bound and not max_size and self._current_size > bound:
            raise RemoteProtocolError(
                f"message on link {self.name!r} exceeds {bound} bytes, the most a receiver without a "
                "max-message-size holds of one message",
                condition=conditions.LINK_MESSAGE_SIZE_EXCEEDED,
                scope="link",
            )
        if more:
            return None
        self._current = None
        self._current_parts = []
        current.payload = b"".join(parts)
        return current


def as_symbols(values: Any) -> tuple[symbol, ...] | None:
    """Capabilities as a tuple of symbols (a str, or a sequence of str, or None)."""
    if values is None:
        return None
    if isinstance(values, str):
        return (symbol(values),)
    return tuple(symbol(value) for value in values)


def uint_or_none(value: int | None) -> uint | None:
    """An optional uint field."""
    return None if value is None else uint(value)
