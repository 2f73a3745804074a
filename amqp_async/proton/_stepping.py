"""Stepping a container by hand: proton's ``start()``, ``process()``, ``do_work()`` and ``stop()``.

proton's ``Container.run()`` is ``start()``, then ``process()`` until it returns False, then ``stop()`` and a last
``process()``; programs that share their thread with another loop (a GUI, a game, a test) make those calls
themselves. Each ``process()`` dispatches the events that are ready, waits for I/O at most ``container.timeout``
seconds, dispatches what came, and says whether the container still has work.

Ours runs the container's usual task (:meth:`Container.run_async`) on an event loop of its own, created by
``start()`` and run only inside ``process()``: one call runs it until the turn of the loop in which a round of
callbacks was dispatched ends, the container has finished, or the timeout has passed. Between calls the loop is
idle; what the peer sends waits in the socket, and calls from other threads (``EventInjector``,
``call_threadsafe``) wait in the loop's queue.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._reactor import Reactor

__all__ = ["Stepper"]


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (as ``Container.run()`` uses), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Stepper:
    """The event loop and task of a container that is stepped with ``process()``."""

    def __init__(self, container: Reactor) -> None:
        self._loop = _new_loop()
        self._task: asyncio.Task[None] = self._loop.create_task(container.run_async())
        self._task.add_done_callback(self._stop_loop)
        self._stepping = False

    @property
    def stepping(self) -> bool:
        """True while a ``process()`` call runs the loop (between calls, no loop runs)."""
        return self._stepping

    @property
    def finished(self) -> bool:
        """The container's task has ended (and the loop is closed)."""
        return self._loop.is_closed()

    def dispatched(self) -> None:
        """The container is dispatching a round of callbacks: the step ends with this turn of the loop (which
        also writes what the callbacks queued, when they answered a read)."""
        if self._stepping:
            self._loop.stop()

    def _stop_loop(self, _task: object = None) -> None:
        self._loop.stop()

    def step(self, timeout: float | None) -> bool:
        """Run the loop until a round of callbacks is dispatched, the container ends, or ``timeout`` seconds pass
        (None: no limit). Returns False once the container has ended; raises what a handler raised."""
        loop = self._loop
        if loop.is_closed():
            return False
        task = self._task
        if not task.done():
            timer = None if timeout is None else loop.call_later(timeout, self._stop_loop)
            self._stepping = True
            try:
                loop.run_forever()
            finally:
                self._stepping = False
                if timer is not None:
                    timer.cancel()
        if not task.done():
            return True
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
        task.result()  # a handler's exception, as run() raises it
        return False
