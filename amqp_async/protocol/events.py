"""Events the engine reports, named in the past tense: what the peer (or the transport) did.

Events are small frozen values. The engine returns them from :meth:`Connection.next_events` in the order things
happened. Per-message work never creates an event per message: complete incoming deliveries wait in their link's
:attr:`~amqp_async.protocol.link.ReceiverLink.incoming` queue, announced by one :class:`DeliveriesReceived` per link
per batch of input, and one :class:`DeliveriesUpdated` covers every delivery a disposition frame names.
"""

from __future__ import annotations

# dataclasses rather than attrs: attrs imports platform, which imports subprocess on Python 3.10, and importing the
# Sans-IO engine loads neither (tests/test_sans_io_imports.py).
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..codec.performatives import Error, Open
    from .delivery import Delivery
    from .link import Link
    from .session import Session

__all__ = [
    "Authenticated",
    "ConnectionClosed",
    "ConnectionOpened",
    "DeliveriesReceived",
    "DeliveriesUpdated",
    "Event",
    "FlowReceived",
    "LinkAttached",
    "LinkDetached",
    "SessionBegun",
    "SessionEnded",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Base of every engine event."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Authenticated(Event):
    """The SASL exchange succeeded (§5.3). On a server, ``identity`` is the authenticated user ("anonymous" for
    ANONYMOUS); on a client it is None."""

    mechanism: str
    identity: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionOpened(Event):
    """The peer's open frame arrived (§2.4.1); ``open`` holds what the peer announced."""

    open: Open


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionClosed(Event):
    """The connection ended.

    Attributes:
        error: why, or None for a clean close: the peer's error when it started the close, ours when we did
            (for a violation the engine detected, the condition it sent).
        remote: True when the peer started the close (its close frame, or the transport ending); False when we
            did (our close, answered now by the peer's) or this engine closed it because the peer broke the
            protocol or went idle.
        sasl_code: the SASL outcome code when authentication failed (§5.3.3.6), else None.
        transport_ended: the byte stream ended without a close (the network failed or the peer vanished).
        protocol_header: when the peer's protocol header was not the one expected (§2.2): the header it sent, or
            ``b""`` when its first bytes were no AMQP protocol header at all; else None.
        idle_expired: this engine closed the connection because the peer sent nothing for our whole idle timeout
            (§2.4.5; ``error`` is ``amqp:resource-limit-exceeded``): the peer is gone as surely as when the
            transport ends, though no close came from it.
        dropped: the outgoing deliveries this end cut short (see :attr:`LinkDetached.dropped`), of every session:
            the close (or the transport's end) left frames of them unwritten for good.
    """

    error: Error | None = None
    remote: bool = True
    sasl_code: int | None = None
    transport_ended: bool = False
    protocol_header: bytes | None = None
    idle_expired: bool = False
    dropped: tuple[Delivery, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionBegun(Event):
    """The peer's begin frame arrived (§2.5.1): an answer to ours, or a new session the peer started.

    For a session the peer started, ``session.locally_begun`` is False until :meth:`Session.begin` answers it.
    """

    session: Session


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionEnded(Event):
    """The session ended (§2.5.1): the peer's end arrived, or the engine ended it for a session error.

    ``remote`` is True when the peer started the end; ``error`` is the error of whichever side started it.
    ``dropped``: the outgoing deliveries of the session's links this end cut short (see
    :attr:`LinkDetached.dropped`).
    """

    session: Session
    error: Error | None = None
    remote: bool = True
    dropped: tuple[Delivery, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkAttached(Event):
    """The peer's attach frame arrived (§2.6.3): an answer to ours, or a new link the peer started.

    For a link the peer started, ``link.locally_attached`` is False until :meth:`Link.attach` answers it.
    """

    link: Link


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkDetached(Event):
    """The link was detached (§2.6.4): the peer's detach arrived, or the engine detached it for a link error.

    ``remote`` is True when the peer started the detach; ``error`` is the error of whichever side started it.

    ``dropped`` holds the outgoing deliveries this detach cut short: the engine's answer to the peer's detach (or
    its own, for a link error) dropped frames of them still waiting for the peer's session window (§2.5.6), or
    ended them while the layer above was still streaming them, so their last frame was never written (none of
    their frames, when :attr:`Delivery.written <amqp_async.protocol.delivery.Delivery.written>` is False): none
    reached the peer whole. At-most-once ones have no outcome to fail, and this is the only word of their loss. Empty
    when our own :meth:`Link.detach <amqp_async.protocol.link.Link.detach>` came first: the command dropped them
    (:meth:`Session.incomplete_deliveries <amqp_async.protocol.session.Session.incomplete_deliveries>` names them
    just before).
    """

    link: Link
    error: Error | None = None
    closed: bool = True
    remote: bool = True
    dropped: tuple[Delivery, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class FlowReceived(Event):
    """A flow frame arrived (§2.7.4): the session's window, and for ``link`` its credit, may have changed.

    Attributes:
        drained: for a receiving link: a drain we asked for has completed (its credit is now zero).
    """

    session: Session
    link: Link | None = None
    drained: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveriesReceived(Event):
    """Complete (or aborted) incoming deliveries are waiting in ``link.incoming``."""

    link: Link


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveriesUpdated(Event):
    """A disposition frame changed the remote state and/or settlement of these deliveries (§2.7.6)."""

    deliveries: list[Delivery]
    state: Any = None
    settled: bool = False
