"""``amqp-async bench``: how fast a peer takes and gives messages: a send phase, then a receive phase.

Each phase moves ``--count`` messages of ``--size`` bytes through one connection (the receive phase takes back
what the send phase left), and the summary table gives messages, bytes, seconds, msg/s and MB/s of each.
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections import deque
from typing import Any

import anyio
import attrs
import click

from ..client import Tracker, connect
from ..message import Message
from ._connect import connect_arguments, connection_options, split_connection_options
from ._exit import CommandFailed, ExitCode
from ._progress import RunProgress

__all__ = ["PhaseResult", "bench"]


@attrs.frozen
class PhaseResult:
    """One phase's figures."""

    phase: str
    messages: int
    bytes: int
    seconds: float

    @property
    def rate(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def throughput(self) -> float:
        """Body megabytes (10^6) per second."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        """The figures as a JSON object."""
        return {**attrs.asdict(self), "rate": self.rate, "throughput_mb_s": self.throughput}


async def _send_phase(
    connection: Any, address: str, count: int, size: int, delivery: str, window: int, run: str
) -> PhaseResult:
    sender = await connection.open_sender(address, delivery=delivery)
    body = b"x" * size
    pending: deque[Tracker] = deque()
    with RunProgress("sent", count) as progress:
        for _ in range(count):
            tracker = await sender.submit(Message(body, subject=run))
            if delivery == "at-most-once":
                progress.advance(1, size)
                continue
            pending.append(tracker)
            if len(pending) >= window:
                await pending.popleft()
                progress.advance(1, size)
        while pending:
            await pending.popleft()
            progress.advance(1, size)
    await sender.close()
    return PhaseResult("send", progress.messages, progress.size, progress.elapsed)


async def _receive_phase(
    connection: Any, address: str, count: int, credit: int, timeout: float, run: str
) -> PhaseResult:
    receiver = await connection.open_receiver(address, credit=min(credit, count))
    with RunProgress("received", count) as progress:
        while progress.messages < count:
            delivery = None
            with anyio.move_on_after(timeout):
                delivery = await receiver.receive()
            if delivery is None:
                raise CommandFailed(ExitCode.TIMEOUT, f"received {progress.messages} of {count} messages")
            message = delivery.message
            if message.subject != run:
                # A message this run did not send (the queue was not empty): counted, it would make the figures
                # wrong and leave as many of the run's own behind. Given back, untouched.
                await delivery.release()
                raise CommandFailed(
                    ExitCode.USAGE,
                    f"{address} held messages this run did not send: bench needs an empty queue of its own (leave "
                    f"--address out for a fresh one); they were given back, and the {count:,} this run sent are "
                    f"there too, {progress.messages:,} of them received",
                )
            size = len(message.body or b"")
            await delivery.accept()
            progress.advance(1, size)
    await receiver.close()
    return PhaseResult("receive", progress.messages, progress.size, progress.elapsed)


async def _bench(
    url: str | None,
    options: dict[str, Any],
    *,
    address: str,
    count: int,
    size: int,
    delivery: str,
    window: int,
    credit: int,
    timeout: float,
    embedded: bool,
    output: str,
) -> None:
    results: list[PhaseResult] = []
    async with contextlib.AsyncExitStack() as stack:
        if embedded:
            from ..broker import Broker

            url = (await stack.enter_async_context(Broker(port=0))).url
        connection = await stack.enter_async_context(connect(url, **options))
        run = f"amqp-async bench {uuid.uuid4().hex[:12]}"  # the subject of this run's messages
        results.append(await _send_phase(connection, address, count, size, delivery, window, run))
        results.append(await _receive_phase(connection, address, count, credit, timeout, run))
    _report(results, output, title=f"{count:,} messages of {size:,} bytes, {delivery}")


def _report(results: list[PhaseResult], output: str, *, title: str) -> None:
    if output == "json":
        click.echo(json.dumps([result.as_json() for result in results]))
        return
    from rich.console import Console  # only here: the other commands start without rich
    from rich.table import Table

    table = Table(title=title)
    for name in ("phase", "messages", "bytes", "seconds", "msg/s", "MB/s"):
        table.add_column(name, justify="left" if name == "phase" else "right")
    for r in results:
        table.add_row(
            r.phase, f"{r.messages:,}", f"{r.bytes:,}", f"{r.seconds:.3f}", f"{r.rate:,.0f}", f"{r.throughput:.2f}"
        )
    Console().print(table)


@click.command()
@click.option("--address", "-a", help="the queue to use (default: a fresh name; RabbitMQ: /queue/NAME).")
@click.option("--count", "-c", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.option("--size", type=click.IntRange(min=0), default=100, show_default=True, help="body bytes.")
@click.option(
    "--delivery",
    type=click.Choice(("at-least-once", "at-most-once")),
    default="at-least-once",
    show_default=True,
)
@click.option("--window", type=click.IntRange(min=1), default=1000, show_default=True, help="sends in flight.")
@click.option("--credit", type=click.IntRange(min=1), default=1000, show_default=True, help="receiver prefetch.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="seconds to wait for each message in the receive phase (exit 5 after).",
)
@click.option("--embedded", is_flag=True, help="run against an embedded broker in this process (ignores --url).")
@click.option("--output", "-o", type=click.Choice(("table", "json")), default="table", show_default=True)
@connection_options
def bench(
    address: str | None,
    count: int,
    size: int,
    delivery: str,
    window: int,
    credit: int,
    timeout: float,
    embedded: bool,
    output: str,
    **connection: Any,
) -> None:
    """Measure send and receive rates against a peer and print a summary table.

    \b
    amqp-async bench --embedded --count 50000
    amqp-async bench -u amqp://guest:guest@localhost --address /queue/bench --output json
    """
    url, options = connect_arguments(split_connection_options(connection))
    from ._run import run_command

    run_command(
        functools.partial(
            _bench,
            url,
            options,
            address=address or f"amqp-async-bench-{uuid.uuid4().hex[:8]}",
            count=count,
            size=size,
            delivery=delivery,
            window=window,
            credit=credit,
            timeout=timeout,
            embedded=embedded,
            output=output,
        )
    )
