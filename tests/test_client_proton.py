"""The awaitable client (`amqp_async.connect` and what hangs off it) against a real, independent AMQP 1.0 peer: the
python-qpid-proton broker of `tests/proton_broker.py`, running in a thread of the test process.

Every test acts through the public client API and then checks what proton saw (the broker records every open,
attach, message, outcome, flow, drain, detach and close), so an option that never reaches the wire, or reaches it
wrong, fails here. Every test is bounded in time (``anyio.fail_after``): a client that hangs fails its test, it
never hangs the run.

Backends: every async test runs on asyncio and on asyncio with uvloop (skipped, with the reason, when uvloop is not
installed); a smoke set (`ALL_BACKENDS`) runs on trio too (skipped when trio is not installed). The 1,000-message
tests run on plain asyncio only (`ASYNCIO_ONLY`), to keep the run short.

The broker thread's blocking helpers (``wait_*``, ``put``, ``call``) are called through `anyio.to_thread` (see
`in_thread`) where they could wait for the client, so the event loop keeps running the client meanwhile.

What these tests pin down about the client's error reporting (documented here, as the API leaves a choice):

* when the broker closes the connection while messages are in flight, their trackers raise `DeliveryInDoubt`
  (never a plain `ConnectionError`: the caller must decide whether to resend), while receivers, senders and any
  later call raise `ConnectionError` carrying the broker's condition and description;
* a link the broker refuses (attach answered, then detached with an error) raises `LinkError` from
  ``open_sender``/``open_receiver``; a link the broker detaches later without an error ends ``async for``
  cleanly; with an error, ``async for`` raises `LinkError` with the broker's condition;
* a peer silent for longer than our idle timeout (``heartbeat``) fails the connection at once (`ConnectionError`,
  ``amqp:resource-limit-exceeded``), without waiting for the silent peer to answer our close.
"""

from __future__ import annotations

import functools
import gc
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; the test dependency group has it")

from proton import Condition, Endpoint

import amqp_async
from amqp_async import Message
from amqp_async.client import Tracker
from amqp_async.codec.delivery_states import Accepted, Modified, Rejected, Released

try:
    from frame_sniffer import FrameSniffer
    from proton_broker import ProtonBroker
    from slow_relays import slow_relay
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frame_sniffer import FrameSniffer
    from tests.proton_broker import ProtonBroker
    from tests.slow_relays import slow_relay

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

T = TypeVar("T")

#: A flow's descriptor code (§2.7.4), as FrameSniffer records it.
_FLOW = 0x13

#: Seconds any single test may take (the 1,000-message tests get more).
TIMEOUT = 10.0
REPO = Path(__file__).resolve().parent.parent

ASYNCIO = pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio")
UVLOOP = pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")
TRIO = pytest.param(("trio", {}), id="trio")

#: The smoke set: also on trio.
ALL_BACKENDS = pytest.mark.parametrize("anyio_backend", [ASYNCIO, UVLOOP, TRIO], indirect=True)
#: The heavy tests: plain asyncio only.
ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", [ASYNCIO], indirect=True)
#: Tests of what only asyncio does (the writer-wake-up accounting).
ASYNCIO_FAMILY = pytest.mark.parametrize("anyio_backend", [ASYNCIO, UVLOOP], indirect=True)


def _require_backend(name: str, options: dict[str, Any]) -> None:
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop", reason="uvloop is not installed (pip install uvloop)")
    if name == "trio":
        pytest.importorskip("trio", reason="trio is not installed (it is in the test dependency group)")


@pytest.fixture(params=[ASYNCIO, UVLOOP])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    name, options = request.param
    _require_backend(name, options)
    return name, options


@pytest.fixture
def broker() -> Iterator[ProtonBroker]:
    with ProtonBroker(timeout=TIMEOUT) as running:
        yield running


# ---------------------------------------------------------------------------------------------------------------
# Helpers


async def in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking broker helper in a worker thread, so the client keeps running meanwhile."""
    return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))


async def until(predicate: Callable[[], Any], timeout: float = 5.0) -> None:
    """Poll a client-side condition (the loop runs between polls)."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def _broker_links(broker: ProtonBroker, name: str) -> list[Any]:
    """The broker's open links named ``name`` (broker thread only)."""
    found = []
    for conn in list(broker._handler.connections):
        link = conn.link_head(Endpoint.LOCAL_ACTIVE)
        while link is not None:
            if link.name == name:
                found.append(link)
            link = link.next(Endpoint.LOCAL_ACTIVE)
    return found


def broker_detach(broker: ProtonBroker, name: str, condition: tuple[str, str] | None = None) -> None:
    """Make the broker detach (close) the link named ``name``, with an error or without."""

    def detach() -> None:
        links = _broker_links(broker, name)
        assert links, f"the broker has no open link named {name!r}"
        for link in links:
            if condition is not None:
                link.condition = Condition(*condition)
            link.close()

    broker.call(detach)


def broker_close_connections(broker: ProtonBroker, condition: str, description: str, *, wait: bool = True) -> None:
    """Make the broker close every client connection with an error."""

    def close() -> None:
        for conn in list(broker._handler.connections):
            if conn.state & Endpoint.LOCAL_ACTIVE:
                conn.condition = Condition(condition, description)
                conn.close()

    broker.call(close, wait=wait)


def broker_pause(broker: ProtonBroker, seconds: float) -> None:
    """Block the broker thread for ``seconds``: it reads nothing and answers nothing meanwhile. Returns once the
    broker thread is blocked."""
    blocked = threading.Event()

    def pause() -> None:
        blocked.set()
        time.sleep(seconds)

    broker.call(pause, wait=False)
    assert blocked.wait(TIMEOUT), "the broker thread did not pause"


def symbol_keys(mapping: dict[Any, Any] | None) -> dict[str, Any] | None:
    """A map from proton with its (symbol) keys as plain strings."""
    return None if mapping is None else {str(key): value for key, value in mapping.items()}


def bodies(records: list[Any]) -> list[Any]:
    return [record.body for record in records]


# ---------------------------------------------------------------------------------------------------------------
# connect


@ALL_BACKENDS
async def test_connect_sends_open_fields(broker: ProtonBroker) -> None:
    broker_props = {"product": "proton-broker"}
    broker.properties = broker_props
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(
            broker.url,
            container_id="amqp-async-test-container",
            virtual_host="vhost.example",
            properties={"client": "amqp_async tests", "n": 7},
            offered_capabilities=["OFFER-ONE", "OFFER-TWO"],
            desired_capabilities=["ANONYMOUS-RELAY"],
            heartbeat=4,
            max_frame_size=8192,
        ) as conn:
            [info] = await in_thread(broker.wait_connections, 1)
            assert info.container_id == "amqp-async-test-container"
            assert info.hostname == "vhost.example"
            assert symbol_keys(info.properties) == {"client": "amqp_async tests", "n": 7}
            assert info.offered_capabilities == ["OFFER-ONE", "OFFER-TWO"]
            assert info.desired_capabilities == ["ANONYMOUS-RELAY"]
            assert info.idle_timeout == pytest.approx(2.0)  # half our heartbeat, as §2.4.5 advises (and proton does)
            assert info.max_frame_size == 8192
            assert info.sasl_mechanism == "ANONYMOUS"
            assert info.authenticated
            # ... and what the broker said back.
            assert conn.container_id == "amqp-async-test-container"
            assert conn.remote_container_id == "proton-broker"
            assert symbol_keys(conn.remote_properties) == broker_props
            assert "ANONYMOUS-RELAY" in [str(c) for c in conn.remote_offered_capabilities]
            assert not conn.is_closed
        assert conn.is_closed
        [close] = await in_thread(broker.wait_closes, 1)
        assert close.by == "client"
        assert close.condition is None


async def test_connect_defaults_hostname_from_url_and_the_default_heartbeat(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            [info] = await in_thread(broker.wait_connections, 1)
            assert info.hostname == "127.0.0.1"
            assert info.idle_timeout == 15.0  # half the default heartbeat (30 s): nothing waits for ever
            assert info.container_id == conn.container_id
            assert info.container_id  # a generated, non-empty container id
            assert info.sasl_mechanism == "ANONYMOUS"


async def test_connect_without_sasl(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url, sasl_enabled=False) as conn:
            sender = await conn.open_sender("no-sasl")
            assert await sender.send(Message(body="plain")) == Accepted()
        [info] = broker.connections
        assert info.sasl_mechanism is None


@ALL_BACKENDS
async def test_connect_await_then_close(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        conn = await amqp_async.connect(broker.url)
        try:
            assert not conn.is_closed
            sender = await conn.open_sender("awaited")
            assert await sender.send(Message(body=1)) == Accepted()
        finally:
            await conn.close()
        assert conn.is_closed
        await conn.close()  # idempotent
        [close] = await in_thread(broker.wait_closes, 1)
        assert close.by == "client"


async def test_heartbeats_keep_an_idle_connection_alive() -> None:
    # proton closes a connection that is silent for 1 s (and advertises 0.5 s: we heartbeat every 0.25 s); our
    # idle timeout is 2 s and we advertise half, 1 s, so proton must heartbeat us too (every 0.5 s). 3 s of idleness
    # on both sides: only heartbeats keep the connection up.
    with ProtonBroker(idle_timeout=1.0, timeout=TIMEOUT) as broker, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url, heartbeat=2) as conn:
            sender = await conn.open_sender("idle")
            await anyio.sleep(3.0)
            assert not conn.is_closed, (conn._error, broker.closes)
            assert broker.closes == []
            assert broker.transport_errors == []
            assert await sender.send(Message(body="still here")) == Accepted()
        [info] = broker.connections
        assert info.idle_timeout == pytest.approx(1.0)
        assert [close.by for close in broker.closes] == ["client"]


async def test_a_silent_peer_fails_the_connection_after_our_idle_timeout(broker: ProtonBroker) -> None:
    # We advertise 1 s; the broker thread then blocks for 3.5 s (no heartbeats, no answers, socket left open).
    # The client must give up after about 1 s: close with amqp:resource-limit-exceeded and fail every waiter,
    # without waiting for the silent peer to answer its close.
    errors: list[BaseException] = []
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url, heartbeat=1, reconnect=False) as conn:
            sender = await conn.open_sender("silent")
            receiver = await conn.open_receiver("silent-in")

            async def receive() -> None:
                try:
                    await receiver.receive()
                except amqp_async.AMQPError as exc:
                    errors.append(exc)

            await in_thread(broker_pause, broker, 3.5)
            start = time.monotonic()
            with anyio.move_on_after(2.5):
                async with anyio.create_task_group() as group:
                    group.start_soon(receive)
            waited = time.monotonic() - start
            assert errors, f"a receive() was still waiting {waited:.1f} s into the peer's silence (idle timeout 1 s)"
            [error] = errors
            assert type(error) is amqp_async.ConnectionLost
            assert error.condition == "amqp:resource-limit-exceeded"
            assert conn.is_closed
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await sender.send(Message(body="too late"))
            assert caught.value.condition == "amqp:resource-limit-exceeded"


@ALL_BACKENDS
async def test_connect_to_a_closed_port_fails_fast() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port is closed now: nothing listens on it.
    with anyio.fail_after(TIMEOUT):
        start = time.monotonic()
        with pytest.raises(amqp_async.ConnectionError):
            await amqp_async.connect(f"amqp://127.0.0.1:{port}")
        with pytest.raises(amqp_async.ConnectionError):
            async with amqp_async.connect(f"amqp://127.0.0.1:{port}"):
                pass
        assert time.monotonic() - start < 3.0


# ---------------------------------------------------------------------------------------------------------------
# senders


async def test_sender_at_most_once(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("amo", delivery="at-most-once")
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.role == "sender"
            assert attach.snd_settle_mode == "settled"
            for i in range(3):
                assert await sender.send(Message(body=i)) is None
            received = await in_thread(broker.wait_messages, 3, address="amo")
            assert bodies(received) == [0, 1, 2]
            assert all(record.settled for record in received)


@ALL_BACKENDS
async def test_sender_at_least_once(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("alo")
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.snd_settle_mode == "unsettled"
            assert attach.rcv_settle_mode == "first"
            assert await sender.send(Message(body="hello", subject="greeting", properties={"k": "v"})) == Accepted()
            [record] = await in_thread(broker.wait_messages, 1, address="alo")
            assert record.body == "hello"
            assert record.message.subject == "greeting"
            assert symbol_keys(record.properties) == {"k": "v"}
            assert not record.settled
            assert record.outcome == "accepted"
            assert [m.body for m in broker.queued("alo")] == ["hello"]
            # Already encoded message bytes go as they are.
            assert await sender.send(Message(body="pre-encoded", subject="bytes").encode()) == Accepted()
            [_, record] = await in_thread(broker.wait_messages, 2, address="alo")
            assert (record.body, record.message.subject) == ("pre-encoded", "bytes")


async def test_sender_exactly_once(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("exo", delivery="exactly-once")
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.snd_settle_mode == "unsettled"
            assert attach.rcv_settle_mode == "second"
            assert await sender.send(Message(body="once")) == Accepted()
            [record] = await in_thread(broker.wait_messages, 1)
            assert record.outcome == "accepted"
            # Mode second: the broker sent its outcome unsettled; the client settles it.
            await in_thread(broker.wait_for, lambda: broker.messages[0].client_settled, what="the client's settle")


async def test_sender_attach_fields(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender(
                "fields",
                name="my-sender-link",
                durable=2,
                expiry_policy="never",
                timeout=30,
                capabilities=["queue", "shared"],
                properties={"owner": "tests"},
                max_message_size=65536,
            )
            assert sender.name == "my-sender-link"
            assert sender.address == "fields"
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.name == "my-sender-link"
            assert attach.role == "sender"
            assert attach.target.address == "fields"
            assert attach.target.durable == 2
            assert attach.target.expiry_policy == "never"
            assert attach.target.timeout == 30
            assert attach.target.capabilities == ["queue", "shared"]
            assert symbol_keys(attach.properties) == {"owner": "tests"}
            assert attach.max_message_size == 65536
            assert await sender.send(Message(body="x")) == Accepted()
            await sender.close()
            [detach] = await in_thread(broker.wait_detaches, 1, link="my-sender-link")
            assert detach.closed
            assert detach.condition is None


async def test_sender_durable_true(broker: ProtonBroker) -> None:
    # Session.open_sender documents ``durable`` as "0, 1, 2 or True".
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("durable-true", durable=True)
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.target.durable in (1, 2)
            assert await sender.send(Message(body="x")) == Accepted()


@ALL_BACKENDS
async def test_anonymous_sender_routes_by_message_address(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            assert "ANONYMOUS-RELAY" in [str(c) for c in conn.remote_offered_capabilities]
            sender = await conn.open_sender(None)
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.target.address is None
            assert await sender.send(Message(body="to a", address="dest-a")) == Accepted()
            assert await sender.send(Message(body="to b", address="dest-b")) == Accepted()
            with pytest.raises(amqp_async.MessageRejected) as caught:
                await sender.send(Message(body="nowhere"))
            assert caught.value.condition == "amqp:not-found"
            received = await in_thread(broker.wait_messages, 3)
            assert [(r.address, r.body) for r in received[:2]] == [("dest-a", "to a"), ("dest-b", "to b")]
            assert [m.body for m in broker.queued("dest-a")] == ["to a"]
            assert [m.body for m in broker.queued("dest-b")] == ["to b"]


async def test_dynamic_sender(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender(None, dynamic=True)
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.target.dynamic
            assert sender.address is not None
            assert re.fullmatch(r"dynamic-\d+", sender.address)
            assert await sender.send(Message(body="to the new node")) == Accepted()
            [record] = await in_thread(broker.wait_messages, 1)
            assert record.address == sender.address
            receiver = await conn.open_receiver(sender.address)
            delivery = await receiver.receive()
            assert delivery.message.body == "to the new node"
            await delivery.accept()


@ALL_BACKENDS
async def test_sender_outcome_rejected(broker: ProtonBroker) -> None:
    broker.outcome_for["rej"] = ("rejected", "amqp:precondition-failed", "no thanks")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("rej")
            with pytest.raises(amqp_async.MessageRejected) as caught:
                await sender.send(Message(body="bad"))
            error = caught.value
            assert error.condition == "amqp:precondition-failed"
            assert error.description == "no thanks"
            assert isinstance(error.outcome, Rejected)
            assert str(error.outcome.error.condition) == "amqp:precondition-failed"
            # The link stays usable after a rejection.
            broker.outcome_for["rej"] = "accepted"
            assert await sender.send(Message(body="good")) == Accepted()
            assert [m.body for m in broker.queued("rej")] == ["good"]


async def test_sender_outcome_released(broker: ProtonBroker) -> None:
    broker.outcome_for["rel"] = "released"
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("rel")
            with pytest.raises(amqp_async.MessageReleased) as caught:
                await sender.send(Message(body="x"))
            assert isinstance(caught.value.outcome, Released)
            assert broker.queued("rel") == []


@pytest.mark.parametrize(("failed", "undeliverable"), [(True, False), (False, True), (True, True)])
async def test_sender_outcome_modified(broker: ProtonBroker, failed: bool, undeliverable: bool) -> None:
    broker.outcome_for["mod"] = ("modified", failed, undeliverable)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("mod")
            with pytest.raises(amqp_async.MessageModified) as caught:
                await sender.send(Message(body="x"))
            outcome = caught.value.outcome
            assert isinstance(outcome, Modified)
            assert bool(outcome.delivery_failed) is failed
            assert bool(outcome.undeliverable_here) is undeliverable


@ASYNCIO_ONLY
async def test_submit_pipelined_with_a_bounded_window(broker: ProtonBroker) -> None:
    count, window = 1000, 100
    with anyio.fail_after(30):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("pipeline")
            in_flight: deque[Tracker] = deque()
            outcomes = []
            for i in range(count):
                in_flight.append(await sender.submit(Message(body=i)))
                assert len(in_flight) <= window
                if len(in_flight) == window:
                    outcomes.append(await in_flight.popleft())
            while in_flight:
                outcomes.append(await in_flight.popleft())
            assert outcomes == [Accepted()] * count
            received = await in_thread(broker.wait_messages, count, address="pipeline")
            assert bodies(received) == list(range(count))
            assert len({r.tag for r in received}) == count
            assert sender.unsettled == []
            # Memory stays bounded: trackers whose outcome was awaited and dropped are not kept alive by the
            # sender (a long-lived sender would otherwise grow without bound).
            del outcomes
            gc.collect()
            live = sum(1 for obj in gc.get_objects() if type(obj) is Tracker)
            assert live <= window, f"{live} Tracker objects still alive after all were awaited and dropped"


@ASYNCIO_ONLY
async def test_concurrent_sends_with_gather(broker: ProtonBroker) -> None:
    import asyncio

    count = 1000
    with anyio.fail_after(30):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("gathered")
            outcomes = await asyncio.gather(*(sender.send(Message(body=i)) for i in range(count)))
            assert outcomes == [Accepted()] * count
            received = await in_thread(broker.wait_messages, count, address="gathered")
            assert len(received) == count
            assert sorted(bodies(received)) == list(range(count))
            await anyio.sleep(0.1)
            assert len(broker.messages) == count  # nothing twice


@pytest.mark.parametrize("anyio_backend", [ASYNCIO, TRIO], indirect=True)
async def test_concurrent_sends_in_a_task_group(broker: ProtonBroker) -> None:
    count = 1000
    outcomes: list[Any] = []

    with anyio.fail_after(30):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("grouped")

            async def send_one(i: int) -> None:
                outcomes.append(await sender.send(Message(body=i)))

            async with anyio.create_task_group() as group:
                for i in range(count):
                    group.start_soon(send_one, i)
            assert outcomes == [Accepted()] * count
            received = await in_thread(broker.wait_messages, count, address="grouped")
            assert sorted(bodies(received)) == list(range(count))
            await anyio.sleep(0.1)
            assert len(broker.messages) == count


@ALL_BACKENDS
async def test_one_mebibyte_message_both_ways(broker: ProtonBroker) -> None:
    # On trio the driver reads through anyio: 64 KiB reads until they come back full, then larger ones.
    payload = os.urandom(1 << 20)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("big")
            assert await sender.send(Message(body=payload)) == Accepted()
            [record] = await in_thread(broker.wait_messages, 1, address="big")
            assert record.body == payload
            receiver = await conn.open_receiver("big", credit=1)
            delivery = await receiver.receive()
            assert delivery.message.body == payload
            await delivery.accept()
            await in_thread(broker.wait_outcomes, 1, outcome="accepted")


async def test_frames_are_split_to_the_peers_max_frame_size() -> None:
    payload = os.urandom(100_000)
    with ProtonBroker(max_frame_size=4096, timeout=TIMEOUT) as broker, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url, max_frame_size=2048) as conn:
            [info] = await in_thread(broker.wait_connections, 1)
            assert info.max_frame_size == 2048
            sender = await conn.open_sender("split")
            assert await sender.send(Message(body=payload)) == Accepted()
            [record] = await in_thread(broker.wait_messages, 1)
            assert record.body == payload
            receiver = await conn.open_receiver("split")
            delivery = await receiver.receive()
            assert delivery.message.body == payload
            await delivery.accept()
            assert broker.transport_errors == []


async def test_open_sender_cancelled_before_the_attach_answer(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            session = await conn.open_session()  # begun before the broker is paused
            await in_thread(broker_pause, broker, 0.4)
            with anyio.move_on_after(0.1) as scope:
                await session.open_sender("cancelled-attach")
            assert scope.cancelled_caught
            sender = await session.open_sender("cancelled-attach")
            assert await sender.send(Message(body="after the cancel")) == Accepted()
            [record] = await in_thread(broker.wait_messages, 1)
            assert record.body == "after the cancel"


async def test_send_waits_for_delayed_credit(broker: ProtonBroker) -> None:
    broker.delay_credit["slow"] = 0.6
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("slow")
            assert sender.credit == 0
            start = time.monotonic()
            assert await sender.send(Message(body="patient")) == Accepted()
            assert time.monotonic() - start >= 0.3
            [record] = await in_thread(broker.wait_messages, 1, address="slow")
            assert record.body == "patient"


@ALL_BACKENDS
async def test_refused_link_raises_link_error_at_open(broker: ProtonBroker) -> None:
    broker.detach_on_attach["forbidden"] = ("amqp:unauthorized-access", "not for you")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            with pytest.raises(amqp_async.LinkError) as caught:
                await conn.open_sender("forbidden")
            assert not isinstance(caught.value, amqp_async.LinkDetached)
            assert caught.value.condition == "amqp:unauthorized-access"
            assert caught.value.description == "the peer refused the sender to 'forbidden': not for you"
            with pytest.raises(amqp_async.LinkError) as caught:
                await conn.open_receiver("forbidden")
            assert caught.value.condition == "amqp:unauthorized-access"
            # The connection and its session are unharmed.
            sender = await conn.open_sender("allowed")
            assert await sender.send(Message(body="ok")) == Accepted()


async def test_broker_closing_the_connection_at_attach(broker: ProtonBroker) -> None:
    broker.close_connection_on["doom"] = ("amqp:connection:framing-error", "go away")
    with anyio.fail_after(TIMEOUT):
        conn = await amqp_async.connect(broker.url)
        try:
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await conn.open_sender("doom")
            assert caught.value.condition == "amqp:connection:framing-error"
            assert caught.value.description == "go away"
            await until(lambda: conn.is_closed)
            with pytest.raises(amqp_async.ConnectionError):
                await conn.open_sender("other")
        finally:
            await conn.close()


# ---------------------------------------------------------------------------------------------------------------
# receivers


async def test_receiver_prefetch_is_bounded(broker: ProtonBroker) -> None:
    for i in range(20):
        broker.put("prefetch", i)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("prefetch", credit=5)
            await until(lambda: receiver.queued == 5)
            await anyio.sleep(0.2)  # not consuming: nothing more may come
            assert receiver.queued == 5
            assert len(broker.queued("prefetch")) == 15
            flows = [f for f in broker.flows if f.link == receiver.name]
            assert flows[0].credit == 5
            got = []
            for _ in range(20):
                delivery = await receiver.receive()
                got.append(delivery.message.body)
                await delivery.accept()
                assert receiver.queued <= 5
                await anyio.sleep(0)
            assert got == list(range(20))
            assert all(f.credit <= 5 for f in broker.flows if f.link == receiver.name)
            await in_thread(broker.wait_outcomes, 20, link=receiver.name)


@ALL_BACKENDS
async def test_receiver_manual_credit(broker: ProtonBroker) -> None:
    for i in range(3):
        broker.put("manual", i)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("manual", credit=0)
            await anyio.sleep(0.2)
            assert receiver.queued == 0
            assert receiver.receive_nowait() is None
            receiver.add_credit(2)
            first = await receiver.receive()
            second = await receiver.receive()
            assert [first.message.body, second.message.body] == [0, 1]
            await first.accept()
            await second.accept()
            await anyio.sleep(0.2)
            assert receiver.receive_nowait() is None  # no credit left, no top-up with credit=0
            assert [m.body for m in broker.queued("manual")] == [2]
            receiver.add_credit(1)
            await until(lambda: receiver.queued == 1)
            third = receiver.receive_nowait()
            assert third is not None
            assert third.message.body == 2
            await third.accept()
            await in_thread(broker.wait_outcomes, 3, link=receiver.name)


async def test_credit_top_up_is_written_before_the_application_yields(broker: ProtonBroker) -> None:
    """An application that takes queued deliveries without an ``await`` that suspends (``receive()`` returns at
    once while deliveries are queued) must not hold back the credit it tops up: the broker, out of credit, would
    wait for it until the application's next suspension (on uvloop that cost a fifth of the receive rate). The
    event loop is blocked while the broker's record is read, so only a flow written synchronously can reach it.
    On asyncio and uvloop (the direct stream writes synchronously; trio's streams have no synchronous write)."""
    for i in range(20):
        broker.put("top-up", i)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("top-up", credit=10)
            await until(lambda: receiver.queued == 10)
            flows_before = len([f for f in broker.flows if f.link == receiver.name])
            taken = [receiver.receive_nowait() for _ in range(5)]
            assert all(delivery is not None for delivery in taken)
            # No await since the deliveries were taken: the event loop (and our writer task) cannot run.
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                flows = [f for f in broker.flows if f.link == receiver.name]
                if any(flow.credit > 0 for flow in flows[flows_before:]):
                    break
                time.sleep(0.01)
            else:
                pytest.fail("the credit top-up stayed queued while the application held the event loop")
            for delivery in taken:
                assert delivery is not None
                await delivery.accept()
            rest = [await receiver.receive() for _ in range(15)]
            assert [d.message.body for d in taken + rest] == list(range(20))
            for delivery in rest:
                await delivery.accept()


async def test_credit_is_topped_up_once_per_half_prefetch_not_per_message(broker: ProtonBroker) -> None:
    """A receiver with ``credit=N`` grants credit again once N/2 of it is used up (credit plus queued deliveries
    down to half), not at every message taken: a flow per message costs a write each, and RabbitMQ before 4.0
    adds each flow's credit to what it still holds (rabbitmq-server#2597), so flows that frequent made it send
    past our tolerance (a 50,000-message receive failed with amqp:link:transfer-limit-exceeded). The flows are
    read off the wire by proton's decoder (a proxy in front of the broker)."""
    for i in range(30):
        broker.put("half-prefetch", i)
    sniffer = FrameSniffer(broker.port)
    try:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(sniffer.url) as conn:
                receiver = await conn.open_receiver("half-prefetch", credit=10)
                await until(lambda: receiver.queued == 10)
                before = len(sniffer.performatives(_FLOW))
                taken = [receiver.receive_nowait() for _ in range(10)]  # all ten, the application never suspending
                await until(lambda: len(sniffer.performatives(_FLOW)) >= before + 2)  # the flows reach the proxy
                await anyio.sleep(0.1)  # a flow per message taken would be eight more, written at once
                credits = [fields[6] for fields in sniffer.performatives(_FLOW)[before:]]
                # One top-up at the fifth message taken (to 5: five still queued), one at the tenth (to 10); a
                # flow per message taken would be ten.
                assert credits == [5, 10]
                rest = [await receiver.receive() for _ in range(20)]
                assert [d.message.body for d in taken + rest if d is not None] == list(range(30))
                for delivery in taken + rest:
                    assert delivery is not None
                    await delivery.accept()
    finally:
        sniffer.close()


@ALL_BACKENDS
async def test_async_for_ends_when_the_broker_detaches_cleanly(broker: ProtonBroker) -> None:
    for i in range(3):
        broker.put("clean", i)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("clean", name="clean-receiver")
            got = []
            async for delivery in receiver:
                got.append(delivery.message.body)
                await delivery.accept()
                if len(got) == 3:
                    await in_thread(broker.wait_outcomes, 3, link="clean-receiver")
                    await in_thread(broker_detach, broker, "clean-receiver")
            assert got == [0, 1, 2]
            assert receiver.is_closed
            # The client answered the broker's detach.
            await in_thread(broker.wait_detaches, 1, link="clean-receiver")
            with pytest.raises(amqp_async.LinkDetached):
                await receiver.receive()
            # The connection is fine.
            sender = await conn.open_sender("clean")
            assert await sender.send(Message(body="after")) == Accepted()


@ALL_BACKENDS
async def test_async_for_raises_when_the_broker_detaches_with_an_error(broker: ProtonBroker) -> None:
    broker.put("doomed", "only")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("doomed", name="doomed-receiver")
            got = []
            with pytest.raises(amqp_async.LinkError) as caught:
                async for delivery in receiver:
                    got.append(delivery.message.body)
                    await delivery.accept()
                    await in_thread(broker.wait_outcomes, 1, link="doomed-receiver")
                    await in_thread(
                        broker_detach, broker, "doomed-receiver", ("amqp:resource-deleted", "queue deleted")
                    )
            assert got == ["only"]
            assert not isinstance(caught.value, amqp_async.LinkDetached)
            assert caught.value.condition == "amqp:resource-deleted"
            assert caught.value.description == "queue deleted"
            await in_thread(broker.wait_detaches, 1, link="doomed-receiver")


@ALL_BACKENDS
async def test_cancelled_receive_loses_nothing(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("cancel-rx")
            with anyio.move_on_after(0.2) as scope:
                await receiver.receive()
            assert scope.cancelled_caught
            with anyio.CancelScope() as scope:
                scope.cancel()
                await receiver.receive()
            await in_thread(broker.put, "cancel-rx", "after the cancel")
            delivery = await receiver.receive()
            assert delivery.message.body == "after the cancel"
            await delivery.accept()


async def test_receive_cancelled_while_messages_arrive_loses_nothing(broker: ProtonBroker) -> None:
    count = 50
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("cancel-race", credit=10)

            def produce() -> None:
                for i in range(count):
                    broker.put("cancel-race", i)
                    time.sleep(0.002)

            got: list[Any] = []
            cancelled = 0
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.to_thread.run_sync, produce)
                while len(got) < count:
                    with anyio.move_on_after(0.001) as scope:
                        delivery = await receiver.receive()
                    if scope.cancelled_caught:
                        cancelled += 1
                        continue
                    got.append(delivery.message.body)
                    await delivery.accept()
            assert got == list(range(count))
            assert cancelled > 0
            await in_thread(broker.wait_outcomes, count, link=receiver.name)
            assert broker.queued("cancel-race") == []


SETTLEMENTS: list[Any] = [
    pytest.param(lambda d: d.accept(), {"outcome": "accepted"}, False, id="accept"),
    pytest.param(
        lambda d: d.reject("amqp:precondition-failed", "bad message", {"field": "body"}),
        {"outcome": "rejected", "condition": ("amqp:precondition-failed", "bad message", {"field": "body"})},
        False,
        id="reject",
    ),
    pytest.param(lambda d: d.release(), {"outcome": "released", "delivery_failed": False}, True, id="release"),
    pytest.param(
        lambda d: d.release(delivered=True),
        {"outcome": "modified", "delivery_failed": True, "undeliverable_here": False},
        True,
        id="release-delivered",
    ),
    pytest.param(
        lambda d: d.modify(delivery_failed=False, undeliverable_here=False, annotations={"x-opt-why": "later"}),
        {"outcome": "modified", "delivery_failed": False, "undeliverable_here": False},
        True,
        id="modify-annotations",
    ),
    pytest.param(
        lambda d: d.modify(delivery_failed=True, undeliverable_here=True),
        {"outcome": "modified", "delivery_failed": True, "undeliverable_here": True},
        False,
        id="modify-undeliverable",
    ),
]


@ALL_BACKENDS
@pytest.mark.parametrize(("settle", "expected", "requeued"), SETTLEMENTS)
async def test_receiver_settlements_as_proton_records_them(
    broker: ProtonBroker, settle: Callable[[Any], Any], expected: dict[str, Any], requeued: bool
) -> None:
    broker.put("settle", "payload")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("settle", credit=0)
            receiver.add_credit(1)
            delivery = await receiver.receive()
            assert delivery.message.body == "payload"
            assert not delivery.settled
            await settle(delivery)
            assert delivery.settled
            [outcome] = await in_thread(broker.wait_outcomes, 1, link=receiver.name)
            assert outcome.tag == delivery.tag
            assert outcome.settled  # rcv-settle-mode first: the client settled with its outcome
            for key, value in expected.items():
                if key == "condition":
                    name, description, info = outcome.condition
                    assert (name, description, symbol_keys(info)) == value
                else:
                    assert getattr(outcome, key) == value, key
            queued = broker.queued("settle")
            assert [m.body for m in queued] == (["payload"] if requeued else [])
            if requeued and expected.get("delivery_failed"):
                assert queued[0].delivery_count == 1


async def test_modify_sends_message_annotations(broker: ProtonBroker) -> None:
    broker.put("annotate", "payload")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("annotate", credit=0)
            receiver.add_credit(1)
            delivery = await receiver.receive()
            await delivery.modify(delivery_failed=False, annotations={"x-opt-why": "later", "x-opt-n": 2})
            [outcome] = await in_thread(broker.wait_outcomes, 1, link=receiver.name)
            assert outcome.outcome == "modified"
            assert symbol_keys(outcome.message_annotations) == {"x-opt-why": "later", "x-opt-n": 2}


async def test_exactly_once_receiver_accept_waits_for_the_broker(broker: ProtonBroker) -> None:
    broker.put("exo-rx", "precious")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("exo-rx", delivery="exactly-once", credit=1)
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.role == "receiver"
            assert attach.rcv_settle_mode == "second"
            assert attach.snd_settle_mode == "unsettled"
            delivery = await receiver.receive()
            assert delivery.message.body == "precious"
            # While the broker is paused it cannot settle: accept() must wait for it.
            await in_thread(broker_pause, broker, 0.5)
            start = time.monotonic()
            await delivery.accept()
            assert time.monotonic() - start >= 0.3
            assert delivery.settled
            [outcome] = await in_thread(broker.wait_outcomes, 1, link=receiver.name)
            assert outcome.outcome == "accepted"
            assert not outcome.settled  # the client left the settling to the broker, as mode second requires
            assert broker.queued("exo-rx") == []


@ALL_BACKENDS
async def test_dynamic_receiver(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver(None, dynamic=True)
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.source.dynamic
            assert attach.source.address is None
            assert receiver.address is not None
            assert re.fullmatch(r"dynamic-\d+", receiver.address)
            sender = await conn.open_sender(receiver.address)
            assert await sender.send(Message(body="to the temporary queue")) == Accepted()
            delivery = await receiver.receive()
            assert delivery.message.body == "to the temporary queue"
            await delivery.accept()
            [record] = broker.messages
            assert record.address == receiver.address


async def test_receiver_detach_says_closed_false_and_close_says_closed_true(broker: ProtonBroker) -> None:
    """``detach()`` keeps the peer's terminus for a later attach (§2.6.4: closed=false), ``close()`` ends it (§2.6.6:
    closed=true), as proton's ``link.detach()`` and ``link.close()``; each waits for the broker's answer."""
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            kept = await conn.open_receiver("q-kept", name="kept", durable=True, expiry_policy="never")
            await kept.detach()
            closed = await conn.open_receiver("q-closed", name="closed")
            await closed.close()
            stream = await conn.open_stream_receiver("q-stream", name="stream")
            await stream.detach()
            assert kept.is_closed and closed.is_closed and stream.is_closed
            detaches = await in_thread(broker.wait_detaches, 3)
    assert {detach.link: detach.closed for detach in detaches} == {"kept": False, "closed": True, "stream": False}


async def test_receiver_source_fields(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver(
                "source-fields",
                name="my-receiver-link",
                durable=2,
                expiry_policy="never",
                timeout=60,
                distribution_mode="move",
                selector="color = 'red'",
                capabilities=["queue"],
                outcomes=["amqp:accepted:list", "amqp:released:list"],
                default_outcome=Released(),
                properties={"purpose": "test"},
                max_message_size=1 << 20,
            )
            assert receiver.name == "my-receiver-link"
            [attach] = await in_thread(broker.wait_attaches, 1)
            source = attach.source
            assert attach.name == "my-receiver-link"
            assert attach.role == "receiver"
            assert source.address == "source-fields"
            assert source.durable == 2
            assert source.expiry_policy == "never"
            assert source.timeout == 60
            assert source.distribution_mode == "move"
            assert source.capabilities == ["queue"]
            assert source.outcomes == ["amqp:accepted:list", "amqp:released:list"]
            assert source.filter is not None
            [(key, described)] = source.filter.items()
            assert str(key) == "selector"
            assert str(described.descriptor) == "apache.org:selector-filter:string"
            assert described.value == "color = 'red'"
            assert symbol_keys(attach.properties) == {"purpose": "test"}
            assert attach.max_message_size == 1 << 20
            # The filter map built by selector() and given as filter= is the same on the wire.
            other = await conn.open_receiver("source-fields", filter=amqp_async.selector("color = 'blue'"))
            attaches = await in_thread(broker.wait_attaches, 2)
            [(key, described)] = attaches[1].source.filter.items()
            assert attaches[1].name == other.name
            assert str(key) == "selector"
            assert str(described.descriptor) == "apache.org:selector-filter:string"
            assert described.value == "color = 'blue'"


@ALL_BACKENDS
async def test_browse_copy_leaves_messages_queued_and_move_takes_them(broker: ProtonBroker) -> None:
    broker.put("browse", "one")
    broker.put("browse", "two")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            browser = await conn.open_receiver("browse", distribution_mode="copy")
            seen = []
            for _ in range(2):
                delivery = await browser.receive()
                seen.append(delivery.message.body)
                await delivery.accept()
            assert seen == ["one", "two"]
            await in_thread(broker.wait_outcomes, 2, link=browser.name)
            assert [m.body for m in broker.queued("browse")] == ["one", "two"]
            assert broker.attaches[0].source.distribution_mode == "copy"
            await browser.close()
            consumer = await conn.open_receiver("browse", distribution_mode="move")
            taken = []
            for _ in range(2):
                delivery = await consumer.receive()
                taken.append(delivery.message.body)
                await delivery.accept()
            assert taken == ["one", "two"]
            await in_thread(broker.wait_outcomes, 4)
            assert broker.queued("browse") == []


@ALL_BACKENDS
async def test_drain_returns_once_the_broker_answered(broker: ProtonBroker) -> None:
    broker.put("drain", "a")
    broker.put("drain", "b")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("drain", credit=0)
            receiver.add_credit(5)
            await until(lambda: receiver.queued == 2)
            await receiver.drain()
            drain = broker.drains[0]  # recorded before the broker's answer went out
            assert drain.link == receiver.name
            assert drain.sent + drain.returned == drain.credit
            assert drain.returned == 3
            assert receiver.credit == 0
            assert receiver.queued == 2
            # The credit is really gone: a new message stays at the broker.
            await in_thread(broker.put, "drain", "c")
            await anyio.sleep(0.2)
            assert receiver.queued == 2
            assert [m.body for m in broker.queued("drain")] == ["c"]


@ALL_BACKENDS
async def test_drain_with_no_credit_left_returns_at_once(broker: ProtonBroker) -> None:
    """Nothing to drain: no flow is sent. Asked, python-qpid-proton's sender (pn_link_drained) has no credit to
    give back and says nothing: drain() waited the whole drain_timeout and raised LinkTimeout."""
    for body in "abc":
        broker.put("drain-nothing", body)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url, drain_timeout=5) as conn:
            manual = await conn.open_receiver("drain-nothing", credit=0)
            started = time.monotonic()
            await manual.drain()  # nothing ever granted
            manual.add_credit(3)
            await until(lambda: manual.queued == 3)
            await manual.drain()  # all of it used
            assert time.monotonic() - started < 2.0
            assert manual.queued == 3 and manual.credit == 0


@ALL_BACKENDS
async def test_drain_returns_once_a_message_in_many_frames_that_used_the_last_credit_is_whole(
    broker: ProtonBroker,
) -> None:
    """The last credit is used at a message's first frame, and the engine's drain ends there (§2.6.7): drain()
    returned as the message before it was complete, the last one still arriving, and receive_nowait() after it
    found one message of two, though the sender had sent everything it had (the caller takes what is queued)."""
    body = b"x" * (256 << 10)
    for _ in range(6):
        broker.put("drain-large", body)
    port = int(broker.url.rsplit(":", 1)[1])
    with anyio.fail_after(TIMEOUT):
        async with slow_relay(port, piece=16384) as url, amqp_async.connect(url, max_frame_size=4096) as conn:
            receiver = await conn.open_receiver("drain-large", credit=0)
            for _ in range(3):
                receiver.add_credit(2)
                await receiver.drain()
                assert receiver.queued == 2
                for _ in range(2):
                    delivery = receiver.receive_nowait()
                    assert delivery is not None and delivery.message.body == body
                    await delivery.accept()
            assert receiver.queued == 0 and receiver.credit == 0


@ALL_BACKENDS
async def test_a_prefetching_receiver_receives_again_after_a_drain_of_an_empty_queue(broker: ProtonBroker) -> None:
    """The drain took the prefetch's credit back, and only taking a delivery topped it up: with none queued, the
    next receive() waited for ever though messages were at the broker."""
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("drain-prefetch", credit=10)
            await receiver.drain()
            assert broker.drains[0].returned == 10
            await in_thread(broker.put, "drain-prefetch", "after")
            delivery = await receiver.receive()
            assert delivery.message.body == "after"
            await delivery.accept()
            assert receiver.credit == 9  # the prefetch again, less the one delivered


async def test_drain_on_an_empty_queue_gives_all_credit_back(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("drain-2", credit=0)
            receiver.add_credit(4)
            await in_thread(broker.wait_for, lambda: [f for f in broker.flows if f.credit == 4], what="the flow")
            await receiver.drain()
            drain = broker.drains[0]
            assert (drain.credit, drain.sent, drain.returned) == (4, 0, 4)
            assert receiver.credit == 0


async def test_drain_answers_after_the_messages_it_made_the_broker_send(broker: ProtonBroker) -> None:
    broker.put("drain-3", "a")
    broker.put("drain-3", "b")
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("drain-3", credit=0)
            receiver.add_credit(3)
            await receiver.drain()  # credit and drain go out together: the broker sends 2, then gives 1 back
            assert receiver.queued == 2
            assert receiver.credit == 0
            drain = broker.drains[0]  # (proton raises one more flow event for its own drained flow)
            assert (drain.credit, drain.sent, drain.returned) == (3, 2, 1)
            received = [receiver.receive_nowait(), receiver.receive_nowait()]
            assert [d.message.body for d in received if d is not None] == ["a", "b"]


async def test_at_most_once_receiver(broker: ProtonBroker) -> None:
    for i in range(3):
        broker.put("amo-rx", i)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("amo-rx", delivery="at-most-once")
            [attach] = await in_thread(broker.wait_attaches, 1)
            assert attach.snd_settle_mode == "settled"
            got = []
            for _ in range(3):
                delivery = await receiver.receive()
                assert delivery.settled  # it came pre-settled
                await delivery.accept()  # nothing to say, nothing sent
                got.append(delivery.message.body)
            assert got == [0, 1, 2]
            await anyio.sleep(0.1)
            assert broker.outcomes == []
            assert broker.queued("amo-rx") == []


# ---------------------------------------------------------------------------------------------------------------
# sessions


@ALL_BACKENDS
async def test_two_sessions_closing_one_leaves_the_other_working(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            first = await conn.open_session()
            second = await conn.open_session()
            assert first is not second
            sender1 = await first.open_sender("s1")
            receiver1 = await first.open_receiver("s2")
            sender2 = await second.open_sender("s2")
            receiver2 = await second.open_receiver("s1")
            assert await sender1.send(Message(body="via session 1")) == Accepted()
            delivery = await receiver2.receive()
            assert delivery.message.body == "via session 1"
            await delivery.accept()
            assert await sender2.send(Message(body="via session 2")) == Accepted()
            delivery = await receiver1.receive()
            assert delivery.message.body == "via session 2"
            await delivery.accept()

            await first.close()
            assert first.is_closed
            assert sender1.is_closed
            assert receiver1.is_closed
            with pytest.raises(amqp_async.ClosedByApplication):
                await sender1.send(Message(body="too late"))
            with pytest.raises(amqp_async.ClosedByApplication):
                await receiver1.receive()

            assert not second.is_closed
            assert await sender2.send(Message(body="still working")) == Accepted()
            sender3 = await second.open_sender("s1")
            assert await sender3.send(Message(body="new link")) == Accepted()
            got = []
            for _ in range(1):
                delivery = await receiver2.receive()
                got.append(delivery.message.body)
                await delivery.accept()
            assert got == ["new link"]
            assert [m.body for m in broker.queued("s2")] == ["still working"]
            async with await conn.open_session() as third:
                sender4 = await third.open_sender("s3")
                assert await sender4.send(Message(body="third")) == Accepted()
            assert third.is_closed
            assert [r.body for r in broker.messages if r.address == "s3"] == ["third"]


# ---------------------------------------------------------------------------------------------------------------
# errors and cancellation


@ALL_BACKENDS
async def test_send_cancelled_while_waiting_for_credit_sends_nothing(broker: ProtonBroker) -> None:
    broker.credit_for["stuck"] = 0
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("stuck", name="stuck-link")
            with anyio.move_on_after(0.3) as scope:
                await sender.send(Message(body="never"))
            assert scope.cancelled_caught
            await anyio.sleep(0.1)
            assert broker.messages == []
            await in_thread(broker.grant_credit, "stuck-link", 10)
            await until(lambda: sender.credit > 0)
            await anyio.sleep(0.3)
            assert broker.messages == []  # nothing sneaked out once credit came
            assert await sender.send(Message(body="after")) == Accepted()
            await in_thread(broker.wait_messages, 1)
            await anyio.sleep(0.1)
            assert bodies(broker.messages) == ["after"]


@ALL_BACKENDS
async def test_cancelled_tracker_await_keeps_the_outcome(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("tracked")
            await in_thread(broker_pause, broker, 0.4)  # the outcome cannot come before the cancel
            tracker = await sender.submit(Message(body="tracked"))
            with anyio.move_on_after(0.05) as scope:
                await tracker
            assert scope.cancelled_caught
            assert not tracker.done
            assert await tracker == Accepted()
            assert tracker.done
            assert tracker.settled
            assert tracker.outcome == Accepted()
            assert await tracker == Accepted()  # again: the outcome stays
            [record] = await in_thread(broker.wait_messages, 1)
            assert record.tag == tracker.tag


@ALL_BACKENDS
async def test_send_cancelled_after_the_transfer_leaves_its_tracker_in_unsettled(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("cancelled-send")
            assert sender.unsettled == []
            await in_thread(broker_pause, broker, 0.4)
            with anyio.move_on_after(0.1) as scope:
                await sender.send(Message(body="sent, then cancelled"))
            assert scope.cancelled_caught
            [tracker] = sender.unsettled
            assert not tracker.done
            assert await tracker == Accepted()
            assert sender.unsettled == []
            [record] = await in_thread(broker.wait_messages, 1)
            assert record.body == "sent, then cancelled"
            assert record.tag == tracker.tag


@ALL_BACKENDS
async def test_tracker_awaited_by_two_tasks(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("tracked-twice")
            await in_thread(broker_pause, broker, 0.3)
            tracker = await sender.submit(Message(body="x"))
            results: list[Any] = []

            async def wait_for_it() -> None:
                results.append(await tracker)

            with anyio.fail_after(3):
                async with anyio.create_task_group() as group:
                    group.start_soon(wait_for_it)
                    group.start_soon(wait_for_it)
            assert results == [Accepted(), Accepted()]


@ASYNCIO_FAMILY
async def test_confirmed_sends_one_at_a_time_do_not_wake_the_writer(
    broker: ProtonBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A confirmed send writes its own transfer and the reader writes its answers: a round trip needs no turn of
    # the writer task (one task switch, and its wake-up, fewer). At-most-once sends count as written at once too.
    from amqp_async.io.driver import EngineDriver

    turns: list[int] = []
    write = EngineDriver._write

    async def counted(self: EngineDriver) -> bool:
        turns.append(1)
        return await write(self)

    monkeypatch.setattr(EngineDriver, "_write", counted)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("one-at-a-time")
            fast = await conn.open_sender("one-at-a-time", delivery="at-most-once")
            assert await sender.send(Message(body="warm-up")) == Accepted()
            before = len(turns)
            for number in range(50):
                assert await sender.send(Message(body=number)) == Accepted()
            for number in range(50):
                assert await fast.send(Message(body=number)) is None
            assert len(turns) - before <= 30  # the at-most-once sends in a row take every other turn
            records = await in_thread(broker.wait_messages, 101)
            assert [record.body for record in records[1:]] == list(range(50)) * 2


@ALL_BACKENDS
async def test_a_cancelled_waiter_leaves_the_other_waiters_theirs(broker: ProtonBroker) -> None:
    # Each waiting task has its own wake-up: cancelling one (a timeout) must not cancel the others', and a task
    # that waits in short timeouts again and again must not pile wake-ups up on the tracker.
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("tracked-cancelled")
            await in_thread(broker_pause, broker, 0.5)
            tracker = await sender.submit(Message(body="x"))
            results: list[Any] = []

            async def wait_for_it() -> None:
                results.append(await tracker)

            async def wait_in_timeouts() -> None:
                for _ in range(20):
                    with anyio.move_on_after(0.005):
                        await tracker
                    assert tracker.done or len(tracker._waiters or ()) == 1  # the other task's only

            async with anyio.create_task_group() as group:
                group.start_soon(wait_for_it)
                await anyio.sleep(0.01)
                await wait_in_timeouts()
            assert not tracker._waiters
            assert results == [Accepted()]


@ALL_BACKENDS
async def test_broker_closing_the_connection_mid_stream(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("mid-in")
            sender = await conn.open_sender("mid-out")
            assert await sender.send(Message(body="before")) == Accepted()
            assert sender.credit > 0
            # The broker closes the connection; before the client's reader can see that (this blocking call holds
            # the event loop, and submit() does not yield while there is credit), messages go in flight. The
            # broker writes nothing after its close, so their outcomes never come.
            broker_close_connections(broker, "amqp:connection:forced", "broker going away")
            trackers = [await sender.submit(Message(body=i)) for i in range(5)]
            assert not any(tracker.done for tracker in trackers)
            # Pending trackers: in doubt (the broker may or may not have taken them).
            for tracker in trackers:
                with pytest.raises(amqp_async.DeliveryInDoubt):
                    await tracker
            # Receivers and later calls: the broker's error.
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await receiver.receive()
            assert not isinstance(caught.value, amqp_async.DeliveryInDoubt)
            assert caught.value.condition == "amqp:connection:forced"
            assert caught.value.description == "broker going away"
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await sender.send(Message(body="after"))
            assert caught.value.condition == "amqp:connection:forced"
            assert conn.is_closed
            with pytest.raises(amqp_async.ConnectionError):
                await conn.open_sender("mid-out")


@ALL_BACKENDS
async def test_broker_detaching_a_sender_mid_stream(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("detach-out", name="detached-sender")
            assert await sender.send(Message(body="before")) == Accepted()
            await in_thread(broker_pause, broker, 0.4)
            trackers = [await sender.submit(Message(body=i)) for i in range(3)]
            await anyio.sleep(0.1)
            broker.call(
                lambda: [
                    (setattr(link, "condition", Condition("amqp:resource-deleted", "node gone")), link.close())
                    for link in _broker_links(broker, "detached-sender")
                ],
                wait=False,
            )
            outcomes = []
            for tracker in trackers:
                try:
                    outcomes.append(await tracker)
                except amqp_async.DeliveryInDoubt:
                    outcomes.append("in doubt")
            # The broker reads the transfers before its detach goes out (proton answers them), or not: each
            # tracker has an outcome or is in doubt, none hangs and none is silently lost.
            assert all(outcome in (Accepted(), "in doubt") for outcome in outcomes)
            with pytest.raises(amqp_async.LinkError) as caught:
                await sender.send(Message(body="after"))
            assert caught.value.condition == "amqp:resource-deleted"
            assert caught.value.description == "node gone"
            assert sender.is_closed
            # The connection is fine.
            other = await conn.open_sender("detach-out")
            assert await other.send(Message(body="other link")) == Accepted()


@ALL_BACKENDS
async def test_waiting_calls_fail_when_the_connection_is_closed(broker: ProtonBroker) -> None:
    broker.credit_for["no-credit-here"] = 0
    errors: list[BaseException] = []
    with anyio.fail_after(TIMEOUT):
        conn = await amqp_async.connect(broker.url)
        receiver = await conn.open_receiver("nothing-here")
        sender = await conn.open_sender("no-credit-here")

        async def receive() -> None:
            try:
                await receiver.receive()
            except amqp_async.AMQPError as exc:
                errors.append(exc)

        async def send() -> None:
            try:
                await sender.send(Message(body="never"))
            except amqp_async.AMQPError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(receive)
            group.start_soon(send)
            await anyio.sleep(0.1)
            await conn.close()
        assert len(errors) == 2
        # The application closed it: no error pretends the peer or the network did.
        assert all(isinstance(error, amqp_async.ClosedByApplication) for error in errors), errors
        with pytest.raises(amqp_async.ClosedByApplication):
            await sender.send(Message(body="x"))
        assert broker.messages == []


@ALL_BACKENDS
async def test_async_for_ends_when_the_receiver_is_closed_by_another_task(broker: ProtonBroker) -> None:
    got: list[Any] = []
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            receiver = await conn.open_receiver("closing")

            async def consume() -> None:
                async for delivery in receiver:
                    got.append(delivery.message.body)
                    await delivery.accept()

            async with anyio.create_task_group() as group:
                group.start_soon(consume)
                await in_thread(broker.put, "closing", "first")
                await until(lambda: got == ["first"])
                await receiver.close()
            assert got == ["first"]
            await in_thread(broker.wait_detaches, 1, link=receiver.name)


@ALL_BACKENDS
async def test_misuse_after_close(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        conn = await amqp_async.connect(broker.url)
        sender = await conn.open_sender("misuse")
        receiver = await conn.open_receiver("misuse")
        await sender.close()
        assert sender.is_closed
        await sender.close()  # idempotent
        with pytest.raises(amqp_async.ClosedByApplication):
            await sender.send(Message(body="x"))
        with pytest.raises(amqp_async.ClosedByApplication):
            await sender.submit(Message(body="x"))
        await receiver.close()
        with pytest.raises(amqp_async.ClosedByApplication):
            await receiver.receive()
        with pytest.raises(amqp_async.ClosedByApplication):
            receiver.add_credit(1)
        async for _ in receiver:  # a closed receiver iterates nothing
            raise AssertionError("a closed receiver yielded a delivery")
        await conn.close()
        with pytest.raises(amqp_async.ClosedByApplication):
            await conn.open_sender("misuse")
        with pytest.raises(amqp_async.ClosedByApplication):
            await conn.open_receiver("misuse")
        with pytest.raises(amqp_async.ClosedByApplication):
            await conn.open_session()
        assert broker.messages == []


# ---------------------------------------------------------------------------------------------------------------
# threads


@ALL_BACKENDS
async def test_run_threadsafe_from_another_thread(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("threads")

            def worker() -> list[Any]:
                outcomes = [conn.run_threadsafe(sender.send(Message(body=i))).result(5) for i in range(3)]
                receiver = conn.run_threadsafe(conn.open_receiver("threads")).result(5)
                delivery = conn.run_threadsafe(receiver.receive()).result(5)
                conn.run_threadsafe(delivery.accept()).result(5)
                return [*outcomes, delivery.message.body]

            assert await anyio.to_thread.run_sync(worker) == [Accepted(), Accepted(), Accepted(), 0]
            await in_thread(broker.wait_outcomes, 1, outcome="accepted")


@ALL_BACKENDS
async def test_calls_from_a_worker_thread_through_anyio(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("portal")

            def worker() -> list[Any]:
                outcomes = [anyio.from_thread.run(sender.send, Message(body=i)) for i in range(3)]
                receiver = anyio.from_thread.run(functools.partial(conn.open_receiver, "portal"))
                delivery = anyio.from_thread.run(receiver.receive)
                anyio.from_thread.run(delivery.accept)
                return [*outcomes, delivery.message.body]

            assert await anyio.to_thread.run_sync(worker) == [Accepted(), Accepted(), Accepted(), 0]


@pytest.mark.parametrize(
    ("backend", "options"),
    [
        pytest.param("asyncio", {}, id="asyncio"),
        pytest.param("asyncio", {"use_uvloop": True}, id="uvloop"),
        pytest.param("trio", {}, id="trio"),
    ],
)
def test_blocking_portal_from_synchronous_code(broker: ProtonBroker, backend: str, options: dict[str, Any]) -> None:
    _require_backend(backend, options)
    with anyio.from_thread.start_blocking_portal(backend, options) as portal:
        conn = portal.call(lambda: amqp_async.connect(broker.url, container_id="portal-client"))
        try:
            sender = portal.call(conn.open_sender, "sync")
            assert portal.call(sender.send, Message(body="from sync code")) == Accepted()
            receiver = portal.call(conn.open_receiver, "sync")
            delivery = portal.call(receiver.receive)
            assert delivery.message.body == "from sync code"
            portal.call(delivery.accept)
        finally:
            portal.call(conn.close)
    assert conn.is_closed
    assert broker.connections[0].container_id == "portal-client"
    [outcome] = broker.wait_outcomes(1)
    assert outcome.outcome == "accepted"


# ---------------------------------------------------------------------------------------------------------------
# frame trace


def test_frame_trace_in_a_subprocess(broker: ProtonBroker, tmp_path: Path) -> None:
    script = tmp_path / "traced_client.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys

            import anyio

            import amqp_async


            async def main() -> None:
                async with amqp_async.connect(sys.argv[1]) as conn:
                    sender = await conn.open_sender("traced")
                    await sender.send(amqp_async.Message(body="traced"))


            anyio.run(main)
            """
        )
    )
    env = dict(os.environ)
    env.pop("PN_TRACE_FRM", None)
    env["AMQP_ASYNC_TRACE_FRM"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(script), broker.url], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    trace = result.stderr
    assert re.search(r"-> .*\bOpen\(", trace), trace
    assert re.search(r"<- .*\bOpen\(", trace), trace
    assert re.search(r"-> .*\bAttach\(", trace), trace
    assert re.search(r"-> .*\bTransfer\(", trace), trace
    assert re.search(r"<- .*\bDisposition\(", trace), trace
    assert bodies(broker.messages) == ["traced"]
