"""``amqp-async send``: send messages to an address, with a window of unsettled messages and an optional rate; or
files, each streamed as one message (``--file``, :mod:`._files`)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import queue
import threading
from collections import deque
from collections.abc import Iterator
from typing import IO, Any, cast

import anyio
import click

from ..client import DeliveryMode, Tracker, connect
from ..message import Message
from ._bodies import FORMATS, InputError, MessageTemplate, message_batches, parse_property
from ._connect import connect_arguments, connection_options, split_connection_options
from ._exit import CommandFailed, ExitCode
from ._files import send_files
from ._progress import RunProgress
from ._run import INPUT_THREAD, body_size, run_command

__all__ = ["send"]

DELIVERY_MODES = ("at-least-once", "at-most-once", "exactly-once")
_END = object()


class _InputFeeder:
    """Messages read from a stream (stdin, a FIFO) in a daemon thread of its own, a batch at a time as asked for.

    A read may block for ever (``tail -f log | amqp-async send logs -i -``). Read in one of anyio's worker threads,
    it held the process after Ctrl-C until a line came: the task gave up waiting, but the interpreter joins such
    threads before it exits. A daemon thread is not waited for.

    Each batch (the lines of one read, :func:`._bodies.message_batches`) crosses to the event loop in one
    ``call_soon_threadsafe``: one a message, the hand-over bounded ``send -i -`` to some 9,000 messages a second.
    The thread reads one batch ahead of the one being sent, and no further: the input is read as fast as the peer
    takes the messages (back-pressure), with at most two batches in memory.
    """

    def __init__(self, batches: Iterator[list[Message]]) -> None:
        self._batches = batches
        self._loop = asyncio.get_running_loop()
        self._asked: queue.SimpleQueue[asyncio.Future[Any]] = queue.SimpleQueue()
        self._batch: Iterator[Message] = iter(())
        threading.Thread(target=self._read, name=INPUT_THREAD, daemon=True).start()
        self._ahead: asyncio.Future[Any] | None = self._ask()

    def _ask(self) -> asyncio.Future[Any]:
        future = self._loop.create_future()
        self._asked.put(future)
        return future

    async def next(self) -> Any:
        """The next message, or _END (InputError for a line that does not make one, after the lines before it)."""
        while (message := next(self._batch, _END)) is _END:
            if self._ahead is None:
                return _END
            batch = await self._ahead
            if batch is _END:
                self._ahead = None
                return _END
            self._ahead = self._ask()  # the next batch is read while this one is sent
            self._batch = iter(batch)
        return message

    def _read(self) -> None:
        while True:
            future = self._asked.get()
            try:
                batch = next(self._batches, _END)
            except BaseException as exc:  # handed to the task that asked: InputError, an unreadable file...
                self._answer(future, exc, None)
                return
            self._answer(future, None, batch)
            if batch is _END:
                return

    def _answer(self, future: asyncio.Future[Any], error: BaseException | None, item: Any) -> None:
        def settle() -> None:
            if future.done():  # the task stopped waiting (cancelled): what was read goes unsent, as at Ctrl-C
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(item)

        try:
            self._loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop has closed: the command is over
            pass


def _source(batches: Iterator[list[Message]], threaded: bool) -> tuple[_InputFeeder | None, Iterator[Message]]:
    """Where the messages come from: a feeder thread when ``threaded`` (a stream, whose reads may block), else
    ``batches`` unpacked here."""
    if threaded:
        return _InputFeeder(batches), iter(())
    return None, itertools.chain.from_iterable(batches)


async def _next(items: Iterator[Message], feeder: _InputFeeder | None) -> Any:
    """The next message, or _END; from the feeder's thread when reading a stream (it may block for ever)."""
    if feeder is not None:
        return await feeder.next()
    return next(items, _END)


async def _send(
    url: str | None,
    options: dict[str, Any],
    address: str,
    batches: Iterator[list[Message]],
    *,
    threaded: bool,
    total: int | None,
    delivery: str,
    rate: float | None,
    window: int,
    timeout: float | None,
    quiet: bool,
    streamed_size: int | None = None,
) -> None:
    progress = RunProgress("sent", total, quiet=quiet)
    try:
        with anyio.fail_after(timeout):
            if streamed_size is not None:
                await _send_streamed(
                    url, options, address, batches, threaded, delivery, rate, streamed_size, progress, quiet
                )
            else:
                await _send_all(url, options, address, batches, threaded, delivery, rate, window, quiet, progress)
    except InputError as exc:
        raise CommandFailed(ExitCode.USAGE, f"input: {exc}") from None
    except TimeoutError:
        if timeout is None:
            raise  # not --timeout's: the connection's own (its error says which)
        of = "" if total is None else f" of {total:,}"
        noun = "message" if (progress.messages if total is None else total) == 1 else "messages"
        why = (
            f"--rate {rate:g} paces them"
            if rate and total is not None and total / rate > timeout
            else "the rest waited for the peer: its credit (a broker at a memory or queue-depth limit gives none) "
            "or its outcomes"
        )
        raise CommandFailed(
            ExitCode.TIMEOUT,
            f"--timeout {timeout:g} s passed: {progress.messages:,}{of} {noun} sent and settled ({why})",
        ) from None


async def _send_all(
    url: str | None,
    options: dict[str, Any],
    address: str,
    batches: Iterator[list[Message]],
    threaded: bool,
    delivery: str,
    rate: float | None,
    window: int,
    quiet: bool,
    progress: RunProgress,
) -> None:
    async with connect(url, **options) as connection:
        sender = await connection.open_sender(address, delivery=cast(DeliveryMode, delivery))  # a click choice
        confirmed = delivery != "at-most-once"
        pending: deque[tuple[Tracker[Any], int]] = deque()
        feeder, items = _source(batches, threaded)
        try:
            with progress:
                try:
                    await _send_each(sender, items, feeder, confirmed, rate, window, pending, progress)
                except BaseException:
                    # Ended early (Ctrl-C, --timeout, a message refused): the messages on their way get a moment
                    # for their outcomes, so that what is reported is what the peer took.
                    with anyio.CancelScope(shield=True), anyio.move_on_after(OUTCOME_GRACE):
                        await _outcomes(pending)
                    raise
                finally:  # the messages the peer accepted meanwhile count too
                    progress.advance(*_accepted(pending))
        finally:
            # Said before the connection closes (its close makes the messages without an outcome in doubt), and
            # however the run ends: at Ctrl-C or a refusal, what the peer accepted is what the user needs to know.
            _report(progress, pending, quiet)


#: ``--size`` above which each body is streamed in parts of :data:`_PART` bytes (one part in memory, whatever the
#: size): a bytes body of SIZE, encoded whole, took 2.2 times SIZE (228 MB of RSS for ``--size 100000000``).
STREAMED_SIZE = 1 << 20
_PART = 256 << 10


async def _send_streamed(
    url: str | None,
    options: dict[str, Any],
    address: str,
    batches: Iterator[list[Message]],
    threaded: bool,
    delivery: str,
    rate: float | None,
    size: int,
    progress: RunProgress,
    quiet: bool,
) -> None:
    """Send each message of ``batches`` with a body of ``size`` bytes written in parts (a streamed message: one
    delivery, one data section, one outcome each), one at a time, paced to ``rate``."""
    part = b"x" * _PART
    async with connect(url, **options) as connection:
        sender = await connection.open_stream_sender(address, delivery=cast(DeliveryMode, delivery))
        feeder, items = _source(batches, threaded)
        started = anyio.current_time()
        number = 0
        try:
            with progress:
                while (message := await _next(items, feeder)) is not _END:
                    if rate and (delay := started + number / rate - anyio.current_time()) > 0:
                        await anyio.sleep(delay)
                    number += 1
                    message.body = None  # the body is the stream's
                    # its outcome awaited at the block's end (a stream cut short is aborted: never delivered)
                    async with sender.open_stream(message, body_size=size) as stream:
                        for offset in range(0, size, _PART):
                            await stream.write(part[: min(_PART, size - offset)])
                    progress.advance(1, size)
        finally:
            _report(progress, deque(), quiet)


#: Seconds a run that ends early waits for the outcomes of the messages on their way (a second Ctrl-C ends it).
OUTCOME_GRACE = 2.0


async def _outcomes(pending: deque[tuple[Tracker[Any], int]]) -> None:
    """Wait until every tracker in ``pending`` has its outcome (whatever it is)."""
    for tracker, _ in pending:
        try:
            await tracker
        except Exception:  # refused, or in doubt: counted as not accepted (_accepted)
            pass


def _accepted(pending: deque[tuple[Tracker[Any], int]]) -> tuple[int, int]:
    """The messages in ``pending`` the peer accepted, and their bytes (``Tracker.settled``: settled, no error)."""
    sizes = [size for tracker, size in pending if tracker.settled]
    return len(sizes), sum(sizes)


def _report(progress: RunProgress, pending: deque[tuple[Tracker[Any], int]], quiet: bool) -> None:
    """The summary (unless ``quiet``), and a warning for the messages sent whose outcome never came."""
    if not quiet:
        click.echo(progress.summary(), err=True)
    in_doubt = sum(1 for tracker, _ in pending if not tracker.done)
    if in_doubt:
        click.echo(
            f"amqp-async: {in_doubt:,} message{'' if in_doubt == 1 else 's'} sent without an outcome yet: in doubt "
            "(the peer may have taken them, or not)",
            err=True,
        )


async def _send_each(
    sender: Any,
    items: Iterator[Message],
    feeder: _InputFeeder | None,
    confirmed: bool,
    rate: float | None,
    window: int,
    pending: deque[tuple[Tracker[Any], int]],
    progress: RunProgress,
) -> None:
    """Send every message, at most ``window`` unsettled (confirmed), paced to ``rate``; ``pending`` holds the
    trackers not counted yet."""
    started = anyio.current_time()
    number = 0
    while (message := await _next(items, feeder)) is not _END:
        if rate:
            # Paced against the start, not the previous send: a late message does not delay the rest.
            delay = started + number / rate - anyio.current_time()
            if delay > 0:
                await anyio.sleep(delay)
        number += 1
        tracker = await sender.submit(message)
        if not confirmed:
            progress.advance(1, body_size(message))
            continue
        pending.append((tracker, body_size(message)))
        # Counted as their outcomes come (the progress line moves while the window is not full, as at a low
        # --rate), and waited for when the window is full.
        while pending and (len(pending) >= window or pending[0][0].done):
            await pending[0][0]  # raises MessageRejected... for an outcome other than accepted
            progress.advance(1, pending.popleft()[1])
    while pending:
        await pending[0][0]
        progress.advance(1, pending.popleft()[1])


@click.command()
@click.argument("address")
@click.argument("bodies", nargs=-1)
@click.option(
    "--input",
    "-i",
    "input_file",
    type=click.File("r", encoding="utf-8", errors="surrogateescape"),  # a bad line is named (_bodies._lines)
    help="read one body per line from FILE ('-': stdin) instead of arguments.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text: each body a string; json: each body a JSON value; message: each a JSON object as "
    "'receive --output json' prints (body and attributes).",
)
@click.option(
    "--count",
    "-c",
    type=click.IntRange(min=0),
    help="messages to send in all. BODIES, or the lines of a regular file, repeat in order when fewer; the lines of "
    "a pipe or a terminal are read once, never kept: when they end first, that is an input error (exit 2).",
)
@click.option("--size", type=click.IntRange(min=0), help="send bodies of SIZE bytes (binary) instead.")
@click.option(
    "--file",
    "-f",
    "files",
    multiple=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="send the file as one message, streamed as it is read (repeatable; '-': stdin); its name goes in the "
    "application property 'filename'.",
)
@click.option("--binary", is_flag=True, help="send text bodies as binary (a data section).")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), help="at most this many messages per second.")
@click.option(
    "--delivery",
    type=click.Choice(DELIVERY_MODES),
    default="at-least-once",
    show_default=True,
    help="at-least-once: wait for each outcome; at-most-once: sent settled, no outcome.",
)
@click.option(
    "--window", type=click.IntRange(min=1), default=1000, show_default=True, help="unsettled messages in flight."
)
@click.option("--subject")
@click.option("--content-type")
@click.option("--correlation-id")
@click.option("--reply-to")
@click.option("--ttl", type=click.FloatRange(min=0), help="time to live, seconds.")
@click.option("--priority", type=click.IntRange(0, 255))
@click.option("--durable", is_flag=True, help="mark messages durable (the broker should keep them on disk).")
@click.option(
    "--property", "-p", "properties", multiple=True, metavar="NAME=VALUE", help="application property (repeatable)."
)
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="fail (exit 5) if not done in time.")
@click.option("--quiet", "-q", is_flag=True, help="no progress and no summary.")
@connection_options
def send(
    address: str,
    bodies: tuple[str, ...],
    input_file: IO[str] | None,
    fmt: str,
    count: int | None,
    size: int | None,
    files: tuple[str, ...],
    binary: bool,
    rate: float | None,
    delivery: str,
    window: int,
    subject: str | None,
    content_type: str | None,
    correlation_id: str | None,
    reply_to: str | None,
    ttl: float | None,
    priority: int | None,
    durable: bool,
    properties: tuple[str, ...],
    timeout: float | None,
    quiet: bool,
    **connection: Any,
) -> None:
    """Send messages to ADDRESS: the BODIES given, the lines of --input, or --count generated ones.

    \b
    amqp-async send -u amqp://localhost orders '{"id": 1}' --format json
    seq 1000 | amqp-async send orders -i - --rate 100
    amqp-async send orders --count 100000 --size 1024 --delivery at-most-once
    amqp-async send artifacts --file model.bin --file weights.bin
    """
    if bodies and input_file is not None:
        raise click.UsageError("give BODIES or --input, not both")
    if files and (bodies or input_file is not None or count is not None or size is not None or rate is not None):
        raise click.UsageError("--file sends files: give no BODIES, --input, --count, --size or --rate with it")
    try:
        application_properties = dict(parse_property(text) for text in properties)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--property") from None
    template = MessageTemplate(
        subject=subject,
        content_type=content_type,
        correlation_id=correlation_id,
        reply_to=reply_to,
        ttl=ttl,
        priority=priority,
        durable=durable,
        binary=binary,
        properties=application_properties,
    )
    url, options = connect_arguments(split_connection_options(connection))
    if files:
        run_command(
            functools.partial(
                send_files,
                url,
                options,
                address,
                files,
                template,
                delivery=delivery,
                timeout=timeout,
                quiet=quiet,
            )
        )
        return
    # A large --size is streamed: the bodies made here are then the items' own (replaced as the stream is written).
    streamed_size = size if size is not None and size > STREAMED_SIZE else None
    batches = message_batches(
        bodies, input_file, fmt=fmt, count=count, size=None if streamed_size else size, template=template
    )
    total = count if count is not None else (len(bodies) if bodies else (None if input_file is not None else 1))
    run_command(
        functools.partial(
            _send,
            url,
            options,
            address,
            batches,
            threaded=input_file is not None,
            total=total,
            delivery=delivery,
            rate=rate,
            window=window,
            timeout=timeout,
            quiet=quiet,
            streamed_size=streamed_size,
        )
    )
