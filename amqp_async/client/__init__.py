"""The awaitable client: :func:`connect`, connections, sessions, senders, receivers and deliveries.

It drives the Sans-IO engine (:mod:`amqp_async.protocol`) over anyio streams, so it runs on asyncio (uvloop when
installed) and on trio.
"""

from __future__ import annotations

from ._backoff import Backoff
from ._capabilities import PeerCapabilities
from ._connect import connect
from ._connect_options import ConnectOptions
from ._connection import Connection
from ._delivery import Delivery
from ._link_options import DeliveryMode, DistributionMode, ExpiryPolicy, OnError, Outcome
from ._links import Receiver, Sender, SendManyError, selector
from ._opening import Opening
from ._session import Session
from ._state import ConnectionState, StateChange
from ._tracker import Tracker
from ._transaction import Transaction, TransactionState

__all__ = [
    "Backoff",
    "ConnectOptions",
    "Connection",
    "ConnectionState",
    "Delivery",
    "DeliveryMode",
    "DistributionMode",
    "ExpiryPolicy",
    "OnError",
    "Opening",
    "Outcome",
    "PeerCapabilities",
    "Receiver",
    "SendManyError",
    "Sender",
    "Session",
    "StateChange",
    "Tracker",
    "Transaction",
    "TransactionState",
    "connect",
    "selector",
]
