"""A delivery (§2.6.12): one message's transfer over a link, and the state both ends keep about it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .link import Link

__all__ = ["Delivery"]


class Delivery:
    """One delivery, on either end of a link.

    Attributes:
        link: the link it travels on.
        delivery_id: the session-scoped delivery-id (§2.7.5).
        tag: the delivery-tag, unique among the link's unsettled deliveries.
        message_format: the message-format (0 for the AMQP 1.0 message format).
        payload: the message bytes (for an incoming delivery, once complete).
        settled: True once this end has settled it.
        remote_settled: True once the peer has said it settled it.
        state: the delivery state this end last set (e.g. ``Accepted()``), or None.
        remote_state: the delivery state the peer last sent, or None.
        aborted: True when the sender aborted it (§2.6.14); its payload is then empty.
        transfer_state: for an outgoing delivery, the encoded delivery state its transfer frames carry (§2.7.5
            ``state``: a transactional-state, §4.5.6), or empty.
        written: for an outgoing delivery, True once a transfer frame of it went into the connection's output (it
            may have reached the peer); False while all of it waits for the peer's incoming window (§2.5.6). A
            delivery still unwritten when its link, session or connection ends never left this end: its message
            was not sent, and may be sent again. Always False for an incoming delivery.
        written_whole: for an outgoing delivery, True once its last transfer frame (``more`` false, §2.6.14; an
            aborted one too) went into the connection's output: all of it may have reached the peer. A delivery
            ``written`` but not ``written_whole`` when its link, session or connection ends was cut short: its
            receiver never gets it whole, and drops what came of it. Always False for an incoming delivery.
    """

    __slots__ = (
        "aborted",
        "delivery_id",
        "link",
        "message_format",
        "payload",
        "remote_settled",
        "remote_state",
        "settled",
        "state",
        "tag",
        "transfer_state",
        "user_data",
        "written",
        "written_whole",
    )

    def __init__(
        self, link: Link, delivery_id: int, tag: bytes, message_format: int, payload: bytes, settled: bool
    ) -> None:
        self.link = link
        self.delivery_id = delivery_id
        self.tag = tag
        self.message_format = message_format
        self.payload = payload
        self.settled = settled
        self.remote_settled = False
        self.state: Any = None
        self.remote_state: Any = None
        self.aborted = False
        self.transfer_state = b""
        self.written = False
        self.written_whole = False
        #: free for the layer above (the driver keeps its tracker here).
        self.user_data: Any = None

    def __repr__(self) -> str:
        return (
            f"Delivery(id={self.delivery_id}, tag={self.tag!r}, settled={self.settled}, "
            f"remote_settled={self.remote_settled}, remote_state={self.remote_state!r})"
        )
