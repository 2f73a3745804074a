"""Open transactions are bounded: per connection (``max_transactions``), and in the broker's memory limit.

Before, a client that declared transactions and never discharged them grew the broker without bound, past
``--max-memory``: 200,000 declares took it from 30 to 124 MiB of RSS under a 64 MiB limit, every one accepted.
Now a declare beyond the connection's limit, or beyond the room the memory limit leaves (each open transaction
counted as a node is, :data:`~amqp_async.broker._flow.NODE_SIZE`), is rejected with
``amqp:resource-limit-exceeded`` naming the limit (§4.3: a declare the coordinator cannot do is rejected with the
error); a discharge, a rollback and the end of the connection give the room back.

Checked with python-qpid-proton's container (its ``declare_transaction``) and with our client's
``conn.transaction()`` as the controllers; the broker's own counts read in-process.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import TransactionError
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker.__main__ import make_broker, parse_arguments
from amqp_async.broker._flow import ENDPOINT_SIZE, NODE_SIZE

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton.handlers import MessagingHandler, TransactionHandler  # noqa: E402 - after the importorskip
from proton.reactor import Container  # noqa: E402

TIMEOUT = 10.0
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Declarer(MessagingHandler, TransactionHandler):  # type: ignore[misc]  # proton is untyped
    """python-qpid-proton declaring ``count`` transactions at once and discharging none, then (with ``then``)
    committing one and declaring once more."""

    def __init__(self, url: str, count: int, *, then: bool = False) -> None:
        super().__init__()
        self.url = url
        self.count = count
        self.then = then
        self.declared: list[Any] = []
        self.failed: list[tuple[str, str]] = []
        self.after: str | None = None  # what the declare after the commit got
        self.answered = 0

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.connection = event.container.connect(self.url)
        for _ in range(self.count):
            event.container.declare_transaction(self.connection, handler=self)

    def _answered(self) -> None:
        self.answered += 1
        if self.answered == self.count:
            if self.then and self.declared:
                self.declared.pop(0).commit()
            else:
                self.connection.close()

    def on_transaction_declared(self, event: Any) -> None:
        if self.answered >= self.count:  # the declare after the commit
            self.after = "declared"
            self.connection.close()
            return
        self.declared.append(event.transaction)
        self._answered()

    def on_transaction_declare_failed(self, event: Any) -> None:
        condition = event.delivery.remote.condition
        if self.answered >= self.count:
            self.after = f"failed: {condition}"
            self.connection.close()
            return
        self.failed.append((str(condition.name), str(condition.description)))
        self._answered()

    def on_transaction_committed(self, event: Any) -> None:
        self.container.declare_transaction(self.connection, handler=self)

    def on_transaction_commit_failed(self, event: Any) -> None:
        self.after = "commit failed"
        self.connection.close()


def _wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {TIMEOUT} s: {what}")
        time.sleep(0.02)


def test_python_qpid_proton_declaring_past_the_connection_limit_is_rejected_naming_it() -> None:
    with BrokerThread(max_transactions=3) as broker:
        handler = _Declarer(broker.url, 5, then=True)
        Container(handler).run()
        assert len(handler.declared) == 3 - 1  # (one of the three committed at the end)
        assert len(handler.failed) == 2
        for condition, description in handler.failed:
            assert condition == RESOURCE_LIMIT_EXCEEDED
            assert "max-transactions 3" in description
        # a discharge frees a place: the declare after the commit is taken
        assert handler.after == "declared"
        # the connection's end rolled back what it held open: nothing counted any more
        _wait_for(lambda: not broker.broker.connections, "the connection released")
        assert broker.broker.flow.node_bytes == 0


def test_open_transactions_count_in_the_memory_limit() -> None:
    # room for five transactions, with the connection's session and its controller link (half the limit at most)
    with BrokerThread(max_memory=5 * NODE_SIZE + 2 * ENDPOINT_SIZE, max_transactions=None) as broker:
        handler = _Declarer(broker.url, 8)
        Container(handler).run()
        assert len(handler.declared) == 5  # the room the limit leaves, counted at NODE_SIZE each
        assert [condition for condition, _ in handler.failed] == [RESOURCE_LIMIT_EXCEEDED] * 3
        assert all("memory limit" in description for _, description in handler.failed), handler.failed
        _wait_for(lambda: not broker.broker.connections, "the connection released")
        assert broker.broker.flow.node_bytes == 0
        # the room is back for the next connection
        handler = _Declarer(broker.url, 5)
        Container(handler).run()
        assert (len(handler.declared), handler.failed) == (5, [])


@pytest.mark.anyio
async def test_our_client_is_refused_past_the_limit_and_gets_the_place_back_at_a_discharge() -> None:
    async with Broker(port=0, max_transactions=2) as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as conn:
            first = await conn.transaction()
            second = await conn.transaction()
            with anyio.fail_after(TIMEOUT), pytest.raises(TransactionError) as refused:
                await conn.transaction()
            assert refused.value.condition == RESOURCE_LIMIT_EXCEEDED
            assert "max-transactions 2" in str(refused.value)
            (server,) = broker.connections
            assert len(server.transactions.transactions) == 2
            await first.rollback()
            third = await conn.transaction()  # the rollback freed a place
            sender = await conn.open_sender("txn-limit")
            await third.send(sender, amqp_async.Message(body="committed"))
            await third.commit()
            await second.commit()
            receiver = await conn.open_receiver("txn-limit", credit=1)
            with anyio.fail_after(TIMEOUT):
                delivery = await receiver.receive()
            assert delivery.message.body == "committed"
            await delivery.accept()
            assert server.transactions.transactions == {}
        assert broker.flow.node_bytes == NODE_SIZE  # the queue "txn-limit" alone: the transactions gave theirs back


@pytest.mark.anyio
async def test_transactions_past_their_timeout_give_their_place_to_a_new_declare() -> None:
    broker = Broker(port=0, max_transactions=2, transaction_timeout=0.3)
    async with broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        old = [await conn.transaction(), await conn.transaction()]
        await anyio.sleep(0.5)
        # at the limit, but both are past the timeout: rolled back now, and the declare is taken
        fresh = await conn.transaction()
        (server,) = broker.connections
        assert list(server.transactions.transactions) == [fresh.txn_id]
        await fresh.rollback()
        for transaction in old:
            with pytest.raises(TransactionError) as timed_out:
                await transaction.commit()
            assert timed_out.value.condition == "amqp:transaction:timeout"


def test_the_limit_is_checked_and_set_from_the_command_line() -> None:
    assert Broker().max_transactions == 1000
    with pytest.raises(ValueError, match="max_transactions must be at least 1"):
        Broker(max_transactions=0)
    assert make_broker(parse_arguments(["--max-transactions", "7"])).max_transactions == 7
    assert make_broker(parse_arguments([])).max_transactions == 1000
    with pytest.raises(SystemExit) as exited:
        parse_arguments(["--max-transactions", "0"])
    assert exited.value.code == 2
