"""Reconnect delays: an increasing pause between attempts, as python-qpid-proton's ``Backoff``.

The sequence follows proton's ``delay_iter``: the first delay is 0 (the first reconnect attempt is immediate),
the second is ``initial``, and each later one is ``factor`` times the one before, never more than ``maximum``.
With the defaults that is 0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10, 10, ... seconds.

On top of proton's sequence each non-zero delay is shortened by a random fraction of itself, at most ``jitter``
(0.1 by default: a delay of 10 s becomes one between 9 and 10 s), so that many clients cut off by the same broker
restart do not all come back at the same instant. The jitter only shortens, so ``maximum`` stays a hard bound.

Unlike proton's, the awaitable client's reconnecting ends by default: ``max_time`` (60 s) bounds how long it goes on
after the connection was lost, so that nothing waits for ever on a peer that is gone (docs/client.md, "Defaults and
their bounds"). Reconnecting for ever is an explicit choice: ``Backoff(max_time=None)``. The proton-compatible
API's ``Backoff`` keeps proton's unlimited default.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Iterator

__all__ = ["DEFAULT_MAX_TIME", "Backoff"]

#: Seconds after the connection was lost after which the awaitable client stops reconnecting, by default.
DEFAULT_MAX_TIME = 60.0


class Backoff:
    """Delays, in seconds, to wait before each reconnect attempt.

    A Backoff is an iterator: ``next(backoff)`` (or proton's ``backoff.next()``) gives the next delay and raises
    :class:`StopIteration` once ``max_tries`` delays have been given; :meth:`reset` starts the sequence again
    (call it once a connection has been established, so that the next outage starts with an immediate retry).

    Arguments:
        initial: the second delay (the first is always 0), in seconds; proton's ``initial``.
        factor: how much each delay grows over the one before it (>= 1).
        maximum: the longest delay, in seconds; proton's ``max_delay``.
        jitter: the largest fraction (0 to 1) by which a delay is randomly shortened; 0 for exact delays.
        max_tries: how many delays to give in all, counting the first immediate one (so ``max_tries=1`` means a
            single attempt), or None for no limit. As in proton, each delay covers one pass over all the URLs of
            the failover list.
        max_time: seconds, counted from the loss of the connection, after which the awaitable client gives up
            reconnecting (no attempt starts later, and one under way is cut short then); 60 by default, None for
            no limit. Not a property of the delays: the iterator ignores it, and so does the proton-compatible
            API, which reconnects by proton's rules.
        rng: a function returning a float in [0, 1), for the jitter; :func:`random.random` unless given (tests
            pass a fixed one).

    Raises:
        ValueError: for a negative ``initial`` or ``maximum``, a ``factor`` below 1, a ``jitter`` outside 0 to 1,
            or a ``max_tries`` below 1, or a ``max_time`` that is not above 0.
    """

    def __init__(
        self,
        initial: float = 0.1,
        factor: float = 2.0,
        maximum: float = 10.0,
        jitter: float = 0.1,
        max_tries: int | None = None,
        *,
        max_time: float | None = DEFAULT_MAX_TIME,
        rng: Callable[[], float] | None = None,
    ) -> None:
        for name, value in (("initial", initial), ("factor", factor), ("maximum", maximum), ("jitter", jitter)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Backoff {name} must be a number, not {type(value).__name__}")
        if initial < 0:
            raise ValueError(f"Backoff initial must be >= 0, not {initial!r}")
        if factor < 1:
            raise ValueError(f"Backoff factor must be >= 1, not {factor!r}")
        if maximum < 0:
            raise ValueError(f"Backoff maximum must be >= 0, not {maximum!r}")
        if not 0 <= jitter <= 1:
            raise ValueError(f"Backoff jitter must be between 0 and 1, not {jitter!r}")
        if max_tries is not None and (isinstance(max_tries, bool) or not isinstance(max_tries, int)):
            raise TypeError(f"Backoff max_tries must be an int or None, not {type(max_tries).__name__}")
        if max_tries is not None and max_tries < 1:
            raise ValueError(f"Backoff max_tries must be >= 1, not {max_tries!r}")
        if max_time is not None:
            if isinstance(max_time, bool) or not isinstance(max_time, (int, float)):
                raise TypeError(f"Backoff max_time must be a number of seconds or None, not {type(max_time).__name__}")
            if not max_time > 0:
                raise ValueError(f"Backoff max_time must be > 0 seconds, not {max_time!r}")
        self.initial = float(initial)
        self.factor = float(factor)
        self.maximum = float(maximum)
        self.jitter = float(jitter)
        self.max_tries = max_tries
        self.max_time = None if max_time is None or max_time == float("inf") else float(max_time)
        self._rng: Callable[[], float] = rng if rng is not None else _random.random
        self._tries = 0
        self._delay = 0.0

    def reset(self) -> None:
        """Start the sequence again: the next delay is the immediate 0."""
        self._tries = 0
        self._delay = 0.0

    @property
    def tries(self) -> int:
        """How many delays have been given since the start or the last :meth:`reset`."""
        return self._tries

    def __iter__(self) -> Iterator[float]:
        return self

    def __next__(self) -> float:
        if self.max_tries is not None and self._tries >= self.max_tries:
            raise StopIteration
        if self._tries == 0:
            nominal = 0.0
        elif self._tries == 1:
            nominal = min(self.maximum, self.initial)
        else:
            nominal = min(self.maximum, self._delay * self.factor)
        self._tries += 1
        self._delay = nominal
        if nominal == 0.0 or self.jitter == 0.0:
            return nominal
        return nominal - nominal * self.jitter * self._rng()

    def next(self) -> float:
        """The next delay (proton's old ``Backoff.next()``); raises StopIteration after ``max_tries``."""
        return self.__next__()

    def __repr__(self) -> str:
        return (
            f"Backoff(initial={self.initial!r}, factor={self.factor!r}, maximum={self.maximum!r}, "
            f"jitter={self.jitter!r}, max_tries={self.max_tries!r}, max_time={self.max_time!r})"
        )
