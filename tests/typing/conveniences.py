"""A user's program with the conveniences: ``async with`` links and deliveries, receive_many, send_many, JSON
bodies, run_threadsafe (checked by mypy --strict and pyright strict; never run)."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from typing_extensions import assert_type

from amqp_async import Accepted, Connection, Delivery, Message, OnError, SendManyError


async def handle(conn: Connection) -> None:
    async with conn.open_receiver("jobs", credit=50, on_error="reject") as receiver:
        deliveries = await receiver.receive_many(20, timeout=1.0)
        assert_type(deliveries, list[Delivery])
        for delivery in deliveries:
            async with delivery as same:  # accepted at the end; rejected if the block raises
                assert_type(same, Delivery)
                job = delivery.message.json()
                assert_type(job, Any)
        assert_type(receiver.on_error, OnError)


async def publish(conn: Connection) -> None:
    async with conn.open_sender("jobs") as sender:
        batch = [Message.from_json({"job": n}, subject="job") for n in range(10)]
        assert_type(batch, list[Message])
        outcomes = await sender.send_many(batch)
        assert_type(outcomes, list[Accepted])
        try:
            await sender.send_many([Message(body=b"x"), b"\x00Sw\xa1\x01y"])
        except SendManyError as failed:
            for index, error in failed.errors:
                assert_type(index, int)
                print(index, error.condition, error.description)
            assert_type(failed.outcomes, dict[int, Accepted | None])
    async with conn.open_sender("metrics", delivery="at-most-once") as unconfirmed:
        assert_type(await unconfirmed.send_many([Message(body=1)]), list[None])


def from_a_thread(conn: Connection, sender_ready: threading.Event) -> None:
    future = conn.run_threadsafe(conn.open_sender("from-threads"))
    sender = future.result(5)
    outcome = conn.run_threadsafe(sender.send(Message(body="from a thread")))
    assert_type(outcome, concurrent.futures.Future[Accepted])
    assert_type(outcome.result(5), Accepted)
    sender_ready.set()
