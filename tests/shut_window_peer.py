"""A python-qpid-proton peer whose session window stays shut, for the tests of messages never put on the wire
(``test_client_unsent_*.py``, ``test_client_close_session_backlog.py``).

``submit()`` hands a message to the engine once the link has credit; past the peer's incoming window (§2.5.6) its
transfer waits in the engine. This peer opens what the client opens with a window of four frames, gives credit, and
reads no transfer: the first four messages of :data:`ONE_FRAME` are written, the rest wait.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import pytest
from proton import Condition

from amqp_async.client import _links
from amqp_async.io import driver

__all__ = [
    "CLOSE_BOUND",
    "ENDING_CONDITION",
    "ONE_FRAME",
    "WINDOW_FRAMES",
    "EndsOnCue",
    "ShutWindowPeer",
    "cuttable_relay",
    "results_of",
    "shorten_close_bounds",
]

#: The peer's session window, in frames.
WINDOW_FRAMES = 4
#: A body of one frame (proton's frames are 32 KiB), large enough that four of them fill the peer's window (proton
#: counts its window in bytes buffered: a hundred small frames would fit).
ONE_FRAME = b"x" * 30_000
#: The condition :class:`EndsOnCue` ends with.
ENDING_CONDITION = "amqp:resource-limit-exceeded"
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


class EndsOnCue(ShutWindowPeer):
    """The shut-window peer that, once ``cue`` is set, ends what ``ending`` names (a ``peer-`` prefix allowed) with
    :data:`ENDING_CONDITION`: the client's first link (``detach``; ``detach-plain``: without an error), its session
    (``end``) or the connection (``close``); any other ending (the client's own, a cut relay) it leaves to the test.
    It records the tags of the deliveries it got whole (``whole``: it reads none, but proton completes them)."""

    _ENDPOINTS = frozenset({"detach", "detach-plain", "end", "close"})

    def __init__(self, ending: str, *, answer_detach: bool = True) -> None:
        super().__init__(answer_detach=answer_detach)
        self.ending = ending.removeprefix("peer-")
        self.cue = threading.Event()
        self.whole: set[Any] = set()  # (proton's tags: str)
        self._link: Any = None

    def on_delivery(self, event: Any) -> None:
        if not event.delivery.partial:
            self.whole.add(event.delivery.tag)

    def on_link_remote_open(self, event: Any) -> None:
        super().on_link_remote_open(event)
        if (
            self._link is None and self.ending in self._ENDPOINTS
        ):  # (the first connection's: a reconnect attaches again)
            self._link = event.link
            event.container.schedule(0.02, self)

    def on_timer_task(self, event: Any) -> None:
        if not self.cue.is_set():
            event.container.schedule(0.02, self)
            return
        link = self._link
        endpoint = {"detach": link, "detach-plain": link, "end": link.session, "close": link.connection}[self.ending]
        if self.ending != "detach-plain":
            endpoint.condition = Condition(ENDING_CONDITION, "the peer gives up")
        endpoint.close()


@contextlib.asynccontextmanager
async def cuttable_relay(url: str, *, reconnects_pass: bool = False) -> AsyncIterator[tuple[str, anyio.Event]]:
    """A TCP relay to the 127.0.0.1 port of ``url``: it yields its own URL and an event that, set, cuts the
    connections it relays (a transport lost without a close): every one, those that come later at once; with
    ``reconnects_pass``, those it relayed before, and those that come later (a reconnect) get through."""
    port = int(url.rsplit(":", 1)[1])
    cut = anyio.Event()

    async def relay(client: anyio.abc.SocketStream) -> None:
        doomed = not (reconnects_pass and cut.is_set())
        async with client, await anyio.connect_tcp("127.0.0.1", port) as upstream:

            async def pipe(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    async for data in source:
                        await sink.send(data)

            async with anyio.create_task_group() as group:
                group.start_soon(pipe, client, upstream)
                group.start_soon(pipe, upstream, client)
                if doomed:
                    await cut.wait()
                    group.cancel_scope.cancel()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, relay)
        yield f"amqp://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}", cut
        group.cancel_scope.cancel()


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
