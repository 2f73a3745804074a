"""The connection attempts of one awaitable connection, and the errors that say how a connection failed.

A first ``connect()`` tries each URL once, each attempt within ``connect_timeout``. Reconnecting after a loss
follows the Backoff's delays across the failover list (each delay covers one pass over the URLs, as proton's
connector does) until its ``max_tries``, or until its ``max_time`` has passed since the loss: no attempt starts
later, and one under way is cut short then. One sequence serves every outage until a connection has stayed open
long enough to count as restored (:meth:`Attempts.restart_if_stable`): a peer that accepts, opens and drops each
connection is retried with growing delays, and within the same ``max_time``.

The errors: :func:`first_connect_failure` (no URL answered a first connect), :meth:`Attempts.gave_up`
(reconnecting gave up: a ConnectionLost whose cause is the last attempt's error), :func:`lost` (an open connection
failed: the transport, or the idle timeout) and :func:`failed_before_open` (an attempt whose stream connected
but which ended before the peer's open); ``_transport`` has those of an attempt that did not connect at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import attrs

from ..codec import conditions
from ..errors import ConnectError, ConnectionLost, ConnectTimeout
from ..io.driver import EngineDriver
from ._backoff import Backoff
from ._config import ResolvedOptions
from ._transport import transport_loss, where
from ._url import Address

__all__ = ["Attempt", "Attempts", "failed_before_open", "first_connect_failure", "lost"]


@attrs.frozen
class Attempt:
    """One attempt: where, and its time limit (``timeout`` seconds, until ``deadline``; None: none), set by
    ``limit`` (``connect_timeout``, or the reconnect's ``max_time`` when that ends sooner)."""

    address: Address
    timeout: float | None
    deadline: float | None
    limit: str


class Attempts:
    """The attempts of one connection (see the module's documentation).

    Attributes:
        count: reconnect attempts since the outage began (0 for the first connect).
        started: when the outage began (the loop's clock).
        last_error: why the last reconnect attempt failed, or None.
        current: the attempt under way (or the last one).
    """

    def __init__(self, options: ResolvedOptions) -> None:
        self._options = options
        self._sequence: Iterator[tuple[float, Address]] | None = None
        self._deadline: float | None = None
        self.count = 0
        self.started = 0.0
        self.last_error: ConnectError | None = None
        self.current: Attempt | None = None

    @property
    def _backoff(self) -> Backoff | None:
        reconnect = self._options.reconnect
        return None if reconnect is False else reconnect

    def first(self) -> Iterator[tuple[float, Address]]:
        """The first connect's attempts: each URL once, at once."""
        return iter([(0.0, address) for address in self._options.urls])

    def reconnecting(self) -> Iterator[tuple[float, Address]]:
        """The (delay, address) attempts of the current outage; the first call after a restart begins a new one,
        and its ``max_time``."""
        if self._sequence is None:
            self._sequence = self._options.attempts()
            self.started = anyio.current_time()
            backoff = self._backoff
            max_time = backoff.max_time if backoff is not None else None
            self._deadline = None if max_time is None else self.started + max_time
            self.count = 0
            self.last_error = None
        return self._sequence

    def restart_if_stable(self, opened_at: float | None) -> None:
        """The connection just lost had opened at ``opened_at``: if it stayed open for at least the Backoff's
        longest delay (and at least a second), it counts as restored, and the next outage starts a new sequence
        (an immediate first retry, a new ``max_time``). A peer that drops each connection sooner is no better
        than one that refuses it."""
        backoff = self._backoff
        stable_after = max(1.0, backoff.maximum) if backoff is not None else 1.0
        if opened_at is not None and anyio.current_time() - opened_at >= stable_after:
            self._sequence = None

    def limit_text(self) -> str:
        """How long (or how many times) reconnecting goes on, for the log ("" without a limit)."""
        backoff = self._backoff
        if backoff is None:
            return ""
        if backoff.max_time is not None:
            return f"{backoff.max_time:g} s"
        return f"{backoff.max_tries} attempts" if backoff.max_tries is not None else ""

    def out_of_time(self, delay: float) -> bool:
        """True when an attempt after ``delay`` seconds would start at or past the reconnect's ``max_time``."""
        return self._deadline is not None and anyio.current_time() + delay >= self._deadline

    def start(self, address: Address, *, reconnecting: bool) -> Attempt:
        """An attempt to ``address`` starting now: its time limit is ``connect_timeout``, cut to what is left of
        the reconnect's ``max_time``."""
        now = anyio.current_time()
        timeout = self._options.connect_timeout
        limit = "connect_timeout"
        if reconnecting:
            self.count += 1
            if self._deadline is not None and (timeout is None or self._deadline - now < timeout):
                timeout = self._deadline - now
                limit = "the reconnect's max_time"
        attempt = self.current = Attempt(address, timeout, None if timeout is None else now + timeout, limit)
        return attempt

    def gave_up(self, loss: ConnectionLost | None, address: Address | None, *, out_of_time: bool) -> ConnectionLost:
        """The error every waiter raises once reconnecting gave up: the loss, what was tried, and why the last
        attempt failed (its ``__cause__``, so its ``errno`` too)."""
        backoff = self._backoff
        assert backoff is not None
        elapsed = anyio.current_time() - self.started
        limit = f"max_time {backoff.max_time:g} s" if out_of_time else f"max_tries {backoff.max_tries}"
        text = loss.description if loss is not None else f"connection to {address} lost"
        text += f"; reconnecting gave up after {self.count} attempt(s) in {elapsed:.1f} s ({limit})"
        last = self.last_error
        if last is not None:
            text += f"; the last attempt: {last.description}"
        cause = last if last is not None else (loss.__cause__ if loss is not None else None)
        condition = loss.condition if loss is not None else None
        return ConnectionLost(text, condition=condition, cause=cause, **where(address))


def first_connect_failure(failures: list[ConnectError]) -> ConnectError:
    """What a first ``connect()`` raises when no URL answered: the last attempt's error (its type, cause and
    errno), its message naming every URL tried and why each failed."""
    if not failures:
        return ConnectError("cannot connect: no URL was tried")
    last = failures[-1]
    if len(failures) > 1:
        reasons = "; ".join(
            f"{failure.url}: {failure.description.removeprefix(f'cannot connect to {failure.url}: ')}"
            for failure in failures
        )
        last.description = f"cannot connect to any of the {len(failures)} URLs: {reasons}"
        last.args = (last.description,)
    return last


def lost(address: Address | None, heartbeat: float | None, driver: EngineDriver | None) -> ConnectionLost:
    """The error for the loss of an open connection: the peer fell silent for ``heartbeat`` seconds (given when
    our idle timeout expired), or the transport broke (its OS error chained) or ended."""
    if heartbeat is not None:
        return ConnectionLost(
            f"connection to {address} lost: the peer sent nothing for {heartbeat:g} s (the idle timeout, heartbeat)",
            condition=conditions.RESOURCE_LIMIT_EXCEEDED,
            **where(address),
        )
    return transport_loss(address, driver.transport_exception if driver is not None else None)


def failed_before_open(
    address: Address | None, attempt: Attempt | None, driver: EngineDriver | None, *, timed_out: bool
) -> ConnectError:
    """The error for an attempt whose stream connected but which ended before the peer's open: out of time
    (``timed_out``: its limit passed), or the stream broke or ended."""
    located = where(address)
    if timed_out and attempt is not None and attempt.timeout is not None:
        return ConnectTimeout(
            f"cannot connect to {address}: the peer did not open the connection within {attempt.timeout:.3g} s "
            f"({attempt.limit})",
            **located,
        )
    exc = driver.transport_exception if driver is not None else None
    if driver is None or exc is None:
        return ConnectError(
            f"cannot connect to {address}: the peer closed the socket before it opened the connection", **located
        )
    return ConnectError(f"cannot connect to {address}: {driver.transport_error}", cause=exc, **located)
