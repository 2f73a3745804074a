"""Transactions (§4) end to end: the awaitable API (``conn.transaction()``) against the embedded broker's
coordinator, with exact message counts on the broker's queues; hostile and misuse cases (unknown txn-ids,
discharging twice, a connection lost mid-transaction); and a peer without a coordinator (proton's reactor,
which refuses coordinator links).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async import Message, TransactionError, TransactionInDoubt, TransactionRolledBack
from amqp_async.broker import Broker
from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.transactions import LOCAL_TRANSACTIONS

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    options.setdefault("port", 0)
    with anyio.fail_after(TIMEOUT):
        async with Broker(**options) as broker:
            yield broker


def connect(broker: Broker, **options: Any) -> Any:
    options.setdefault("reconnect", False)
    return amqp_async.connect(broker.url, **options)


def depth(broker: Broker, address: str) -> int:
    queue = broker.queues.get(address)
    return 0 if queue is None else len(queue)


def bodies(broker: Broker, address: str) -> list[Any]:
    queue = broker.queues.get(address)
    return [] if queue is None else [entry.message.body for entry in queue.entries]


async def eventually(predicate: Any, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def fill(broker: Broker, address: str, count: int) -> None:
    async with connect(broker) as conn, await conn.open_sender(address) as sender:
        for n in range(count):
            await sender.send(Message(body=n))


def drop_abruptly(conn: amqp_async.Connection) -> None:
    """Reset the client's TCP connection (an RST), with no AMQP close."""
    stream = conn._stream
    assert stream is not None
    sock: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------------------------------------------------------
# Sends


async def test_sends_become_visible_only_at_commit() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        txn = await conn.transaction()
        assert txn.state == "active" and txn.txn_id
        for n in range(3):
            assert await sender.send(Message(body=n), transaction=txn) == Accepted()
        assert depth(broker, "q") == 0
        await txn.commit()
        assert txn.state == "committed"
        assert bodies(broker, "q") == [0, 1, 2]


async def test_sends_vanish_at_rollback() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        txn = await conn.transaction()
        await txn.send(sender, Message(body="a"))
        tracker = await sender.submit(Message(body="b"), transaction=txn)
        assert await tracker == Accepted()
        await txn.rollback()
        assert txn.state == "rolled back" and depth(broker, "q") == 0
        await sender.send(Message(body="plain"))
        assert bodies(broker, "q") == ["plain"]


async def test_async_with_commits_on_a_clean_exit() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        async with conn.transaction() as txn:
            await sender.send(Message(body=1), transaction=txn)
            await sender.send(Message(body=2), transaction=txn)
            assert depth(broker, "q") == 0
        assert txn.state == "committed" and bodies(broker, "q") == [1, 2]


async def test_async_with_rolls_back_on_an_exception() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction() as txn:
                await sender.send(Message(body=1), transaction=txn)
                1 / 0  # noqa: B018
        assert txn.state == "rolled back" and depth(broker, "q") == 0


@pytest.mark.parametrize("fail", [False, True])
async def test_a_discharge_cancelled_under_way_still_gives_the_state_its_outcome(fail: bool) -> None:
    """A commit() (or rollback()) cancelled after its discharge went out leaves the transaction "in doubt" until
    the coordinator's answer comes, and then says what it was: it stayed "in doubt" for ever, though committed."""
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        txn = await conn.transaction()
        await sender.send(Message(body="in-txn"), transaction=txn)
        with anyio.move_on_after(0) as cancelled:
            await (txn.rollback() if fail else txn.commit())
        assert cancelled.cancelled_caught and txn.state == "in doubt"
        await eventually(lambda: txn.state != "in doubt")
        assert txn.state == ("rolled back" if fail else "committed")
        assert bodies(broker, "q") == ([] if fail else ["in-txn"])


async def test_async_with_rolls_back_on_cancellation() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        sent = anyio.Event()
        transactions = []

        async def work() -> None:
            async with conn.transaction() as txn:
                transactions.append(txn)
                await sender.send(Message(body=1), transaction=txn)
                sent.set()
                await anyio.sleep(10)

        async with anyio.create_task_group() as group:
            group.start_soon(work)
            await sent.wait()
            group.cancel_scope.cancel()
        (txn,) = transactions
        assert txn.state == "rolled back" and depth(broker, "q") == 0
        # the connection still works, and so do new transactions
        async with conn.transaction() as again:
            await sender.send(Message(body=2), transaction=again)
        assert bodies(broker, "q") == [2]


async def test_an_anonymous_sender_sends_within_a_transaction() -> None:
    async with serving() as broker, connect(broker) as conn:
        relay = await conn.open_sender(None)
        async with conn.transaction() as txn:
            await relay.send(Message(address="a", body=1), transaction=txn)
            await relay.send(Message(address="b", body=2), transaction=txn)
            assert depth(broker, "a") == depth(broker, "b") == 0
        assert bodies(broker, "a") == [1] and bodies(broker, "b") == [2]


# ---------------------------------------------------------------------------------------------------------------
# Settlement of received messages


async def test_accepts_consume_only_at_commit() -> None:
    async with serving() as broker:
        await fill(broker, "q", 5)
        async with connect(broker) as conn:
            receiver = await conn.open_receiver("q", credit=10)
            async with conn.transaction() as txn:
                for n in range(5):
                    delivery = await receiver.receive()
                    assert delivery.message.body == n
                    await delivery.accept(transaction=txn)
                await eventually(lambda: not broker.queues["q"].consumers[0].unsettled)
            await receiver.close()
        assert depth(broker, "q") == 0


async def test_rollback_makes_accepted_messages_available_again_with_their_delivery_count() -> None:
    async with serving() as broker:
        await fill(broker, "q", 3)
        async with connect(broker) as conn:
            receiver = await conn.open_receiver("q", credit=0)
            receiver.add_credit(3)
            txn = await conn.transaction()
            for _ in range(3):
                await (await receiver.receive()).accept(transaction=txn)
            assert depth(broker, "q") == 0
            await txn.rollback()
            assert bodies(broker, "q") == [0, 1, 2]
            receiver.add_credit(3)
            again = [await receiver.receive() for _ in range(3)]
            assert [d.message.body for d in again] == [0, 1, 2]
            # each was delivered once and the attempt rolled back (§3.2.1 delivery-count)
            assert [d.message.delivery_count for d in again] == [1, 1, 1]
            assert [d.message.first_acquirer for d in again] == [False, False, False]
            for delivery in again:
                await delivery.accept()
            await receiver.close()
        assert depth(broker, "q") == 0


@pytest.mark.parametrize("how", ["reject", "release", "modify"])
async def test_other_outcomes_within_a_transaction_take_effect_at_commit(how: str) -> None:
    async with serving(dead_letter_queue="dlq") as broker:
        await fill(broker, "q", 1)
        async with connect(broker) as conn:
            receiver = await conn.open_receiver("q", credit=0)
            receiver.add_credit(1)
            delivery = await receiver.receive()
            async with conn.transaction() as txn:
                await getattr(delivery, how)(transaction=txn)
                assert depth(broker, "q") == depth(broker, "dlq") == 0
            await receiver.close()
        expected = {"reject": (0, 1), "release": (1, 0), "modify": (1, 0)}[how]
        assert (depth(broker, "q"), depth(broker, "dlq")) == expected


async def test_mixed_send_and_accept_in_one_transaction() -> None:
    async with serving() as broker:
        await fill(broker, "in", 4)
        async with connect(broker) as conn:
            receiver = await conn.open_receiver("in", credit=0)
            sender = await conn.open_sender("out")
            receiver.add_credit(2)
            async with conn.transaction() as txn:  # commit: 2 moved
                for _ in range(2):
                    delivery = await receiver.receive()
                    await sender.send(Message(body=delivery.message.body * 10), transaction=txn)
                    await delivery.accept(transaction=txn)
            assert (depth(broker, "in"), bodies(broker, "out")) == (2, [0, 10])
            receiver.add_credit(2)
            txn = await conn.transaction()  # rollback: nothing moved
            for _ in range(2):
                delivery = await receiver.receive()
                await sender.send(Message(body=delivery.message.body * 10), transaction=txn)
                await delivery.accept(transaction=txn)
            await txn.rollback()
            assert (bodies(broker, "in"), bodies(broker, "out")) == ([2, 3], [0, 10])
            await receiver.close()


# ---------------------------------------------------------------------------------------------------------------
# Several transactions, and their ends


async def test_concurrent_transactions_on_one_connection_are_independent() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        session = await conn.open_session()
        other = await session.open_sender("q")  # a sender on another session joins the same transactions
        first, second, third = await conn.transaction(), await conn.transaction(), await conn.transaction()
        assert len({first.txn_id, second.txn_id, third.txn_id}) == 3
        await sender.send(Message(body="1a"), transaction=first)
        await other.send(Message(body="2a"), transaction=second)
        await sender.send(Message(body="3a"), transaction=third)
        await other.send(Message(body="1b"), transaction=first)
        await second.rollback()
        await third.commit()
        assert bodies(broker, "q") == ["3a"]
        await first.commit()
        assert bodies(broker, "q") == ["3a", "1a", "1b"]
        assert all(not c.transactions.transactions for c in broker.connections)


async def test_many_transactions_declared_at_once() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")

        async def one(n: int) -> None:
            async with conn.transaction() as txn:
                await sender.send(Message(body=n), transaction=txn)
                if n % 2:
                    raise KeyError(n)

        async with anyio.create_task_group() as group:
            for n in range(20):
                group.start_soon(lambda n=n: _ignore(KeyError, one(n)))
        assert sorted(bodies(broker, "q")) == list(range(0, 20, 2))


async def _ignore(kind: type[BaseException], coroutine: Any) -> None:
    try:
        await coroutine
    except kind:
        pass


async def test_a_connection_that_ends_with_open_transactions_rolls_them_back() -> None:
    async with serving() as broker:
        await fill(broker, "in", 2)
        conn = await connect(broker)
        sender = await conn.open_sender("out")
        receiver = await conn.open_receiver("in", credit=0)
        receiver.add_credit(2)
        first, second = await conn.transaction(), await conn.transaction()
        await sender.send(Message(body="x"), transaction=first)
        await (await receiver.receive()).accept(transaction=second)
        await (await receiver.receive()).accept(transaction=first)
        assert (depth(broker, "in"), depth(broker, "out")) == (0, 0)
        await conn.close()
        await eventually(lambda: not broker.connections)
        assert (bodies(broker, "in"), depth(broker, "out")) == ([0, 1], 0)


async def test_a_dropped_connection_reports_the_transaction_rolled_back_never_committed() -> None:
    async with serving() as broker:
        conn = await connect(broker)
        sender = await conn.open_sender("out")
        txn = await conn.transaction()
        await sender.send(Message(body="x"), transaction=txn)
        drop_abruptly(conn)
        await eventually(lambda: not broker.connections)
        with pytest.raises(TransactionRolledBack) as caught:
            await txn.commit()
        assert caught.value.condition == "amqp:transaction:rollback"
        assert txn.state == "rolled back" and depth(broker, "out") == 0
        await txn.rollback()  # nothing left to do: returns at once
        with pytest.raises(TransactionRolledBack):
            await sender.send(Message(body="y"), transaction=txn)
        await conn.close()


async def test_a_block_that_caught_the_rollback_of_its_work_does_not_end_quietly() -> None:
    async with serving() as broker:
        conn = await connect(broker)
        sender = await conn.open_sender("out")
        caught_in_block: list[TransactionRolledBack] = []
        with pytest.raises(TransactionRolledBack, match="the connection it was declared on ended"):
            async with conn.transaction() as txn:
                await sender.send(Message(body="before"), transaction=txn)
                drop_abruptly(conn)
                await eventually(lambda: not broker.connections)
                try:  # a per-message try/except, as a loop over messages has
                    await sender.send(Message(body="after"), transaction=txn)
                except TransactionRolledBack as exc:
                    caught_in_block.append(exc)
            # before: the block ended normally, and nothing had been committed
        assert caught_in_block and txn.state == "rolled back" and depth(broker, "out") == 0
        await conn.close()


async def test_a_connection_lost_during_the_commit_leaves_it_in_doubt() -> None:
    async with serving() as broker:
        conn = await connect(broker)
        sender = await conn.open_sender("out")
        txn = await conn.transaction()
        await sender.send(Message(body="x"), transaction=txn)
        # the broker vanishes without answering: stop its connections from reading
        for server_connection in list(broker.connections):
            server_connection._on_control = lambda link: None  # type: ignore[method-assign]
        async with anyio.create_task_group() as group:

            async def commit() -> None:
                with pytest.raises(TransactionInDoubt):
                    await txn.commit()

            group.start_soon(commit)
            await eventually(lambda: txn.state == "discharging" and conn._controller.unsettled)
            drop_abruptly(conn)
        assert txn.state == "in doubt"
        await conn.close()


# ---------------------------------------------------------------------------------------------------------------
# Misuse and hostile cases


async def test_commit_twice_and_work_after_the_end_are_refused_locally() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        txn = await conn.transaction()
        await txn.commit()
        with pytest.raises(TransactionError, match="not active"):
            await txn.commit()
        with pytest.raises(TransactionError):
            await sender.send(Message(body=1), transaction=txn)
        with pytest.raises(TransactionError):
            await txn.declare()
        assert depth(broker, "q") == 0


async def test_discharge_twice_on_the_wire_gets_unknown_id() -> None:
    async with serving() as broker, connect(broker) as conn:
        txn = await conn.transaction()
        await txn.commit()
        txn.state = "active"  # as a client that does not keep track would: the same discharge again
        with pytest.raises(TransactionError) as caught:
            await txn.commit()
        assert caught.value.condition == "amqp:transaction:unknown-id"
        assert not isinstance(caught.value, TransactionRolledBack)


async def test_discharge_of_an_unknown_txn_id() -> None:
    async with serving() as broker, connect(broker) as conn:
        txn = await conn.transaction()
        txn.txn_id = b"no-such-txn"
        with pytest.raises(TransactionError) as caught:
            await txn.rollback()
        assert caught.value.condition == "amqp:transaction:unknown-id"
        assert "unknown-id" in str(caught.value)


async def test_a_transactional_transfer_with_an_unknown_txn_id_is_rejected() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        txn = await conn.transaction()
        real = txn.txn_id
        txn.txn_id = b"forged"
        with pytest.raises(amqp_async.MessageRejected) as caught:
            await sender.send(Message(body=1), transaction=txn)
        assert caught.value.condition == "amqp:transaction:unknown-id"
        txn.txn_id = real
        await txn.commit()
        assert depth(broker, "q") == 0


async def test_a_transactional_accept_with_an_unknown_txn_id_detaches_the_link() -> None:
    async with serving() as broker:
        await fill(broker, "q", 1)
        async with connect(broker) as conn:
            receiver = await conn.open_receiver("q", credit=0)
            receiver.add_credit(1)
            delivery = await receiver.receive()
            txn = await conn.transaction()
            txn.txn_id = b"forged"
            await delivery.accept(transaction=txn)
            with pytest.raises(amqp_async.LinkError) as caught:
                await receiver.receive()
            assert caught.value.condition == "amqp:transaction:unknown-id"
        assert bodies(broker, "q") == [0]


async def test_the_coordinator_refuses_other_bodies_and_offers_local_transactions() -> None:
    async with serving() as broker, connect(broker) as conn:
        assert LOCAL_TRANSACTIONS in conn.remote_offered_capabilities
        await conn.transaction()
        controller = conn._controller
        assert LOCAL_TRANSACTIONS in controller._engine_link.remote_target.capabilities
        with pytest.raises(amqp_async.MessageRejected) as caught:
            await controller.send(Message(body="not a declare"))
        assert caught.value.condition == "amqp:not-allowed"


async def test_a_transaction_of_another_connection_is_refused() -> None:
    async with serving() as broker, connect(broker) as one, connect(broker) as two:
        sender = await two.open_sender("q")
        txn = await one.transaction()
        with pytest.raises(ValueError, match="another connection"):
            await sender.send(Message(body=1), transaction=txn)


def declare_without_coordinator(url: str, said: str) -> None:
    """On the peer at ``url``, a declare fails with amqp:not-implemented and ``said``; the connection goes on, and
    a second attempt fails the same way."""

    async def main() -> None:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url, reconnect=False) as conn:
                with pytest.raises(TransactionError) as caught:
                    await conn.transaction()
                assert caught.value.condition == "amqp:not-implemented"
                assert said in str(caught.value), caught.value
                assert conn._controller is None  # refused or detached, not kept
                sender = await conn.open_sender("q")
                await sender.send(Message(body=1))
                with pytest.raises(TransactionError):
                    async with conn.transaction():
                        pass

    anyio.run(main)


def test_a_peer_without_a_coordinator_gives_a_clear_error_at_declare() -> None:
    pytest.importorskip("proton", reason="python-qpid-proton is the independent peer")
    try:
        from proton_broker import ProtonBroker
    except ImportError:  # pragma: no cover - tests/ imported as a package
        from tests.proton_broker import ProtonBroker

    with ProtonBroker(timeout=TIMEOUT) as broker:
        # the link refused is named as what it is (before: "the sender with no target (the anonymous relay)")
        declare_without_coordinator(
            broker.url,
            "the peer has no transaction coordinator (it refused the coordinator link): amqp:not-implemented: "
            "the peer refused the transaction controller link",
        )


def test_a_peer_that_takes_the_coordinator_link_for_a_queue_has_no_coordinator() -> None:
    """python-qpid-proton's broker example attaches any link, the coordinator's too, with a plain target (§4.5.1:
    the controller's target is a coordinator). Before, the declare went to it as a message, the broker stored it,
    and the error was "the coordinator answered the declare with Accepted(), not a declared outcome"."""
    try:
        from test_request_reply import proton_broker_example
    except ImportError:  # pragma: no cover - tests/ imported as a package
        from tests.test_request_reply import proton_broker_example

    with proton_broker_example() as url:
        declare_without_coordinator(url, "no transaction coordinator: it answered the coordinator link with the target")


async def test_the_coordinator_refuses_malformed_and_distributed_declares() -> None:
    from amqp_async.codec.transactions import Declare

    async with serving() as broker, connect(broker) as conn:
        await conn.transaction()
        controller = conn._controller
        with pytest.raises(amqp_async.MessageRejected) as caught:
            await controller.send(b"\x00\x53\x77\xa1")  # an amqp-value section cut short
        assert caught.value.condition == "amqp:decode-error"
        with pytest.raises(amqp_async.MessageRejected) as caught:
            await controller.send(Message(body=Declare(global_id=b"xid")))
        assert caught.value.condition == "amqp:not-implemented"
        # the coordinator still works
        async with conn.transaction():
            pass


async def test_presettled_sends_within_a_transaction_wait_for_the_commit() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q", delivery="at-most-once")
        async with conn.transaction() as txn:
            for n in range(3):
                assert await sender.send(Message(body=n), transaction=txn) is None
            await anyio.sleep(0.1)
            assert depth(broker, "q") == 0
        assert bodies(broker, "q") == [0, 1, 2]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_transactions_on_trio(anyio_backend: str) -> None:
    async with serving() as broker:
        await fill(broker, "in", 2)
        async with connect(broker) as conn:
            receiver = await conn.open_receiver("in", credit=0)
            sender = await conn.open_sender("out")
            receiver.add_credit(2)
            with pytest.raises(RuntimeError):
                async with conn.transaction() as txn:
                    await (await receiver.receive()).accept(transaction=txn)
                    await sender.send(Message(body="x"), transaction=txn)
                    raise RuntimeError("undo")
            receiver.add_credit(1)  # for the message the rollback returned (the other one is here already)
            async with conn.transaction() as txn:
                for _ in range(2):
                    delivery = await receiver.receive()
                    await sender.send(Message(body=delivery.message.body), transaction=txn)
                    await delivery.accept(transaction=txn)
            await receiver.close()
        assert (depth(broker, "in"), sorted(bodies(broker, "out"))) == (0, [0, 1])


async def test_a_transaction_open_too_long_is_rolled_back_with_the_timeout_condition() -> None:
    async with serving(transaction_timeout=1.0) as broker:
        await fill(broker, "in", 1)
        async with connect(broker) as conn:
            sender = await conn.open_sender("out")
            receiver = await conn.open_receiver("in", credit=0)
            receiver.add_credit(1)
            slow = await conn.transaction()
            await sender.send(Message(body="late"), transaction=slow)
            await (await receiver.receive()).accept(transaction=slow)
            quick = await conn.transaction()
            await anyio.sleep(1.2)
            # work within it now is refused with the timeout, and so is its commit; the work was rolled back
            with pytest.raises(amqp_async.MessageRejected) as refused:
                await sender.send(Message(body="later"), transaction=slow)
            assert refused.value.condition == "amqp:transaction:timeout"
            with pytest.raises(TransactionRolledBack) as caught:
                await slow.commit()
            assert caught.value.condition == "amqp:transaction:timeout"
            assert (bodies(broker, "in"), depth(broker, "out")) == ([0], 0)
            await quick.rollback()  # a rollback of an expired transaction is what was asked: no error
            assert quick.state == "rolled back"
            async with conn.transaction() as fresh:
                await sender.send(Message(body="in time"), transaction=fresh)
            await receiver.close()
        assert bodies(broker, "out") == ["in time"]


async def test_exactly_once_receivers_and_senders_settle_within_a_transaction() -> None:
    """Receiver settle mode second: the transactional outcome goes out unsettled, and the other side settles it
    (§2.6.12), both for a transactional accept and for a transactional send."""
    async with serving() as broker:
        await fill(broker, "in", 1)
        async with connect(broker) as conn:
            receiver = await conn.open_receiver("in", credit=0, delivery="exactly-once")
            sender = await conn.open_sender("out", delivery="exactly-once")
            receiver.add_credit(1)
            async with conn.transaction() as txn:
                delivery = await receiver.receive()
                await delivery.accept(transaction=txn)
                assert delivery.settled
                assert await sender.send(Message(body="x"), transaction=txn) == Accepted()
            await receiver.close()
        assert (depth(broker, "in"), bodies(broker, "out")) == (0, ["x"])


async def test_work_after_an_explicit_rollback_is_refused_as_not_active() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        txn = await conn.transaction()
        await txn.rollback()
        with pytest.raises(TransactionError, match=r"not active \(rolled back\)") as caught:
            await sender.send(Message(body=1), transaction=txn)
        assert not isinstance(caught.value, TransactionRolledBack)
        with pytest.raises(TransactionError, match="not active"):
            await txn.commit()
        await txn.rollback()  # again: nothing to do
        assert depth(broker, "q") == 0


# --- the memory limit ---------------------------------------------------------------------------------------------


async def test_sends_within_an_open_transaction_count_against_the_memory_limit() -> None:
    """Messages sent under a transaction wait for its commit in the broker: they count in max_memory like queued
    ones, so a transaction that is never discharged cannot fill the broker past its limit (before, a producer's
    credit kept coming: 8,000 x 4 KB held with max_memory 8 MiB); the commit moves the count to the queue, a
    rollback frees it and the producer's credit comes back."""
    size, limit = 4000, 1 << 20
    async with serving(max_memory=limit) as broker, connect(broker) as conn:
        sender = await conn.open_sender("q")
        txn = await conn.transaction()
        sent = 0
        with anyio.move_on_after(2.0):  # until the broker withholds credit
            while True:
                await sender.send(Message(body=b"x" * size), transaction=txn)
                sent += 1
        flow = broker.flow
        assert sent > 0 and sent * size <= limit  # credit stopped at the limit
        assert flow.held_bytes <= limit
        assert depth(broker, "q") == 0
        held = flow.held_bytes
        await txn.rollback()
        assert flow.held_bytes < held // 10  # what the transaction held is free: its messages are gone
        await sender.send(Message(body="after"))  # and the producer has credit again
        assert bodies(broker, "q") == ["after"]
        txn = await conn.transaction()
        for _ in range(10):
            await sender.send(Message(body=b"y" * size), transaction=txn)
        before = flow.held_bytes
        await txn.commit()
        assert flow.held_bytes == before  # counted once: by the queue now, no longer by the transaction
        assert depth(broker, "q") == 11
