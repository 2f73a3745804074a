"""The awaitable client (`amqp_async`) against a real RabbitMQ 3.10 with its AMQP 1.0 plugin.

The broker is a private node started by `tests/rabbitmq.py` (installed with apt first when missing) for the whole
session; every test uses queues of its own (a fresh name), so the tests are independent of one another. What the
broker did is checked from its side too, with rabbitmqctl (`RabbitMQNode.queue_depth`).

Every test is bounded in time (``anyio.fail_after``): a client that hangs fails the test, it never hangs the run.

What RabbitMQ 3.10.8 (Debian 12) does, as found while writing these tests (the tests rely on the first four):

* a released message comes back with the message header's ``first-acquirer`` false (its "redelivered" flag);
  ``delivery-count`` stays 0;
* a rejected message is dropped, or dead-lettered when the queue has a dead-letter exchange (policy);
* a receiver on ``/amq/queue/NAME`` for a queue that does not exist gets no attach: RabbitMQ *ends the session*
  with ``amqp:not-found`` (so the error is a `SessionError`; the connection stays usable);
* a wrong password gets the SASL outcome ``auth`` after a deliberate ~3 s delay;
* drain works on quorum queues (though such a queue never delivers to that link again), but on classic queues
  (what ``/queue/NAME`` declares) it crashes the session (``amqp:internal-error``, ``function_clause ...
  send_drained``: rabbitmq/rabbitmq-server#7119, fixed in later 3.10.x releases, not in Debian's 3.10.8); with
  messages in a quorum queue, RabbitMQ sends its "drained" flow *before* the last transfers;
* the ``modified`` outcome is not supported (the source lists only accepted, rejected and released; a modified
  disposition ends the session with ``amqp:invalid-field``), and ``rcv-settle-mode second`` is refused
  (``amqp:not-implemented``): exactly-once is not tested here;
* it sometimes sends more transfers than the receiver's credit allows (rabbitmq/rabbitmq-server#2597, fixed in
  4.0 only): a receiver must tolerate that, as proton does, or prefetching receivers break under load;
* a publisher nack (queue ``overflow: reject-publish``) crashes the session process: not tested here either.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async.codec.delivery_states import Accepted

try:
    from rabbitmq import RabbitMQNode
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.rabbitmq import RabbitMQNode

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

TIMEOUT = 60.0  # a bound on a hang: rabbitmqctl polls (an Erlang VM each) take seconds on a loaded machine


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses."""
    return f"amqp-async-{uuid.uuid4().hex[:12]}"


async def depth(broker: RabbitMQNode, name: str, expected: int | None = None, timeout: float = 15.0) -> int | None:
    """The queue's depth as RabbitMQ reports it (polled until it equals ``expected``, when given), off the loop."""
    if expected is None:
        return await anyio.to_thread.run_sync(broker.queue_depth, name)
    return await anyio.to_thread.run_sync(broker.wait_queue_depth, name, expected, timeout)


async def ctl(broker: RabbitMQNode, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: broker.ctl(*args))


async def declare_quorum_queue(broker: RabbitMQNode, name: str) -> None:
    """Declare a quorum queue (no management plugin, no AMQP 0-9-1 client here: through rabbitmqctl eval)."""
    out = await ctl(
        broker,
        "eval",
        f'rabbit_amqqueue:declare(rabbit_misc:r(<<"/">>, queue, <<"{name}">>), true, false, '
        '[{<<"x-queue-type">>, longstr, <<"quorum">>}], none, <<"guest">>).',
    )
    assert out.startswith(("{new,", "{existing,")), out


# ---------------------------------------------------------------------------------------------------------------
# throughput and correctness of at-least-once


@pytest.mark.slow
async def test_ten_thousand_messages_at_least_once_no_loss_no_duplicates(
    rabbitmq_broker: RabbitMQNode, queue: str
) -> None:
    count, window = 10_000, 500
    bodies = [f"message {i:05d}" for i in range(count)]
    received: list[str] = []
    outcomes: list[object] = []

    async with amqp_async.connect(rabbitmq_broker.url) as conn:
        sender = await conn.open_sender(f"/queue/{queue}", delivery="at-least-once")
        receiver = await conn.open_receiver(f"/queue/{queue}", credit=window)

        async def produce() -> None:
            pending: deque[amqp_async.Tracker] = deque()
            for body in bodies:
                pending.append(await sender.submit(amqp_async.Message(body=body)))
                if len(pending) >= window:
                    outcomes.append(await pending.popleft())
            while pending:
                outcomes.append(await pending.popleft())

        async def consume() -> None:
            async for delivery in receiver:
                assert not delivery.settled
                received.append(delivery.message.body)
                await delivery.accept()
                if len(received) == count:
                    return

        started = time.monotonic()
        with anyio.fail_after(180):
            async with anyio.create_task_group() as group:
                group.start_soon(produce)
                group.start_soon(consume)
        elapsed = time.monotonic() - started

    assert len(outcomes) == count and all(outcome == Accepted() for outcome in outcomes)
    assert len(received) == count, f"lost {count - len(received)} messages"
    assert len(set(received)) == count, "duplicates"
    assert set(received) == set(bodies)
    assert received == bodies, "one queue, one consumer: RabbitMQ keeps the order"
    assert await depth(rabbitmq_broker, queue, 0) == 0, "every message acknowledged at the broker"
    print(f"{count} messages through RabbitMQ in {elapsed:.2f} s ({count / elapsed:.0f} msg/s)")


async def test_at_most_once_send_and_receive(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    count = 200
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            sender = await conn.open_sender(f"/queue/{queue}", delivery="at-most-once")
            for i in range(count):
                assert await sender.send(amqp_async.Message(body=i)) is None  # no outcome: written, settled
            # credit for all at once: no top-ups while transfers are in flight, so RabbitMQ's credit overshoot
            # (see the module docstring; the 10,000-message test covers it) cannot interfere here.
            receiver = await conn.open_receiver(f"/queue/{queue}", delivery="at-most-once", credit=count)
            bodies = []
            for _ in range(count):
                delivery = await receiver.receive()
                assert delivery.settled, "at-most-once: RabbitMQ sends the message settled"
                bodies.append(delivery.message.body)
                await delivery.accept()  # a no-op on a settled delivery, must not fail
            assert bodies == list(range(count))
    # Settled on the way out: nothing is left unacknowledged at the broker.
    assert await depth(rabbitmq_broker, queue, 0) == 0


async def test_message_sections_round_trip(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    message = amqp_async.Message(
        body={"k": [1, 2, "three"], "n": None},
        id="id-1",
        correlation_id="corr-1",
        subject="the subject",
        reply_to="/queue/replies",
        content_type="application/x-test",
        properties={"color": "blue", "count": 7, "ok": True},
    )
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            sender = await conn.open_sender(f"/queue/{queue}")
            assert await sender.send(message) == Accepted()
            receiver = await conn.open_receiver(f"/queue/{queue}")
            delivery = await receiver.receive()
            got = delivery.message
            await delivery.accept()
    assert got.body == message.body
    assert (got.id, got.correlation_id, got.subject, got.reply_to, got.content_type) == (
        "id-1",
        "corr-1",
        "the subject",
        "/queue/replies",
        "application/x-test",
    )
    assert got.properties == {"color": "blue", "count": 7, "ok": True}


async def test_four_mib_message_round_trip(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    body = os.urandom(4 * 1024 * 1024)
    with anyio.fail_after(60):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            sender = await conn.open_sender(f"/queue/{queue}")
            assert await sender.send(amqp_async.Message(body=body, subject="big")) == Accepted()
            receiver = await conn.open_receiver(f"/queue/{queue}", credit=1)
            delivery = await receiver.receive()
            got = delivery.message
            await delivery.accept()
    assert got.subject == "big"
    assert len(got.body) == len(body) and got.body == body
    assert await depth(rabbitmq_broker, queue, 0) == 0


async def test_topic_address_routes_to_a_subscriber(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    key = queue.replace("-", "_")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            receiver = await conn.open_receiver(f"/topic/{key}.*")  # binds a private queue to amq.topic
            sender = await conn.open_sender(f"/topic/{key}.sport")
            assert await sender.send(amqp_async.Message(body="goal")) == Accepted()
            delivery = await receiver.receive()
            assert delivery.message.body == "goal"
            await delivery.accept()


# ---------------------------------------------------------------------------------------------------------------
# outcomes seen by the broker


async def test_reject_is_seen_by_the_broker(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    """A rejected message is not requeued: RabbitMQ drops it or, with a dead-letter exchange, dead-letters it."""
    dead = f"{queue}-dlq"
    await ctl(
        rabbitmq_broker,
        "set_policy",
        "--apply-to",
        "queues",
        f"dlx-{queue}",
        f"^{queue}$",
        json.dumps({"dead-letter-exchange": "", "dead-letter-routing-key": dead}),
    )
    try:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(rabbitmq_broker.url) as conn:
                dead_letters = await conn.open_receiver(f"/queue/{dead}")  # declares the dead-letter queue
                sender = await conn.open_sender(f"/queue/{queue}")
                await sender.send(amqp_async.Message(body="doomed"))
                receiver = await conn.open_receiver(f"/queue/{queue}", credit=1)
                delivery = await receiver.receive()
                assert delivery.message.body == "doomed"
                assert await depth(rabbitmq_broker, queue, 1) == 1, "delivered, not yet acknowledged"
                await delivery.reject("amqp:internal-error", "cannot process this")
                assert await depth(rabbitmq_broker, queue, 0) == 0, "a rejected message is not requeued"
                dead_letter = await dead_letters.receive()
                assert dead_letter.message.body == "doomed", "RabbitMQ dead-lettered it: it saw 'rejected'"
                await dead_letter.accept()
        assert await depth(rabbitmq_broker, dead, 0) == 0
    finally:
        await ctl(rabbitmq_broker, "clear_policy", f"dlx-{queue}")


async def test_release_is_seen_by_the_broker(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    """A released message is requeued and delivered again, marked as redelivered (first-acquirer false)."""
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            sender = await conn.open_sender(f"/queue/{queue}")
            await sender.send(amqp_async.Message(body="again"))
            receiver = await conn.open_receiver(f"/queue/{queue}", credit=1)
            first = await receiver.receive()
            assert first.message.body == "again"
            assert first.message.first_acquirer is True
            await first.release()
            second = await receiver.receive()
            assert second.message.body == "again"
            assert second.tag != first.tag
            # RabbitMQ 3.10 marks a redelivery with first-acquirer false; it leaves delivery-count at 0.
            assert second.message.first_acquirer is False
            assert await depth(rabbitmq_broker, queue, 1) == 1
            await second.accept()
            assert await depth(rabbitmq_broker, queue, 0) == 0


# ---------------------------------------------------------------------------------------------------------------
# SASL


async def test_sasl_plain_with_the_right_password(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    url = f"amqp://{rabbitmq_broker.host}:{rabbitmq_broker.port}"  # credentials as options, not in the URL
    with anyio.fail_after(TIMEOUT):
        # PLAIN only: RabbitMQ also offers ANONYMOUS (mapped to guest), which would prove nothing.
        async with amqp_async.connect(url, user="guest", password="guest", allowed_mechs="PLAIN") as conn:
            assert conn.remote_properties is not None
            assert conn.remote_properties.get("product") == "RabbitMQ"
            sender = await conn.open_sender(f"/queue/{queue}")
            assert await sender.send(amqp_async.Message(body="authenticated")) == Accepted()


@pytest.mark.parametrize(("user", "password"), [("guest", "wrong"), ("nobody", "guest")])
async def test_sasl_plain_with_bad_credentials_fails_clearly_and_quickly(
    rabbitmq_broker: RabbitMQNode, user: str, password: str
) -> None:
    url = f"amqp://{rabbitmq_broker.host}:{rabbitmq_broker.port}"
    started = time.monotonic()
    with anyio.fail_after(10), pytest.raises(amqp_async.AuthenticationError) as caught:
        async with amqp_async.connect(url, user=user, password=password, allowed_mechs="PLAIN"):
            pass
    error = caught.value
    assert error.condition == "amqp:unauthorized-access"
    assert error.sasl_code == 1  # sasl-code auth
    assert isinstance(error, amqp_async.ConnectionError)
    # RabbitMQ waits ~3 s before it answers a failed login; the client must not add to that.
    assert time.monotonic() - started < 8


# ---------------------------------------------------------------------------------------------------------------
# drain


async def test_drain_on_an_empty_queue_returns(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    """Drain against an empty (quorum) queue: RabbitMQ gives all the credit back and drain() returns.

    (Not checked: that the link then delivers again with new credit. RabbitMQ 3.10.8's quorum queue never does
    after a drain: it answers a later flow with available=1 and sends nothing. Its bug, not the client's.)
    """
    await declare_quorum_queue(rabbitmq_broker, queue)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            receiver = await conn.open_receiver(f"/amq/queue/{queue}", credit=10)
            await receiver.drain()
            assert receiver.credit == 10  # the drain ended (its credit given back), and the prefetch is granted again
            assert receiver.queued == 0
            assert not receiver.is_closed
            await receiver.close()


async def test_drain_with_messages_returns_once_they_arrived(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    """Drain with 3 messages queued and 10 credits: the 3 arrive, the other 7 credits are given back, drain returns.

    RabbitMQ 3.10.8 (quorum queue) sends its drained flow (delivery-count 7, link-credit 0) *before* the 3
    transfers, which then use up the rest of the credit. proton counts a drain as done when the credit is used up,
    whichever way; amqp_async must too, instead of waiting for one more flow that never comes.
    """
    await declare_quorum_queue(rabbitmq_broker, queue)
    async with amqp_async.connect(rabbitmq_broker.url) as conn:
        with anyio.fail_after(TIMEOUT):
            sender = await conn.open_sender(f"/amq/queue/{queue}")
            for i in range(3):
                await sender.send(amqp_async.Message(body=i))
            receiver = await conn.open_receiver(f"/amq/queue/{queue}", credit=0)
            receiver.add_credit(10)
        with anyio.move_on_after(10) as waited:
            await receiver.drain()
        assert not waited.cancelled_caught, (
            f"drain() still waiting after 10 s with credit={receiver.credit}, queued={receiver.queued}"
        )
        assert receiver.credit == 0
        assert receiver.queued == 3
        with anyio.fail_after(TIMEOUT):
            bodies = []
            for _ in range(3):
                delivery = await receiver.receive()
                bodies.append(delivery.message.body)
                await delivery.accept()
        assert bodies == [0, 1, 2]


async def test_drain_reports_a_session_the_broker_ended(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    """Drain on a classic queue: RabbitMQ 3.10.8 crashes the session (rabbitmq-server#7119); drain must say so.

    With a fixed RabbitMQ the drain simply succeeds (credit 0, link open); either way ``drain()`` returning
    normally must mean the drain happened, never that the link died underneath it.
    """
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            receiver = await conn.open_receiver(f"/queue/{queue}", credit=10)
            try:
                await receiver.drain()
            except amqp_async.SessionError as exc:  # RabbitMQ's bug, reported as what it is
                assert exc.condition == "amqp:internal-error"
                assert "send_drained" in str(exc)
            else:
                assert not receiver.is_closed, "drain() returned normally although the broker ended the session"
                assert receiver.credit == 0


# ---------------------------------------------------------------------------------------------------------------
# errors


async def test_receiver_on_a_missing_queue_gives_not_found(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    """``/amq/queue/NAME`` does not declare: RabbitMQ refuses with amqp:not-found (it ends the session)."""
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            with pytest.raises((amqp_async.LinkError, amqp_async.SessionError)) as caught:
                await conn.open_receiver(f"/amq/queue/{queue}-nope")
            assert caught.value.condition == "amqp:not-found"
            assert f"{queue}-nope" in str(caught.value)
            # Only the session was lost: the connection goes on.
            sender = await conn.open_sender(f"/queue/{queue}")
            assert await sender.send(amqp_async.Message(body="still connected")) == Accepted()
    assert await depth(rabbitmq_broker, f"{queue}-nope") is None, "nothing was declared"


# ---------------------------------------------------------------------------------------------------------------
# reconnect (through a TCP proxy we can cut)


class CuttableProxy:
    """A TCP proxy to the broker that counts connections and can cut them all (a network failure)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.accepted = 0
        self.port = 0
        self._scopes: set[anyio.CancelScope] = set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started()
        await listener.serve(self._handle)

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        self.accepted += 1
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                async with (
                    client,
                    await anyio.connect_tcp("127.0.0.1", self.target_port) as upstream,
                    anyio.create_task_group() as group,
                ):
                    group.start_soon(self._pipe, client, upstream)
                    group.start_soon(self._pipe, upstream, client)
            except OSError:
                pass
            finally:
                self._scopes.discard(scope)

    @staticmethod
    async def _pipe(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        with anyio.CancelScope(shield=True):
            await sink.aclose()

    def cut(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()


@pytest.fixture
async def proxy(rabbitmq_broker: RabbitMQNode) -> AsyncIterator[CuttableProxy]:
    running = CuttableProxy(rabbitmq_broker.port)
    async with anyio.create_task_group() as group:
        await group.start(running.run)
        yield running
        group.cancel_scope.cancel()


async def test_reconnect_after_the_network_drops(
    rabbitmq_broker: RabbitMQNode, proxy: CuttableProxy, queue: str
) -> None:
    """Reconnect is on by default: after a network failure the client connects again (SASL, open, then its
    sessions and links), and sending goes on. It must do so with one or a few connections, not a storm."""
    url = f"amqp://guest:guest@127.0.0.1:{proxy.port}"
    async with amqp_async.connect(url) as conn:
        with anyio.fail_after(TIMEOUT):
            sender = await conn.open_sender(f"/queue/{queue}")
            assert await sender.send(amqp_async.Message(body="before")) == Accepted()
        assert proxy.accepted == 1
        proxy.cut()
        outcome = None
        last_error: Exception | None = None
        with anyio.move_on_after(15):
            while outcome is None and not conn.is_closed:
                try:
                    outcome = await sender.send(amqp_async.Message(body="after"))
                except (amqp_async.DeliveryInDoubt, amqp_async.ConnectionError) as exc:
                    last_error = exc  # sent while the connection was down or coming back: try again
                    await anyio.sleep(0.1)
        connections = proxy.accepted
    assert outcome == Accepted(), (
        f"not reconnected within 15 s; the proxy saw {connections} connections; last error: {last_error!r}"
    )
    assert connections <= 4, f"{connections} connections for one network failure: a reconnect storm"
    assert await depth(rabbitmq_broker, queue, 2) == 2


async def test_a_transaction_on_rabbitmq_fails_clearly_at_declare(rabbitmq_broker: RabbitMQNode, queue: str) -> None:
    """RabbitMQ 3.10 has no transaction coordinator: declaring fails at once with a TransactionError naming the
    condition RabbitMQ sent back (no hang), and the connection stays usable."""
    async with amqp_async.connect(rabbitmq_broker.url) as conn:
        with anyio.fail_after(15):
            with pytest.raises(amqp_async.TransactionError) as caught:
                async with conn.transaction():
                    pass
        assert caught.value.condition == "amqp:not-implemented"
        assert "no transaction coordinator" in str(caught.value)
        print(f"RabbitMQ refused the coordinator: {caught.value}")
        sender = await conn.open_sender(f"/queue/{queue}")
        await sender.send(amqp_async.Message(body="still usable"))
