"""Sessions (§2.5): begin/end, the transfer windows of §2.5.6, handles, and the session-scoped delivery ids.

Window accounting (§2.5.6), from this end's point of view:

- ``next_outgoing_id`` numbers our transfer frames; ``remote_incoming_window`` is how many more the peer accepts,
  ``next-incoming-id(peer) + incoming-window(peer) - next-outgoing-id(us)`` as of its last flow. A transfer frame
  is written only while it is positive: frames beyond it wait in the session (never more than the deliveries
  the link credit allowed), and go out when a flow opens the window.
- ``next_incoming_id`` is the transfer-id we expect; ``incoming_window`` how many more we accept. A peer that sends
  beyond it breaks the session: ``amqp:session:window-violation``.

Replenish policy: our incoming window starts at ``incoming_window`` frames and is reset to that value, with a flow
frame, whenever it falls to half of it or below (so that a window of 1 reopens after each frame). The peer may send
up to the limit we last wrote in a begin or flow (next-incoming-id + incoming-window); a frame beyond it is a
violation. The memory the window admits is bounded by link credit (complete deliveries) and max-message-size (a
partial one), not by the window; except on streaming links (:mod:`.streaming`), whose frames are handed over as
they come: the frames the layer above holds unread (``held_frames``) are taken out of the window, which reopens
only as far as they leave room (``incoming_window - held_frames``, again when that gains half a window), so that
unread frames never pass the window (plus the frame being read).

Dispositions (§2.7.6) and flows (§2.7.4) are queued and written when the connection's output is taken: runs of
consecutive delivery ids with the same role, settlement and state share one disposition frame.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

from ..codec import conditions, encode
from ..codec.delivery_states import Accepted, Modified, Rejected, Released
from ..codec.performatives import (
    RCV_FIRST,
    RCV_SECOND,
    RECEIVER,
    SENDER,
    SND_MIXED,
    SND_SETTLED,
    SND_UNSETTLED,
    Attach,
    Begin,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
)
from ..codec.transactions import Declared, TransactionalState
from .delivery import Delivery
from .endpoint import ACTIVE, CLOSED, UNINIT, Endpoint
from .errors import LocalProtocolError, RemoteProtocolError
from .events import DeliveriesUpdated, FlowReceived, LinkAttached, LinkDetached, SessionEnded
from .link import Link, ReceiverLink, SenderLink
from .payload import BY_REFERENCE, payload_slice
from .serial import MASK, serial_diff
from .transfer_frames import encode_handle, transfer_head_size, write_transfer_head

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["Session"]

# §3.4 terminal outcomes, and §4.5.5 declared: the outcome of a declare
_TERMINAL_OUTCOMES = (Accepted, Rejected, Released, Modified, Declared)
_OUTGOING_WINDOW = 0x7FFFFFFF
# initial_incoming_window of a session whose layer above manages the incoming window: the replenish test in
# _on_transfer (window <= initial // 2) never passes, since the window never falls below zero.
_MANUAL_WINDOW = -1

# The largest transfer performative we write (handle, id, a 32-byte tag, format, settled, more, aborted...) plus
# the frame header: payload per frame is the peer's max-frame-size less this.
TRANSFER_OVERHEAD = 128


class Session(Endpoint):
    """One session of a connection. Create it with :meth:`Connection.begin_session`; sessions the peer starts
    arrive in a :class:`~amqp_async.protocol.events.SessionBegun` event and are answered with :meth:`begin`.

    Attributes:
        connection: the connection.
        channel: our channel number, or None before we begin.
        remote_channel: the peer's channel number, or None before its begin.
        next_outgoing_id, incoming_window, outgoing_window, next_incoming_id: our window state (§2.5.6).
        remote_incoming_window, remote_outgoing_window: the peer's, as of its last begin or flow.
        handle_max: the highest handle we accept; ``remote_handle_max`` the peer's.
        remote_begin: the peer's begin frame, once received.
    """

    # Slots: a session's fields are read for every frame. As instance attributes, its 33 would pass the 29 CPython
    # 3.11 and 3.12 keep inline: each session would hold a dict, and neither interpreter specialises a method call
    # on such an instance (``self._write_transfer(...)``, for every message).
    __slots__ = (
        "_advertised_limit",
        "_encoded_state",
        "_expected_delivery_id",
        "_flow_links",
        "_flows_after",
        "_freed_handles",
        "_incoming_unsettled",
        "_links_by_handle",
        "_links_by_name",
        "_links_by_remote_handle",
        "_next_delivery_id",
        "_next_handle",
        "_outgoing_queue",
        "_outgoing_unsettled",
        "_pending_dispositions",
        "_session_flow_pending",
        "_streaming",
        "channel",
        "connection",
        "desired_capabilities",
        "end_reported",
        "handle_max",
        "held_frames",
        "incoming_window",
        "initial_incoming_window",
        "next_incoming_id",
        "next_outgoing_id",
        "offered_capabilities",
        "outgoing_window",
        "properties",
        "remote_begin",
        "remote_channel",
        "remote_handle_max",
        "remote_incoming_window",
        "remote_outgoing_window",
        "user_data",
    )

    def __init__(
        self,
        connection: Connection,
        *,
        incoming_window: int = 2048,
        handle_max: int = 0xFFFFFFFF,
        offered_capabilities: Any = None,
        desired_capabilities: Any = None,
        properties: dict[Any, Any] | None = None,
        manual_window: bool = False,
    ) -> None:
        super().__init__()
        self.connection = connection
        self.channel: int | None = None
        self.remote_channel: int | None = None
        self.remote_begin: Begin | None = None
        self.next_outgoing_id = 0
        #: the window replenished to (see the module's policy), or _MANUAL_WINDOW: the layer above sets the window
        #: (:meth:`set_incoming_window`) and the engine never reopens it by itself.
        self.initial_incoming_window = _MANUAL_WINDOW if manual_window else incoming_window
        self.incoming_window = incoming_window
        self.outgoing_window = _OUTGOING_WINDOW
        self.next_incoming_id = 0
        self._advertised_limit = incoming_window
        #: transfer frames of streaming deliveries received and not yet read by the layer above (§2.5.6: they
        #: keep their place in the incoming window until read; see :mod:`.streaming`).
        self.held_frames = 0
        self.remote_incoming_window = 0
        self.remote_outgoing_window = 0
        self.handle_max = handle_max
        self.remote_handle_max = 0xFFFFFFFF
        self.offered_capabilities = offered_capabilities
        self.desired_capabilities = desired_capabilities
        self.properties = properties
        #: free for the layer above.
        self.user_data: Any = None
        #: a SessionEnded event has been emitted (once per session).
        self.end_reported = False
        self._links_by_handle: dict[int, Link] = {}
        # Our handles: those below _next_handle are in use but for the ones freed (a heap, lowest first), so that
        # a link gets the lowest free handle in constant time (a scan from 0 made 4,000 attaches cost 1 s).
        self._next_handle = 0
        self._freed_handles: list[int] = []
        self._links_by_remote_handle: dict[int, Link] = {}
        self._links_by_name: dict[tuple[str, bool], Link] = {}
        self._next_delivery_id = 0
        #: the delivery-id the peer's next delivery on this session must have (None before its first).
        self._expected_delivery_id: int | None = None
        self._outgoing_unsettled: dict[int, Delivery] = {}
        self._incoming_unsettled: dict[int, Delivery] = {}
        self._pending_dispositions: list[tuple[bool, int, bool, Any]] = []
        self._flow_links: dict[Link, None] = {}
        self._session_flow_pending = False
        # Frames of deliveries waiting for the peer's incoming window: [link, delivery, payload, offset, aborted,
        # final]; ``final`` is False for a part of a delivery that goes on (:meth:`SenderLink.send_more`).
        self._outgoing_queue: deque[list[Any]] = deque()
        #: deliveries started with ``more=True`` whose last part has not been given yet (see SenderLink.send_more).
        self._streaming: dict[Delivery, None] = {}
        # Sender links' flows held back until a queued item (by id) is written: see _defer_flow.
        self._flows_after: dict[int, tuple[Link, bool]] = {}
        # The last delivery state sent on a transfer, and its encoding (one per transaction, reused by its sends).
        self._encoded_state: tuple[Any, bytes] | None = None

    # --- state -------------------------------------------------------------------------------------------

    @property
    def locally_begun(self) -> bool:
        """True once we sent our begin."""
        return self.local_state is not UNINIT

    @property
    def links(self) -> list[Link]:
        """The session's links (attached on either side, not yet detached on both)."""
        return list(self._links_by_name.values())

    @property
    def outgoing_backlog(self) -> int:
        """Bytes of transfer frames waiting for the peer's incoming window."""
        return sum(len(item[2]) - item[3] for item in self._outgoing_queue)

    @property
    def backlogged_deliveries(self) -> list[Delivery]:
        """The deliveries whose transfer frames (some or all) wait for the peer's incoming window."""
        return [item[1] for item in self._outgoing_queue]

    @property
    def has_backlog(self) -> bool:
        """True while transfer frames wait for the peer's incoming window (cheaper than :attr:`outgoing_backlog`)."""
        return bool(self._outgoing_queue)

    def incomplete_deliveries(self, link: Link | None = None) -> tuple[Delivery, ...]:
        """The outgoing deliveries (of ``link``, or of every link) whose last transfer frame is not written yet, in
        the order they were sent: frames of them wait for the peer's incoming window (§2.5.6), or more parts are to
        come (:meth:`SenderLink.send_more`). What an ending would cut short now: a detach, end or close drops them
        (the events name those the peer's ending dropped: :attr:`LinkDetached.dropped
        <amqp_async.protocol.events.LinkDetached.dropped>`). Not for the hot path: a scan of the queue."""
        queue = self._outgoing_queue
        streaming = self._streaming
        if not queue and not streaming:
            return ()
        found = dict.fromkeys(item[1] for item in queue if link is None or item[0] is link)
        found.update(dict.fromkeys(delivery for delivery in streaming if link is None or delivery.link is link))
        return tuple(found)

    def unwritten(self, delivery: Delivery) -> bool:
        """True while frames of ``delivery`` wait for the peer's incoming window, or more of it is to come
        (:meth:`SenderLink.send_more`)."""
        if delivery in self._streaming:
            return True
        queue = self._outgoing_queue
        return bool(queue) and any(item[1] is delivery for item in queue)

    @property
    def unsettled_outgoing(self) -> int:
        """How many deliveries we sent are not settled yet."""
        return len(self._outgoing_unsettled)

    @property
    def unsettled_incoming(self) -> int:
        """How many deliveries we received are not settled yet."""
        return len(self._incoming_unsettled)

    def set_incoming_window(self, window: int) -> None:
        """Set the incoming window (§2.5.6) to ``window`` frames and take it over from the engine's replenish
        policy: from now on the window only changes here (the layer above reopens it as its application consumes
        what arrived, proton's session capacity). A begun session tells the peer in a flow frame."""
        if window < 0 or window > MASK:
            raise LocalProtocolError(f"incoming window must be in [0, 2**32-1], got {window}")
        self.initial_incoming_window = _MANUAL_WINDOW
        self.incoming_window = window
        if self.local_state is ACTIVE:
            self._queue_session_flow()

    def _require_usable(self) -> None:
        if self.local_state is not ACTIVE:
            raise LocalProtocolError("the session is not begun (or already ended) on our side")
        if self.remote_state is CLOSED:
            raise LocalProtocolError("the peer ended the session")

    # --- commands ----------------------------------------------------------------------------------------

    def begin(self) -> None:
        """Send our begin (§2.5.1): to start the session, or to answer one the peer started.

        Answering a session the engine has already ended (the peer broke the protocol on it, or on the connection,
        in the same input; the :class:`SessionEnded` or :class:`ConnectionClosed` event follows) does nothing.
        """
        if self.local_state is CLOSED and self.engine_ended:
            return
        if self.local_state is not UNINIT:
            raise LocalProtocolError("the session is already begun")
        self.connection._require_open_for_sessions()
        if self.channel is None:
            self.channel = self.connection._allocate_channel(self)
        self.local_state = ACTIVE
        # Our begin lets the peer send incoming-window frames from its next-outgoing-id (known once its begin is
        # here; for a session we start, the peer's first transfer id is taken from its begin).
        self._advertised_limit = (self.next_incoming_id + self.incoming_window) & MASK
        self._send_frame(
            Begin(
                remote_channel=self.remote_channel,
                next_outgoing_id=self.next_outgoing_id,
                incoming_window=self.incoming_window,
                outgoing_window=self.outgoing_window,
                handle_max=self.handle_max,
                offered_capabilities=self.offered_capabilities,
                desired_capabilities=self.desired_capabilities,
                properties=self.properties,
            )
        )

    def end(self, error: Error | None = None) -> None:
        """Send our end (§2.5.1), detaching nothing explicitly: links end with the session.

        A session the peer began and we have not answered is begun first (§2.5.1: an end follows a begin), or, when
        the connection cannot carry that any more, only marked ended.
        """
        if self.local_state is UNINIT and self.remote_state is not UNINIT:
            connection = self.connection
            if connection.local_state is ACTIVE and connection.remote_state is ACTIVE:
                self.begin()
            else:
                self._mark_ended()
                return
        if self.local_state is not ACTIVE:
            return
        self.connection._flush_session(self)
        self.local_state = CLOSED
        self.local_error = error
        self._send_frame(End(error=error))
        for link in self._links_by_name.values():
            if link.local_state is not CLOSED:
                link.local_state = CLOSED
                link.engine_ended = True  # it ends with the session, not by a command of its own
        self._outgoing_queue.clear()
        self._streaming.clear()
        self._flows_after.clear()
        if self.remote_state is not UNINIT:
            self.connection._release_channel(self)
        # else the peer still owes the answer to our begin, and then its end (§2.5.1): the channel stays ours until
        # that end (_on_end), so that a late begin finds the session it answers rather than "no session".

    def _mark_ended(self) -> None:
        """Our side is over without an end frame (nothing can be written for the session any more)."""
        self.local_state = CLOSED
        self.engine_ended = True
        for link in self._links_by_name.values():
            if link.local_state is not CLOSED:
                link.local_state = CLOSED
                link.engine_ended = True
        self.connection._release_channel(self)

    def attach_sender(self, name: str, **options: Any) -> SenderLink:
        """Start a link on which we send (§2.6.3); ``options`` are those of :meth:`Link.attach`."""
        link = SenderLink(self, name)
        self._attach(link, options)
        return link

    def attach_receiver(self, name: str, **options: Any) -> ReceiverLink:
        """Start a link on which we receive (§2.6.3); ``options`` are those of :meth:`Link.attach`."""
        link = ReceiverLink(self, name)
        self._attach(link, options)
        return link

    def link_named(self, name: str, role: bool) -> Link | None:
        """The link called ``name`` with ``role`` (``SENDER`` or ``RECEIVER``, ours) the session knows: attached, or
        detached on our side and waiting for the peer's detach (§2.6.4). A new link of that name is refused until
        it is gone (§2.6.1: the name identifies the link)."""
        return self._links_by_name.get((name, role))

    def _attach(self, link: Link, options: dict[str, Any]) -> None:
        self._require_usable()
        key = (link.name, link.role)
        existing = self._links_by_name.get(key)
        if existing is not None:
            # §2.6.1: a link name identifies the link (with the role) between two containers.
            if existing.local_state is CLOSED:
                raise LocalProtocolError(
                    f"a link named {link.name!r} with that role is still detaching: the peer has not answered its "
                    "attach and detach yet (§2.6.4)"
                )
            raise LocalProtocolError(f"a link named {link.name!r} with that role is already attached")
        self._links_by_name[key] = link
        try:
            link.attach(**options)
        except BaseException:
            del self._links_by_name[key]
            raise

    # --- incoming deliveries -------------------------------------------------------------------------------

    def _take_delivery_id(self, delivery_id: int) -> None:
        """The first transfer of a delivery names ``delivery_id``: the one after the session's last (a serial
        number), or the session ends. §2.6.12: a delivery-id identifies an unsettled delivery of the session, and
        dispositions name ranges of them, so a peer that reused an id (the same message delivered twice, and
        settled twice) or sent them out of order breaks the session's bookkeeping; Qpid Proton refuses the same
        ("sequencing error, expected delivery-id").

        Raises:
            RemoteProtocolError: ``amqp:invalid-field``, the session ending.
        """
        expected = self._expected_delivery_id
        if expected is not None and delivery_id != expected:
            raise RemoteProtocolError(
                f"a transfer with delivery-id {delivery_id}, where the session's next is {expected}",
                condition=conditions.INVALID_FIELD,
                scope="session",
            )
        self._expected_delivery_id = (delivery_id + 1) & MASK

    # --- handles -----------------------------------------------------------------------------------------

    def _no_handle_left(self, limit: int) -> bool:
        """Whether every handle up to ``limit`` is in use, or will be our answer to a link the peer attached."""
        links = self._links_by_name
        if len(links) <= limit:
            return False  # the quick bound: counted exactly only near the limit
        waiting = sum(1 for link in links.values() if link.handle is None and link.remote_state is ACTIVE)
        return len(self._links_by_handle) + waiting > limit

    def _allocate_handle(self, link: Link) -> int:
        limit = min(self.handle_max, self.remote_handle_max)
        freed = self._freed_handles
        handle = freed[0] if freed else self._next_handle
        if handle > limit:
            raise LocalProtocolError(
                f"no free handle: handle-max is {limit}", condition=conditions.RESOURCE_LIMIT_EXCEEDED
            )
        if freed:
            heapq.heappop(freed)
        else:
            self._next_handle += 1
        self._links_by_handle[handle] = link
        self._links_by_name[(link.name, link.role)] = link
        return handle

    def _release_handle(self, link: Link) -> None:
        if link.handle is not None and self._links_by_handle.get(link.handle) is link:
            del self._links_by_handle[link.handle]
            heapq.heappush(self._freed_handles, link.handle)
        self._forget_link_if_done(link)

    def _forget_link_if_done(self, link: Link) -> None:
        if link.remote_state is UNINIT and link.local_state is CLOSED and link.handle is not None:
            # §2.6.3, §2.6.4: we attached and detached before the peer answered. Its attach still comes, and then
            # its detach: the link is kept by name until then, so that the late attach is taken for the answer it is
            # (forgotten here, it read as a new link the peer started; refused, the refusal read as a new link at
            # the peer, and so on: thousands of attaches a second after one cancelled open).
            return
        if link.local_state is not ACTIVE and link.remote_state is not ACTIVE:
            if self._links_by_name.get((link.name, link.role)) is link:
                del self._links_by_name[(link.name, link.role)]
            self._flow_links.pop(link, None)
            if self.connection.answer_detach:
                self._drop_unsettled(link)
            else:
                # proton's model (the layer above answers detaches): the peer may still settle what it got before
                # the link went, so the deliveries stay tracked until they settle or the session ends.
                self._drop_queued_transfers(link)

    def _drop_queued_transfers(self, link: Link) -> tuple[Delivery, ...]:
        """Forget the transfer frames of ``link`` still waiting for the peer's incoming window (and its deliveries
        still being streamed); return the deliveries cut short (:meth:`incomplete_deliveries`)."""
        dropped = self.incomplete_deliveries(link)
        if self._outgoing_queue:
            self._outgoing_queue = deque(item for item in self._outgoing_queue if item[0] is not link)
            self._flows_after = {key: held for key, held in self._flows_after.items() if held[0] is not link}
        if self._streaming:
            self._streaming = {delivery: None for delivery in self._streaming if delivery.link is not link}
        return dropped

    def _drop_unsettled(self, link: Link) -> None:
        """Forget the unsettled deliveries of a link that is gone, so the maps stay bounded."""
        for unsettled in (self._outgoing_unsettled, self._incoming_unsettled):
            stale = [delivery_id for delivery_id, delivery in unsettled.items() if delivery.link is link]
            for delivery_id in stale:
                del unsettled[delivery_id]
        if self._outgoing_queue:
            self._outgoing_queue = deque(item for item in self._outgoing_queue if item[0] is not link)

    # --- output ------------------------------------------------------------------------------------------

    def _send_frame(self, performative: Any, payload: bytes = b"") -> None:
        self.connection._write_frame(self.channel or 0, performative, payload)

    def _transfer_prefix(self, handle: int) -> bytes:
        return encode_handle(handle)

    def _send_transfer(
        self,
        link: SenderLink,
        payload: Any,
        tag: bytes,
        settled: bool,
        message_format: int,
        state: Any = None,
        more: bool = False,
    ) -> Delivery:
        delivery_id = self._next_delivery_id
        self._next_delivery_id = (delivery_id + 1) & MASK
        delivery = Delivery(link, delivery_id, tag, message_format, payload, settled)
        if state is not None:
            delivery.state = state
            cached = self._encoded_state
            if cached is not None and cached[0] is state:
                delivery.transfer_state = cached[1]  # a transaction's sends share one state object
            else:
                delivery.transfer_state = encode(state)
                self._encoded_state = (state, delivery.transfer_state)
        if not settled:
            self._outgoing_unsettled[delivery_id] = delivery
        connection = self.connection
        if (
            not more
            and not self._outgoing_queue
            and self.remote_incoming_window > 0
            and len(payload) + len(delivery.transfer_state) <= connection._max_transfer_payload
        ):
            # The common case: one frame, written at once from the link's template.
            self._write_transfer(link, delivery, payload, more)
        else:
            if more:
                self._streaming[delivery] = None
            self._outgoing_queue.append([link, delivery, payload, 0, False, not more])
            self._pump_outgoing()
        return delivery

    def _send_more(self, link: SenderLink, delivery: Delivery, payload: Any, more: bool) -> None:
        if delivery not in self._streaming:
            raise LocalProtocolError("the delivery is complete: nothing more can be sent on it")
        if not more:
            del self._streaming[delivery]
        self._outgoing_queue.append([link, delivery, payload, 0, False, not more])
        self._pump_outgoing()

    def _write_transfer(
        self, link: SenderLink, delivery: Delivery, payload: Any, more: bool, aborted: bool = False
    ) -> None:
        connection = self.connection
        size = len(payload)
        write_transfer_head(
            connection._out,
            self.channel or 0,
            link._transfer_prefix,
            delivery.delivery_id,
            delivery.tag,
            delivery.message_format,
            delivery.settled,
            more,
            aborted,
            size,
            b"" if aborted else delivery.transfer_state,
        )
        if payload.__class__ is bytes and size < BY_REFERENCE:
            connection._out += payload  # a small message, copied into the output: _write_payload's first case
        elif payload:
            connection._write_payload(payload)
        connection.frames_sent += 1
        self.next_outgoing_id = (self.next_outgoing_id + 1) & MASK
        self.remote_incoming_window -= 1
        # The marks of the hot path: what ends a link can tell what never left, and what left only in part. The
        # frames of a delivery go out in order, so its last frame (more false) is the last written.
        delivery.written = True
        delivery.written_whole = not more

    def _frame_room(self, link: SenderLink, delivery: Delivery, more: bool) -> int:
        """The payload one transfer frame of ``delivery`` holds at the peer's max-frame-size (§2.7.1)."""
        head = transfer_head_size(
            self.channel or 0,
            link._transfer_prefix,
            delivery.delivery_id,
            delivery.tag,
            delivery.message_format,
            delivery.settled,
            more,
            delivery.transfer_state,
        )
        room = self.connection._remote_max_frame_size - head
        if room <= 0:
            raise LocalProtocolError("the peer's max-frame-size leaves no room for a transfer's payload")
        return room

    def _pump_outgoing(self) -> None:
        """Write queued transfer frames while the peer's incoming window allows, each as full as the peer's
        max-frame-size lets it be."""
        queue = self._outgoing_queue
        while queue and self.remote_incoming_window > 0:
            item = queue[0]
            link, delivery, payload, offset, aborted, final = item
            if aborted:
                queue.popleft()
                self._write_transfer(link, delivery, b"", False, aborted=True)
                if self._flows_after:
                    self._release_flow(item)
                continue
            remaining = len(payload) - offset
            if not final and not remaining:
                queue.popleft()  # a part of a streamed delivery that brought no bytes: nothing to write
                if self._flows_after:
                    self._release_flow(item)
                continue
            room = self._frame_room(link, delivery, True)
            if remaining <= (self._frame_room(link, delivery, False) if final else room):
                queue.popleft()
                self._write_transfer(link, delivery, payload_slice(payload, offset) if offset else payload, not final)
                if self._flows_after:
                    self._release_flow(item)
            else:
                end = offset + room
                item[3] = end
                self._write_transfer(link, delivery, payload_slice(payload, offset, end), True)

    def _defer_flow(self, link: Link, echo: bool) -> bool:
        """Hold back a flow of sender ``link`` while transfers of the link wait for the peer's window; True if held.

        §2.6.7: a sender's delivery-count counts every delivery it has sent, and the receiver recomputes its credit
        from it. Our delivery-count already counts the transfers queued here, so a flow written now would reach the
        receiver before them: the credit it gives back (a drain's answer) would make them arrive beyond the credit.
        The flow is written once the last of them is (with the link's state as it is then).
        """
        queue = self._outgoing_queue
        if not queue:
            return False
        for item in reversed(queue):
            if item[0] is link:
                previous = self._flows_after.get(id(item))
                self._flows_after[id(item)] = (link, echo or (previous is not None and previous[1]))
                return True
        return False

    def _release_flow(self, item: list[Any]) -> None:
        held = self._flows_after.pop(id(item), None)
        if held is not None:
            link, echo = held
            if link._usable():
                link._write_flow(echo)

    def abort(self, delivery: Delivery) -> None:
        """Abort a delivery whose frames are not all written yet, or that is still being streamed (§2.6.14); a
        written one cannot be aborted."""
        streaming = self._streaming.pop(delivery, 0) is None
        link = delivery.link
        if isinstance(link, SenderLink) and link._streaming is delivery:  # aborted here, not by SenderLink.abort
            link._streaming = None
        queue = self._outgoing_queue
        items = [item for item in queue if item[1] is delivery] if queue else []
        if items:
            # The rest of the payload is dropped; one aborted transfer frame takes its place, in turn and within the
            # peer's window like any frame. It is written even if no frame went out yet: the delivery used a credit
            # and a delivery-count, which the receiver must see used too (§2.6.7).
            kept = items[0]
            for item in items[1:]:  # later parts of a streamed delivery go with it
                queue.remove(item)
                held = self._flows_after.pop(id(item), None)
                if held is not None:  # a flow waiting for this item waits for the aborted frame instead
                    self._flows_after[id(kept)] = held
            kept[2] = b""
            kept[3] = 0
            kept[4] = True
            kept[5] = True
        elif streaming:
            queue.append([link, delivery, b"", 0, True, True])
        else:
            raise LocalProtocolError("the delivery is fully written and cannot be aborted")
        self._outgoing_unsettled.pop(delivery.delivery_id, None)
        delivery.aborted = True
        delivery.settled = True
        self._pump_outgoing()

    def release_frames(self, count: int) -> None:
        """``count`` held frames of streaming deliveries were read (or dropped) by the layer above: they leave the
        incoming window's reckoning, which reopens, with a flow frame, once that gains half a window (§2.5.6)."""
        held = self.held_frames - count
        self.held_frames = held
        if self.incoming_window <= (self.initial_incoming_window >> 1) - held and self.local_state is ACTIVE:
            self.incoming_window = self.initial_incoming_window - held
            self._queue_session_flow()

    def _queue_link_flow(self, link: Link) -> None:
        self._flow_links[link] = None
        self.connection._dirty_sessions[self] = None

    def _queue_session_flow(self) -> None:
        self._session_flow_pending = True
        self.connection._dirty_sessions[self] = None

    def _send_flow(
        self,
        link: Link | None,
        delivery_count: int | None,
        link_credit: int | None,
        available: int | None,
        drain: bool,
        echo: bool,
    ) -> None:
        self._advertised_limit = (self.next_incoming_id + self.incoming_window) & MASK
        self._send_frame(
            Flow(
                next_incoming_id=self.next_incoming_id if self.remote_state is not UNINIT else None,
                incoming_window=self.incoming_window,
                next_outgoing_id=self.next_outgoing_id,
                outgoing_window=self.outgoing_window,
                handle=None if link is None else link.handle,
                delivery_count=delivery_count,
                link_credit=link_credit,
                available=available,
                drain=drain,
                echo=echo,
            )
        )

    def _queue_disposition(self, role: bool, delivery: Delivery, settled: bool, state: Any) -> None:
        if delivery.remote_settled and settled:
            # The peer settled first (§2.6.12): it has forgotten the delivery, so nothing need be said.
            (self._incoming_unsettled if role is RECEIVER else self._outgoing_unsettled).pop(delivery.delivery_id, None)
            return
        if settled:
            (self._incoming_unsettled if role is RECEIVER else self._outgoing_unsettled).pop(delivery.delivery_id, None)
        self._pending_dispositions.append((role, delivery.delivery_id, settled, state))
        self.connection._dirty_sessions[self] = None

    def _flush(self) -> None:
        """Write the queued flows and the coalesced dispositions."""
        if self.local_state is not ACTIVE:
            self._pending_dispositions.clear()
            self._flow_links.clear()
            self._session_flow_pending = False
            return
        if self._flow_links:
            links = list(self._flow_links)
            self._flow_links.clear()
            for link in links:
                if link.local_state is ACTIVE:
                    link._write_flow()
            self._session_flow_pending = False
        elif self._session_flow_pending:
            self._session_flow_pending = False
            self._send_flow(None, None, None, None, False, False)
        pending = self._pending_dispositions
        if not pending:
            return
        self._pending_dispositions = []
        run_role, first, run_settled, run_state = pending[0]
        last = first
        for role, delivery_id, settled, state in pending[1:]:
            if (
                role is run_role
                and settled is run_settled
                and delivery_id == (last + 1) & MASK
                and (state is run_state or state == run_state)
            ):
                last = delivery_id
                continue
            self._write_disposition(run_role, first, last, run_settled, run_state)
            run_role, first, run_settled, run_state, last = role, delivery_id, settled, state, delivery_id
        self._write_disposition(run_role, first, last, run_settled, run_state)

    def _write_disposition(self, role: bool, first: int, last: int, settled: bool, state: Any) -> None:
        self._send_frame(
            Disposition(role=role, first=first, last=None if last == first else last, settled=settled, state=state)
        )

    # --- input -------------------------------------------------------------------------------------------

    def _on_begin(self, begin: Begin) -> None:
        self.remote_begin = begin
        self.remote_state = ACTIVE
        self.next_incoming_id = begin.next_outgoing_id
        self.remote_incoming_window = begin.incoming_window
        self.remote_outgoing_window = begin.outgoing_window
        if self.local_state is ACTIVE:
            self._advertised_limit = (self.next_incoming_id + self.incoming_window) & MASK
        self.remote_handle_max = begin.handle_max

    def _on_end(self, end: End) -> None:
        self.remote_state = CLOSED
        self.remote_error = end.error
        peer_initiated = self.local_state is not CLOSED
        answers = (self.local_state is ACTIVE and self.connection.answer_close) or (
            self.local_state is UNINIT and self.connection.answer_detach
        )
        if not self.end_reported:
            self.end_reported = True
            self.connection._emit(
                SessionEnded(
                    session=self,
                    error=end.error if peer_initiated else self.local_error,
                    remote=peer_initiated,
                    # what our answer below drops (§2.5.6): the layer above has no other way to learn it
                    dropped=self.incomplete_deliveries() if answers else (),
                )
            )
        for link in list(self._links_by_name.values()):
            link.remote_state = CLOSED
        if answers:
            # §2.5.1: answer the end; a session not answered yet is begun and ended (the layer above, when it
            # answers detaches and closes itself, answers this too: proton's model)
            self.end()
            self.engine_ended = True
        self._outgoing_unsettled.clear()
        self._incoming_unsettled.clear()
        self._links_by_name.clear()
        self._links_by_handle.clear()
        self._next_handle = 0
        self._freed_handles.clear()
        self._links_by_remote_handle.clear()

    def _on_attach(self, attach: Attach) -> None:
        handle = attach.handle
        if handle in self._links_by_remote_handle:
            raise RemoteProtocolError(
                f"attach on handle {handle}, which is in use",
                condition=conditions.SESSION_HANDLE_IN_USE,
                scope="session",
            )
        if handle > self.handle_max:
            # §2.7.2: a handle outside the range its partner can handle closes the connection with framing-error.
            raise RemoteProtocolError(
                f"attach on handle {handle} beyond handle-max {self.handle_max}",
                condition=conditions.CONNECTION_FRAMING_ERROR,
            )
        if attach.snd_settle_mode not in (SND_UNSETTLED, SND_SETTLED, SND_MIXED) or attach.rcv_settle_mode not in (
            RCV_FIRST,
            RCV_SECOND,
        ):
            # §2.8.2, §2.8.3: settle modes outside their enumerations (an answer cannot mirror them), like a missing
            # initial-delivery-count below, end the session.
            raise RemoteProtocolError(
                f"attach with settle modes {attach.snd_settle_mode!r}, {attach.rcv_settle_mode!r}",
                condition=conditions.INVALID_FIELD,
                scope="session",
            )
        our_role = not attach.role
        link = self._links_by_name.get((attach.name, our_role))
        needs_handle = link is None or link.remote_state is not UNINIT or link.handle is None
        limit = min(self.handle_max, self.remote_handle_max)
        if needs_handle and self._no_handle_left(limit):
            # Our answer needs a handle within the peer's handle-max (§2.7.2), and the peer, which set it, has
            # them all: none is left to answer on, so the link can neither be attached nor refused.
            raise RemoteProtocolError(
                f"attach of link {attach.name!r}: no handle is left to answer on within handle-max {limit}",
                condition=conditions.RESOURCE_LIMIT_EXCEEDED,
                scope="session",
            )
        if link is None or link.remote_state is not UNINIT:
            link = SenderLink(self, attach.name) if our_role is SENDER else ReceiverLink(self, attach.name)
            self._links_by_name[(attach.name, our_role)] = link
        link.remote_attach = attach
        link.remote_handle = handle
        link.remote_state = ACTIVE
        if our_role is RECEIVER:
            # §2.6.7: the receiver's delivery-count starts at the sender's initial-delivery-count.
            initial = attach.initial_delivery_count
            if initial is None and attach.source is not None:
                raise RemoteProtocolError(
                    "a sender's attach must carry initial-delivery-count",
                    condition=conditions.INVALID_FIELD,
                    scope="session",
                )
            link.delivery_count = (initial or 0) & MASK
        self._links_by_remote_handle[handle] = link
        self.connection._emit(LinkAttached(link=link))

    def _on_detach(self, detach: Detach) -> None:
        link = self._remote_link(detach.handle)
        del self._links_by_remote_handle[detach.handle]
        link.remote_state = CLOSED
        link.remote_error = detach.error
        link.remote_closed = bool(detach.closed)
        if isinstance(link, ReceiverLink) and link._current is not None:
            link._drop_current()  # an incomplete delivery dies with the link
        peer_initiated = link.local_state is not CLOSED
        dropped: tuple[Delivery, ...] = ()
        if isinstance(link, SenderLink) and link.local_state is ACTIVE and self.connection.answer_detach:
            # Our answer below drops them (§2.6.4: no frame of the link after its detach): dropped now, for the
            # event to name them (the layer above has no other way to learn it).
            dropped = self._drop_queued_transfers(link)
        if not link.detach_reported:
            link.detach_reported = True
            self.connection._emit(
                LinkDetached(
                    link=link,
                    error=detach.error if peer_initiated else link.local_error,
                    closed=bool(detach.closed),
                    remote=peer_initiated,
                    dropped=dropped,
                )
            )
        if link.local_state is ACTIVE:
            if self.connection.answer_detach:
                if isinstance(link, ReceiverLink) and self._awaits_outcomes(link):
                    # §2.6.4: answer the detach, once the layer above has given its outcomes to the deliveries that
                    # came before it (a producer's last messages and its detach often share one read)
                    self.connection._answer_detach_later(link, bool(detach.closed))
                else:
                    link.detach(closed=bool(detach.closed))  # §2.6.4: answer the detach
                    link.engine_ended = True
        elif link.local_state is UNINIT and self.connection.answer_detach:
            # A link detached before we answered its attach: §2.6.3, attach (null termini) and detach, the way a link
            # is refused (only marked detached when the session is not begun on our side: nothing can be written).
            link.detach(closed=bool(detach.closed))
            link.engine_ended = True
        else:
            self._forget_link_if_done(link)

    def _awaits_outcomes(self, link: ReceiverLink) -> bool:
        """Some delivery the peer sent unsettled on ``link`` has no outcome from us yet (a scan of the session's
        unsettled deliveries, at most its window: made once per detach)."""
        return any(
            delivery.link is link and delivery.state is None and not delivery.settled
            for delivery in self._incoming_unsettled.values()
        )

    def _remote_link(self, handle: Any) -> Link:
        link = self._links_by_remote_handle.get(handle)
        if link is None:
            # §2.7.5/§2.7.4: a frame for a handle that is not attached ends the session with this error.
            raise RemoteProtocolError(
                f"no link is attached on handle {handle}",
                condition=conditions.SESSION_UNATTACHED_HANDLE,
                scope="session",
            )
        return link

    def _on_flow(self, flow: Flow) -> None:
        # §2.5.6: remote-incoming-window := next-incoming-id(flow) + incoming-window(flow) - next-outgoing-id.
        # A flow without next-incoming-id answers no begin of ours yet: count from our initial id, 0.
        # The window is a plain uint (2**32 - 1 is a peer's "unlimited"); only the transfers it has not counted yet
        # (sent since its next-incoming-id) are a serial-number difference.
        next_incoming = flow.next_incoming_id if flow.next_incoming_id is not None else 0
        self.remote_incoming_window = flow.incoming_window - serial_diff(self.next_outgoing_id, next_incoming)
        self.remote_outgoing_window = flow.outgoing_window
        link: Link | None = None
        drained = False
        if flow.handle is not None:
            link = self._remote_link(flow.handle)
            drained = link._on_flow(flow)
            if flow.echo and link.local_state is ACTIVE:
                self._queue_link_flow(link)
        elif flow.echo:
            self._queue_session_flow()
        self.connection._emit(FlowReceived(session=self, link=link, drained=drained))
        if self._outgoing_queue:
            self._pump_outgoing()

    def _count_incoming_frames(self, count: int = 1) -> None:
        """``count`` transfer frames taken (§2.5.6): each uses a unit of the incoming window, which reopens to its
        size (less what the layer above holds unread) whenever half of it is used. Called once the window was found
        open for all of them: here for one frame, by the receive hot path (transfer_intake) for a run of frames."""
        self.next_incoming_id = (self.next_incoming_id + count) & MASK
        self.remote_outgoing_window -= count
        window = self.incoming_window
        full = self.initial_incoming_window - self.held_frames
        low = (self.initial_incoming_window >> 1) - self.held_frames
        reopened_at = window - low  # the frame (counted from 1) that takes the window down to its low mark
        if reopened_at > count:
            self.incoming_window = window - count
            return
        # Reopened to its full size at that frame, and again each time the frames after it used what lies above the
        # low mark: what one frame at a time leaves.
        self.incoming_window = full - (count - max(reopened_at, 1)) % max(full - low, 1)
        self._queue_session_flow()

    def _on_transfer(self, fields: Any, payload: bytes | memoryview) -> None:
        if self.local_state is CLOSED:
            return  # §2.5.1: after our end, frames other than the peer's end are ignored
        # §2.5.6: every transfer frame uses one unit of our incoming window. The peer may send up to the limit we
        # last told it (next-incoming-id + incoming-window in our last begin or flow actually written).
        remaining = (self._advertised_limit - self.next_incoming_id) & MASK
        if remaining == 0 or remaining >= 1 << 31:
            raise RemoteProtocolError(
                "transfer beyond the session's incoming window",
                condition=conditions.SESSION_WINDOW_VIOLATION,
                scope="session",
            )
        if fields.__class__ is not list or not fields:
            raise RemoteProtocolError("a transfer without fields", condition=conditions.DECODE_ERROR)
        self._count_incoming_frames()
        link = self._links_by_remote_handle.get(fields[0])
        if link is None:
            link = self._remote_link(fields[0])  # raises the unattached-handle error
        if not isinstance(link, ReceiverLink):
            raise RemoteProtocolError(
                f"transfer on link {link.name!r}, where the peer is the receiver",
                condition=conditions.INVALID_FIELD,
                scope="session",
            )
        if link.local_state is not ACTIVE:
            if link.local_state is UNINIT:
                # We have not answered the attach, so no credit was ever granted (§2.6.7).
                raise RemoteProtocolError(
                    f"transfer on link {link.name!r} before we attached it",
                    condition=conditions.LINK_TRANSFER_LIMIT_EXCEEDED,
                    scope="link",
                )
            # We detached: the peer has not seen it yet (§2.6.4); the frame is dropped, but a delivery it starts
            # still takes its delivery-id (§2.7.5: the session numbers every delivery; skipped, the next transfer
            # on any link of the session read as out of sequence, and the session ended).
            delivery_id = fields[1] if len(fields) > 1 else None
            expected = self._expected_delivery_id
            if delivery_id is not None and (expected is None or delivery_id == expected):
                self._expected_delivery_id = (delivery_id + 1) & MASK
            return
        # The payload is bytes, or a view for a frame with more to come (the link joins it with the next ones).
        delivery = link._on_transfer(fields, payload, 0)  # type: ignore[arg-type]  # a view is joined, not kept
        if delivery is not None:
            if delivery.remote_settled or delivery.aborted:
                self._incoming_unsettled.pop(delivery.delivery_id, None)
            link.incoming.append(delivery)
            connection = self.connection
            if link not in connection._announced:
                connection._announce_deliveries(link)

    def _on_disposition(self, disposition: Disposition) -> None:
        # The role is the disposition's sender's: a receiver's disposition is about deliveries we sent.
        ours_sent = disposition.role is RECEIVER
        unsettled = self._outgoing_unsettled if ours_sent else self._incoming_unsettled
        first = disposition.first
        last = disposition.last if disposition.last is not None else first
        span = (last - first) & MASK
        if span >= 1 << 31:
            raise RemoteProtocolError("disposition range runs backwards", condition=conditions.INVALID_FIELD)
        if ours_sent and span >= 16 and unsettled:  # (a short range costs little as it is)
            # The ids we sent are numbered in order (§2.7.5), so what we track lies between the oldest unsettled one
            # and the newest: a range is cut to that window before anything is looked at, and one that misses it
            # costs nothing, however many deliveries are unsettled (a wide range matching none would otherwise
            # cost a pass over all of them, per 25-byte frame).
            oldest = next(iter(unsettled))
            window = (next(reversed(unsettled)) - oldest) & MASK
            start = max(serial_diff(first, oldest), 0)
            end = min(serial_diff(first, oldest) + span, window)
            if start > end:
                return
            first = (oldest + start) & MASK
            span = end - start
        settled = bool(disposition.settled)
        state = disposition.state
        updated: list[Delivery] = []
        candidates: range | list[int]
        if span < len(unsettled):
            if first + span <= MASK:
                candidates = range(first, first + span + 1)  # no list built: a range of outcomes per disposition
            else:
                candidates = [(first + offset) & MASK for offset in range(span + 1)]  # across the wrap (§2.7.6)
        else:
            # A wide range over a small map: look only at what we track (bounded work whatever the peer says).
            candidates = [delivery_id for delivery_id in unsettled if ((delivery_id - first) & MASK) <= span]
        for delivery_id in candidates:
            delivery = unsettled.get(delivery_id)
            if delivery is None:
                continue
            if state is not None:
                delivery.remote_state = state
            if settled:
                delivery.remote_settled = True
                delivery.settled = True
                del unsettled[delivery_id]
            elif (
                ours_sent
                and self.connection.answer_close
                and (
                    isinstance(state, _TERMINAL_OUTCOMES)
                    or (state.__class__ is TransactionalState and isinstance(state.outcome, _TERMINAL_OUTCOMES))
                )
            ):
                # Receiver settle mode second (§2.6.12): the receiver reached an outcome (within a transaction too,
                # §4.4) and waits for us to settle; we settle at once (the outcome is reported all the same).
                delivery.settled = True
                self._queue_disposition(SENDER, delivery, True, None)
            updated.append(delivery)
        if updated:
            self.connection._emit(DeliveriesUpdated(deliveries=updated, state=state, settled=settled))
