"""Mistakes the types catch. Each line below is an error both checkers must report: mypy runs with
``warn_unused_ignores`` (``--strict``) and pyright with ``reportUnnecessaryTypeIgnoreComment``, so a line that stops
being an error fails the typecheck session. Never run."""

from __future__ import annotations

import amqp_async
from amqp_async import Accepted, Connection, Delivery, Message, Receiver, Sender


def needs_confirmation(sender: Sender[Accepted]) -> None:
    print(sender.name)


async def mistakes(conn: Connection, sender: Sender, receiver: Receiver, delivery: Delivery) -> None:
    # A misspelt link option (the example): mypy names it, and so does the TypeError at run time.
    await conn.open_receiver("q", credits=10)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    await conn.open_sender("q", deliver="at-most-once")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    await conn.open_sender("q", delivery="at-least-twice")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    await conn.open_receiver("q", distribution_mode="share")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    await conn.open_session(incoming_widow=10)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    await amqp_async.connect("amqp://localhost", hearbeat=30)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    await amqp_async.connect("amqp://localhost", heartbeat="30s")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # An error's info map has symbol (str) keys (§2.8.19), and its values are AMQPValues to narrow.
    amqp_async.AMQPError("x", info={1: "one"})  # type: ignore[dict-item]  # pyright: ignore[reportArgumentType]
    # A typo in a method name.
    await sender.sned(Message(body="x"))  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Only Messages and encoded bytes are sent (a TypeError at run time too).
    await sender.send("text")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    await sender.send({"a": 1})  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # An unknown message field.
    Message(body="x", subjet="typo")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    # An at-most-once sender is not a confirmed one: its send() gives no outcome.
    unconfirmed = await conn.open_sender("q", delivery="at-most-once")
    needs_confirmation(unconfirmed)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # The body is what AMQP carries, not Any: narrow it before using it as a str.
    delivery.message.body.upper()  # type: ignore[union-attr]  # pyright: ignore[reportOptionalMemberAccess, reportAttributeAccessIssue, reportUnknownMemberType]
    # A forgotten await: the Opening is not the sender (before: its coroutine send() took the message, typed Any).
    forgotten = conn.open_sender("q")
    await forgotten.send(Message(body="x"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Message.send()/recv() are proton's, for the callback API's links (before: typed Any, a TypeError at run time).
    Message(body="x").send(sender)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    Message().recv(receiver)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # receive_many takes its timeout by keyword.
    await receiver.receive_many(10, 1.0)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    # A received body's values are AMQPValues to narrow (Described.value was Any: an AttributeError at run time).
    body = delivery.message.body
    if isinstance(body, amqp_async.types.Described):
        body.value.upper()  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportOptionalMemberAccess]
    amqp_async.types.ulong(7).upper()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # A settle mode that contradicts the delivery asked for (a ValueError at run time too).
    await conn.open_sender("q", delivery="at-most-once", snd_settle_mode=2)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    await conn.open_sender("q", snd_settle_mode=1)  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
