"""The awaitable client: :func:`connect`, connections, sessions, senders, receivers and deliveries.

It drives the Sans-IO engine (:mod:`amqp_async.protocol`) over anyio streams, so it runs on asyncio (uvloop when
installed) and on trio.
"""

from __future__ import annotations

from ._backoff import Backoff
from ._connection import Connection, connect
from ._delivery import Delivery
from ._links import Receiver, Sender, Tracker, selector
from ._session import Session
from ._state import ConnectionState, StateChange
from ._transaction import Transaction

__all__ = [
    "Backoff",
    "Connection",
    "ConnectionState",
    "Delivery",
    "Receiver",
    "Sender",
    "Session",
    "StateChange",
    "Tracker",
    "Transaction",
    "connect",
    "selector",
]
