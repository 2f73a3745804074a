"""Request/reply on any AMQP 1.0 peer: a server task answers requests with their text in upper case.

    python examples/request_reply.py [URL] [REQUEST ADDRESS] [REPLY ADDRESS]

Peers differ in what they offer (docs/broker-differences.md), so this program asks the peer
(``connection.peer_capabilities``) instead of assuming:

- **replies**: through the anonymous relay (one sender with no target; each reply goes to its request's
  ``reply_to``) when the peer offers ``ANONYMOUS-RELAY``, else a sender per reply address, opened on first use;
- **the reply queue**: a dynamic node (the peer makes a temporary queue and names it) unless the peer is known to
  make none or refuses the dynamic attach; then a named queue: REPLY ADDRESS, or a name made from the request
  address (``requests`` gives ``replies-<random>``, RabbitMQ's ``/queue/requests`` gives
  ``/queue/replies-<random>``). A named queue outlives the program on brokers that keep queues.

Requests are matched to replies by ``correlation_id``. It prints how it talks to the peer, then one line per
request. Tried on the embedded broker, RabbitMQ 3.10 (``amqp://guest:guest@localhost /queue/requests``) and
python-qpid-proton's broker example.
"""

from __future__ import annotations

import sys
import uuid

import anyio

import amqp_async


async def reply_senders(connection: amqp_async.Connection) -> dict[str | None, amqp_async.Sender]:
    """Where replies go: one anonymous sender (key None) when the peer relays, else filled per address."""
    if connection.peer_capabilities.anonymous_relay:
        return {None: await connection.open_sender(None)}
    return {}


async def send_reply(
    connection: amqp_async.Connection, senders: dict[str | None, amqp_async.Sender], reply: amqp_async.Message
) -> None:
    if None in senders:  # the anonymous relay: the message's address says where it goes
        await senders[None].send(reply)
        return
    address = reply.address
    if address not in senders:
        senders[address] = await connection.open_sender(address)
    await senders[address].send(reply)


async def serve(url: str, address: str, ready: anyio.Event, requests: int) -> None:
    async with amqp_async.connect(url) as connection:
        receiver = await connection.open_receiver(address)
        senders = await reply_senders(connection)
        ready.set()
        for _ in range(requests):
            delivery = await receiver.receive()
            request = delivery.message
            reply = amqp_async.Message(
                address=request.reply_to, correlation_id=request.id, body=str(request.body).upper()
            )
            await send_reply(connection, senders, reply)
            await delivery.accept()


def named_reply_queue(request_address: str) -> str:
    """A reply queue of our own beside the request queue: the same prefix (``/queue/`` for RabbitMQ)."""
    prefix = request_address[: request_address.rfind("/") + 1]
    return f"{prefix}replies-{uuid.uuid4().hex[:12]}"


async def open_reply_queue(
    connection: amqp_async.Connection, request_address: str, reply_address: str | None
) -> tuple[amqp_async.Receiver, str]:
    """The receiver of the replies, and how it was made."""
    if reply_address is None and connection.peer_capabilities.dynamic_nodes is not False:
        # Dynamic nodes are not announced (§3.5.3): try, on a session of its own, as a peer that refuses may
        # end the session (RabbitMQ 3.x does).
        session = await connection.open_session()
        try:
            receiver = await session.open_receiver(None, dynamic=True)
            if receiver.address:
                return receiver, f"a dynamic node, {receiver.address}"
            print("no dynamic node: the peer answered without an address")
            await receiver.close()
        except (amqp_async.LinkError, amqp_async.SessionError) as refusal:
            print(f"no dynamic node: {refusal}")
    elif reply_address is None:
        print("no dynamic node: the peer makes none")
    address = reply_address or named_reply_queue(request_address)
    return await connection.open_receiver(address), f"a named queue, {address}"


async def main(url: str, address: str, reply_address: str | None) -> None:
    questions = ["hello", "request", "reply"]
    async with anyio.create_task_group() as group:
        ready = anyio.Event()
        group.start_soon(serve, url, address, ready, len(questions))
        await ready.wait()
        async with amqp_async.connect(url) as connection:
            relay = connection.peer_capabilities.anonymous_relay
            print(f"replies through {'the anonymous relay' if relay else 'a sender per reply address'}")
            reply_queue, how = await open_reply_queue(connection, address, reply_address)
            print(f"replies to {how}")
            sender = await connection.open_sender(address)
            for number, question in enumerate(questions):
                await sender.send(amqp_async.Message(id=number, reply_to=reply_queue.address, body=question))
                delivery = await reply_queue.receive()
                await delivery.accept()
                print(f"{question!r} -> {delivery.message.body!r} (correlation {delivery.message.correlation_id!s})")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    anyio.run(
        main,
        arguments[0] if arguments else "amqp://127.0.0.1:5672",
        arguments[1] if len(arguments) > 1 else "requests",
        arguments[2] if len(arguments) > 2 else None,
    )
