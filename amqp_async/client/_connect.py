"""``connect()``: the entry point of the awaitable API, and what it returns (awaitable, and an async context
manager that closes the connection)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ._config import ResolvedOptions, resolve_options
from ._connection import Connection
from ._opening import Opening

if TYPE_CHECKING:
    from typing_extensions import Unpack  # a type checker's name only: typing_extensions is not a dependency

    from ._connect_options import ConnectOptions

__all__ = ["connect"]


async def _open_connection(resolved: ResolvedOptions) -> Connection:
    """Make the connection with the options ``connect()`` resolved, and wait until it is open."""
    connection = Connection(resolved)
    try:
        import asyncio

        connection._loop = asyncio.get_running_loop()
    except RuntimeError:  # trio
        pass
    await connection._establish()
    return connection


def connect(url: str | None = None, **options: Unpack[ConnectOptions]) -> Opening[Connection]:
    """Connect to an AMQP 1.0 peer.

    ``await connect(url)`` gives an open :class:`Connection`; ``async with connect(url) as conn`` also closes it
    at the end, however the block ends. What it returns is an :class:`Opening` (as ``open_sender()`` returns),
    so a variable holding it is annotated ``Opening[Connection]``; it is a coroutine, so it also goes where one
    goes (``asyncio.create_task(connect(url))``). It makes one connection: awaiting it or entering it a second
    time raises RuntimeError (call ``connect()`` again for another connection).

    Options mirror proton's ``Container.connect`` (``urls``, ``user``, ``password``, ``sasl_enabled``,
    ``allowed_mechs``, ``allow_insecure_mechs``, ``heartbeat``, ``reconnect``, ``max_frame_size``,
    ``virtual_host``, ``properties``, ``offered_capabilities``, ``desired_capabilities``, ``sni``) plus
    ``connect_timeout``, ``open_timeout``, ``drain_timeout``, ``ssl_context``, ``container_id``, ``http_proxy``
    (for ``ws``/``wss`` URLs: a proxy URL, or False for none; default: the https_proxy/http_proxy/no_proxy
    environment variables) and ``tracing`` (OpenTelemetry: True for the global tracer provider, or a
    TracerProvider; off by default); a ``connect.json`` is honoured as proton honours it. ``url`` is ``amqp://``,
    ``amqps://``, ``ws://`` or ``wss://`` (AMQP over WebSocket, the URL naming the WebSocket endpoint).

    Defaults bound every wait (docs/client.md, "Defaults and their bounds"): ``connect_timeout`` 30 s per attempt,
    ``heartbeat`` 30 s (our idle timeout), ``open_timeout`` 15 s for the peer's answer to a session's begin or a
    link's attach, ``drain_timeout`` 60 s for its answer to a drain, and reconnecting after a network failure
    gives up after 60 s (``reconnect=Backoff(max_time=None)`` reconnects for ever). None lifts a limit.

    Raises:
        NameResolutionError: the host name does not resolve.
        ConnectionRefused: nothing listens there (also the builtin ConnectionRefusedError).
        ConnectTimeout: the attempt took longer than ``connect_timeout`` (also the builtin TimeoutError).
        TLSError: the TLS handshake failed (CertificateVerifyFailed: the peer's certificate was refused).
        AuthenticationError: SASL authentication failed.
        ConnectError: the peer could not be reached otherwise (all of the above are ConnectErrors; with several
            URLs, the last one's error, naming every URL tried).
        ConnectionClosed: the peer refused the connection with a close frame.
        TypeError, ValueError: an unknown option or a bad value (InvalidURL for a bad URL), raised by the call
            itself, before anything is awaited (as ``open_sender()`` checks its arguments).
    """
    # Checked at run time by resolve_options, here rather than when awaited: a wrong option is the caller's
    # mistake at this line, and an Opening holds a coroutine that would warn "never awaited" if dropped later.
    resolved = resolve_options(url, cast("dict[str, Any]", options))
    return Opening(_open_connection(resolved), call="connect()")
