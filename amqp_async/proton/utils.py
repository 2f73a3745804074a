"""``proton.utils`` under its own name: the blocking API (:class:`BlockingConnection`, :class:`BlockingSender`,
:class:`BlockingReceiver`, :class:`SyncRequestResponse`) and its exceptions.

A blocking connection runs its container on a background thread; handlers given to it run on that thread. See
:mod:`amqp_async.proton._utils` for the details.
"""

from __future__ import annotations

from ._exceptions import Timeout
from ._utils import (
    BlockingConnection,
    BlockingReceiver,
    BlockingSender,
    ConnectionClosed,
    LinkDetached,
    SendException,
    SyncRequestResponse,
)

__all__ = [
    "BlockingConnection",
    "BlockingReceiver",
    "BlockingSender",
    "ConnectionClosed",
    "LinkDetached",
    "SendException",
    "SyncRequestResponse",
    "Timeout",
]
