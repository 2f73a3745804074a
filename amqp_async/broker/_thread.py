"""Run a :class:`Broker` on its own event loop in a background thread (for synchronous code and tests)."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread

from ._server import Broker

__all__ = ["BrokerThread"]


class BrokerThread:
    """A broker serving in a daemon thread; a context manager.

    >>> with BrokerThread() as broker:  # port 0: a free port
    ...     url = broker.url

    Args:
        **options: those of :class:`Broker` (``port`` defaults to 0 here).
    """

    def __init__(self, **options: Any) -> None:
        options.setdefault("port", 0)
        self.broker = Broker(**options)
        self._portal_manager = anyio.from_thread.start_blocking_portal()
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The URL clients connect to."""
        return self.broker.url

    def start(self) -> BrokerThread:
        """Start serving; returns once the broker listens."""
        self._portal = self._portal_manager.__enter__()
        # One task runs the broker from start to stop: its task group must be entered and left by the same task.
        self._future, _ = self._portal.start_task(self._serve)
        return self

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._stopping = anyio.Event()
        async with self.broker:
            task_status.started()
            await self._stopping.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and end the thread (idempotent)."""
        with self._lock:
            if self._portal is None:
                return
            try:
                self._portal.call(self._stopping.set)
                self._future.result(timeout)
            finally:
                self._portal = None
                self._portal_manager.__exit__(None, None, None)

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
