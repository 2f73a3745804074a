"""A bound on how long code may run without giving the event loop back.

``anyio.fail_after`` cannot end a coroutine that never yields: its deadline is the event loop's, and a loop that
never gets control again never checks it (the whole process stalls: timers, heartbeats, every other task).
:func:`fails_if_the_loop_stalls` bounds such code with a real-time signal instead, so a test of it fails rather than
hanging the suite.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["LoopStalled", "fails_if_the_loop_stalls"]


class LoopStalled(AssertionError):
    """The code ran past its bound without the block ending (most likely without yielding to the loop)."""


@contextmanager
def fails_if_the_loop_stalls(seconds: float) -> Iterator[None]:
    """Raise :class:`LoopStalled` inside the block when it has not ended after ``seconds`` (SIGALRM: the main
    thread only, where pytest runs the event loop)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("fails_if_the_loop_stalls needs the main thread (SIGALRM)")

    def stalled(signum: int, frame: FrameType | None) -> None:
        raise LoopStalled(f"the block ran for {seconds} s without ending: the event loop is stalled")

    previous = signal.signal(signal.SIGALRM, stalled)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
