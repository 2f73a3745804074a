"""HTTP proxies for AMQP over WebSocket: which proxy a ``ws``/``wss`` URL goes through, and the CONNECT tunnel.

Which proxy (:func:`proxy_for`):

* the ``http_proxy`` connect option, when given: a URL ``http://[user:password@]host[:port]`` (port 8080 by
  default) used for every ``ws`` and ``wss`` URL; ``False`` (or ``""``) means no proxy, whatever the environment
  says;
* otherwise (the option is None, the default) the standard environment variables, as curl and Python's urllib
  read them: ``https_proxy`` (or ``HTTPS_PROXY``) for ``wss``, ``http_proxy`` (or ``HTTP_PROXY``) for ``ws``,
  both skipped for a host that ``no_proxy`` (``NO_PROXY``) lists (comma-separated host names or domain suffixes,
  ``*`` for all).

Plain ``amqp`` and ``amqps`` URLs never use a proxy: these variables are about HTTP, and AMQP's own port is not.

The tunnel (:func:`open_tunnel`): a TCP connection to the proxy, ``CONNECT host:port HTTP/1.1`` (RFC 9110 §9.3.6),
with ``Proxy-Authorization: Basic`` when the proxy URL has a user, and a 2xx answer; the stream is then the
tunnel, on which TLS (for ``wss``) and the WebSocket handshake run end to end with the server.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import Literal
from urllib.parse import unquote, urlsplit

import anyio
import anyio.abc

from ._url import Address, InvalidURL

__all__ = ["ProxyError", "ProxyURL", "open_tunnel", "parse_proxy", "proxy_for"]

#: The port of a proxy URL that names none (the customary one; urllib has no default).
DEFAULT_PROXY_PORT = 8080

#: The most bytes of the proxy's answer to CONNECT that are read (its header only).
_MAX_ANSWER = 1 << 16


class ProxyError(OSError):
    """The proxy refused the tunnel (its status line is in the message) or answered something else than HTTP.

    An :class:`OSError`: the client goes on to its next URL, or reconnects, as after a failed TCP connect.
    """


class ProxyURL:
    """A parsed proxy URL: host, port and optional credentials."""

    __slots__ = ("host", "password", "port", "user")

    def __init__(self, host: str, port: int, user: str | None, password: str | None) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.password = password

    def __repr__(self) -> str:
        return f"ProxyURL({self.host!r}, {self.port}, user={self.user!r})"


def parse_proxy(url: str) -> ProxyURL:
    """Parse ``http://[user:password@]host[:port]`` (a bare ``host:port`` is taken as http).

    Raises:
        InvalidURL: another scheme (an ``https://`` proxy, reached over TLS, is not supported) or no host.
    """
    text = url if "://" in url else "http://" + url
    parts = urlsplit(text)
    if parts.scheme.lower() != "http":
        raise InvalidURL(f"unsupported proxy URL scheme {parts.scheme!r} (expected http://host:port)")
    if not parts.hostname:
        raise InvalidURL(f"proxy URL without a host: {url!r}")
    try:
        port = parts.port or DEFAULT_PROXY_PORT
    except ValueError:
        raise InvalidURL(f"invalid port in proxy URL {url!r}") from None
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return ProxyURL(parts.hostname, port, user, password)


def _env(env: Mapping[str, str], name: str) -> str | None:
    return env.get(name.lower()) or env.get(name.upper()) or None


def proxy_for(
    address: Address, option: str | Literal[False] | None, env: Mapping[str, str] = os.environ
) -> ProxyURL | None:
    """The proxy to reach ``address`` through, or None (see the module's documentation for the rules)."""
    if not address.websocket:
        return None
    if option is False or option == "":
        return None
    if option is not None:
        return parse_proxy(option)
    url = _env(env, "https_proxy" if address.tls else "http_proxy")
    if url is None:
        return None
    if _bypassed(address.host, _env(env, "no_proxy") or ""):
        return None
    return parse_proxy(url)


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` lists ``host``: ``*``, the host itself, or a domain it is in (``example.com`` and
    ``.example.com`` both cover ``a.example.com``); a ``:port`` on an entry is ignored, as curl ignores it."""
    host = host.lower().strip("[]")
    for entry in no_proxy.split(","):
        entry = entry.strip().lower()
        if entry == "*":
            return True
        if entry.startswith("[") and "]" in entry:
            entry = entry[1 : entry.index("]")]
        elif entry.count(":") == 1:
            entry = entry.partition(":")[0]
        entry = entry.lstrip(".")
        if entry and (host == entry or host.endswith("." + entry)):
            return True
    return False


async def open_tunnel(proxy: ProxyURL, host: str, port: int) -> anyio.abc.ByteStream:
    """A TCP stream to ``host:port`` through ``proxy`` (HTTP CONNECT).

    Raises:
        OSError: the proxy cannot be reached.
        ProxyError: the proxy answered with a status other than 2xx, or not HTTP.
    """
    stream = await anyio.connect_tcp(proxy.host, proxy.port)
    try:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        request = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
        if proxy.user is not None:
            token = base64.b64encode(f"{proxy.user}:{proxy.password or ''}".encode()).decode("ascii")
            request += f"Proxy-Authorization: Basic {token}\r\n"
        await stream.send((request + "\r\n").encode("latin-1"))
        answer = b""
        # Read the answer's header only, byte-exact: whatever follows its blank line is the server's (it sends
        # nothing before our TLS or WebSocket handshake, but a proxy must not be assumed to keep them apart).
        while b"\r\n\r\n" not in answer:
            if len(answer) > _MAX_ANSWER:
                raise ProxyError(f"the proxy {proxy.host}:{proxy.port} sent an over-long answer to CONNECT")
            try:
                answer += await stream.receive(1)
            except anyio.EndOfStream:
                raise ProxyError(f"the proxy {proxy.host}:{proxy.port} closed the connection on CONNECT") from None
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
            raise ProxyError(f"the proxy {proxy.host}:{proxy.port} answered CONNECT with {status_line!r}")
        if not 200 <= int(fields[1]) < 300:
            raise ProxyError(f"the proxy {proxy.host}:{proxy.port} refused CONNECT {authority}: {status_line}")
        return stream
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
        raise
