"""A python-qpid-proton peer whose session window stays shut, for the tests of messages never put on the wire
(``test_client_unsent_*.py``, ``test_client_close_session_backlog.py``).

``submit()`` hands a message to the engine once the link has credit; past the peer's incoming window (§2.5.6) its
transfer waits in the engine. This peer opens what the client opens with a window of four frames, gives credit, and
reads no transfer: the first four messages of :data:`ONE_FRAME` are written, the rest wait.
"""

from __future__ import annotations

from typing import Any

import pytest

from amqp_async.client import _links
from amqp_async.io import driver

__all__ = ["CLOSE_BOUND", "ONE_FRAME", "WINDOW_FRAMES", "ShutWindowPeer", "results_of", "shorten_close_bounds"]

#: The peer's session window, in frames.
WINDOW_FRAMES = 4
#: A body of one frame (proton's frames are 32 KiB), large enough that four of them fill the peer's window (proton
#: counts its window in bytes buffered: a hundred small frames would fit).
ONE_FRAME = b"x" * 30_000
#: The close bounds the tests set (the sender's and the connection's; the defaults are 10 s).
CLOSE_BOUND = 2.0


class ShutWindowPeer:
    """A proton handler that opens what the client opens with a session window of :data:`WINDOW_FRAMES` frames,
    gives credit (100), and reads no transfer: its window stays shut once full. It answers the client's close, and
    its end and detach unless told not to (``answer_end``, ``answer_detach``: then our close waits out its bound)."""

    def __init__(self, *, answer_end: bool = True, answer_detach: bool = True) -> None:
        self.answer_end = answer_end
        self.answer_detach = answer_detach

    def on_connection_remote_open(self, event: Any) -> None:
        event.connection.open()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.incoming_capacity = WINDOW_FRAMES * 32768
        event.session.open()

    def on_session_remote_close(self, event: Any) -> None:
        if self.answer_end:
            event.session.close()

    def on_link_remote_open(self, event: Any) -> None:
        event.link.open()
        event.link.flow(100)

    def on_link_remote_close(self, event: Any) -> None:
        if self.answer_detach:
            event.link.close()


def shorten_close_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have the closes wait :data:`CLOSE_BOUND` for the peer (the sender's, the session's, the connection's)."""
    monkeypatch.setattr(_links, "CLOSE_TIMEOUT", CLOSE_BOUND, raising=False)
    monkeypatch.setattr(driver, "CLOSE_TIMEOUT", CLOSE_BOUND, raising=False)


async def results_of(trackers: list[Any]) -> list[BaseException | None]:
    """What each tracker ended with: None for an outcome, else the exception it raised."""
    results: list[BaseException | None] = []
    for tracker in trackers:
        try:
            await tracker
        except Exception as exc:
            results.append(exc)
        else:
            results.append(None)
    return results
