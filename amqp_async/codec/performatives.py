"""The transport performatives (spec §2.7) and the ``error`` type (§2.8.14), defined from the spec's field tables.

Each class is a :class:`~amqp_async.codec.composite.Composite`: ``Open(container_id="x")`` builds one,
``codec.encode(obj)`` / ``obj.encode_into(buf)`` encode it, and the generic decoder returns an instance for a
described list with its descriptor. Field names are the spec's, in snake_case; field order is the spec's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..types import symbol
from .composite import Composite, F

if TYPE_CHECKING:
    from .values import AMQPValue

__all__ = [
    "PERFORMATIVES",
    "RCV_FIRST",
    "RCV_SECOND",
    "RECEIVER",
    "SENDER",
    "SND_MIXED",
    "SND_SETTLED",
    "SND_UNSETTLED",
    "Attach",
    "Begin",
    "Close",
    "Detach",
    "Disposition",
    "End",
    "Error",
    "Flow",
    "Open",
    "Transfer",
]

# §2.8.1 role (boolean).
#: The link endpoint is the sender of messages.
SENDER = False
#: The link endpoint is the receiver of messages.
RECEIVER = True

# §2.8.2 sender-settle-mode (ubyte).
#: The sender will send all deliveries initially unsettled to the receiver.
SND_UNSETTLED = 0
#: The sender will send all deliveries settled to the receiver.
SND_SETTLED = 1
#: The sender MAY send a mixture of settled and unsettled deliveries to the receiver.
SND_MIXED = 2

# §2.8.3 receiver-settle-mode (ubyte).
#: The receiver will spontaneously settle all incoming transfers.
RCV_FIRST = 0
#: The receiver will only settle after sending the disposition to the sender and receiving a settled disposition.
RCV_SECOND = 1


class Error(Composite, code=0x1D, name="amqp:error:list"):
    """§2.8.14 error: details of an error.

    Attributes:
        condition: the error condition, a symbol (see :mod:`amqp_async.codec.conditions`). Mandatory.
        description: descriptive text about the error condition.
        info: map (symbol keys) carrying information about the error condition.
    """

    condition: symbol = F("symbol", mandatory=True)
    description: str | None = F("string")
    info: dict[str, AMQPValue] | None = F("fields")


class Open(Composite, code=0x10, name="amqp:open:list"):
    """§2.7.1 open: negotiate connection parameters."""

    container_id: str = F("string", mandatory=True)
    hostname: str | None = F("string")
    max_frame_size: int = F("uint", default=4294967295)
    channel_max: int = F("ushort", default=65535)
    idle_time_out: int | None = F("milliseconds")
    outgoing_locales: tuple[symbol, ...] | None = F("ietf-language-tag", multiple=True)
    incoming_locales: tuple[symbol, ...] | None = F("ietf-language-tag", multiple=True)
    offered_capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)
    desired_capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)
    properties: dict[Any, Any] | None = F("fields")


class Begin(Composite, code=0x11, name="amqp:begin:list"):
    """§2.7.2 begin: begin a session on a channel."""

    remote_channel: int | None = F("ushort")
    next_outgoing_id: int = F("transfer-number", mandatory=True)
    incoming_window: int = F("uint", mandatory=True)
    outgoing_window: int = F("uint", mandatory=True)
    handle_max: int = F("handle", default=4294967295)
    offered_capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)
    desired_capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)
    properties: dict[Any, Any] | None = F("fields")


class Attach(Composite, code=0x12, name="amqp:attach:list"):
    """§2.7.3 attach: attach a link to a session.

    ``source`` and ``target`` hold a :class:`~amqp_async.codec.terminus.Source` /
    :class:`~amqp_async.codec.terminus.Target` (or a coordinator, §4.5.1); ``role`` is :data:`SENDER` or
    :data:`RECEIVER`.
    """

    name: str = F("string", mandatory=True)
    handle: int = F("handle", mandatory=True)
    role: bool = F("role", mandatory=True)
    snd_settle_mode: int = F("sender-settle-mode", default=SND_MIXED)
    rcv_settle_mode: int = F("receiver-settle-mode", default=RCV_FIRST)
    source: Any = F("*", requires="source")
    target: Any = F("*", requires="target")
    unsettled: dict[Any, Any] | None = F("map")
    incomplete_unsettled: bool = F("boolean", default=False)
    initial_delivery_count: int | None = F("sequence-no")
    max_message_size: int | None = F("ulong")
    offered_capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)
    desired_capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)
    properties: dict[Any, Any] | None = F("fields")


class Flow(Composite, code=0x13, name="amqp:flow:list"):
    """§2.7.4 flow: update link state (session flow state, and link flow state when ``handle`` is set)."""

    next_incoming_id: int | None = F("transfer-number")
    incoming_window: int = F("uint", mandatory=True)
    next_outgoing_id: int = F("transfer-number", mandatory=True)
    outgoing_window: int = F("uint", mandatory=True)
    handle: int | None = F("handle")
    delivery_count: int | None = F("sequence-no")
    link_credit: int | None = F("uint")
    available: int | None = F("uint")
    drain: bool = F("boolean", default=False)
    echo: bool = F("boolean", default=False)
    properties: dict[Any, Any] | None = F("fields")


class Transfer(Composite, code=0x14, name="amqp:transfer:list"):
    """§2.7.5 transfer: transfer a message (the message bytes follow the performative in the frame payload).

    ``settled`` has no default in the spec (its meaning when unset depends on earlier transfers), so it stays
    ``None`` when absent; ``state`` holds a delivery state (§3.4) or ``None``.
    """

    handle: int = F("handle", mandatory=True)
    delivery_id: int | None = F("delivery-number")
    delivery_tag: bytes | None = F("delivery-tag")
    message_format: int | None = F("message-format")
    settled: bool | None = F("boolean")
    more: bool = F("boolean", default=False)
    rcv_settle_mode: int | None = F("receiver-settle-mode")
    state: Any = F("*", requires="delivery-state")
    resume: bool = F("boolean", default=False)
    aborted: bool = F("boolean", default=False)
    batchable: bool = F("boolean", default=False)


class Disposition(Composite, code=0x15, name="amqp:disposition:list"):
    """§2.7.6 disposition: inform the remote peer of delivery state changes for deliveries ``first``..``last``."""

    role: bool = F("role", mandatory=True)
    first: int = F("delivery-number", mandatory=True)
    last: int | None = F("delivery-number")
    settled: bool = F("boolean", default=False)
    state: Any = F("*", requires="delivery-state")
    batchable: bool = F("boolean", default=False)


class Detach(Composite, code=0x16, name="amqp:detach:list"):
    """§2.7.7 detach: detach the link endpoint from the session (``closed`` closes the link)."""

    handle: int = F("handle", mandatory=True)
    closed: bool = F("boolean", default=False)
    error: Error | None = F("error")


class End(Composite, code=0x17, name="amqp:end:list"):
    """§2.7.8 end: end the session."""

    error: Error | None = F("error")


class Close(Composite, code=0x18, name="amqp:close:list"):
    """§2.7.9 close: signal a connection close."""

    error: Error | None = F("error")


#: The performatives that may be the body of an AMQP frame (§2.7), by descriptor code.
PERFORMATIVES: dict[int, type[Composite]] = {
    cls.descriptor_code: cls for cls in (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close)
}
