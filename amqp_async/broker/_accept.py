"""The broker's accept loop: a listener that outlasts running out of file descriptors.

anyio's ``SocketListener.serve`` lets every error of ``accept()`` escape, so one client opening more sockets than
the process may have files (``EMFILE``) stopped the whole broker, its other clients with it. A
:class:`SteadyListener` does what trio's ``serve_listeners`` does: when the system has no room for one more socket
(``EMFILE``, ``ENFILE``, ``ENOBUFS``, ``ENOMEM``) it logs a warning naming the limit, pauses accepting for
:data:`ACCEPT_PAUSE` seconds and tries again, while the connections already accepted go on being served; the
connections that wait meanwhile stay in the listen backlog, accepted once a descriptor is free (a silent one is
closed after the broker's handshake time-out). An accept failing for the peer's sake (it reset the connection
first) is retried at once.
"""

from __future__ import annotations

import errno
import logging
import math
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import anyio
import anyio.abc
from anyio.streams.stapled import MultiListener

# Imported now: out of descriptors, importing it then would fail too (it opens its extension module's file).
try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

__all__ = ["ACCEPT_PAUSE", "WARNING_INTERVAL", "SteadyListener", "steady"]

log = logging.getLogger("amqp_async.broker")

#: Seconds accepting pauses when the system has no room for one more socket (trio's ``serve_listeners`` pauses as
#: long).
ACCEPT_PAUSE = 0.1
#: Seconds between two warnings of one listener that cannot accept (it retries every :data:`ACCEPT_PAUSE`: a
#: warning each time would flood the log for as long as a client holds the descriptors).
WARNING_INTERVAL = 60.0


def _file_limit() -> str:
    """The process's limit of open files, as ``ulimit -n`` sets it (for the warning)."""
    if resource is None:
        return "too many open files"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return "too many open files" if soft == resource.RLIM_INFINITY else f"too many open files (the limit is {soft})"


#: errno -> (what ran out, what the operator can do): accept(2) fails with these when the process or the system has
#: no room for the new socket; the connection waits in the listen backlog meanwhile.
_NO_ROOM: dict[int, tuple[Callable[[], str], str]] = {
    errno.EMFILE: (_file_limit, "raise the limit (ulimit -n)"),
    errno.ENFILE: (lambda: "too many open files in the system", "raise the system's limit (fs.file-max)"),
    errno.ENOBUFS: (lambda: "no buffer space for a new socket", "the system is short of memory"),
    errno.ENOMEM: (lambda: "no memory for a new socket", "the system is short of memory"),
}

#: accept(2) on Linux: "already-pending network errors on the new socket [are passed] as an error code from
#: accept() ... the application should ... treat them like EAGAIN by retrying" (ECONNABORTED elsewhere: the peer
#: reset the connection before it was accepted). Named by getattr: not every platform has all of them.
_PEER_GONE = frozenset(
    code
    for name in (
        "ECONNABORTED",
        "EPROTO",
        "ENETDOWN",
        "ENOPROTOOPT",
        "EHOSTDOWN",
        "ENONET",
        "EHOSTUNREACH",
        "EOPNOTSUPP",
        "ENETUNREACH",
        "ECONNRESET",
        "ETIMEDOUT",
    )
    if (code := getattr(errno, name, None)) is not None
)


def _os_error(exc: BaseException) -> OSError | None:
    """The operating system's error behind a failed accept: asyncio raises it as is, anyio on trio wraps it in a
    ``BrokenResourceError``."""
    if isinstance(exc, OSError):
        return exc
    cause = exc.__cause__
    return cause if isinstance(cause, OSError) else None


class SteadyListener(anyio.abc.Listener[anyio.abc.SocketStream]):
    """A socket listener whose accept loop waits out a shortage of descriptors (see the module's docstring).

    Args:
        listener: the listening socket (one of those :func:`anyio.create_tcp_listener` makes).
    """

    def __init__(self, listener: anyio.abc.SocketListener) -> None:
        self.listener = listener
        self._warned_at = -math.inf

    async def accept(self) -> anyio.abc.SocketStream:
        """The next connection, after as many pauses as it takes the system to have room for it.

        Raises:
            OSError: (or anyio's ``BrokenResourceError``) the listening socket itself failed.
            anyio.ClosedResourceError: the listener was closed.
        """
        paused_at: float | None = None
        warned = False
        while True:
            try:
                stream = await self.listener.accept()
            except (OSError, anyio.BrokenResourceError) as exc:
                error = _os_error(exc)
                if error is None:
                    raise
                if error.errno in _PEER_GONE:
                    log.debug("accept on %s: %r (the peer went first)", self._where(), error)
                    continue
                no_room = _NO_ROOM.get(error.errno or 0)
                if no_room is None:
                    raise
                now = anyio.current_time()
                if paused_at is None:
                    paused_at = now
                if now - self._warned_at >= WARNING_INTERVAL:
                    self._warned_at = now
                    warned = True
                    what, hint = no_room
                    log.warning(
                        "%s: not accepting connections on %s for %s s at a time until it passes (those open are "
                        "still served); %s",
                        what(),
                        self._where(),
                        ACCEPT_PAUSE,
                        hint,
                    )
                await anyio.sleep(ACCEPT_PAUSE)
                continue
            if warned and paused_at is not None:
                paused = anyio.current_time() - paused_at
                log.info("accepting connections on %s again (after %.1f s)", self._where(), paused)
            return stream

    async def serve(
        self,
        handler: Callable[[anyio.abc.SocketStream], Any],
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        """Accept connections until cancelled, each handled by ``handler`` in a task of ``task_group`` (default: a
        task group of its own)."""
        async with AsyncExitStack() as stack:
            if task_group is None:
                task_group = await stack.enter_async_context(anyio.create_task_group())
            while True:
                stream = await self.accept()
                task_group.start_soon(handler, stream)

    async def aclose(self) -> None:
        """Close the listening socket."""
        await self.listener.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        """The listening socket's (its address, its local port)."""
        return self.listener.extra_attributes

    def _where(self) -> str:
        """The listening address, for the log (``127.0.0.1:5672``)."""
        try:
            address = self.listener.extra(anyio.abc.SocketAttribute.local_address)
        except (anyio.TypedAttributeLookupError, OSError):
            return "the broker's port"
        if isinstance(address, str):  # a UNIX socket's path
            return address
        host, port = address[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def steady(listener: MultiListener[anyio.abc.SocketStream]) -> MultiListener[anyio.abc.SocketStream]:
    """``listener`` (what :func:`anyio.create_tcp_listener` returns: one socket per address the host resolves to)
    with each of its sockets accepting as a :class:`SteadyListener` does."""
    return MultiListener(
        [
            SteadyListener(inner) if isinstance(inner, anyio.abc.SocketListener) else inner
            for inner in listener.listeners
        ]
    )
