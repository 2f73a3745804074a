"""The quickstart: start the embedded broker, then send and receive through it with the awaitable API.

    python examples/quickstart.py

The broker serves on a free port in this process (``python -m amqp_async.broker`` runs it on its own); the
client connects to it like to any AMQP 1.0 broker.
"""

from __future__ import annotations

import anyio

import amqp_async
from amqp_async.broker import Broker


async def main() -> None:
    async with Broker(port=0) as broker:
        print(f"embedded broker listening on {broker.url}")
        async with amqp_async.connect(broker.url) as connection:
            sender = await connection.open_sender("quickstart")
            for number in range(3):
                outcome = await sender.send(amqp_async.Message(body=f"hello {number}", subject="greeting"))
                print(f"sent 'hello {number}': {outcome}")
            receiver = await connection.open_receiver("quickstart", credit=10)
            for _ in range(3):
                delivery = await receiver.receive()
                print(f"received {delivery.message.body!r} (subject {delivery.message.subject!r})")
                await delivery.accept()
    print("done")


if __name__ == "__main__":
    anyio.run(main)
