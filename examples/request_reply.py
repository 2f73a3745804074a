"""Request/reply over a dynamic reply queue: a server task answers requests with their text in upper case.

    python examples/request_reply.py [URL] [REQUEST ADDRESS]

The client opens a dynamic receiver (the peer creates a temporary queue and tells us its address), sends each
request with ``reply_to`` set to that address, and matches replies by ``correlation_id``.
"""

from __future__ import annotations

import sys

import anyio

import amqp_async


async def serve(url: str, address: str, ready: anyio.Event, requests: int) -> None:
    async with amqp_async.connect(url) as connection:
        receiver = await connection.open_receiver(address)
        replies = await connection.open_sender(None)  # anonymous: each reply goes to its message's address
        ready.set()
        for _ in range(requests):
            delivery = await receiver.receive()
            request = delivery.message
            reply = amqp_async.Message(
                address=request.reply_to, correlation_id=request.id, body=str(request.body).upper()
            )
            await replies.send(reply)
            await delivery.accept()


async def main(url: str, address: str) -> None:
    questions = ["hello", "request", "reply"]
    async with anyio.create_task_group() as group:
        ready = anyio.Event()
        group.start_soon(serve, url, address, ready, len(questions))
        await ready.wait()
        async with amqp_async.connect(url) as connection:
            reply_queue = await connection.open_receiver(None, dynamic=True)
            sender = await connection.open_sender(address)
            for number, question in enumerate(questions):
                await sender.send(amqp_async.Message(id=number, reply_to=reply_queue.address, body=question))
                delivery = await reply_queue.receive()
                await delivery.accept()
                print(f"{question!r} -> {delivery.message.body!r} (correlation {delivery.message.correlation_id})")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    anyio.run(
        main,
        arguments[0] if arguments else "amqp://127.0.0.1:5672",
        arguments[1] if len(arguments) > 1 else "requests",
    )
