"""Open the byte stream a client connection runs on, as its URL's scheme says.

========  =====================================================================================================
scheme    stream
========  =====================================================================================================
amqp      TCP
amqps     TLS over TCP
ws        a WebSocket (AMQP WebSocket Binding, subprotocol ``amqp``) over TCP, or over an HTTP proxy's tunnel
wss       a WebSocket over TLS over TCP (TLS end to end with the server, also through a proxy's tunnel)
========  =====================================================================================================

TLS uses the same options for ``wss`` as for ``amqps``: the ``ssl_context`` and ``sni`` connect options (or
connect.json's ``tls`` map). Used by the awaitable client and by the proton-compatible API alike.

:func:`attempt_failure` turns what a failed :func:`open_stream` raised into the :class:`~amqp_async.ConnectError`
subclass that names it (name resolution, refused, timed out, TLS, certificate), with the host and port in its
message and the OS error chained, as :func:`transport_loss` does for a stream that broke while open.
"""

from __future__ import annotations

import errno as _errno
import os
import re
import socket
import ssl
from collections.abc import Mapping
from typing import TypedDict

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

from ..errors import (
    CertificateVerifyFailed,
    ConnectError,
    ConnectionLost,
    ConnectionRefused,
    ConnectTimeout,
    NameResolutionError,
    TLSError,
)
from ..io.websocket import client_handshake, require_wsproto
from ._config import ResolvedOptions
from ._proxy import open_tunnel, proxy_for
from ._url import DEFAULT_PORTS, Address

__all__ = ["ATTEMPT_ERRORS", "Where", "attempt_failure", "error_name", "open_stream", "transport_loss", "where"]

#: What a failed :func:`open_stream` raises (all turned into a ConnectError by :func:`attempt_failure`); TimeoutError
#: (the attempt's deadline) is an OSError.
ATTEMPT_ERRORS = (OSError, anyio.BrokenResourceError, anyio.EndOfStream)

# The resolver's error names by number (socket.EAI_*), for messages.
_EAI_NAMES = {getattr(socket, name): name for name in dir(socket) if name.startswith("EAI_")}


async def open_stream(
    address: Address, options: ResolvedOptions, env: Mapping[str, str] = os.environ
) -> anyio.abc.ByteStream:
    """Connect to ``address``: TCP, then TLS for ``amqps``/``wss``, then the WebSocket handshake for ``ws``/``wss``.

    Raises:
        OSError: the TCP connect failed, a proxy refused the tunnel (:class:`~._proxy.ProxyError`) or the
            WebSocket handshake failed (:class:`~amqp_async.io.websocket.WebSocketError`).
        ssl.SSLError: the TLS handshake failed.
    """
    context = (options.ssl_context or ssl.create_default_context()) if address.tls else None
    if not address.websocket:
        if context is not None:
            stream: anyio.abc.ByteStream = await anyio.connect_tcp(
                address.host,
                address.port,
                ssl_context=context,
                tls_hostname=options.sni_for(address),
                tls_standard_compatible=False,
            )
            return stream
        return await anyio.connect_tcp(address.host, address.port)
    require_wsproto()  # before connecting: a missing extra is reported as such, not as a network failure
    proxy = proxy_for(address, options.http_proxy, env)
    if proxy is None:
        stream = await anyio.connect_tcp(address.host, address.port)
    else:
        stream = await open_tunnel(proxy, address.host, address.port)
    try:
        if context is not None:
            stream = await TLSStream.wrap(
                stream, hostname=options.sni_for(address), ssl_context=context, standard_compatible=False
            )
        host = address.host_port if address.port != DEFAULT_PORTS[address.scheme] else address.host_header
        return await client_handshake(stream, host, address.resource)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
        raise


# ----------------------------------------------------------------------------------------------------------------
# What failed, as an error that names it


class Where(TypedDict, total=False):
    """The keyword arguments that locate the peer in a :class:`~amqp_async.ConnectionError`."""

    url: str
    host: str
    port: int


def where(address: Address | None) -> Where:
    """Where ``address`` is, for a :class:`~amqp_async.ConnectionError` (nothing when unknown)."""
    if address is None:
        return {}
    return {"url": str(address), "host": address.host, "port": address.port}


def error_name(error: OSError) -> str:
    """``ECONNREFUSED``, ``EAI_NONAME``...: the symbolic name of an OS or resolver error (its number if unknown)."""
    number = error.errno
    if number is None:
        return type(error).__name__
    if isinstance(error, socket.gaierror):
        return _EAI_NAMES.get(number, f"EAI {number}")
    return _errno.errorcode.get(number, f"errno {number}")


def _os_errors(exc: BaseException) -> list[OSError]:
    """The OS errors behind what anyio raised: ``connect_tcp`` tries every address of the host and raises
    ``OSError("All connection attempts failed")`` from the one failure or from a group of them."""
    cause = exc.__cause__
    if isinstance(cause, OSError):
        return [cause]
    inner = getattr(cause, "exceptions", None)  # an ExceptionGroup (a builtin from Python 3.11 only)
    if isinstance(inner, tuple):
        found = [error for error in inner if isinstance(error, OSError)]
        if found:
            return found
    return [exc] if isinstance(exc, OSError) else []


def _ssl_text(error: ssl.SSLError) -> str:
    """OpenSSL's words, as ``[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: ...``, without the
    position in CPython's source that ``str()`` adds."""
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(error))


def _text(error: OSError) -> str:
    return f"{error.strerror or error} ({error_name(error)})" if error.errno is not None else str(error)


def attempt_failure(
    exc: BaseException, address: Address, timeout: float | None, limit: str = "connect_timeout"
) -> ConnectError:
    """The error for an attempt to reach ``address`` that failed with ``exc`` (from :func:`open_stream`, or the
    attempt's deadline of ``timeout`` seconds, set by ``limit``): its type names what failed, its message the
    address and why, and the OS error behind it is its ``__cause__`` (``errno`` kept)."""
    located = where(address)
    prefix = f"cannot connect to {address}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return CertificateVerifyFailed(
            f"{prefix}: TLS handshake failed: {_ssl_text(exc)}",
            verify_code=exc.verify_code,
            verify_message=exc.verify_message,
            cause=exc,
            **located,
        )
    if isinstance(exc, ssl.SSLError):
        return TLSError(f"{prefix}: TLS handshake failed: {_ssl_text(exc)}", cause=exc, **located)
    if isinstance(exc, (anyio.EndOfStream, anyio.BrokenResourceError)):
        during = "the TLS handshake" if address.tls else "the connection's set-up"
        error_class = TLSError if address.tls else ConnectError
        return error_class(f"{prefix}: the peer closed the socket during {during}", cause=exc, **located)
    if isinstance(exc, socket.gaierror):
        return NameResolutionError(
            f"{prefix}: name resolution failed for {address.host!r}: {_text(exc)}",
            cause=exc,
            **located,
        )
    errors = _os_errors(exc)
    refused = [error for error in errors if isinstance(error, ConnectionRefusedError)]
    if refused:
        return ConnectionRefused(
            f"{prefix}: connection refused ({error_name(refused[0])})", cause=refused[0], **located
        )
    timed_out = [error for error in errors if isinstance(error, TimeoutError)]
    if timed_out:
        if timed_out[0].errno is None:  # our deadline, not the kernel's
            reason = f"no connection within {timeout:.3g} s ({limit})" if timeout is not None else "timed out"
        else:
            reason = f"connection timed out ({error_name(timed_out[0])})"
        return ConnectTimeout(f"{prefix}: {reason}", cause=timed_out[0], **located)
    if errors:
        return ConnectError(f"{prefix}: {_text(errors[0])}", cause=errors[0], **located)
    return ConnectError(f"{prefix}: {exc!r}", cause=exc, **located)


def transport_loss(address: Address | None, exc: BaseException | None) -> ConnectionLost:
    """The error for an open connection to ``address`` whose stream broke (``exc``, the OS error behind anyio's
    wrapper) or ended (None: the peer closed the socket without a close frame)."""
    located = where(address)
    target = f"connection to {address}" if address is not None else "connection"
    if exc is None:
        return ConnectionLost(f"{target} lost: the peer closed the socket without closing the connection", **located)
    reason = _text(exc) if isinstance(exc, OSError) else repr(exc)
    return ConnectionLost(f"{target} lost: {reason}", cause=exc, **located)
