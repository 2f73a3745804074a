"""A pair of our protocol engines in one process: messages per second, both sides' work counted.

Run: ``python benchmarks/engine.py [--messages N]`` (or ``nox -s bench``).

A client engine sends N messages with 16-byte bodies to a server engine over an in-memory byte pipe: the
receiver grants credit in batches (prefetch 1000, topped up as messages are consumed), accepts every message,
and its dispositions flow back. At-most-once sends settled transfers (no dispositions); at-least-once sends
unsettled ones and waits for every outcome. The timed region covers everything both engines do: sending,
framing, parsing, window and credit accounting, dispositions and their processing. The payload is a message
encoded once beforehand (the codec has its own benchmark), so this measures the engine alone.

python-qpid-proton's engine is measured the same way (its Transport + Connection pumped in memory, same message,
same credit and settlement), side by side in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.performatives import SND_SETTLED, SND_UNSETTLED
from amqp_async.codec.terminus import Source, Target
from amqp_async.message import Message
from amqp_async.protocol import events
from amqp_async.protocol.connection import CLIENT, SERVER, Connection

PREFETCH = 1000
PAYLOAD = Message(body=b"0123456789abcdef").encode()


def ours(count: int, settled: bool) -> float:
    """Messages per second between two of our engines."""
    client = Connection(role=CLIENT, container_id="bench-client")
    server = Connection(role=SERVER, container_id="bench-server")
    client.open()

    def pump() -> None:
        for _ in range(100):
            out = client.data_to_send()
            back = server.data_to_send()
            if not out and not back:
                return
            if out:
                server.receive_data(out)
            if back:
                client.receive_data(back)

    pump()
    server.open()
    session = client.begin_session()
    pump()
    for event in server.next_events():
        if isinstance(event, events.SessionBegun):
            event.session.begin()
    sender = session.attach_sender(
        "bench", target=Target(address="q"), source=Source(), snd_settle_mode=SND_SETTLED if settled else SND_UNSETTLED
    )
    pump()
    receiver = None
    for event in server.next_events():
        if isinstance(event, events.LinkAttached):
            receiver = event.link
            receiver.attach(source=receiver.remote_source, target=receiver.remote_target)
            receiver.grant_credit(PREFETCH)
    assert receiver is not None
    pump()
    client.next_events()
    accepted = Accepted()
    sent = outcomes = received = 0
    start = time.perf_counter()
    while outcomes < count:
        while sent < count and sender.link_credit > 0:
            sender.send(PAYLOAD)
            sent += 1
        server.receive_data(client.data_to_send())
        incoming = receiver.incoming
        consumed = len(incoming)
        while incoming:
            delivery = incoming.popleft()
            if not settled:
                receiver.settle(delivery, accepted)
        received += consumed
        server.next_events()
        if receiver.link_credit < PREFETCH // 2:
            receiver.grant_credit(PREFETCH)
        client.receive_data(server.data_to_send())
        if settled:
            outcomes = received
        else:
            for event in client.next_events():
                if isinstance(event, events.DeliveriesUpdated):
                    outcomes += len(event.deliveries)
    elapsed = time.perf_counter() - start
    assert received == count
    return count / elapsed


def proton(count: int, settled: bool) -> float | None:
    """Messages per second between two python-qpid-proton engines, the same way."""
    try:
        import proton as p
    except ImportError:
        return None
    client_transport, server_transport = p.Transport(p.Transport.CLIENT), p.Transport(p.Transport.SERVER)
    client_connection, server_connection = p.Connection(), p.Connection()
    client_collector, server_collector = p.Collector(), p.Collector()
    client_connection.collect(client_collector)
    server_connection.collect(server_collector)
    client_transport.bind(client_connection)
    server_transport.bind(server_connection)

    def move(source: p.Transport, target: p.Transport) -> bool:
        moved = False
        while True:
            pending = source.pending()
            capacity = target.capacity()
            if pending <= 0 or capacity <= 0:
                return moved
            data = source.peek(min(pending, capacity))
            source.pop(len(data))
            target.push(data)
            moved = True

    def pump() -> None:
        while move(client_transport, server_transport) | move(server_transport, client_transport):
            pass

    client_connection.open()
    session = client_connection.session()
    session.open()
    sender = session.sender("bench")
    sender.target.address = "q"
    sender.snd_settle_mode = p.Link.SND_SETTLED if settled else p.Link.SND_UNSETTLED
    sender.open()
    pump()
    server_connection.open()
    receiver = None
    for collector in (server_collector,):
        while collector.peek():
            event = collector.peek()
            if event.type == p.Event.SESSION_REMOTE_OPEN:
                event.session.open()
            elif event.type == p.Event.LINK_REMOTE_OPEN:
                receiver = event.link
                receiver.source.copy(receiver.remote_source)
                receiver.target.copy(receiver.remote_target)
                receiver.open()
                receiver.flow(PREFETCH)
            collector.pop()
    assert receiver is not None
    pump()
    while client_collector.peek():
        client_collector.pop()
    sent = outcomes = received = 0
    tag = 0
    start = time.perf_counter()
    while outcomes < count:
        while sent < count and sender.credit > 0:
            delivery = sender.delivery(str(tag))
            tag += 1
            sender.send(PAYLOAD)
            sender.advance()
            if settled:
                delivery.settle()
            sent += 1
        move(client_transport, server_transport)
        while True:
            delivery = receiver.current
            if delivery is None or delivery.partial:
                break
            receiver.recv(delivery.pending)
            receiver.advance()
            if not settled:
                delivery.update(p.Delivery.ACCEPTED)
            delivery.settle()
            received += 1
        while server_collector.peek():
            server_collector.pop()
        if receiver.credit < PREFETCH // 2:
            receiver.flow(PREFETCH - receiver.credit)
        move(server_transport, client_transport)
        if settled:
            outcomes = received
        else:
            while client_collector.peek():
                event = client_collector.peek()
                if event.type == p.Event.DELIVERY:
                    delivery = event.delivery
                    if delivery.remote_state:
                        # (proton's Delivery.settled reports the peer's settlement, which came with it)
                        delivery.settle()
                        outcomes += 1
                client_collector.pop()
    elapsed = time.perf_counter() - start
    assert received == count
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    print(f"Engine pair in memory: {args.messages} messages of {len(PAYLOAD)} bytes, prefetch {PREFETCH}")
    print(f"{'mode':<16}{'amqp_async msg/s':>18}{'proton msg/s':>16}{'ratio':>8}")
    for label, settled in (("at-most-once", True), ("at-least-once", False)):
        ours_rate = ours(args.messages, settled)
        proton_rate = proton(args.messages, settled)
        if proton_rate is None:
            print(f"{label:<16}{ours_rate:>18,.0f}{'(not installed)':>16}")
        else:
            print(f"{label:<16}{ours_rate:>18,.0f}{proton_rate:>16,.0f}{ours_rate / proton_rate:>8.2f}")


if __name__ == "__main__":
    main()
