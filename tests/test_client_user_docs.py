"""What a new user of the awaitable API meets first, as docs/client.md shows it, against real peers: the embedded
broker as a process of its own (killed and started again on its port for an outage) and in-process. Every test runs
on asyncio and on trio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async import ConnectionState

try:
    from broker_process import BrokerProcess
    from broker_serving import serving
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_process import BrokerProcess
    from tests.broker_serving import serving
    from tests.proton_peer import proton_server

from proton import Condition
from proton import Message as ProtonMessage
from proton.handlers import MessagingHandler

pytestmark = pytest.mark.anyio

#: The user docs, for the statements tested here.
DOCS = Path(__file__).resolve().parent.parent / "docs"

#: Generous: a broker process restarts in seconds on a loaded machine.
TIMEOUT = 60.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def collect(
    changes: anyio.abc.ObjectReceiveStream[amqp_async.StateChange], into: list[amqp_async.StateChange]
) -> None:
    async with changes:
        async for change in changes:
            into.append(change)


async def test_the_reconnected_change_names_the_attempt_that_succeeded() -> None:
    # docs/client.md, "Connection state": log.info("AMQP connection back (attempt %d)", change.attempt)
    with BrokerProcess() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=amqp_async.Backoff(initial=0.2, max_time=30.0))
            changes: list[amqp_async.StateChange] = []
            async with anyio.create_task_group() as group:
                group.start_soon(collect, conn.state_changes(), changes)
                broker.kill()
                while not any(change.state is ConnectionState.RECONNECTING for change in changes):
                    await anyio.sleep(0.01)
                await anyio.to_thread.run_sync(broker.start)  # again, on the same port
                while not any(change.reconnected for change in changes):
                    await anyio.sleep(0.01)
                await conn.close()
    attempts = [change.attempt for change in changes if change.state is ConnectionState.RECONNECTING]
    [reconnected] = [change for change in changes if change.reconnected]
    # the attempt that opened the new connection: the last one started (the connection's log says the same:
    # "reconnected to URL (attempt N, ...)")
    assert reconnected.attempt == attempts[-1] >= 1


async def test_async_for_waits_on_an_empty_queue_until_the_receiver_is_closed() -> None:
    # docs/client.md, "Receiving": an empty queue is no error and has no timeout; closing the receiver from another
    # task ends the loop quietly.
    async with serving() as broker, amqp_async.connect(broker.url) as conn:
        async with conn.open_sender("orders") as sender:
            await sender.send(amqp_async.Message.from_json({"id": 1}))
        receiver = await conn.open_receiver("orders")
        handled: list[object] = []
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:

                async def close_once_handled() -> None:
                    while not handled:
                        await anyio.sleep(0.01)
                    await anyio.sleep(0.5)  # the loop now waits for a next message that never comes
                    assert receiver.queued == 0
                    await receiver.close()

                group.start_soon(close_once_handled)
                async for delivery in receiver:
                    async with delivery:
                        handled.append(delivery.message.json())
        assert handled == [{"id": 1}]
        with anyio.move_on_after(0.5) as scope:  # the pattern the docs give to stop waiting
            async with conn.open_receiver("orders") as again:
                async for _ in again:
                    pytest.fail("the queue was empty")
        assert scope.cancelled_caught


class SendTwoThenEnd(MessagingHandler):
    """python-qpid-proton serving a receiver two messages, then ending its link, session or connection."""

    def __init__(self, what: str, condition: str | None) -> None:
        super().__init__()
        self.what = what
        self.condition = condition
        self.served = False

    def on_sendable(self, event: Any) -> None:
        if self.served:
            return
        self.served = True
        link = event.sender
        link.send(ProtonMessage(body="one"))
        link.send(ProtonMessage(body="two"))
        ended = {"link": link, "session": link.session, "connection": link.connection}[self.what]
        if self.condition is not None:
            ended.condition = Condition(self.condition, "the server says no")
        ended.close()


@pytest.mark.parametrize(
    ("what", "condition", "raised", "expected_condition"),
    [
        ("link", None, None, None),  # ends quietly
        ("link", "amqp:internal-error", amqp_async.LinkError, "amqp:internal-error"),
        ("session", None, amqp_async.SessionError, "amqp-async:session-ended"),
        ("session", "amqp:internal-error", amqp_async.SessionError, "amqp:internal-error"),
        ("connection", None, amqp_async.ConnectionClosed, "amqp:connection:forced"),
        ("connection", "amqp:internal-error", amqp_async.ConnectionClosed, "amqp:internal-error"),
    ],
)
async def test_async_for_ends_as_the_docs_say_when_the_peer_ends_the_link_session_or_connection(
    what: str, condition: str | None, raised: type[amqp_async.AMQPError] | None, expected_condition: str | None
) -> None:
    # docs/client.md, "Receiving": the messages that came are handed out first, then the loop ends or raises.
    assert "`SessionError` when the peer ends the link's session" in (DOCS / "client.md").read_text(encoding="utf-8")
    with proton_server(SendTwoThenEnd(what, condition)) as url:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url, reconnect=False) as conn:
                receiver = await conn.open_receiver("q")
                bodies: list[object] = []
                error: amqp_async.AMQPError | None = None
                try:
                    async for delivery in receiver:
                        bodies.append(delivery.message.body)
                except amqp_async.AMQPError as caught:
                    error = caught
    assert bodies == ["one", "two"]
    if raised is None:
        assert error is None
    else:
        assert isinstance(error, raised) and error.condition == expected_condition, repr(error)


def test_the_documented_connect_config_error_is_public(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "connect.json").write_text("{not json", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESSAGING_CONNECT_FILE", raising=False)
    with pytest.raises(ValueError) as raised:
        amqp_async.connect()
    assert type(raised.value).__name__ == "ConnectConfigError"
    assert type(raised.value) is amqp_async.ConnectConfigError
    assert type(raised.value) is amqp_async.errors.ConnectConfigError


async def test_the_consumer_loop_of_the_docs_goes_on_across_an_outage(tmp_path: Path) -> None:
    # docs/client.md's first block: async for delivery in receiver: async with delivery: handle(...)
    with BrokerProcess("--data-dir", str(tmp_path)) as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=amqp_async.Backoff(initial=0.2, max_time=30.0))
            sender = await conn.open_sender("jobs")
            for number in range(3):
                await sender.send(amqp_async.Message(body=number, durable=True))
            receiver = await conn.open_receiver("jobs", credit=1)
            handled: list[object] = []
            async for delivery in receiver:
                async with delivery:
                    handled.append(delivery.message.body)
                    if len(handled) == 1:  # the broker restarts while the first message is handled
                        broker.kill()
                        await anyio.to_thread.run_sync(broker.start)
                if delivery.message.body == 2:
                    break
            await conn.close()
    # the loop went on: the first message's accept was lost with the connection, and it came again
    assert handled.count(0) == 2 and handled[-1] == 2 and set(handled) == {0, 1, 2}


async def test_deliveries_queued_on_a_lost_link_are_not_handed_out(tmp_path: Path) -> None:
    with BrokerProcess("--data-dir", str(tmp_path)) as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=amqp_async.Backoff(initial=0.2, max_time=30.0))
            sender = await conn.open_sender("jobs")
            for number in range(5):
                await sender.send(amqp_async.Message(body=number, durable=True))
            receiver = await conn.open_receiver("jobs")  # the default prefetch: the five come at once
            handled: list[object] = []
            not_settled: list[object] = []
            async for delivery in receiver:
                try:
                    async with delivery:
                        handled.append(delivery.message.body)
                        if len(handled) == 1:  # the other four are queued here when the broker restarts
                            while receiver.queued < 4:
                                await anyio.sleep(0.01)
                            broker.kill()
                            await anyio.to_thread.run_sync(broker.start)
                except amqp_async.LinkDetached:  # the accept went with the connection
                    not_settled.append(delivery.message.body)
                if delivery.message.body == 4:
                    break
            await conn.close()
    # only the delivery in hand at the loss is handled twice (its accept lost: LinkDetached, or a warning once
    # async with delivery no longer raises it); the four queued came once, on the new link
    assert not_settled in ([], [0])
    assert handled == [0, 0, 1, 2, 3, 4]


async def test_a_delivery_that_arrived_settled_settles_quietly_after_a_loss() -> None:
    # docs/client.md, "Settling": a delivery that arrived settled takes its first settlement quietly, sending nothing
    with BrokerProcess() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=amqp_async.Backoff(initial=0.2, max_time=30.0))
            async with conn.open_sender("metrics") as sender:
                await sender.send(amqp_async.Message(body=1.5))
            receiver = await conn.open_receiver("metrics", delivery="at-most-once")
            delivery = await receiver.receive()
            assert delivery.settled  # the sender settled it first (§2.6.12)
            broker.kill()
            while conn.state is ConnectionState.OPEN:
                await anyio.sleep(0.01)
            await delivery.accept()  # nothing to send, so nothing the loss could take
            await conn.close()
