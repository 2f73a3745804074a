"""Run a :class:`Broker` on its own event loop in a background thread (for synchronous code and tests)."""

from __future__ import annotations

import threading
from typing import Any

import anyio
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
        self._portal.call(self._enter)
        return self

    async def _enter(self) -> None:
        await self.broker.__aenter__()

    async def _exit(self) -> None:
        await self.broker.__aexit__(None, None, None)

    def stop(self) -> None:
        """Stop serving and end the thread (idempotent)."""
        with self._lock:
            if self._portal is None:
                return
            try:
                self._portal.call(self._exit)
            finally:
                self._portal = None
                self._portal_manager.__exit__(None, None, None)

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
