"""The Sans-IO AMQP 1.0 protocol engine: connection, sessions, links, deliveries and SASL, in both roles.

Nothing here does I/O, reads a clock, or starts a thread: a :class:`Connection` takes received bytes and the time
as arguments, and hands back events and bytes to send (see :mod:`amqp_async.protocol.connection` for the theory of
operation). The awaitable client drives it with one task per connection; the embedded broker drives the server
role the same way.
"""

from __future__ import annotations

from . import events
from .connection import CLIENT, SERVER, Connection
from .delivery import Delivery
from .endpoint import EndpointState
from .errors import (
    ConnectionClosedError,
    LocalProtocolError,
    NoCreditError,
    RemoteProtocolError,
    SessionWindowClosedError,
)
from .link import Link, ReceiverLink, SenderLink
from .payload import Gathered
from .sasl import SaslClient, SaslResult, SaslServer
from .session import Session

__all__ = [
    "CLIENT",
    "SERVER",
    "Connection",
    "ConnectionClosedError",
    "Delivery",
    "EndpointState",
    "Gathered",
    "Link",
    "LocalProtocolError",
    "NoCreditError",
    "ReceiverLink",
    "RemoteProtocolError",
    "SaslClient",
    "SaslResult",
    "SaslServer",
    "SenderLink",
    "Session",
    "SessionWindowClosedError",
    "events",
]
