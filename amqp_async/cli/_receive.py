"""``amqp-async receive`` and ``peek``: take (or browse) messages from an address and print them."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import attrs
import click

from ..client import Delivery, Receiver, connect
from ..codec.conditions import LINK_MESSAGE_SIZE_EXCEEDED
from ..errors import LinkError
from ..message import Message
from ._browse import check_browsing
from ._connect import connect_arguments, connection_options, split_connection_options
from ._exit import CommandFailed, ExitCode
from ._files import receive_files
from ._progress import RunProgress
from ._run import body_size, run_command
from ._values import message_to_json, to_json

__all__ = ["peek", "receive"]

OUTPUTS = ("text", "json", "none")
#: The most messages printed before the output is flushed and they are settled, while more are ready.
_FLUSH_EVERY = 256
SETTLE_MODES = ("accept", "release", "reject")


@attrs.frozen(kw_only=True)
class ReceivePlan:
    """What a receive run does (the command's options, checked)."""

    address: str
    count: int | None
    timeout: float | None
    selector: str | None
    browse: bool
    output: str
    settle: str
    delivery: str
    credit: int
    quiet: bool
    #: fewer than ``count`` messages when the timeout passes is a failure (receive), or not (peek).
    count_required: bool = True


def format_message(message: Message, output: str) -> str:
    """One message as printed: its body as text (strings as they are, other values as JSON), or a JSON line."""
    if output == "json":
        return json.dumps(message_to_json(message), ensure_ascii=False)
    body = message.body
    if isinstance(body, str):
        return body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body).decode("utf-8", "backslashreplace")
    return json.dumps(to_json(body), ensure_ascii=False)


def _top_up(receiver: Receiver, plan: ReceivePlan, received: int) -> None:
    """Grant credit so that at most ``credit`` messages, and never more than ``count`` in all, are on their way.

    Manual flow control: a receiver that prefetched beyond ``count`` would hold messages it then gives back (or,
    at-most-once, loses: the sender settled them already).
    """
    wanted = plan.credit if plan.count is None else min(plan.credit, plan.count - received)
    missing = wanted - (receiver.credit + receiver.queued)
    if missing > 0:
        receiver.add_credit(missing)


async def _take(receiver: Receiver) -> Delivery:
    """The next delivery; a message larger than a receiver holds whole says how to receive it."""
    try:
        return await receiver.receive()
    except LinkError as error:
        if error.condition != LINK_MESSAGE_SIZE_EXCEEDED:
            raise
        raise CommandFailed(
            ExitCode.NOT_ACCEPTED, f"{error} (receive --output-dir DIR streams a message of any size to a file)"
        ) from error


async def _settle(delivery: Delivery, settle: str) -> None:
    if settle == "accept":
        await delivery.accept()
    elif settle == "release":
        await delivery.release()
    else:
        await delivery.reject("amqp:internal-error", "rejected by amqp-async receive --settle reject")


async def _receive(url: str | None, options: dict[str, Any], plan: ReceivePlan) -> None:
    link_options: dict[str, Any] = {"credit": 0, "delivery": plan.delivery}
    if plan.selector is not None:
        link_options["selector"] = plan.selector
    if plan.browse:
        link_options["distribution_mode"] = "copy"
    out = sys.stdout
    unwritten: list[Delivery] = []
    # A line written to a stream without a buffer of its own (python -u, PYTHONUNBUFFERED, a terminal's line
    # buffering) has left once write() returns: settled at once.
    immediate = bool(getattr(out, "write_through", False) or getattr(out, "line_buffering", False))
    async with connect(url, **options) as connection:
        receiver = await connection.open_receiver(plan.address, **link_options)
        if plan.browse:
            check_browsing(connection, receiver, plan.address)
        with RunProgress("received", plan.count, quiet=plan.quiet) as progress:
            while plan.count is None or progress.messages < plan.count:
                _top_up(receiver, plan, progress.messages)
                delivery = None
                with anyio.move_on_after(plan.timeout):
                    delivery = await _take(receiver)
                if delivery is None:
                    if plan.count is not None and plan.count_required:
                        out.flush()
                        raise CommandFailed(
                            ExitCode.TIMEOUT,
                            f"received {progress.messages} of {plan.count} messages: none came for {plan.timeout} s",
                        )
                    break
                message = delivery.message
                if plan.output == "none":
                    await _settle(delivery, plan.settle)
                else:
                    # Settled once its line is out of our buffer (flushed when nothing else is ready: a pipe sees
                    # messages as they come): a reader that goes away (| head) leaves the rest unsettled, released.
                    unwritten.append(delivery)
                    try:
                        out.write(format_message(message, plan.output) + "\n")  # a full buffer writes: EPIPE too
                    except BrokenPipeError:
                        await _release(unwritten)
                        raise
                    if immediate or not receiver.queued or len(unwritten) >= _FLUSH_EVERY:
                        await _flush(out, unwritten, plan.settle)
                progress.advance(1, body_size(message))
            await _flush(out, unwritten, plan.settle)
        if not plan.quiet:
            click.echo(progress.summary(), err=True)


async def _flush(out: Any, unwritten: list[Delivery], settle: str) -> None:
    """Flush the output, then settle the deliveries whose lines it held. A closed output (a pipe whose reader
    has gone, EPIPE) releases them instead (§3.4.4: not processed, to be delivered again), then raises."""
    try:
        out.flush()
    except BrokenPipeError:
        await _release(unwritten)
        raise
    for delivery in unwritten:
        await _settle(delivery, settle)
    unwritten.clear()


async def _release(unwritten: list[Delivery]) -> None:
    for delivery in unwritten:
        if not delivery.settled:
            await delivery.release()
    unwritten.clear()


def _receive_options(function: Any) -> Any:
    options = [
        click.argument("address"),
        click.option("--selector", "-s", metavar="EXPR", help="JMS selector, e.g. \"color = 'red'\"."),
        click.option(
            "--output",
            "-o",
            type=click.Choice(OUTPUTS),
            default="text",
            show_default=True,
            help="text: each body on a line; json: one JSON object per message (body and attributes); none.",
        ),
        click.option(
            "--credit", type=click.IntRange(min=1), default=100, show_default=True, help="messages prefetched."
        ),
        click.option("--quiet", "-q", is_flag=True, help="no progress and no summary."),
    ]
    for option in reversed(options):
        function = option(function)
    return connection_options(function)


@click.command()
@_receive_options
@click.option("--count", "-c", type=click.IntRange(min=1), help="stop after COUNT messages.")
@click.option(
    "--timeout",
    "-t",
    type=click.FloatRange(min=0, min_open=True),
    help="seconds to wait for the next message: then stop (exit 5 when fewer than --count came).",
)
@click.option("--browse", is_flag=True, help="copy messages, leave them on the queue.")
@click.option(
    "--settle",
    type=click.Choice(SETTLE_MODES),
    default="accept",
    show_default=True,
    help="the outcome given to each message.",
)
@click.option(
    "--delivery",
    type=click.Choice(("at-least-once", "at-most-once")),
    default="at-least-once",
    show_default=True,
    help="at-most-once: the sender settles first, a message lost in transit is gone.",
)
@click.option(
    "--output-dir",
    "-d",
    type=click.Path(file_okay=False, path_type=Path),
    help="write each message's body to a file of its own in DIR, streamed as it arrives (named by its 'filename' "
    "property, else its id, else message-N; stdout lists the files).",
)
def receive(
    address: str,
    selector: str | None,
    output: str,
    credit: int,
    quiet: bool,
    count: int | None,
    timeout: float | None,
    browse: bool,
    settle: str,
    delivery: str,
    output_dir: Path | None,
    **connection: Any,
) -> None:
    """Receive messages from ADDRESS and print them on stdout (progress and summary on stderr).

    Without --count and --timeout it runs until interrupted.

    \b
    amqp-async receive orders --count 10 --timeout 5 --output json
    amqp-async receive orders --timeout 1 --selector "priority > 3"
    amqp-async receive artifacts --output-dir downloads --count 2
    """
    if output_dir is not None:
        link_options: dict[str, Any] = {"delivery": delivery}
        if selector is not None:
            link_options["selector"] = selector
        if browse:
            link_options["distribution_mode"] = "copy"
        url, options = connect_arguments(split_connection_options(connection))
        run_command(
            functools.partial(
                receive_files,
                url,
                options,
                address,
                output_dir,
                count=count,
                timeout=timeout,
                link_options=link_options,
                settle=settle,
                output=output,
                quiet=quiet,
                credit=credit,
            )
        )
        return
    plan = ReceivePlan(
        address=address,
        count=count,
        timeout=timeout,
        selector=selector,
        browse=browse,
        output=output,
        settle=settle,
        delivery=delivery,
        credit=credit,
        quiet=quiet,
    )
    url, options = connect_arguments(split_connection_options(connection))
    run_command(functools.partial(_receive, url, options, plan))


@click.command()
@_receive_options
@click.option("--count", "-c", type=click.IntRange(min=1), help="show at most COUNT messages.")
@click.option(
    "--timeout",
    "-t",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="seconds to wait for the next message before stopping.",
)
def peek(
    address: str,
    selector: str | None,
    output: str,
    credit: int,
    quiet: bool,
    count: int | None,
    timeout: float,
    **connection: Any,
) -> None:
    """Show the messages waiting at ADDRESS without taking them (a browsing receiver).

    \b
    amqp-async peek orders --count 5 --output json
    """
    plan = ReceivePlan(
        address=address,
        count=count,
        timeout=timeout,
        selector=selector,
        browse=True,
        output=output,
        settle="accept",
        delivery="at-least-once",
        credit=credit,
        quiet=quiet,
        count_required=False,
    )
    url, options = connect_arguments(split_connection_options(connection))
    run_command(functools.partial(_receive, url, options, plan))
