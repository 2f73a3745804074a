"""Reconnect and failover of the awaitable client (`amqp_async.connect(reconnect=..., urls=...)`), against the proton
broker of `tests/proton_broker.py`.

A real network failure is made with `TcpProxy`, a small TCP relay (anyio tasks on the test's own loop) between the
client and the broker: it can *freeze* the broker-to-client direction (the broker's answers, such as dispositions,
are held back, so the client's deliveries are in flight), *cut* every relayed connection (the client sees the byte
stream end without a close frame) and, while *down*, drop each new connection at once. The broker behind it is
then stopped and a new one started on the same port (`ProtonBroker(port=...)`).

What `ProtonBroker.stop()` does, found here: it sends a real close frame (``amqp:connection:forced``, "proton broker
stopping") before it ends the transport; the client treats any close frame as the peer's deliberate decision and
does not reconnect (python-qpid-proton does the same: its MessagingHandler closes the connection on a remote close
with an error, and its connector reconnects only a connection still open locally). Hence the proxy for failures.

Every test is bounded with ``anyio.fail_after``; the broker's blocking start and stop run in a worker thread.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async.codec.delivery_states import Accepted

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

TIMEOUT = 15.0
BROKER_TIMEOUT = 5.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def backoff() -> amqp_async.Backoff:
    return amqp_async.Backoff(initial=0.05, maximum=0.5)


def free_port() -> int:
    """A TCP port nothing listens on (bound and released at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def start_broker(**options: Any) -> ProtonBroker:
    broker = ProtonBroker(timeout=BROKER_TIMEOUT, **options)
    await anyio.to_thread.run_sync(broker.start)
    return broker


async def stop_broker(broker: ProtonBroker) -> None:
    await anyio.to_thread.run_sync(broker.stop)


@asynccontextmanager
async def running_broker(**options: Any) -> AsyncIterator[ProtonBroker]:
    broker = await start_broker(**options)
    try:
        yield broker
    finally:
        await stop_broker(broker)


async def in_thread(function: Callable[[], Any]) -> Any:
    """Run a blocking broker helper (``wait_*``) off the event loop, which must keep serving the client."""
    return await anyio.to_thread.run_sync(function)


class TcpProxy:
    """A TCP relay from ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``, run as tasks of the test's loop.

    ``freeze()`` holds back the bytes from the broker to the client (until ``thaw()``, or forever if the connection
    is cut first), ``cut()`` ends every relayed connection abruptly, ``down()`` freezes and cuts and then drops every
    new connection at once, until ``up()``; ``refuse()`` cuts and stops listening (connections are refused, as by a
    broker's host while the broker restarts), until ``await listen()``. ``accepted`` counts the client connections it
    took.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.accepted = 0
        self._down = False
        self._thawed = anyio.Event()
        self._thawed.set()
        self._scopes: set[anyio.CancelScope] = set()
        self._group: anyio.abc.TaskGroup | None = None
        self._listening = anyio.CancelScope()

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    async def __aenter__(self) -> TcpProxy:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        await self.listen()
        return self

    async def listen(self) -> None:
        """Listen (again, on the same port once it has one)."""
        assert self._group is not None
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        self.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        self._listening = anyio.CancelScope()
        self._group.start_soon(self._serve, listener, self._listening)

    async def _serve(self, listener: anyio.abc.SocketListener, scope: anyio.CancelScope) -> None:
        with scope:  # (the relays run in the proxy's group: refuse() stops the accepting alone)
            await listener.serve(self._relay, task_group=self._group)
        await listener.aclose()

    def refuse(self) -> None:
        self.cut()
        self._listening.cancel()

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._group is not None
        self.cut()
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)

    def freeze(self) -> None:
        if self._thawed.is_set():
            self._thawed = anyio.Event()

    def thaw(self) -> None:
        self._thawed.set()

    def cut(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    def down(self) -> None:
        self._down = True
        self.freeze()
        self.cut()

    def up(self) -> None:
        self._down = False
        self.thaw()

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        self.accepted += 1
        if self._down:
            await anyio.aclose_forcefully(client)
            return
        try:
            upstream = await anyio.connect_tcp("127.0.0.1", self.target_port)
        except OSError:
            await anyio.aclose_forcefully(client)
            return
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._pump, client, upstream, False, scope)
                    group.start_soon(self._pump, upstream, client, True, scope)
            finally:
                self._scopes.discard(scope)
        await anyio.aclose_forcefully(client)
        await anyio.aclose_forcefully(upstream)

    async def _pump(
        self, source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream, downstream: bool, scope: anyio.CancelScope
    ) -> None:
        try:
            while True:
                data = await source.receive(65536)
                if downstream:
                    await self._thawed.wait()
                await sink.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            scope.cancel()  # one side ended: end the relayed connection (both directions)


async def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)
    assert predicate(), what


# ---------------------------------------------------------------------------------------------------------------
# The broker's stop(): a close frame


async def test_broker_stop_sends_a_close_frame_which_is_final() -> None:
    """`ProtonBroker.stop()` closes with ``amqp:connection:forced`` in a real close frame: the client takes it as
    deliberate (as proton does) and does not reconnect, even with reconnect on and a new broker on the same port."""
    with anyio.fail_after(TIMEOUT):
        first = await start_broker(port=free_port())
        try:
            conn = await amqp_async.connect(first.url, reconnect=backoff())
            receiver = await conn.open_receiver("q")
        finally:
            await stop_broker(first)
        async with running_broker(port=first.port) as second:
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await receiver.receive()
            assert caught.value.condition == "amqp:connection:forced"
            assert "proton broker stopping" in str(caught.value)
            await anyio.sleep(0.5)  # several backoff delays: a reconnect would have happened by now
            assert second.connections == []
            assert conn.is_closed
            await conn.close()


# ---------------------------------------------------------------------------------------------------------------
# Reconnect across a broker restart


async def test_reconnect_across_broker_restart_reattaches_and_reports_in_doubt() -> None:
    port = free_port()
    first = await start_broker(port=port)
    second: ProtonBroker | None = None
    received: list[int] = []
    try:
        async with TcpProxy(port) as proxy, anyio.create_task_group() as group:
            with anyio.fail_after(TIMEOUT):
                conn = await amqp_async.connect(proxy.url, reconnect=backoff())
                sender = await conn.open_sender("q", name="restart-sender")
                receiver = await conn.open_receiver("q", name="restart-receiver", credit=10)

                async def consume() -> None:
                    async for delivery in receiver:
                        received.append(delivery.message.body)
                        try:
                            await delivery.accept()
                        except amqp_async.LinkDetached:
                            pass  # it came on the link of the dropped connection: the broker delivers it again

                group.start_soon(consume)

                # Before: a plain exchange.
                for number in range(10):
                    assert await sender.send(amqp_async.Message(body=number)) == Accepted()
                await wait_until(lambda: set(received) >= set(range(10)), "messages 0-9 received")

                # In flight at the cut: the broker has the transfers, the client never learns their outcomes.
                proxy.freeze()
                trackers = {number: await sender.submit(amqp_async.Message(body=number)) for number in range(10, 15)}
                await in_thread(lambda: first.wait_messages(15, address="q"))
                proxy.down()
                await stop_broker(first)
                # Two reconnect attempts were dropped by the proxy: the client is between attempts (the moment while
                # its first attempt connects is test_send_while_the_reconnect_connects_is_not_lost's subject).
                await wait_until(lambda: proxy.accepted >= 3, "two reconnect attempts")

                # Sent while the connection is down: waits for the reconnect, then goes through.
                during: dict[str, Any] = {}

                async def send_during_outage() -> None:
                    during["outcome"] = await sender.send(amqp_async.Message(body=15))

                group.start_soon(send_during_outage)
                await anyio.sleep(0.1)

                second = await start_broker(port=port)
                proxy.up()

                # Every in-flight send is reported in doubt, none silently dropped or "accepted".
                in_doubt = []
                for number, tracker in trackers.items():
                    with pytest.raises(amqp_async.DeliveryInDoubt):
                        await tracker
                    in_doubt.append(number)
                assert in_doubt == list(range(10, 15))

                # At-least-once by the application: send the in-doubt ones again, then new ones.
                for number in in_doubt:
                    assert await sender.send(amqp_async.Message(body=number)) == Accepted()
                for number in range(16, 25):
                    assert await sender.send(amqp_async.Message(body=number)) == Accepted()
                await wait_until(lambda: "outcome" in during, "the send made during the outage completed")
                assert during["outcome"] == Accepted()

                # The receiver carries on: everything sent arrives at least once, across the restart.
                await wait_until(lambda: set(received) >= set(range(25)), "messages 0-24 received")
                assert not conn.is_closed

                # The new broker saw the same links attached again.
                attaches = await in_thread(lambda: second.wait_attaches(2))  # type: ignore[union-attr]
                assert sorted((a.name, a.role, a.address) for a in attaches) == [
                    ("restart-receiver", "receiver", "q"),
                    ("restart-sender", "sender", "q"),
                ]
                assert sorted(a.name for a in first.attaches) == ["restart-receiver", "restart-sender"]
                assert len(second.connections) == 1
                assert second.connections[0].container_id == conn.container_id
                group.cancel_scope.cancel()
            await conn.close()
    finally:
        await stop_broker(first)
        if second is not None:
            await stop_broker(second)


async def test_send_in_the_reconnect_window_waits_for_the_new_connection() -> None:
    """A message sent after the transport failed, while the client is between reconnect attempts, waits for the new
    connection and is sent there: never written into the dead connection and forgotten."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            sender = await conn.open_sender("q", name="window-sender")
            assert await sender.send(amqp_async.Message(body="before")) == Accepted()
            proxy.down()
            await anyio.sleep(0.2)  # the client saw the cut and is between reconnect attempts
            result: dict[str, Any] = {}

            async def send_during() -> None:
                result["outcome"] = await sender.send(amqp_async.Message(body="during"))

            async with anyio.create_task_group() as group:
                group.start_soon(send_during)
                await anyio.sleep(0.2)
                assert result == {}  # still waiting: there is no connection to send on
                proxy.up()
            assert result["outcome"] == Accepted()
            bodies = [m.body for m in await in_thread(lambda: broker.wait_messages(2, address="q"))]
            assert bodies == ["before", "during"]
            assert [m.connection for m in broker.messages] == [0, 1]
            await conn.close()


async def test_send_while_the_reconnect_connects_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """A send made while the client is connecting again (here the TCP connect takes 0.3 s, as on a slow network)
    must wait for the new connection and be sent there. It must not go out on the link of the dead connection:
    there it is never transferred, and its tracker never completes."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            sender = await conn.open_sender("q", name="slow-reconnect-sender")
            assert await sender.send(amqp_async.Message(body="before")) == Accepted()
            connect_tcp = anyio.connect_tcp

            async def slow_connect_tcp(*args: Any, **kwargs: Any) -> Any:
                await anyio.sleep(0.3)
                return await connect_tcp(*args, **kwargs)

            monkeypatch.setattr(anyio, "connect_tcp", slow_connect_tcp)
            proxy.cut()
            await anyio.sleep(0.1)  # the client saw the cut and is connecting again
            result: dict[str, Any] = {}

            async def send_during() -> None:
                try:
                    result["outcome"] = await sender.send(amqp_async.Message(body="during"))
                except amqp_async.DeliveryInDoubt as exc:
                    result["outcome"] = exc

            async with anyio.create_task_group() as group:
                group.start_soon(send_during)
                with anyio.move_on_after(5):
                    while "outcome" not in result:
                        await anyio.sleep(0.01)
                group.cancel_scope.cancel()
            assert "outcome" in result, "the send made while reconnecting never completed: the message was lost"
            assert result["outcome"] == Accepted()
            bodies = [m.body for m in await in_thread(lambda: broker.wait_messages(2, address="q"))]
            assert bodies == ["before", "during"]
            await conn.close()


async def test_reconnect_resumes_receiving_after_a_cut() -> None:
    """A receiver blocked in receive() through an outage gets the messages queued after the reconnect."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            receiver = await conn.open_receiver("inbox", name="resume-receiver")
            await in_thread(lambda: broker.wait_attaches(1))
            got: list[Any] = []

            async def take_one() -> None:
                delivery = await receiver.receive()
                got.append(delivery.message.body)
                await delivery.accept()

            async with anyio.create_task_group() as group:
                group.start_soon(take_one)
                await anyio.sleep(0.05)
                proxy.cut()
                await in_thread(lambda: broker.wait_attaches(2, name="resume-receiver"))
                broker.put("inbox", "after the cut")
            assert got == ["after the cut"]
            outcomes = await in_thread(lambda: broker.wait_outcomes(1, link="resume-receiver"))
            assert outcomes[0].outcome == "accepted"
            assert outcomes[0].connection == 1
            await conn.close()


# ---------------------------------------------------------------------------------------------------------------
# Failover


async def test_failover_list_connects_to_the_live_url() -> None:
    dead_url = f"amqp://127.0.0.1:{free_port()}"
    async with running_broker() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(urls=[dead_url, broker.url], reconnect=backoff()) as conn:
                assert conn.address is not None
                assert (conn.address.host, conn.address.port) == ("127.0.0.1", broker.port)
                sender = await conn.open_sender("q")
                assert await sender.send(amqp_async.Message(body="via failover")) == Accepted()
            [message] = await in_thread(lambda: broker.wait_messages(1, address="q"))
            assert message.body == "via failover"


async def test_failover_list_without_reconnect_still_tries_each_url() -> None:
    dead_url = f"amqp://127.0.0.1:{free_port()}"
    async with running_broker() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(urls=[dead_url, broker.url], reconnect=False) as conn:
                assert conn.address is not None and conn.address.port == broker.port


async def test_no_live_url_is_a_connection_error_naming_them() -> None:
    dead = [f"amqp://127.0.0.1:{free_port()}", f"amqp://127.0.0.1:{free_port()}"]
    with anyio.fail_after(TIMEOUT):
        with pytest.raises(amqp_async.ConnectionError) as caught:
            await amqp_async.connect(urls=dead, reconnect=backoff())
        for url in dead:
            assert url in str(caught.value)


async def test_reconnect_fails_over_to_the_next_url() -> None:
    """Connected through the first URL; when that path dies for good, the reconnect goes to the second one."""
    async with (
        running_broker() as broker,
        TcpProxy(broker.port) as first_path,
        TcpProxy(broker.port) as second_path,
    ):
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(urls=[first_path.url, second_path.url], reconnect=backoff())
            assert conn.address is not None and conn.address.port == first_path.port
            sender = await conn.open_sender("q", name="failover-sender")
            assert await sender.send(amqp_async.Message(body=1)) == Accepted()
            first_path.down()
            await in_thread(lambda: broker.wait_attaches(2, name="failover-sender"))
            assert conn.address is not None and conn.address.port == second_path.port
            assert await sender.send(amqp_async.Message(body=2)) == Accepted()
            assert second_path.accepted >= 1
            bodies = [m.body for m in await in_thread(lambda: broker.wait_messages(2, address="q"))]
            assert bodies == [1, 2]
            await conn.close()


# ---------------------------------------------------------------------------------------------------------------
# No reconnect


async def test_reconnect_false_fails_the_connection_and_its_waiters() -> None:
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=False)
            sender = await conn.open_sender("q", name="no-reconnect-sender")
            receiver = await conn.open_receiver("other", name="no-reconnect-receiver")
            proxy.freeze()
            tracker = await sender.submit(amqp_async.Message(body="in flight"))
            await in_thread(lambda: broker.wait_messages(1, address="q"))
            errors: dict[str, BaseException] = {}

            async def wait_receive() -> None:
                try:
                    await receiver.receive()
                except Exception as exc:
                    errors["receive"] = exc

            async def wait_tracker() -> None:
                try:
                    await tracker
                except Exception as exc:
                    errors["tracker"] = exc

            async with anyio.create_task_group() as group:
                group.start_soon(wait_receive)
                group.start_soon(wait_tracker)
                await anyio.sleep(0.05)
                proxy.down()
            assert isinstance(errors["receive"], amqp_async.ConnectionError)
            assert isinstance(errors["tracker"], amqp_async.DeliveryInDoubt)
            assert conn.is_closed
            with pytest.raises(amqp_async.ConnectionError):
                await sender.send(amqp_async.Message(body="after"))
            with pytest.raises(amqp_async.ConnectionError):
                await conn.open_receiver("q")
            proxy.up()
            await anyio.sleep(0.3)
            assert len(broker.connections) == 1  # no second connection: no reconnect
            await conn.close()


async def test_close_frame_from_the_peer_does_not_reconnect() -> None:
    async with running_broker() as broker:
        broker.close_connection_on["fatal"] = ("amqp:internal-error", "deliberately closed")
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=backoff())
            receiver = await conn.open_receiver("q")
            try:
                await conn.open_sender("fatal")
            except amqp_async.ConnectionError as exc:
                assert exc.condition == "amqp:internal-error"
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await receiver.receive()
            assert caught.value.condition == "amqp:internal-error"
            assert "deliberately closed" in str(caught.value)
            await anyio.sleep(0.5)  # several backoff delays
            assert len(broker.connections) == 1
            assert conn.is_closed
            await conn.close()


async def test_closed_links_and_sessions_are_not_restored() -> None:
    """Only what is still open is re-attached after a reconnect: a link or session the application closed before
    the drop must not come back on the new connection."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            kept = await conn.open_sender("q", name="kept-sender")
            closed = await conn.open_sender("q", name="closed-sender")
            await closed.close()
            session = await conn.open_session()
            await session.open_receiver("q", name="ended-session-receiver")
            await session.close()
            await in_thread(lambda: broker.wait_detaches(1, link="closed-sender"))
            proxy.cut()
            await in_thread(lambda: broker.wait_connections(2))
            assert await kept.send(amqp_async.Message(body="after")) == Accepted()
            await anyio.sleep(0.2)  # let any stray attach arrive
            reattached = sorted(a.name for a in broker.attaches if a.connection == 1)
            assert reattached == ["kept-sender"]
            await conn.close()


async def test_links_and_sessions_closed_during_the_reconnect_stay_closed_and_close_at_once() -> None:
    """close() called while the connection is down: the peer dropped the link (or session) with the transport, so
    close() returns at once and the reconnect leaves it out. Before, close() waited 10 s for an answer that could
    not come, and the link was attached again after the reconnect: a receiver the application could no longer
    read, holding the credit (and the messages) other consumers were waiting for."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            kept = await conn.open_sender("q", name="kept-sender")
            receiver = await conn.open_receiver("jobs", name="closed-in-outage")
            sender = await conn.open_sender("q", name="sender-closed-in-outage")
            session = await conn.open_session()
            await session.open_receiver("q", name="session-closed-in-outage")
            await in_thread(lambda: broker.wait_attaches(4))
            proxy.down()
            await wait_until(lambda: conn.state is not amqp_async.ConnectionState.OPEN, "the drop seen")
            started = anyio.current_time()
            await receiver.close()
            await sender.close()
            await session.close()
            assert anyio.current_time() - started < 1.0  # before: 10 s each
            proxy.up()
            await in_thread(lambda: broker.wait_connections(2))
            assert await kept.send(amqp_async.Message(body="after")) == Accepted()
            await anyio.sleep(0.2)  # let any stray attach arrive
            assert sorted(a.name for a in broker.attaches if a.connection == 1) == ["kept-sender"]
            with pytest.raises(amqp_async.ClosedByApplication):
                await sender.send(amqp_async.Message(body="on a closed sender"))
            await conn.close()


async def test_delivery_received_before_the_drop_cannot_be_settled_after_it() -> None:
    """A delivery taken before the connection dropped belongs to the old link: settling it raises LinkDetached
    (the broker gives the message again, on the new link)."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        broker.put("once", "first")
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            receiver = await conn.open_receiver("once", name="settle-receiver")
            delivery = await receiver.receive()
            assert delivery.message.body == "first"
            proxy.cut()
            again = await receiver.receive()  # requeued by the broker when the old connection dropped
            assert again.message.body == "first"
            with pytest.raises(amqp_async.LinkDetached):
                await delivery.accept()
            await again.accept()
            outcomes = await in_thread(lambda: broker.wait_outcomes(1, link="settle-receiver"))
            assert [(o.connection, o.outcome) for o in outcomes] == [(1, "accepted")]
            await conn.close()


@pytest.mark.parametrize("outcome", ["accept", "reject", "release", "modify"])
async def test_a_delivery_settled_while_the_connection_is_down_raises_and_is_delivered_again(outcome: str) -> None:
    """Between the loss and a new transport, the old link's engine still read attached: ``accept()`` (and the other
    outcomes) returned and marked the delivery settled, and no frame ever carried it: an accepted job was given
    again after the reconnect and processed twice. It raises LinkDetached now, with the loss as its cause."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        broker.put("down", "job")
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            receiver = await conn.open_receiver("down", name="down-receiver")
            delivery = await receiver.receive()
            proxy.refuse()  # the connection cut, and every reconnect attempt refused until listen()
            await wait_until(lambda: proxy.accepted == 1 and conn.state is not amqp_async.ConnectionState.OPEN, "drop")
            with pytest.raises(amqp_async.LinkDetached) as caught:
                await getattr(delivery, outcome)()
            assert isinstance(caught.value.__cause__, amqp_async.ConnectionLost)
            assert not delivery.settled  # nothing was said to the peer
            await proxy.listen()
            again = await receiver.receive()  # the broker gives it again on the new link: as the error said
            assert again.message.body == "job"
            await again.accept()
            outcomes = await in_thread(lambda: broker.wait_outcomes(1, link="down-receiver"))
            assert [(o.connection, o.outcome) for o in outcomes] == [(1, "accepted")]
            await conn.close()


async def test_waiters_fail_when_reconnect_attempts_run_out(caplog: pytest.LogCaptureFixture) -> None:
    """With ``max_tries``, a peer that stays away ends the connection: waiters get a ConnectionError, not a hang.

    Running out of attempts is an expected end, not a crash of the connection's driver: the error names the URL
    and the last failure, and nothing is logged as an internal failure."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            limited = amqp_async.Backoff(initial=0.05, maximum=0.1, max_tries=3)
            conn = await amqp_async.connect(proxy.url, reconnect=limited)
            receiver = await conn.open_receiver("q", name="limited-receiver")
            sender = await conn.open_sender("q", name="limited-sender")
            proxy.down()
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await receiver.receive()
            assert str(proxy.port) in str(caught.value)
            assert "driver failed" not in str(caught.value)
            assert not str(caught.value).endswith(": None")  # the last failure: the peer dropped us
            assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
            assert conn.is_closed
            with pytest.raises(amqp_async.ConnectionError):
                await sender.send(amqp_async.Message(body="too late"))
            assert proxy.accepted == 4  # the first connection, then one per try
            await conn.close()


async def test_options_the_engine_cannot_send_are_refused_at_the_call_and_never_replayed() -> None:
    """A session window or handle-max beyond a uint (§2.7.2) and a credit beyond one (§2.7.4) are refused when the
    call is made. They used to be taken, fail in the engine when awaited, and stay registered with the connection:
    the next reconnect began that session again, failed on the same value, and the connection ended for good."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            kept = await conn.open_sender("q", name="kept-sender")
            with pytest.raises(ValueError, match="incoming_window"):
                conn.open_session(incoming_window=2**32)
            with pytest.raises(ValueError, match="incoming_window"):
                conn.open_session(incoming_window=0)
            with pytest.raises(TypeError, match="incoming_window"):
                conn.open_session(incoming_window=True)
            with pytest.raises(ValueError, match="handle_max"):
                conn.open_session(handle_max=2**33)
            with pytest.raises(ValueError, match="handle_max"):
                conn.open_session(handle_max=-1)
            with pytest.raises(ValueError, match="credit"):
                conn.open_receiver("q", credit=2**40)
            assert (await conn.open_session(incoming_window=2**32 - 1, handle_max=0)).is_closed is False
            proxy.cut()
            await in_thread(lambda: broker.wait_connections(2))
            assert await kept.send(amqp_async.Message(body="after")) == Accepted()
            assert conn.state is amqp_async.ConnectionState.OPEN
            await conn.close()


async def test_an_open_cancelled_before_its_answer_leaves_no_link_behind() -> None:
    """A link whose ``open_receiver()`` (or ``open_sender()``) was cancelled belongs to nobody: it is detached and
    left out of the reconnect, as is a session whose ``open_session()`` was. It used to stay attached, and a
    reconnect attached it again with its prefetch credit, a consumer no one could read that took the queue's
    messages."""
    async with running_broker() as broker, TcpProxy(broker.port) as proxy:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(proxy.url, reconnect=backoff())
            kept = await conn.open_sender("q", name="kept-sender")
            with anyio.move_on_after(0):
                await conn.open_receiver("q", name="cancelled-receiver")
            with anyio.move_on_after(0):
                await conn.open_sender("q", name="cancelled-sender")
            with anyio.move_on_after(0):
                await conn.open_session()
            await in_thread(lambda: broker.wait_detaches(1, link="cancelled-receiver"))
            await in_thread(lambda: broker.wait_detaches(1, link="cancelled-sender"))
            proxy.cut()
            await in_thread(lambda: broker.wait_connections(2))
            assert await kept.send(amqp_async.Message(body="after")) == Accepted()
            await anyio.sleep(0.2)  # let any stray attach arrive
            assert sorted(a.name for a in broker.attaches if a.connection == 1) == ["kept-sender"]
            receiver = await conn.open_receiver("q", name="reader")
            with anyio.fail_after(5):
                assert (await receiver.receive()).message.body == "after"
            assert conn._sessions == [conn._default_session]  # the cancelled session was not begun again either
            await conn.close()
