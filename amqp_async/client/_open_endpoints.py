"""Dropping closed links and sessions from the lists their connection keeps of them.

A session keeps its links, and a connection its sessions, so that a reconnect can attach (begin) the open ones
again. One closed by either side is never attached again, so the lists drop them: not at every close (the list is
walked then), but when a list has doubled since it was last pruned, which costs each addition O(1) amortised
however many endpoints stay open. Before, a connection that opened a link per request kept every one it had
closed, with its deliveries, for its whole life.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

__all__ = ["PRUNE_FROM", "forget", "with_added", "without_closed"]

#: Lists shorter than this are not worth a pass.
PRUNE_FROM = 64


class _Endpoint(Protocol):
    @property
    def is_closed(self) -> bool: ...


_E = TypeVar("_E", bound=_Endpoint)


def without_closed(endpoints: list[_E]) -> list[_E]:
    """The endpoints still open, in their order."""
    return [endpoint for endpoint in endpoints if not endpoint.is_closed]


def next_prune(count: int) -> int:
    """The length at which a list of ``count`` open endpoints is pruned next: twice as long."""
    return max(PRUNE_FROM, 2 * count)


def with_added(endpoints: list[_E], endpoint: _E, prune_at: int) -> tuple[list[_E], int]:
    """``endpoints`` with ``endpoint`` added (the closed ones dropped first, when the list is ``prune_at`` long),
    and the length at which to prune next."""
    if len(endpoints) >= prune_at:
        endpoints = without_closed(endpoints)
        prune_at = next_prune(len(endpoints))
    endpoints.append(endpoint)
    return endpoints, prune_at


def forget(endpoints: list[_E], endpoint: _E) -> None:
    """Take ``endpoint`` out of ``endpoints``, if it is there: its open failed or was cancelled, so nobody holds
    it and a reconnect must not bring it back."""
    if endpoint in endpoints:
        endpoints.remove(endpoint)
