"""proton's connector rules: which URL a connection tries next, and after what delay.

``Container.connect(url or urls, reconnect=...)`` takes, as proton does:

* ``reconnect=None``: proton's default delays (:func:`delay_iter`: 0, 0.1, 0.2... up to 10 s, forever);
* ``reconnect=False``: one attempt, at the first URL;
* a :class:`Backoff`, a list of delays, or any other iterable of delays;
* an object with ``reset()`` and ``next()`` (the older protocol, which proton wraps): ``reset()`` starts a
  sequence and each ``next()`` gives a delay (StopIteration ends it; any other exception it raises is raised by
  ``Container.run()``, as under proton).

Each delay is used for one pass over the URLs, so the attempts are ``(d1, url1), (d1, url2), (d2, url1)...``. When
the connection is opened the first attempt is made at once (its delay ignored); each later one waits its delay.
Once the peer has answered the open, the sequence starts again from its beginning for the next outage: for the
default, a lost connection is retried at once.

One deliberate difference: proton's own ``Backoff`` is a single generator, so after a successful reconnection its
delays do not start again (they keep growing, and ``max_tries`` counts attempts over the connection's whole life);
ours starts again from 0, like a list of delays, and each connection iterates its own copy.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any

from ..client._backoff import Backoff as _ClientBackoff
from ._url import Url

__all__ = ["ConnectSequence", "Urls", "delay_iter", "make_backoff_wrapper"]


def delay_iter(
    initial: float = 0.1, factor: float = 2.0, max_delay: float = 10.0, max_tries: int | None = None
) -> Iterator[float]:
    """proton's reconnect delays: 0, then ``initial``, growing by ``factor`` up to ``max_delay``."""
    yield 0.0
    tries = 1
    delay = initial
    while max_tries is None or tries < max_tries:
        yield delay
        tries += 1
        delay = min(max_delay, factor * delay)


class Urls:
    """A failover list (proton's ``Urls``): iterating gives the :class:`Url` of each value, in order."""

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = [Url(v) if not isinstance(v, Url) else v for v in values]

    def __iter__(self) -> Iterator[Url]:
        return iter(self.values)


class _WrappedBackoff:
    """An old-protocol policy (``reset()``, ``next()``) as an iterable: each iteration resets it first."""

    def __init__(self, backoff: Any) -> None:
        self.backoff = backoff

    def __iter__(self) -> Iterator[float]:
        self.backoff.reset()
        return self

    def __next__(self) -> float:
        return self.backoff.next()  # type: ignore[no-any-return]


def make_backoff_wrapper(backoff: Any) -> Any:
    """proton's adapter: a policy with ``reset`` and ``next`` becomes an iterable of delays; others are kept."""
    if isinstance(backoff, _ClientBackoff):
        return backoff  # iterated through a copy (see ConnectSequence)
    if hasattr(backoff, "reset") and hasattr(backoff, "next"):
        return _WrappedBackoff(backoff)
    return backoff


class ConnectSequence:
    """The (delay, URL) attempts of one connection, by proton's connector rules (see the module docstring).

    Args:
        reconnect: the ``reconnect`` argument of ``connect`` (None, False, or a policy).
        urls: the failover list, in order; each item is handed back as given.
    """

    def __init__(self, reconnect: Any, urls: list[Any]) -> None:
        if not urls:
            raise ValueError("One of url or urls required")
        self.reconnect = make_backoff_wrapper(reconnect)
        self.urls = list(urls)
        self._attempts: Iterator[tuple[float, Any]] | None = None

    def _delays(self) -> Iterable[float]:
        reconnect = self.reconnect
        if reconnect is None:
            return delay_iter()
        if reconnect is False:
            return delay_iter(max_tries=1)
        if isinstance(reconnect, _ClientBackoff):
            fresh = copy.copy(reconnect)
            fresh.reset()
            return fresh
        return reconnect  # type: ignore[no-any-return]

    def _restart(self) -> None:
        urls = self.urls
        self._attempts = ((delay, url) for delay in self._delays() for url in urls)

    def first(self) -> Any:
        """The URL to try when the connection is opened (the first attempt's delay is not waited)."""
        self._restart()
        try:
            return self.next_attempt()[1]
        except StopIteration:  # an empty policy: still one attempt, as every connection gets one
            return self.urls[0]

    def connected(self) -> None:
        """The peer answered the open: the next outage starts the sequence again (none without reconnect)."""
        if self.reconnect is False:
            self._attempts = None
        else:
            self._restart()

    def next_attempt(self) -> tuple[float, Any]:
        """The next (delay, URL).

        Raises:
            StopIteration: no attempt is left.
            Exception: what a custom policy raised.
        """
        attempts = self._attempts
        if attempts is None:
            raise StopIteration
        return next(attempts)
