"""Running a program's main coroutine so that Ctrl-C ends it with :exc:`KeyboardInterrupt` on every Python.

From Python 3.11, ``asyncio.Runner`` (and ``anyio.run``, which uses it) turns the first Ctrl-C into a cancellation
of the main task, lets it unwind, and then raises :exc:`KeyboardInterrupt`. On 3.10, ``anyio.run`` uses a backport
of that runner which cannot tell the interrupt's cancellation from any other (``asyncio.Task.uncancel()`` is new in
3.11), so the program ends with a ``CancelledError`` traceback and exit status 1 instead. :func:`run` installs the
same handler itself on 3.10 and raises :exc:`KeyboardInterrupt` when the main task ended cancelled after Ctrl-C,
as 3.11 does: the program unwinds the same way on every interpreter (docs/troubleshooting.md).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any, TypeVar

import anyio

__all__ = ["run"]

T = TypeVar("T")


def run(
    func: Callable[..., Awaitable[T]],
    *args: Any,
    backend: str = "asyncio",
    backend_options: dict[str, Any] | None = None,
) -> T:
    """``anyio.run(func, *args, backend=..., backend_options=...)``; on Python 3.10 with asyncio, in the main
    thread, a first Ctrl-C cancels the main task and :exc:`KeyboardInterrupt` is raised once it has unwound (a
    second Ctrl-C raises it at once), as ``asyncio.Runner`` does from 3.11.

    Raises:
        KeyboardInterrupt: SIGINT arrived, and the main task did not finish normally after it.
    """
    if (
        sys.version_info >= (3, 11)
        or backend != "asyncio"
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # the program has its own handler
    ):
        return anyio.run(func, *args, backend=backend, backend_options=backend_options)
    return _run_interruptible(func, args, backend_options)


def _run_interruptible(
    func: Callable[..., Awaitable[T]], args: tuple[Any, ...], backend_options: dict[str, Any] | None
) -> T:
    main_task: asyncio.Task[Any] | None = None
    interrupts = 0

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1 and main_task is not None and not main_task.done():
            main_task.cancel()
            main_task.get_loop().call_soon_threadsafe(lambda: None)  # wake a loop blocked in select()
            return
        raise KeyboardInterrupt

    async def main() -> T:
        nonlocal main_task
        main_task = asyncio.current_task()
        return await func(*args)

    # A handler other than the default one: anyio's runner then leaves SIGINT to it.
    signal.signal(signal.SIGINT, on_sigint)
    try:
        return anyio.run(main, backend="asyncio", backend_options=backend_options)
    except asyncio.CancelledError:
        if interrupts:
            raise KeyboardInterrupt from None
        raise
    finally:
        if signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
