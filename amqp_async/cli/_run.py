"""Running a command's coroutine: on asyncio, with every failure turned into a message and an exit code."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from ..io import runner
from ..io.exception_groups import leaves
from ..message import Message
from ._exit import ExitCode, exit_code_for

__all__ = ["INPUT_THREAD", "blocking_read", "body_size", "run_command"]


def body_size(message: Message) -> int:
    """The size of ``message``'s body in bytes (UTF-8 for text; 0 for other values), for the progress counts."""
    body = message.body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return len(body)
    if isinstance(body, str):
        return len(body.encode("utf-8", "surrogatepass"))
    return 0


def run_command(function: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``function(*args)`` on asyncio and exit with the code its outcome gives (see ExitCode).

    A failure prints ``amqp-async: error: ...`` on stderr (the AMQP condition and the peer's description for AMQP
    errors) and exits with its code; no traceback unless ``--debug`` logging shows it.
    """
    try:
        runner.run(function, *args)  # Ctrl-C: KeyboardInterrupt on Python 3.10 too (amqp_async.io.runner)
    except KeyboardInterrupt:
        click.echo("amqp-async: interrupted", err=True)
        _exit(ExitCode.INTERRUPTED)
    except Exception as exc:  # every failure becomes a message and a documented exit code
        error = leaves(exc)[0]  # the first real error (task groups wrap what their tasks raise)
        if isinstance(error, BrokenPipeError):
            # The reader of our output has gone (| head): end quietly, as a program killed by SIGPIPE does, and
            # keep Python's own flush of stdout at exit from failing again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            _exit(ExitCode.OUTPUT_CLOSED)
        code = exit_code_for(error)
        logging.getLogger("amqp_async.cli").debug("command failed", exc_info=error)
        click.echo(f"amqp-async: error: {_describe(error)}", err=True)
        _exit(code)


#: The name of the daemon thread that reads ``send``'s input stream (``_send._InputFeeder``).
INPUT_THREAD = "amqp-async input"

_T = TypeVar("_T")

# Reads that may wait for ever (stdin, a FIFO, and opening one) under way in worker threads (see blocking_read).
_blocking_reads = 0
_blocking_lock = threading.Lock()


def blocking_read(read: Callable[..., _T], *args: Any) -> _T:
    """Call ``read(*args)`` (in a worker thread: ``anyio.to_thread.run_sync(blocking_read, file.read, n,
    abandon_on_cancel=True)``) as a read that may wait for ever: an interrupt does not wait for it, and while it
    waits the command's exit ends the process at once (see :func:`_exit`). ``send --file -`` went on until stdin
    ended after a Ctrl-C, and a second one aborted the interpreter (SIGABRT)."""
    global _blocking_reads
    with _blocking_lock:
        _blocking_reads += 1
    try:
        return read(*args)
    finally:
        with _blocking_lock:
            _blocking_reads -= 1


def _exit(code: ExitCode) -> None:
    """Exit with ``code``. While a thread still waits on a read of stdin, at once: the interpreter's shutdown would
    abort (SIGABRT) on the lock that read holds, when it closes stdin."""
    if _blocking_reads or any(thread.name == INPUT_THREAD and thread.is_alive() for thread in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe, a closed stream: nothing more to say there
                pass
        os._exit(code)
    sys.exit(code)


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, TimeoutError) and not str(error):
        return "timed out"
    return text
