"""Every awaiting call of the awaitable client, made while the peer is gone, and how each ended: the scenarios of
tests/test_client_bounds.py, run there in-process with small bounds and by tests/default_bounds_program.py (one
process per scenario, all at once) with the library's defaults.

A scenario starts the embedded broker as a process of its own (``tests/broker_process.py``), connects, prepares
one of everything (a sender with credit, receivers, a delivery received with receiver settle mode second, a
declared transaction, a second connection to close), then makes the peer go away:

- ``killed``: SIGKILL, the kernel closes its sockets (the calls start once the client saw the loss, so that each
  call's outcome is exact);
- ``stopped``: SIGSTOP, its sockets stay open and nothing answers (new TCP connections still complete into the
  listen backlog): only the idle timeout (heartbeat) tells, and ``open_timeout`` (shorter) for a begin or an
  attach;
- ``nothing-listening``: no broker at all: ``connect()`` alone.

Each call then runs in a task of its own; the outcome is the name of the exception it raised (``"returned"`` if it
returned) and the seconds from the failure to the end.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

import amqp_async

try:
    from broker_process import BrokerProcess, free_port
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_process import BrokerProcess, free_port

__all__ = ["EXPECTED", "Outcome", "run_scenario"]

Outcome = dict[str, Any]  # {"raised": class name or "returned", "seconds": float, "text": str, "errno": int | None}

#: The outcome of each call, by scenario.
EXPECTED: dict[str, dict[str, str]] = {
    "stopped": {
        "connect": "ConnectTimeout",  # TCP completes into the backlog; the open never comes
        # the begin and the attaches go out on the stopped peer's connection: open_timeout passes before heartbeat
        "open_session": "SessionTimeout",
        "open_sender": "LinkTimeout",
        "open_receiver": "LinkTimeout",
        "send": "DeliveryInDoubt",  # transferred; the outcome never came before the loss
        "submit_tracker": "DeliveryInDoubt",
        "receive": "ConnectionLost",
        "iterate": "ConnectionLost",
        # A reconnect attempt connects (into the stopped broker's backlog) and attaches the links again: the
        # drained link's credit went with the old link; the old link's delivery can no longer be settled.
        "drain": "returned",
        "accept": "LinkDetached",  # mode second: the sender's settlement never came, and never will
        "commit": "TransactionInDoubt",  # the discharge went out; its outcome never came
        "close": "returned",
    },
    "killed": {
        "connect": "ConnectionRefused",
        # the connection was reconnecting all along: that time is not the peer's to answer in (open_timeout)
        "open_session": "ConnectionLost",
        "open_sender": "ConnectionLost",
        "open_receiver": "ConnectionLost",
        "send": "ConnectionLost",  # waits for the new link's credit; reconnecting gives up
        "submit_tracker": "ConnectionLost",
        "receive": "ConnectionLost",
        "iterate": "ConnectionLost",
        "drain": "ConnectionLost",
        # at once: the connection is lost and reconnecting, nothing can carry the settlement (the peer gives the
        # message again); it waited for the reconnecting to give up, a settlement sent on the lost link
        "accept": "LinkDetached",
        "commit": "TransactionRolledBack",  # the connection ended before the commit was asked
        "close": "returned",
    },
    "nothing-listening": {"connect": "ConnectionRefused", "connect_failover": "ConnectionRefused"},
}


async def _outcome(call: Callable[[], Awaitable[Any]], started: float) -> Outcome:
    try:
        await call()
    except Exception as exc:
        return {
            "raised": type(exc).__name__,
            "seconds": anyio.current_time() - started,
            "text": str(exc),
            "errno": getattr(exc, "errno", None),
            "cause": type(exc.__cause__).__name__ if exc.__cause__ is not None else None,
        }
    return {"raised": "returned", "seconds": anyio.current_time() - started, "text": "", "errno": None, "cause": None}


async def _run_all(calls: dict[str, Callable[[], Awaitable[Any]]], started: float) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}

    async def one(name: str, call: Callable[[], Awaitable[Any]]) -> None:
        outcomes[name] = await _outcome(call, started)

    async with anyio.create_task_group() as group:
        for name, call in calls.items():
            group.start_soon(one, name, call)
    return outcomes


async def run_scenario(scenario: str, options: dict[str, Any]) -> dict[str, Outcome]:
    """Run ``scenario`` with ``connect(**options)`` (an empty dict: the defaults); the outcome of each call."""
    if scenario == "nothing-listening":
        urls = [f"amqp://127.0.0.1:{free_port()}", f"amqp://127.0.0.1:{free_port()}"]
        started = anyio.current_time()
        return await _run_all(
            {
                "connect": lambda: amqp_async.connect(urls[0], **options),
                "connect_failover": lambda: amqp_async.connect(urls=urls, **options),
            },
            started,
        )
    with BrokerProcess() as broker:
        conn = await amqp_async.connect(broker.url, **options)
        closer = await amqp_async.connect(broker.url, **options)
        sender = await conn.open_sender("send")
        assert await sender.send(amqp_async.Message(body="before")) is not None
        receiver = await conn.open_receiver("receive")
        iterated = await conn.open_receiver("iterate")
        drained = await conn.open_receiver("drain", credit=0)
        drained.add_credit(5)
        exact = await conn.open_receiver("exact", delivery="exactly-once")
        await (await conn.open_sender("exact", delivery="exactly-once")).send(amqp_async.Message(body="exactly"))
        delivery = await exact.receive()
        transaction = await conn.transaction()
        await sender.send(amqp_async.Message(body="in the transaction"), transaction=transaction)

        async def submit_tracker() -> Any:
            return await (await sender.submit(amqp_async.Message(body="submitted")))

        async def iterate() -> None:
            async for _ in iterated:
                pass

        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "connect": lambda: amqp_async.connect(broker.url, **options),
            "open_session": conn.open_session,
            "open_sender": lambda: conn.open_sender("new-sender"),
            "open_receiver": lambda: conn.open_receiver("new-receiver"),
            "send": lambda: sender.send(amqp_async.Message(body="after")),
            "submit_tracker": submit_tracker,
            "receive": receiver.receive,
            "iterate": iterate,
            "drain": drained.drain,
            "accept": delivery.accept,
            "commit": transaction.commit,
            "close": closer.close,
        }
        if scenario == "killed":
            broker.kill()
            started = anyio.current_time()
            while conn.state is amqp_async.ConnectionState.OPEN or closer.state is amqp_async.ConnectionState.OPEN:
                await anyio.sleep(0.005)  # the client saw the loss: each call's outcome is exact
        elif scenario == "stopped":
            broker.stop()
            started = anyio.current_time()
        else:
            raise ValueError(f"unknown scenario {scenario!r}")
        try:
            return await _run_all(calls, started)
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close()
                await closer.close()


def dump(outcomes: dict[str, Outcome]) -> str:
    return json.dumps(outcomes, sort_keys=True)
