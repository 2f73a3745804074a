"""The callback API's transactions (``Container.declare_transaction``, ``Transaction``, ``TransactionHandler``,
``TransactionalClientHandler``) against the real python-qpid-proton: each program runs on both, against the same
peer, and the callbacks they make (and what the peer's queues hold after) must be the same.
"""

from __future__ import annotations

import importlib
from typing import Any

import anyio
import anyio.to_thread
import pytest

from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.broker._nodes import Entry

pytest.importorskip("proton", reason="python-qpid-proton is the reference implementation; CI installs it")

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
FLAVOURS = ["proton", "ours"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def modules(flavour: str) -> tuple[Any, Any, Any]:
    package = "proton" if flavour == "proton" else "amqp_async.proton"
    return (
        importlib.import_module(package),
        importlib.import_module(f"{package}.reactor"),
        importlib.import_module(f"{package}.handlers"),
    )


def recorder(flavour: str, url: str, plan: str) -> tuple[Any, list[str]]:
    """A program on ``flavour`` that follows ``plan`` and records its transaction callbacks."""
    core, reactor, handlers = modules(flavour)
    calls: list[str] = []

    class Program(handlers.TransactionalClientHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=0)
            self.round = 0
            self.received = 0

        def on_start(self, event: Any) -> None:
            self.container = event.container
            self.conn = event.container.connect(url)
            self.sender = event.container.create_sender(self.conn, "tx-out")
            if plan == "receive":
                self.receiver = event.container.create_receiver(self.conn, "tx-in")
            self.container.declare_transaction(self.conn, handler=self)

        def on_transaction_declared(self, event: Any) -> None:
            calls.append("declared")
            self.transaction = event.transaction
            assert isinstance(event.transaction, reactor.Transaction) and event.transaction.id
            if plan == "receive":
                self.receiver.flow(2)
                return
            self.transaction.send(self.sender, core.Message(body=f"round-{self.round}"))
            if plan == "commit-fails":
                self.transaction.id = b"forged"  # the coordinator knows no such transaction
                self.transaction.commit()
            elif self.round == 0:
                self.transaction.abort()
            else:
                self.transaction.commit()

        def on_message(self, event: Any) -> None:
            calls.append(f"message {event.message.body}")
            self.accept(event.delivery, self.transaction)  # TransactionalClientHandler.accept
            self.received += 1
            if self.received == 2:
                self.transaction.abort() if self.round == 0 else self.transaction.commit()

        def on_transaction_aborted(self, event: Any) -> None:
            calls.append("aborted")
            self.round += 1
            self.received = 0
            self.container.declare_transaction(self.conn, handler=self)

        def on_transaction_committed(self, event: Any) -> None:
            calls.append("committed")
            event.connection.close()

        def on_transaction_commit_failed(self, event: Any) -> None:
            calls.append(f"commit failed: {event.delivery.remote_state == core.Delivery.REJECTED}")
            event.connection.close()

        def on_transaction_declare_failed(self, event: Any) -> None:
            calls.append("declare failed")
            event.connection.close()

        def on_link_error(self, event: Any) -> None:
            calls.append(f"link error {event.link.name}: {event.link.remote_condition.name}")
            event.connection.close()

    return reactor.Container(Program()), calls


async def run_program(url: str, flavour: str, plan: str) -> list[str]:
    container, calls = recorder(flavour, url, plan)
    with anyio.fail_after(TIMEOUT):
        await anyio.to_thread.run_sync(container.run)
    return calls


def bodies(broker: Broker, address: str) -> list[Any]:
    return [entry.message.body for entry in broker.queue(address).entries]


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_abort_then_commit(flavour: str) -> None:
    async with Broker(port=0) as broker:
        calls = await run_program(broker.url, flavour, "send")
        assert calls == ["declared", "aborted", "declared", "committed"]
        assert bodies(broker, "tx-out") == ["round-1"]


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_commit_the_coordinator_refuses(flavour: str) -> None:
    async with Broker(port=0) as broker:
        calls = await run_program(broker.url, flavour, "commit-fails")
        assert calls == ["declared", "commit failed: True"]
        await anyio.sleep(0.1)
        assert bodies(broker, "tx-out") == []  # the connection ended: its transaction was rolled back


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_transactional_accepts_aborted_then_committed(flavour: str) -> None:
    async with Broker(port=0) as broker:
        for n in range(2):
            broker.queue("tx-in").put(Entry(Message(body=n).encode()))
        calls = await run_program(broker.url, flavour, "receive")
        # aborted: both come back (proton releases what it had not settled), then are accepted and committed
        assert calls == ["declared", "message 0", "message 1", "aborted", "declared", "message 0", "message 1",
                         "committed"]  # fmt: skip
        await anyio.sleep(0.1)
        assert bodies(broker, "tx-in") == []


async def test_a_peer_without_a_coordinator_as_proton_reports_it() -> None:
    """proton's broker-side reactor refuses coordinator links: both clients see the same callbacks."""
    seen = {}
    with ProtonBroker(timeout=TIMEOUT) as broker:
        for flavour in FLAVOURS:
            seen[flavour] = await run_program(broker.url, flavour, "send")
    assert seen["ours"] == seen["proton"]
    assert seen["proton"] == ["link error txn-ctrl: amqp:not-implemented"]
