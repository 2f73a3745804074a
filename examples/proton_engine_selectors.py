"""proton's engine API driven from a program's own event loop (``selectors``), as proton's ``proton_tornado.py``
integration drives it from Tornado's: the program owns the socket; the ``Transport`` only turns bytes into events
and events into bytes.

Sends ``--count`` messages to ``--address`` on an AMQP peer and waits for each outcome, then receives them back.

    python examples/proton_engine_selectors.py --url amqp://localhost:5672 --address queue-1 --count 10

Runs unchanged on python-qpid-proton (``--module proton``) and on amqp_async (``--module amqp_async.proton``, the
default).
"""

from __future__ import annotations

import argparse
import importlib
import selectors
import socket
import time
from typing import Any
from urllib.parse import urlparse


class EngineLoop:
    """One connection's engine pumped over a non-blocking socket by a ``selectors`` loop."""

    def __init__(self, mod: Any, host: str, port: int) -> None:
        self.mod = mod
        self.connection = mod.Connection()
        self.collector = mod.Collector()
        self.connection.collect(self.collector)
        self.transport = mod.Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.transport.bind(self.connection)
        self.connection.hostname = host
        self.sock = socket.create_connection((host, port))
        self.sock.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ)

    def step(self, timeout: float = 0.05) -> list[Any]:
        """One round: write what the transport has, read what the socket has, tick; return the new events."""
        pending = self.transport.pending()
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if pending > 0 else 0)
        self.selector.modify(self.sock, want)
        for _key, mask in self.selector.select(timeout):
            if mask & selectors.EVENT_WRITE:
                data = self.transport.peek(pending)
                if data:
                    self.transport.pop(self.sock.send(data))
            if mask & selectors.EVENT_READ:
                capacity = self.transport.capacity()
                if capacity > 0:
                    data = self.sock.recv(capacity)
                    if data:
                        self.transport.push(data)
                    else:
                        self.transport.close_tail()
        self.transport.tick(time.monotonic())
        events = []
        while (event := self.collector.peek()) is not None:
            events.append((event.type, event.context))
            self.collector.pop()
        return events

    def run_until(self, done: Any, limit: float = 10.0) -> None:
        deadline = time.monotonic() + limit
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError("the peer did not answer in time")
            self.step()

    def close(self) -> None:
        self.selector.close()
        self.sock.close()


def round_trip(module_name: str, url: str, address: str, count: int) -> list[bytes]:
    """Send ``count`` messages, wait for their outcomes, receive them back; return the bodies received."""
    mod = importlib.import_module(module_name)
    parsed = urlparse(url)
    loop = EngineLoop(mod, parsed.hostname or "localhost", parsed.port or 5672)
    try:
        connection = loop.connection
        connection.open()
        session = connection.session()
        session.open()
        sender = session.sender("engine-sender")
        sender.target.address = address
        sender.open()
        loop.run_until(lambda: sender.credit > 0)
        deliveries = []
        for n in range(count):
            delivery = sender.delivery(b"%d" % n)
            message = mod.Message(body=f"message {n}")
            sender.send(message.encode())
            sender.advance()
            deliveries.append(delivery)
        loop.run_until(lambda: all(d.remote_state == mod.Delivery.ACCEPTED for d in deliveries))
        for delivery in deliveries:
            delivery.settle()
        receiver = session.receiver("engine-receiver")
        receiver.source.address = address
        receiver.open()
        receiver.flow(count)
        bodies: list[bytes] = []

        def take() -> bool:
            while receiver.current is not None and not receiver.current.partial:
                current = receiver.current
                data = receiver.recv(current.pending)
                message = mod.Message()
                message.decode(data)
                bodies.append(message.body)
                current.update(mod.Delivery.ACCEPTED)
                current.settle()
            return len(bodies) == count

        loop.run_until(take)
        connection.close()
        loop.run_until(lambda: bool(connection.state & mod.Endpoint.REMOTE_CLOSED))
        return bodies
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://localhost:5672")
    parser.add_argument("--address", default="examples")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--module", default="amqp_async.proton")
    arguments = parser.parse_args()
    for body in round_trip(arguments.module, arguments.url, arguments.address, arguments.count):
        print(body)


if __name__ == "__main__":
    main()
