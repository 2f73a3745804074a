"""Send messages to a queue and wait for each outcome.

    python examples/send.py [URL] [ADDRESS] [COUNT]

URL defaults to amqp://127.0.0.1:5672, ADDRESS to "examples", COUNT to 10.
"""

from __future__ import annotations

import sys

import anyio

import amqp_async


async def main(url: str, address: str, count: int) -> None:
    async with amqp_async.connect(url) as connection:
        sender = await connection.open_sender(address)
        # Pipelined: submit() waits only for credit; the trackers are awaited at the end.
        trackers = [
            await sender.submit(amqp_async.Message(body=f"message {number}", properties={"number": number}))
            for number in range(count)
        ]
        for tracker in trackers:
            await tracker  # raises MessageRejected, MessageReleased, ... if the peer did not accept it
        print(f"sent {count} messages to {address!r}, all accepted")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    anyio.run(
        main,
        arguments[0] if arguments else "amqp://127.0.0.1:5672",
        arguments[1] if len(arguments) > 1 else "examples",
        int(arguments[2]) if len(arguments) > 2 else 10,
    )
