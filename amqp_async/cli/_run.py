"""Running a command's coroutine: on asyncio, with every failure turned into a message and an exit code."""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click

from ..io import runner
from ..message import Message
from ._exit import ExitCode, exit_code_for

__all__ = ["body_size", "run_command"]


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
        sys.exit(ExitCode.INTERRUPTED)
    except Exception as exc:  # every failure becomes a message and a documented exit code
        error = _unwrap(exc)
        code = exit_code_for(error)
        logging.getLogger("amqp_async.cli").debug("command failed", exc_info=error)
        click.echo(f"amqp-async: error: {_describe(error)}", err=True)
        sys.exit(code)


def _unwrap(error: BaseException) -> BaseException:
    """The first real error inside exception groups (task groups wrap what their tasks raise)."""
    # Duck-typed: BaseExceptionGroup is a builtin from Python 3.11 only (anyio brings a backport on 3.10).
    inner = getattr(error, "exceptions", None)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        error = inner[0]
        inner = getattr(error, "exceptions", None)
    return error


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, TimeoutError) and not str(error):
        return "timed out"
    return text
