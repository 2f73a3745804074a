"""Running an awaitable on a connection's event loop from another thread, on asyncio and on trio alike
(:meth:`Connection.run_threadsafe`)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

__all__ = ["LoopHandle"]

_T = TypeVar("_T")


async def _await(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


class LoopHandle:
    """The event loop a connection runs on, taken on that loop's thread (asyncio's loop, or trio's token), so
    that other threads can hand it work."""

    __slots__ = ("_loop", "_trio_token")

    def __init__(self, loop: asyncio.AbstractEventLoop | None, trio_token: Any) -> None:
        self._loop = loop
        self._trio_token = trio_token

    @classmethod
    def current(cls) -> LoopHandle | None:
        """The running loop's handle (None when called outside one)."""
        try:
            return cls(asyncio.get_running_loop(), None)
        except RuntimeError:
            pass
        try:
            trio = importlib.import_module("trio")
            return cls(None, trio.lowlevel.current_trio_token())
        except (ImportError, RuntimeError):
            return None

    def call_soon(self, function: Callable[[], object]) -> bool:
        """Call ``function`` on the loop's thread soon, from any thread; False (and nothing called) once the loop
        has ended."""
        try:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(function)
            else:
                self._trio_token.run_sync_soon(function)
        except RuntimeError:  # asyncio's "Event loop is closed", trio's RunFinishedError
            return False
        return True

    def run(self, awaitable: Awaitable[_T]) -> Future[_T]:
        """Start ``awaitable`` on the loop and return a future of its result (see
        :meth:`Connection.run_threadsafe`)."""
        if self._loop is not None:
            coroutine = _await(awaitable)
            try:
                return asyncio.run_coroutine_threadsafe(coroutine, self._loop)
            except RuntimeError:  # the loop is closed
                coroutine.close()
                _close(awaitable)
                raise RuntimeError("the connection's event loop is closed: nothing runs on it any more") from None
        return self._run_on_trio(awaitable)

    def _run_on_trio(self, awaitable: Awaitable[_T]) -> Future[_T]:
        trio = importlib.import_module("trio")
        token = self._trio_token
        future: Future[_T] = Future()

        async def run() -> None:
            with trio.CancelScope() as scope:

                def cancel_on_cancel(done: Future[_T]) -> None:
                    # future.cancel() in any thread cancels the task, as asyncio's run_coroutine_threadsafe does.
                    if done.cancelled():
                        _call_soon(token, scope.cancel)

                future.add_done_callback(cancel_on_cancel)
                try:
                    result = await awaitable
                except trio.Cancelled:
                    future.cancel()  # by future.cancel(), or the trio run is ending
                    raise
                except BaseException as exc:  # a system task must not raise: the caller's future gets it
                    _settle(future, exc=exc)
                    return
                _settle(future, result=result)

        def start() -> None:
            if future.cancelled():
                _close(awaitable)
            else:
                trio.lowlevel.spawn_system_task(run)

        try:
            token.run_sync_soon(start)
        except trio.RunFinishedError:
            _close(awaitable)
            raise RuntimeError("the connection's trio run has ended: nothing runs on it any more") from None
        return future


def _call_soon(token: Any, function: Any) -> None:
    try:
        token.run_sync_soon(function)
    except RuntimeError:  # trio.RunFinishedError: nothing is left to cancel
        pass


def _settle(future: Future[Any], *, result: Any = None, exc: BaseException | None = None) -> None:
    try:
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)
    except InvalidStateError:  # cancelled meanwhile, from another thread
        pass


def _close(awaitable: Awaitable[Any]) -> None:
    """A coroutine that will never run is closed (no "never awaited" warning)."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()
