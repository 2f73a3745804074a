"""The embedded broker: ``python -m amqp_async.broker``, ``async with Broker() as broker``, or a pytest fixture.

An AMQP 1.0 broker on our engine in the server role, in memory (with ``data_dir``, its queues and durable
messages are also kept on disk across restarts): the default peer for the quickstart, the examples and users' own
tests; never a replacement for a real broker in production. See :class:`Broker` for what it does.
"""

from __future__ import annotations

from ._nodes import Queue, Topic
from ._server import TOPIC_PREFIX, Broker
from ._thread import BrokerThread

__all__ = ["TOPIC_PREFIX", "Broker", "BrokerThread", "Queue", "Topic"]
