"""The embedded broker in the test's own event loop, for the broker tests: ``async with serving() as broker:``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from amqp_async.broker import Broker

__all__ = ["serving"]


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    """A `Broker` with ``options`` on a free port (``broker.url``), serving for the duration of the block."""
    async with Broker(port=0, **options) as broker:
        yield broker
