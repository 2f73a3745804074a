"""Deliveries in parts (§2.6.14): a message whose transfer frames are handed over as they come, and one sent as
its parts are given, so that neither end holds a whole large message.

Receiving. A :class:`~.link.ReceiverLink` with ``streaming`` set hands each delivery over at its first transfer
frame, as a :class:`StreamingDelivery` (a delivery of one frame arrives complete, as on any link). The frames that
follow add their payload to its :attr:`~StreamingDelivery.chunks`, each announced (a
:class:`~.events.DeliveriesReceived` for the link), until the last (``more`` false) sets
:attr:`~StreamingDelivery.complete`, or an aborted one (§2.6.14) sets ``aborted``. A frame the layer above has not
taken with :meth:`StreamingDelivery.take` keeps its place in the session's incoming window (``held_frames``, see
:meth:`~.session.Session.release_frames`): the peer cannot send more than the window while the reader is slow, so
the memory a streamed delivery takes is bounded by the window, whatever the message's size (§2.5.6). The layer above
may stop reading (:meth:`StreamingDelivery.discard`): the frames still to come are then dropped as they arrive.
The link's ``max_message_size`` is checked as the parts add up (``amqp:link:message-size-exceeded``, §2.7.3).

Sending is :meth:`~.link.SenderLink.send` with ``more=True`` for the first part, then
:meth:`~.link.SenderLink.send_more` for the others (``more=False`` for the last) or
:meth:`~.link.SenderLink.abort`; the session queues the frames beyond the peer's window as for any delivery, so
the layer above bounds what it hands over by the session's ``outgoing_backlog``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ..codec import conditions
from .delivery import Delivery
from .errors import RemoteProtocolError

if TYPE_CHECKING:
    from .link import ReceiverLink

__all__ = ["StreamingDelivery", "begin_stream", "continue_stream", "interrupt_stream"]


class StreamingDelivery(Delivery):
    """An incoming delivery handed over at its first frame; its payload comes in :attr:`chunks`.

    Attributes:
        chunks: the payloads of the frames received and not taken yet (bytes each), in order.
        complete: no more frames will come: the last one arrived, or the delivery was aborted or interrupted.
        interrupted: the link (or session) ended before the last frame: the message is incomplete for good.
        discarding: the layer above gave up the rest: frames still to come are dropped as they arrive.
        received: payload bytes received so far (taken or not).
    """

    __slots__ = ("chunks", "complete", "discarding", "interrupted", "received")

    def __init__(self, first: Delivery, payload: bytes) -> None:
        super().__init__(first.link, first.delivery_id, first.tag, first.message_format, b"", False)
        self.remote_settled = first.remote_settled
        self.remote_state = first.remote_state
        self.chunks: deque[bytes] = deque((payload,))
        self.complete = False
        self.interrupted = False
        self.discarding = False
        self.received = len(payload)

    def take(self) -> list[bytes]:
        """The chunks received since the last call (possibly none); their frames leave the incoming window's
        reckoning (the peer may send as many more)."""
        chunks = list(self.chunks)
        self.chunks.clear()
        if chunks:
            self.link.session.release_frames(len(chunks))
        return chunks

    def discard(self) -> None:
        """Drop the chunks not taken, and the frames still to come as they arrive (the reader stopped reading)."""
        self.discarding = True
        self.take()

    def __repr__(self) -> str:
        state = "aborted" if self.aborted else "interrupted" if self.interrupted else "complete" * self.complete
        return f"StreamingDelivery(id={self.delivery_id}, tag={self.tag!r}, received={self.received} {state})"


def begin_stream(link: ReceiverLink, first: Delivery, payload: bytes | memoryview) -> StreamingDelivery:
    """The first frame of a delivery with more to come, on a streaming link: hand it over now."""
    data = bytes(payload)  # a view would keep the whole read buffer it points into alive
    _check_size(link, len(data))
    delivery = StreamingDelivery(first, data)
    session = link.session
    session._incoming_unsettled[delivery.delivery_id] = delivery  # in place of the plain one (§2.6.12)
    session.held_frames += 1
    link._current = delivery
    return delivery


def continue_stream(
    link: ReceiverLink, delivery: StreamingDelivery, payload: bytes | memoryview, more: bool, aborted: bool
) -> None:
    """A continuation frame of the streamed delivery under way on ``link``."""
    session = link.session
    if aborted:
        # §2.6.14: "the receiver SHOULD discard" an aborted delivery; it counts as settled.
        link._current = None
        delivery.aborted = True
        delivery.complete = True
        session.release_frames(len(delivery.chunks))
        delivery.chunks.clear()
        session._incoming_unsettled.pop(delivery.delivery_id, None)
        _announce(link)
        return
    size = len(payload)
    delivery.received += size
    _check_size(link, delivery.received)
    if not more:
        link._current = None
        delivery.complete = True
    if size and not delivery.discarding and not delivery.settled:
        delivery.chunks.append(bytes(payload))
        session.held_frames += 1
    _announce(link)


def interrupt_stream(link: ReceiverLink, delivery: StreamingDelivery) -> None:
    """The link ended before the delivery's last frame: it is incomplete for good (its chunks are dropped)."""
    delivery.interrupted = True
    delivery.complete = True
    link.session.release_frames(len(delivery.chunks))
    delivery.chunks.clear()
    _announce(link)


def _check_size(link: ReceiverLink, size: int) -> None:
    limit = link.max_message_size
    if limit and size > limit:
        # §2.7.3: "Any attempt to deliver a message larger than this results in a message-size-exceeded link-error."
        raise RemoteProtocolError(
            f"message on link {link.name!r} exceeds max-message-size {limit}",
            condition=conditions.LINK_MESSAGE_SIZE_EXCEEDED,
            scope="link",
        )


def _announce(link: ReceiverLink) -> None:
    """Tell the layer above that the link's streamed delivery moved on (a :class:`DeliveriesReceived`)."""
    link.session.connection._announce_deliveries(link)
