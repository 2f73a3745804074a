"""An event loop on a daemon thread, so that Spark's synchronous calls can drive the awaitable client.

Spark calls a data source from plain threads (a task's thread on an executor, the streaming source runner's main
thread on the driver). The connection must live on, answering heartbeats and taking deliveries, between those
calls: its event loop runs on a thread of its own, and each call hands it one coroutine and waits for the result.
The thread is a daemon, so a process that Spark ends without warning never hangs on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """An asyncio event loop (uvloop when installed) running on a daemon thread until :meth:`close`."""

    def __init__(self, name: str = "amqp-async-spark") -> None:
        self._loop = _new_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    @property
    def closed(self) -> bool:
        """True once the loop has stopped."""
        return not self._thread.is_alive()

    def call(self, function: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None, **kwargs: Any) -> T:
        """Run ``function(*args, **kwargs)`` on the loop and return its result (or raise its exception) here.

        Raises:
            TimeoutError: it took more than ``timeout`` seconds (it is cancelled then).
            RuntimeError: the loop is closed.
        """
        if self.closed:
            raise RuntimeError("the AMQP event loop thread has stopped")

        async def run() -> T:
            return await function(*args, **kwargs)

        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():
                raise  # the call itself raised a TimeoutError (a ConnectTimeout...): it did not time out here
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None
        except BaseException:
            future.cancel()  # interrupted here (KeyboardInterrupt, a signal handler's exception): stop it there too
            raise

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait for its thread (idempotent)."""
        if self.closed:
            return
        try:
            self._loop.call_soon_threadsafe(self._loop.stop)
        except RuntimeError:
            return  # already closed
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
