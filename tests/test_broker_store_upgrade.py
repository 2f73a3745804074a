"""A data directory an earlier version wrote keeps its shared durable subscriptions under the keys it gave them: the
broker moves them, once, to the keys it gives them now, or removes the copies, and says so (broker/_store.py,
``Store.upgrade``).

The version before shared subscriptions (the AMQP JMS mapping's capabilities ``shared`` and ``global``) keyed every
link apart: Qpid JMS's links ``orders`` and ``orders|2`` of one shared subscription were two subscriptions, each
taking a copy of every message, and ``alerts|global`` one keyed by the container id of the connection that made it.
Loaded as they were, the subscriptions no link names any more (``client-1/orders|2``, ``client-1/alerts|global``)
took a copy of every message published to their topic for ever (memory and disk), and the global subscription's
consumer found none of its messages. Such a store is that version's layout with the current tables; it is made
here by the current broker (a durable receiver named ``orders|2`` without the capability ``shared`` has that key)
with its version (SQLite's ``user_version``) set back to 0, as that version left it.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Message as ProtonMessage
from proton.reactor import DurableSubscription

from amqp_async.broker import BrokerThread

try:
    from test_broker_shared_subscriptions import TOPIC, Capabilities, connect, receive, subscriptions
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_broker_shared_subscriptions import TOPIC, Capabilities, connect, receive, subscriptions


def earlier_store(data: Path) -> None:
    """A data directory as the earlier version left it: ``orders`` and ``orders|2`` (one shared subscription's
    links, on container client-1), ``alerts|global`` (a global one's link), and ``audit|2`` alone (no ``audit``
    beside it), each holding three durable messages."""
    with BrokerThread(port=0, data_dir=data) as broker:
        connection = connect(broker.url, "client-1")
        try:
            for name in ("orders", "orders|2", "alerts|global", "audit|2"):
                connection.create_receiver(TOPIC, name=name, options=[DurableSubscription()]).detach()
            sender = connection.create_sender(TOPIC)
            for number in range(3):
                sender.send(ProtonMessage(body=number, durable=True))
        finally:
            connection.close()
    with sqlite3.connect(data / "broker.sqlite3") as db:
        db.execute("PRAGMA user_version = 0")


def test_an_earlier_version_s_shared_subscriptions_move_to_their_keys_and_copies_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    earlier_store(data)
    caplog.set_level(logging.INFO, logger="amqp_async.broker")
    with BrokerThread(port=0, data_dir=data) as broker:
        # before: all four loaded under their old keys, the last three named by no link any more
        assert subscriptions(broker.broker) == {"client-1/orders": 3, "|global/alerts": 3, "client-1/audit": 3}
        notices = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
        assert any("'client-1/orders|2'" in notice and "removed with its 3 messages" in notice for notice in notices)
        assert any("'client-1/alerts|global'" in notice and "is now '|global/alerts'" in notice for notice in notices)
        # the global subscription's consumer (Qpid JMS without a client id: any container) gets its messages, and
        # one message published now is copied once per subscription, not to the removed copy
        shared: Any = [DurableSubscription(), Capabilities("shared")]
        consumer = connect(broker.url, "another")
        client = connect(broker.url, "client-1")
        try:
            alerts = consumer.create_receiver(
                TOPIC, name="alerts|global", options=[DurableSubscription(), Capabilities("shared", "global")]
            )
            orders = client.create_receiver(TOPIC, name="orders|2", options=shared)
            client.create_sender(TOPIC).send(ProtonMessage(body="now", durable=True))
            assert receive(alerts, 4) == [0, 1, 2, "now"]
            assert receive(orders, 4) == [0, 1, 2, "now"]
            assert subscriptions(broker.broker) == {"client-1/orders": 0, "|global/alerts": 0, "client-1/audit": 4}
        finally:
            consumer.close()
            client.close()
    with sqlite3.connect(data / "broker.sqlite3") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
        keys = {key for (key,) in db.execute("SELECT subscription FROM queues")}
        assert keys == {"client-1/orders", "|global/alerts", "client-1/audit"}


def test_a_current_store_is_not_upgraded_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A store the current version made keeps a subscription a link named ``audit|2`` without ``shared``."""
    data = tmp_path / "data"
    earlier_store(data)
    with sqlite3.connect(data / "broker.sqlite3") as db:
        db.execute("PRAGMA user_version = 1")
    caplog.set_level(logging.WARNING, logger="amqp_async.broker")
    with BrokerThread(port=0, data_dir=data) as broker:
        assert set(subscriptions(broker.broker)) == {
            "client-1/orders",
            "client-1/orders|2",
            "client-1/alerts|global",
            "client-1/audit|2",
        }
    assert not [record for record in caplog.records if "earlier version" in record.getMessage()]
    fresh = tmp_path / "fresh"
    with BrokerThread(port=0, data_dir=fresh):
        pass
    with sqlite3.connect(fresh / "broker.sqlite3") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
