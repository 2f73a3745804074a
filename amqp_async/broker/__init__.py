"""The embedded broker: ``python -m amqp_async.broker``, ``async with Broker() as broker``, or a pytest fixture.

An AMQP 1.0 broker on our engine in the server role, in memory (with ``data_dir``, its queues and durable
messages are also kept on disk across restarts): the default peer for the quickstart, the examples and users' own
tests; never a replacement for a real broker in production. See :class:`Broker` for what it does.
"""

from __future__ import annotations

from ._deadletter import CONDITION, COUNT, DESCRIPTION, REASON, SOURCE, TIME
from ._nodes import Queue, Topic
from ._server import DEFAULT_EXPIRY_INTERVAL, DEFAULT_MAX_MEMORY, TOPIC_PREFIX, Broker, ListenError
from ._store import DataDirInUse
from ._thread import BrokerThread

#: The message annotations of a dead-lettered message (see :mod:`amqp_async.broker._deadletter`), by name.
DEAD_LETTER_ANNOTATIONS = {
    "reason": REASON,
    "condition": CONDITION,
    "description": DESCRIPTION,
    "source": SOURCE,
    "time": TIME,
    "count": COUNT,
}

__all__ = [
    "DEAD_LETTER_ANNOTATIONS",
    "DEFAULT_EXPIRY_INTERVAL",
    "DEFAULT_MAX_MEMORY",
    "TOPIC_PREFIX",
    "Broker",
    "BrokerThread",
    "DataDirInUse",
    "ListenError",
    "Queue",
    "Topic",
]
