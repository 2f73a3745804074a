"""The conveniences of the awaitable API, on asyncio and on trio: links and sessions as ``async with`` blocks,
``receive_many``, ``send_many``, the TypeError of a ``send()`` of something that is not a message, keyword and
value checks of the link options at the call, and ``run_threadsafe`` from a real thread.

The peers: the embedded broker in-process (its queues are looked at directly: what arrived, what is left, who
consumes), and python-qpid-proton's broker (`ProtonBroker`) where a test needs a peer that stops granting credit.
``async with delivery`` and double settlement: tests/test_client_settlement.py; JSON bodies: tests/test_message_json.py.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

import amqp_async
from amqp_async import (
    Accepted,
    LinkDetached,
    LinkError,
    Message,
    MessageRejected,
    Opening,
    Receiver,
    Sender,
    SendManyError,
    Session,
)
from amqp_async.broker import Broker

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

pytestmark = pytest.mark.anyio

TIMEOUT = 15.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    async with Broker(port=0, **options) as broker:
        yield broker


def connect(broker: Broker | ProtonBroker) -> Any:
    """Our client, without reconnect (a dropped connection must surface, not be retried)."""
    return amqp_async.connect(broker.url, reconnect=False)


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def queued_bodies(broker: Broker, address: str) -> list[Any]:
    queue = broker.queues.get(address)
    return [] if queue is None else [entry.message.body for entry in queue.entries]


def consumers(broker: Broker, address: str) -> int:
    queue = broker.queues.get(address)
    return 0 if queue is None else len(queue.consumers)


def broker_links(broker: ProtonBroker, name: str) -> list[Any]:
    """The proton broker's open links named ``name`` (in the broker thread only)."""
    from proton import Endpoint

    found = []
    for conn in list(broker._handler.connections):
        link = conn.link_head(Endpoint.LOCAL_ACTIVE)
        while link is not None:
            if link.name == name:
                found.append(link)
            link = link.next(Endpoint.LOCAL_ACTIVE)
    return found


async def in_broker(broker: ProtonBroker, function: Callable[[], Any]) -> Any:
    """Run ``function`` in the proton broker's thread (from a worker thread, so that our loop goes on)."""
    return await anyio.to_thread.run_sync(functools.partial(broker.call, function))


async def fill(broker: Broker, address: str, bodies: list[Any]) -> None:
    async with connect(broker) as conn, conn.open_sender(address) as sender:
        await sender.send_many([Message(body=body) for body in bodies])


# ---------------------------------------------------------------------------------------------------------------
# async with conn.open_sender(...) / open_receiver / open_session


async def test_links_and_sessions_as_async_with_blocks_close_on_exit() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_sender("q") as sender:
                assert isinstance(sender, Sender)
                assert not sender.is_closed
                assert await sender.send(Message(body="one")) == Accepted()
            assert sender.is_closed
            async with conn.open_receiver("q") as receiver:
                assert isinstance(receiver, Receiver)
                await eventually(lambda: consumers(broker, "q") == 1)
                delivery = await receiver.receive()
                assert delivery.message.body == "one"
                await delivery.accept()
            assert receiver.is_closed
            await eventually(lambda: consumers(broker, "q") == 0)

            async with conn.open_session() as session:
                assert isinstance(session, Session)
                async with session.open_sender("q") as on_session:
                    await on_session.send(Message(body="two"))
                assert on_session.is_closed
                async with session.open_receiver("q") as from_session:
                    assert (await from_session.receive()).message.body == "two"
                assert from_session.is_closed
            assert session.is_closed
            assert not conn.is_closed


async def test_a_block_that_raises_closes_its_link_and_the_exception_propagates() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            with pytest.raises(KeyError, match="inside"):
                async with conn.open_receiver("q") as receiver:
                    await eventually(lambda: consumers(broker, "q") == 1)
                    raise KeyError("inside")
            assert receiver.is_closed
            await eventually(lambda: consumers(broker, "q") == 0)


async def test_await_still_works_and_an_opening_opens_once() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            opening = conn.open_sender("q")
            assert isinstance(opening, Opening)
            sender = await opening
            assert await sender.send(Message(body=1)) == Accepted()
            with pytest.raises(RuntimeError, match=r"^what open_sender\(\) returned was already awaited or entered"):
                await opening
            session = await conn.open_session()
            receiver = await session.open_receiver("q")
            assert (await receiver.receive()).message.body == 1
            await session.close()
            assert receiver.is_closed


async def test_an_opening_is_a_coroutine_for_task_groups_and_portals() -> None:
    # anyio's start_soon (trio's nursery underneath) and from_thread.run take a coroutine function: open_sender is
    # one, in effect.
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            opened: list[Sender] = []

            async def keep(opening: Any) -> None:
                opened.append(await opening)

            async with anyio.create_task_group() as group:
                group.start_soon(keep, conn.open_sender("q"))

            def from_a_thread() -> Any:
                receiver = anyio.from_thread.run(functools.partial(conn.open_receiver, "q", credit=5))
                return anyio.from_thread.run(receiver.receive)

            await opened[0].send(Message(body="via a task"))
            delivery = await anyio.to_thread.run_sync(from_a_thread)
            assert delivery.message.body == "via a task"


async def test_a_misspelt_option_is_a_type_error_naming_the_public_method() -> None:
    async with serving() as broker, connect(broker) as conn:
        session = await conn.open_session()
        cases: list[tuple[Callable[[], Any], str, str]] = [
            (lambda: conn.open_receiver("q", credits=10), "Connection.open_receiver", "credits"),
            (lambda: conn.open_sender("q", deliver="at-most-once"), "Connection.open_sender", "deliver"),
            (lambda: session.open_receiver("q", selecter="x = 1"), "Session.open_receiver", "selecter"),
            (lambda: session.open_sender("q", capability="queue"), "Session.open_sender", "capability"),
            (lambda: conn.open_session(incoming_widow=10), "Connection.open_session", "incoming_widow"),
        ]
        for call, method, keyword in cases:
            with pytest.raises(TypeError) as raised:
                call()
            # Python 3.13 adds "Did you mean ...?"
            assert str(raised.value).split(". Did you mean")[0] == (
                f"{method}() got an unexpected keyword argument {keyword!r}"
            )
        assert [link.name for link in session._links] == []  # nothing was attached


async def test_option_values_are_checked_at_the_call() -> None:
    async with serving() as broker, connect(broker) as conn:
        cases: list[tuple[Callable[[], Any], type[Exception], str]] = [
            (lambda: conn.open_sender("q", delivery="at-least-twice"), ValueError,
             "delivery must be one of ['at-least-once', 'at-most-once', 'exactly-once'], got 'at-least-twice'"),
            (lambda: conn.open_receiver("q", credit=-1), ValueError, "credit must be an int >= 0, got -1"),
            (lambda: conn.open_sender("q", snd_settle_mode=1), ValueError,
             "snd_settle_mode=1 (settled) is what delivery='at-most-once' means, and only that: pass "
             "delivery='at-most-once' instead (got delivery='at-least-once', snd_settle_mode=1)"),
            (lambda: conn.open_receiver("q", rcv_settle_mode=2), ValueError,
             "rcv_settle_mode must be 0 (first) or 1 (second), got 2"),
            (lambda: conn.open_receiver("q", distribution_mode="share"), ValueError,
             "distribution_mode must be 'move' or 'copy' (§3.5.7), got 'share'"),
            (lambda: conn.open_receiver("q", expiry_policy="sometimes"), ValueError,
             "expiry_policy must be one of ['link-detach', 'session-end', 'connection-close', 'never'] (§3.5.6), "
             "got 'sometimes'"),
            (lambda: conn.open_receiver("q", durable=3), ValueError,
             "durable must be True, False, 0, 1 or 2 (§3.5.5), got 3"),
            (lambda: conn.open_receiver("q", on_error="ignore"), ValueError,
             "on_error must be one of ['modify', 'release', 'reject'], got 'ignore'"),
            (lambda: conn.open_receiver("q", capabilities=[1]), TypeError,
             "capabilities must be a str or a sequence of str, got [1]"),
        ]  # fmt: skip
        for call, error, text in cases:
            with pytest.raises(error) as raised:
                call()
            assert str(raised.value) == text
        await anyio.sleep(0.05)
        assert consumers(broker, "q") == 0


async def test_every_link_option_reaches_the_attach() -> None:
    # python-qpid-proton's broker records the attach as proton decoded it.
    with ProtonBroker(timeout=TIMEOUT) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                receiver = await conn.open_receiver(
                    "q-in",
                    name="my-receiver",
                    credit=7,
                    durable=True,
                    expiry_policy="never",
                    timeout=30,
                    distribution_mode="copy",
                    selector="colour = 'red'",
                    capabilities="queue",
                    outcomes=["amqp:accepted:list", "amqp:released:list"],
                    properties={"purpose": "test"},
                    max_message_size=4096,
                    delivery="exactly-once",
                )
                sender = await conn.open_sender(
                    "q-out", name="my-sender", durable=1, expiry_policy="link-detach", capabilities=["topic", "x"]
                )
                fast = await conn.open_sender("q-fast", delivery="at-most-once")
                await sender.send(Message(body=1))
                await fast.send(Message(body=2))
                await receiver.close()
        attaches = {attach.name: attach for attach in broker.attaches}
        got = attaches["my-receiver"]
        assert got.role == "receiver"
        assert got.source.address == "q-in"
        assert (got.source.durable, got.source.expiry_policy, got.source.timeout) == (2, "never", 30)
        assert got.source.distribution_mode == "copy"
        assert list(got.source.filter or {}) == ["selector"]
        assert got.source.capabilities == ["queue"]
        assert got.source.outcomes == ["amqp:accepted:list", "amqp:released:list"]
        assert got.properties == {"purpose": "test"}
        assert got.max_message_size == 4096
        assert (got.snd_settle_mode, got.rcv_settle_mode) == ("unsettled", "second")
        out = attaches["my-sender"]
        assert (out.target.address, out.target.durable, out.target.expiry_policy) == ("q-out", 1, "link-detach")
        assert out.target.capabilities == ["topic", "x"]
        assert (out.snd_settle_mode, out.rcv_settle_mode) == ("unsettled", "first")
        unconfirmed = next(attach for attach in broker.attaches if attach.address == "q-fast")
        assert unconfirmed.snd_settle_mode == "settled"


def test_connect_options_are_typed_as_resolve_options_takes_them() -> None:
    # connect(**options: Unpack[ConnectOptions]): the TypedDict the type checkers read names every option that
    # resolve_options accepts at run time, and none more. An option added to one list is added to the other.
    from amqp_async.client._config import OPTION_NAMES

    assert set(amqp_async.ConnectOptions.__annotations__) == set(OPTION_NAMES)


async def test_a_misspelt_connect_option_is_a_type_error_naming_connect() -> None:
    with pytest.raises(TypeError, match=r"^connect\(\) got unexpected keyword argument\(s\): hearbeat$"):
        await amqp_async.connect("amqp://localhost:1", hearbeat=30)  # type: ignore[call-arg]


# ---------------------------------------------------------------------------------------------------------------
# send() of something that is not a message


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("text", "str 'text'"),
        ({"a": 1}, "dict {'a': 1}"),
        (42, "int 42"),
        (None, "NoneType None"),
        (["x" * 80], "list ['xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."),
    ],
)
async def test_send_of_something_else_is_a_type_error_saying_what_it_takes(value: Any, shown: str) -> None:
    hint = " (or Message.from_json(...) for JSON)" if isinstance(value, (dict, list)) else ""
    expected = (
        "a message to send is an amqp_async.Message, or the bytes of an encoded message (Message.encode()); got "
        f"{shown}. To send it as the message's body: Message(body=...){hint}"
    )
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            for attempt in (sender.send, sender.submit, lambda v: sender.send_many([Message(body=0), v])):
                with pytest.raises(TypeError) as raised:
                    await attempt(value)
                assert str(raised.value) == expected
            assert queued_bodies(broker, "q") == []  # nothing was sent, not even the batch's first
            assert await sender.send(Message(body="still usable")) == Accepted()
            assert queued_bodies(broker, "q") == ["still usable"]


# ---------------------------------------------------------------------------------------------------------------
# send_many


async def test_send_many_returns_the_outcomes_in_order() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            outcomes = await sender.send_many(Message(body=n) for n in range(250))
            assert outcomes == [Accepted()] * 250
            assert queued_bodies(broker, "q") == list(range(250))
            assert sender.unsettled == []
            assert await sender.send_many([]) == []
            fast = await conn.open_sender("q", delivery="at-most-once")
            assert await fast.send_many([Message(body="a"), Message(body="b").encode()]) == [None, None]
            await eventually(lambda: len(queued_bodies(broker, "q")) == 252)
            assert queued_bodies(broker, "q")[250:] == ["a", "b"]


async def test_send_many_reports_rejected_messages_and_keeps_the_others() -> None:
    FULL = "queue 'q' is full (3 messages): run the broker with a larger --max-queue-depth, or consume from it"
    # The broker holds 3 messages and refuses more (when_full="reject"): messages 3 and 4 are rejected with
    # amqp:resource-limit-exceeded, 0 to 2 accepted.
    with anyio.fail_after(TIMEOUT):
        async with serving(max_queue_depth=3, when_full="reject") as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            with pytest.raises(SendManyError) as raised:
                await sender.send_many([Message(body=n) for n in range(5)])
            failed = raised.value
            assert failed.results[:3] == [Accepted(), Accepted(), Accepted()]
            assert [index for index, _ in failed.errors] == [3, 4]
            for index in (3, 4):
                error = failed.results[index]
                assert isinstance(error, MessageRejected)
                assert error.condition == "amqp:resource-limit-exceeded"
                # it names the option to change (the broker's --max-queue-depth)
                assert error.description == FULL
            assert failed.outcomes == {0: Accepted(), 1: Accepted(), 2: Accepted()}
            assert failed.condition == "amqp:resource-limit-exceeded"
            assert str(failed) == (
                "amqp:resource-limit-exceeded: 2 of 5 messages failed; the first, #3: "
                f"amqp:resource-limit-exceeded: {FULL} (sent to 'q')"
            )  # the refusal names its sender's address (DeliveryError.address)
            assert isinstance(failed, amqp_async.AMQPError)
            assert queued_bodies(broker, "q") == [0, 1, 2]
            assert sender.unsettled == []


async def test_send_many_goes_on_past_a_message_the_engine_refuses() -> None:
    # The broker announces max-message-size 1000: the engine refuses the big message before it is sent.
    with anyio.fail_after(TIMEOUT):
        async with serving(max_message_size=1000) as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            batch = [Message(body="small"), Message(body=b"x" * 5000), Message(body="after")]
            with pytest.raises(SendManyError) as raised:
                await sender.send_many(batch)
            results = raised.value.results
            assert results[0] == Accepted() and results[2] == Accepted()
            refused = results[1]
            assert isinstance(refused, amqp_async.AMQPError)
            assert refused.condition == "amqp:link:message-size-exceeded"
            assert queued_bodies(broker, "q") == ["small", "after"]


async def test_send_many_keeps_track_when_the_link_goes_midway() -> None:
    # The proton broker grants 2 credits and no more: two messages go out and are accepted, then the broker
    # detaches the link while the third waits for credit. The rest were never sent: the error says so, per message.
    with ProtonBroker(timeout=TIMEOUT) as broker:
        broker.credit_for["q"] = 0
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                sender = await conn.open_sender("q", name="batch")
                outcome: list[BaseException] = []

                async def send() -> None:
                    try:
                        await sender.send_many([Message(body=n) for n in range(5)])
                    except SendManyError as exc:
                        outcome.append(exc)

                async with anyio.create_task_group() as group:
                    group.start_soon(send)
                    await in_broker(broker, lambda: [link.flow(2) for link in broker_links(broker, "batch")])
                    await anyio.to_thread.run_sync(functools.partial(broker.wait_messages, 2, address="q"))
                    await eventually(lambda: sender.unsettled == [] and sender.credit == 0)
                    await in_broker(broker, lambda: [link.close() for link in broker_links(broker, "batch")])
                [failed] = outcome
                assert isinstance(failed, SendManyError)
                assert failed.results[:2] == [Accepted(), Accepted()]
                assert [index for index, _ in failed.errors] == [2, 3, 4]
                assert all(isinstance(error, LinkDetached) for _, error in failed.errors)
        assert [m.body for m in broker.messages] == [0, 1]


# ---------------------------------------------------------------------------------------------------------------
# receive_many


async def test_receive_many_takes_what_is_queued_up_to_max_count() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await fill(broker, "q", list(range(5)))
            async with connect(broker) as conn, conn.open_receiver("q", credit=10) as receiver:
                await eventually(lambda: receiver.queued == 5)
                first = await receiver.receive_many(3, timeout=5)
                assert [d.message.body for d in first] == [0, 1, 2]
                rest = await receiver.receive_many(3, timeout=0.3)
                assert [d.message.body for d in rest] == [3, 4]
                for delivery in [*first, *rest]:
                    await delivery.accept()


async def test_receive_many_returns_an_empty_list_when_nothing_comes() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            receiver = await conn.open_receiver("empty")
            started = time.monotonic()
            assert await receiver.receive_many(10, timeout=0.25) == []
            elapsed = time.monotonic() - started
            assert 0.25 <= elapsed < 5.0
            assert await receiver.receive_many(10, timeout=0) == []


async def test_receive_many_waits_for_arrivals_and_returns_once_it_has_max_count() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            receiver = await conn.open_receiver("q", credit=10)
            sender = await conn.open_sender("q")

            async def later() -> None:
                await anyio.sleep(0.1)
                await sender.send(Message(body="a"))
                await anyio.sleep(0.1)
                await sender.send(Message(body="b"))
                await sender.send(Message(body="not taken"))

            started = time.monotonic()
            async with anyio.create_task_group() as group:
                group.start_soon(later)
                got = await receiver.receive_many(2, timeout=10)
            assert [d.message.body for d in got] == ["a", "b"]
            assert time.monotonic() - started < 5.0
            assert [d.message.body for d in await receiver.receive_many(5, timeout=0.2)] == ["not taken"]


async def test_receive_many_keeps_credit_bounded() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await fill(broker, "q", list(range(20)))
            async with connect(broker) as conn:
                # Manual credit: receive_many grants what it lacks for max_count, no more.
                manual = await conn.open_receiver("q", credit=0)
                got = await manual.receive_many(4, timeout=5)
                assert [d.message.body for d in got] == [0, 1, 2, 3]
                assert (manual.credit, manual.queued) == (0, 0)
                await anyio.sleep(0.1)
                assert len(queued_bodies(broker, "q")) == 16  # the broker sent exactly 4
                for delivery in got:
                    await delivery.accept()
                await manual.close()
                # A prefetch of 3: never more than 3 outstanding, however many are asked for.
                prefetching = await conn.open_receiver("q", credit=3)
                taken: list[Any] = []
                while len(taken) < 16:
                    batch = await prefetching.receive_many(10, timeout=5)
                    assert 1 <= len(batch) <= 10
                    assert prefetching.credit + prefetching.queued <= 3
                    taken.extend(d.message.body for d in batch)
                    for delivery in batch:
                        await delivery.accept()
                assert taken == list(range(4, 20))


async def test_receive_many_checks_max_count_and_loses_nothing_when_cancelled() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            receiver = await conn.open_receiver("q")
            with pytest.raises(ValueError, match="max_count must be at least 1, got 0"):
                await receiver.receive_many(0)
            for max_count in (2.5, True, "3"):
                with pytest.raises(TypeError, match="max_count must be an int"):
                    await receiver.receive_many(max_count)  # type: ignore[arg-type]
            for timeout in (-1, float("nan")):
                with pytest.raises(ValueError, match="timeout must be >= 0 seconds"):
                    await receiver.receive_many(1, timeout=timeout)
            with pytest.raises(TypeError, match="timeout must be a number of seconds"):
                await receiver.receive_many(1, timeout="1")  # type: ignore[arg-type]
            assert await receiver.receive_many(1, timeout=0) == []  # 0: what is queued now, nothing
            with anyio.move_on_after(0.1):
                await receiver.receive_many(5)  # no timeout: waits for 5, cancelled first
            sender = await conn.open_sender("q")
            await sender.send(Message(body="kept"))
            assert [d.message.body for d in await receiver.receive_many(5, timeout=0.3)] == ["kept"]


async def test_receive_many_cancelled_while_it_holds_deliveries_puts_them_back_in_order() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await fill(broker, "q", [0, 1, 2])
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q", credit=10)
                sender = await conn.open_sender("q")
                await eventually(lambda: receiver.queued == 3)

                async def one_more() -> None:
                    await anyio.sleep(0.05)
                    await sender.send(Message(body=3))  # arrives while the call holds 0, 1 and 2

                async with anyio.create_task_group() as group:
                    group.start_soon(one_more)
                    with anyio.move_on_after(0.3):
                        await receiver.receive_many(10)  # no timeout: waits for 10, cancelled with 4
                # before: the four were gone from the queue, unsettled, until the connection closed
                assert receiver.queued == 4
                got = await receiver.receive_many(10, timeout=0.2)
                assert [d.message.body for d in got] == [0, 1, 2, 3]
                for delivery in got:
                    await delivery.accept()
        assert queued_bodies(broker, "q") == []


async def test_receive_many_cancelled_with_more_than_the_prefetch_grants_no_more_until_the_queue_drains() -> None:
    """Taking 200 messages, the call topped the prefetch's credit up as it took them; put back on cancellation,
    they stayed queued with the credit still granted: each cancelled call took 10 more from the broker (held 210,
    220...). The credit is lowered so that queue and credit make the prefetch (0 here)."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await fill(broker, "q", list(range(200)))
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q", credit=10)
                for _ in range(3):
                    with anyio.move_on_after(0.3):
                        await receiver.receive_many(1000)  # waits for 1000: cancelled
                    await anyio.sleep(0.1)
                    assert receiver.credit == 0  # before: 10
                    assert receiver.queued == 200
                got = await receiver.receive_many(200, timeout=0)
                assert [d.message.body for d in got] == list(range(200))
                await eventually(lambda: receiver.credit == 10)  # taken: the prefetch again


async def test_receive_many_ends_with_what_it_has_when_the_link_is_detached() -> None:
    with ProtonBroker(timeout=TIMEOUT) as broker:
        broker.put("q", "before")
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q", name="detached")
                await eventually(lambda: receiver.queued == 1)
                await in_broker(broker, lambda: [link.close() for link in broker_links(broker, "detached")])
                await eventually(lambda: receiver.is_closed)
                got = await receiver.receive_many(5, timeout=5)
                assert [d.message.body for d in got] == ["before"]
                with pytest.raises(LinkError):
                    await receiver.receive_many(5, timeout=5)


# ---------------------------------------------------------------------------------------------------------------
# run_threadsafe


async def test_run_threadsafe_from_a_real_thread() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("threads")
            loop_thread = threading.get_ident()

            def worker() -> list[Any]:
                assert threading.get_ident() != loop_thread
                outcomes = [conn.run_threadsafe(sender.send(Message(body=n))).result(5) for n in range(3)]
                receiver = conn.run_threadsafe(conn.open_receiver("threads")).result(5)
                bodies = []
                for _ in range(3):
                    delivery = conn.run_threadsafe(receiver.receive()).result(5)
                    conn.run_threadsafe(delivery.accept()).result(5)
                    bodies.append(delivery.message.body)
                # A cancelled future cancels its task: the receive waiting on an empty queue ends, losing nothing.
                waiting = conn.run_threadsafe(receiver.receive())
                time.sleep(0.1)
                assert waiting.cancel()
                conn.run_threadsafe(sender.send(Message(body="after"))).result(5)
                later = conn.run_threadsafe(receiver.receive()).result(5)
                bodies.append(later.message.body)
                # An error is the future's.
                failing = conn.run_threadsafe(sender.send("not a message"))  # type: ignore[arg-type]
                try:
                    failing.result(5)
                except TypeError as exc:
                    bodies.append(type(exc).__name__)
                return [*outcomes, *bodies]

            assert await anyio.to_thread.run_sync(worker) == [
                Accepted(),
                Accepted(),
                Accepted(),
                0,
                1,
                2,
                "after",
                "TypeError",
            ]


def test_run_threadsafe_once_the_loop_has_ended(anyio_backend: str) -> None:
    holder: list[amqp_async.Connection] = []

    async def main() -> None:
        async with serving() as broker, connect(broker) as conn:
            holder.append(conn)

    anyio.run(main, backend=anyio_backend)
    with pytest.raises(RuntimeError, match="nothing runs on it any more"):
        holder[0].run_threadsafe(anyio.sleep(0))
