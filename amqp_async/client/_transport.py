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
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

from ..io.websocket import client_handshake, require_wsproto
from ._config import ResolvedOptions
from ._proxy import open_tunnel, proxy_for
from ._url import DEFAULT_PORTS, Address

__all__ = ["open_stream"]


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
