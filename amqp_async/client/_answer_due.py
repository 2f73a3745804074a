"""When a peer's answer to a begin or an attach is due (``open_timeout``).

The time is counted per transport: a reconnect sends the begin or attach again on the new connection, and the
peer's time starts again then. Time spent reconnecting is not the peer's silence but the network's, bounded by the
reconnect's own ``max_time``, so it counts for nothing here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from ._connection import Connection

__all__ = ["AnswerDue"]


class AnswerDue:
    """The deadline for the answer to one request (the engine session or link that carries it), on ``connection``.

    Args:
        connection: the connection the request went out on.
        limit: seconds the peer has to answer on one transport, or None for no limit.
    """

    __slots__ = ("_connection", "_due", "_limit", "_request")

    def __init__(self, connection: Connection, limit: float | None) -> None:
        self._connection = connection
        self._limit = limit
        self._request: object = None
        self._due = math.inf

    def passed(self, request: object) -> bool:
        """True once the answer to ``request`` is overdue; never while the connection is reconnecting. A request
        not seen before (sent again after a reconnect) starts its own time."""
        if self._limit is None or self._connection._reconnecting:
            self._request = None
            self._due = math.inf
            return False
        now = anyio.current_time()
        if request is not self._request:
            self._request = request
            self._due = now + self._limit
        return now >= self._due

    async def wait(self) -> None:
        """Wait for a change of the connection's state, or until the answer is due, whichever comes first."""
        with anyio.move_on_after(self._due - anyio.current_time()):
            await self._connection._wait_state()
