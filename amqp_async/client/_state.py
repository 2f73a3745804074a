"""The connection's state as the application sees it, and the stream of its changes (docs/client.md, "Connection
state").

``conn.state`` is a :class:`ConnectionState`; ``conn.state_changes()`` gives an anyio memory object stream of
:class:`StateChange` records, one per change from the moment it is called, that ends (``async for`` stops) after
the final change, ``FAILED`` or ``CLOSED``. The changes are published by the connection's own task, on the event
loop, without waiting: a subscriber that falls more than its buffer behind misses the changes that do not fit (a
warning on the ``amqp_async.connection`` logger says so), but never holds the connection up, and the end of the
stream always comes.

::

    OPEN --lost--> DISCONNECTED --attempt--> RECONNECTING --opened--> OPEN      (a "reconnected" change)
                        ^                        |
                        +-----attempt failed-----+
    any --> FAILED   (the peer closed it, a protocol error, reconnecting gave up, reconnect=False and the network
                      failed): final, ``error`` is what every waiter raises
    any --> CLOSED   (the application's close()): final
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import AMQPError

if TYPE_CHECKING:
    from ._attempts import Attempts

__all__ = ["DEFAULT_STATE_BUFFER", "ConnectionState", "StateChange", "StatePublisher", "log_change"]

log = logging.getLogger("amqp_async.connection")

#: How many changes a subscriber may fall behind by default before changes are dropped for it.
DEFAULT_STATE_BUFFER = 64


class ConnectionState(enum.Enum):
    """Where a :class:`~amqp_async.Connection` stands (``conn.state``)."""

    #: Connected: sends and receives go through.
    OPEN = "open"
    #: The network failed; the next reconnect attempt is due after the Backoff's delay. Waiters keep waiting.
    DISCONNECTED = "disconnected"
    #: A reconnect attempt is under way (TCP, TLS, SASL, up to the peer's open). Waiters keep waiting.
    RECONNECTING = "reconnecting"
    #: Ended with an error, for good: every waiter raises ``error`` (the :class:`StateChange`'s and ``conn``'s).
    FAILED = "failed"
    #: The application closed it.
    CLOSED = "closed"

    @property
    def final(self) -> bool:
        """True for the states a connection never leaves (FAILED, CLOSED)."""
        return self in (ConnectionState.FAILED, ConnectionState.CLOSED)


@attrs.frozen
class StateChange:
    """One change of a connection's state, as ``conn.state_changes()`` yields it.

    Attributes:
        state: the new state.
        previous: the state before.
        error: why, when something failed: for DISCONNECTED the :class:`~amqp_async.ConnectionLost` (the
            connection dropped) or the reconnect attempt's :class:`~amqp_async.ConnectError`; for FAILED the error
            every waiter raises; None otherwise.
        url: the peer's URL (password hidden): the one lost, the one an attempt goes to, the one reconnected to.
        attempt: the reconnect attempt's number since the connection was lost (1, 2, ...), on the "reconnected"
            change the one that opened the new connection; 0 when not reconnecting.
        time: when, on the event loop's clock (``anyio.current_time()``).
    """

    state: ConnectionState
    previous: ConnectionState
    error: AMQPError | None = None
    url: str | None = None
    attempt: int = 0
    time: float = 0.0

    @property
    def reconnected(self) -> bool:
        """True for the change that ends an outage: a reconnect attempt opened a new connection, and the sessions
        and links are being restored on it."""
        return self.state is ConnectionState.OPEN and self.previous is not ConnectionState.OPEN


#: The subscribers a connection keeps before it looks for those that closed their end.
_PRUNE_FROM = 32


class StatePublisher:
    """The subscribers to one connection's state changes: each a memory object stream of its own."""

    __slots__ = ("_overflowed", "_prune_at", "_subscribers")

    def __init__(self) -> None:
        self._subscribers: list[MemoryObjectSendStream[StateChange]] = []
        self._overflowed = False
        # The subscribers that closed their end are forgotten at each change, and, on a connection whose state
        # does not change, when the list has doubled since the last look (40,000 streams opened and closed on a
        # healthy connection held 48 MB).
        self._prune_at = _PRUNE_FROM

    def subscribe(
        self, max_buffer: float = DEFAULT_STATE_BUFFER, *, ended: bool = False
    ) -> MemoryObjectReceiveStream[StateChange]:
        """A new stream of the changes from now on (already ended when ``ended``: the connection's state is
        final)."""
        if not max_buffer >= 1:  # math.inf is allowed (unbounded), NaN is not
            raise ValueError(f"max_buffer must be >= 1, not {max_buffer!r}")
        send, receive = anyio.create_memory_object_stream[StateChange](max_buffer)
        if ended:
            send.close()
            return receive
        subscribers = self._subscribers
        subscribers.append(send)
        if len(subscribers) > self._prune_at:
            subscribers[:] = [kept for kept in subscribers if kept.statistics().open_receive_streams]
            self._prune_at = max(_PRUNE_FROM, 2 * len(subscribers))
        return receive

    def publish(self, change: StateChange) -> None:
        """Hand ``change`` to every subscriber, without waiting; forget the subscribers that closed their end."""
        kept: list[MemoryObjectSendStream[StateChange]] = []
        for send in self._subscribers:
            try:
                send.send_nowait(change)
            except anyio.WouldBlock:
                if not self._overflowed:
                    self._overflowed = True
                    log.warning(
                        "a state_changes() subscriber is %d changes behind: the %s change (and later ones it has "
                        "no room for) is dropped for it",
                        send.statistics().max_buffer_size,
                        change.state.value,
                    )
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                continue  # the subscriber closed its end: forget it
            kept.append(send)
        self._subscribers = kept

    def close(self) -> None:
        """End every subscriber's stream (after the final change)."""
        subscribers = self._subscribers
        self._subscribers = []
        for send in subscribers:
            send.close()


def log_change(change: StateChange, attempts: Attempts, *, opened: bool) -> None:
    """Log ``change`` on ``amqp_async.connection`` (docs/client.md, "Logging"): a loss and a connection that failed
    for good are warnings, the reconnect attempts and their outcome information."""
    state, error = change.state, change.error
    if state is ConnectionState.DISCONNECTED:
        if change.previous is ConnectionState.OPEN:
            limit = attempts.limit_text()
            log.warning("%s; reconnecting%s", error, f" for up to {limit}" if limit else "")
        else:
            log.info("reconnect attempt %d failed: %s", change.attempt, error)
    elif state is ConnectionState.RECONNECTING:
        log.info("reconnecting to %s (attempt %d)", change.url, change.attempt)
    elif state is ConnectionState.OPEN:
        elapsed = change.time - attempts.started
        log.info("reconnected to %s (attempt %d, %.1f s after the loss)", change.url, attempts.count, elapsed)
    elif state is ConnectionState.FAILED:
        # A connect() that fails raises to its caller: only the end of a connection it returned is news.
        log.log(logging.WARNING if opened else logging.DEBUG, "connection failed: %s", error)
    else:
        log.debug("connection to %s closed by the application", change.url)
