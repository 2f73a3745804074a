"""Receive messages from a queue, accepting each one.

    python examples/receive.py [URL] [ADDRESS] [COUNT]

URL defaults to amqp://127.0.0.1:5672, ADDRESS to "examples", COUNT to 10 (0: until the link closes).
"""

from __future__ import annotations

import sys

import anyio

import amqp_async


async def main(url: str, address: str, count: int) -> None:
    received = 0
    async with amqp_async.connect(url) as connection:
        # credit=100: up to 100 messages are prefetched, and the credit is topped up as they are taken.
        receiver = await connection.open_receiver(address, credit=100)
        async for delivery in receiver:
            print(f"received {delivery.message.body!r}")
            await delivery.accept()
            received += 1
            if received == count:
                break
    print(f"received {received} messages from {address!r}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    anyio.run(
        main,
        arguments[0] if arguments else "amqp://127.0.0.1:5672",
        arguments[1] if len(arguments) > 1 else "examples",
        int(arguments[2]) if len(arguments) > 2 else 10,
    )
