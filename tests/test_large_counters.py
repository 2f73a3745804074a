"""Credit and windows up to 2**32 - 1 (§2.6.7, §2.5.6): plain uints, not serial numbers.

A flow's ``link-credit`` and ``incoming-window`` are uints: 2**32 - 1 is a peer's way of saying "unlimited". Only the
counts (delivery-count, transfer ids) are serial numbers. The engine read any credit or window of 2**31 or more as
negative (folded into the signed range), so a sender given such credit or window sent nothing, forever: the broker
delivered none of a queue's messages to such a consumer (and answered a drain with "drained"), our client's
``send()`` hung. Checked on the engine, and end to end with a consumer written frame by frame against the broker.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from amqp_async import Message
from amqp_async.broker import BrokerThread
from amqp_async.client import connect
from amqp_async.codec.performatives import Attach, Begin, Flow, Open, Transfer
from amqp_async.codec.terminus import Source, Target

try:
    from engine_peer import CLIENT, SERVER, EnginePeer, pump
    from frames import AMQP_HEADER, ParsedFrame, frame, parse_stream
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import CLIENT, SERVER, EnginePeer, pump
    from tests.frames import AMQP_HEADER, ParsedFrame, frame, parse_stream

pytestmark = pytest.mark.anyio

MAX_UINT = 2**32 - 1
TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- the engine ---------------------------------------------------------------------------------------------------


def attached_sender() -> tuple[EnginePeer, EnginePeer, object]:
    client = EnginePeer(CLIENT)
    server = EnginePeer(SERVER, auto_accept=True)
    client.open()
    session = client.begin()
    sender = client.sender(session, "out", "q")
    pump(client, server)
    return client, server, sender


@pytest.mark.parametrize("credit", [2**31 - 1, 2**31, MAX_UINT])
def test_a_sender_takes_any_credit_the_receiver_grants(credit: int) -> None:
    client, server, sender = attached_sender()
    [receiver] = [link for session in server.connection.sessions for link in session.links if link.name == "out"]
    receiver.grant_credit(credit)
    pump(client, server)
    assert sender.link_credit == credit  # type: ignore[attr-defined]
    sender.send(b"\x00\x53\x77\xa1\x02hi")  # type: ignore[attr-defined]
    pump(client, server)
    assert sender.link_credit == credit - 1  # type: ignore[attr-defined]
    assert receiver.link_credit == credit - 1
    assert receiver.delivery_count == 1  # it arrived


def test_a_receiver_granting_the_most_credit_sees_a_drain_give_it_all_back() -> None:
    client, server, sender = attached_sender()
    [receiver] = [link for session in server.connection.sessions for link in session.links if link.name == "out"]
    receiver.grant_credit(MAX_UINT, drain=True)
    pump(client, server)
    sender.send(b"\x00\x53\x77\xa1\x02hi")  # type: ignore[attr-defined]
    sender.drained()  # type: ignore[attr-defined]  # the rest of the credit given back
    pump(client, server)
    assert receiver.link_credit == 0 and receiver.drained_credit == MAX_UINT - 1
    assert sender.link_credit == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("window", [2**31, MAX_UINT])
def test_a_session_takes_any_incoming_window_the_peer_announces_in_a_flow(window: int) -> None:
    client, server, sender = attached_sender()
    [session] = server.connection.sessions
    session.incoming_window = window
    session._queue_session_flow()
    pump(client, server)
    assert sender.session.remote_incoming_window == window  # type: ignore[attr-defined]


# --- the broker, against a consumer written frame by frame --------------------------------------------------------


class RawConsumer:
    """A consumer of the broker's queue ``address`` on a raw socket: its frames as the test writes them."""

    def __init__(self, url: str, address: str) -> None:
        host, port = url.split("//")[1].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.buffer = b""
        self.sock.sendall(AMQP_HEADER + frame(Open(container_id="raw-consumer")))
        self.sock.sendall(frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100)))
        self.sock.sendall(frame(Attach(name="c", handle=0, role=True, source=Source(address=address), target=Target())))

    def flow(self, *, window: int = 100, credit: int, drain: bool = False) -> None:
        self.sock.sendall(
            frame(
                Flow(
                    next_incoming_id=0,
                    incoming_window=window,
                    next_outgoing_id=0,
                    outgoing_window=100,
                    handle=0,
                    delivery_count=0,
                    link_credit=credit,
                    drain=drain,
                )
            )
        )

    def frames(self, seconds: float) -> list[ParsedFrame]:
        """What the broker writes within ``seconds``."""
        found: list[ParsedFrame] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                break
            if not data:
                break
            self.buffer += data
            while True:
                if self.buffer.startswith(b"AMQP"):
                    self.buffer = self.buffer[8:]
                    continue
                if len(self.buffer) < 8 or len(self.buffer) < struct.unpack(">I", self.buffer[:4])[0]:
                    break
                size = struct.unpack(">I", self.buffer[:4])[0]
                found += [item for item in parse_stream(self.buffer[:size]) if isinstance(item, ParsedFrame)]
                self.buffer = self.buffer[size:]
        return found


async def fill(url: str, address: str, count: int) -> None:
    async with connect(url) as conn:
        sender = await conn.open_sender(address)
        for index in range(count):
            await sender.send(Message(body=f"m{index}"))


@pytest.mark.parametrize(("credit", "window"), [(MAX_UINT, 100), (2**31, 100), (100, MAX_UINT), (100, 2**31)])
async def test_the_broker_delivers_to_a_consumer_granting_the_most(credit: int, window: int) -> None:
    with BrokerThread() as broker:
        await fill(broker.url, "q", 3)
        consumer = RawConsumer(broker.url, "q")
        consumer.frames(0.2)  # open, begin, attach
        consumer.flow(credit=credit, window=window)
        transfers = [item for item in consumer.frames(1.0) if isinstance(item.body, Transfer)]
        assert len(transfers) == 3


async def test_the_broker_drains_the_most_credit_after_what_it_has() -> None:
    with BrokerThread() as broker:
        await fill(broker.url, "q", 3)
        consumer = RawConsumer(broker.url, "q")
        consumer.frames(0.2)
        consumer.flow(credit=MAX_UINT, drain=True)
        found = consumer.frames(1.0)
        assert sum(isinstance(item.body, Transfer) for item in found) == 3
        [drained] = [item.body for item in found if isinstance(item.body, Flow) and item.body.handle is not None]
        # §2.6.7: the sender advances its delivery-count by the credit left, and has none
        assert (drained.delivery_count, drained.link_credit) == (MAX_UINT, 0)
