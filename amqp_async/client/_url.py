"""Connection URLs: ``[amqp[s]://][user[:password]@]host[:port][/address]`` and ``ws[s]://host[:port]/path``.

The grammar and defaults follow python-qpid-proton's ``Url``:

* the scheme is optional (``amqp`` by default) and is ``amqp`` (plain TCP), ``amqps`` (TLS), ``ws`` (AMQP over
  WebSocket) or ``wss`` (AMQP over WebSocket over TLS);
* ``host``, ``host:port`` and ``user:password@host`` need no ``//``; an IPv6 literal is written in brackets,
  ``[::1]:5672``; host names are lower-cased;
* the port is a number or a service name (``amqp`` is 5672 and ``amqps`` 5671 even where the system's
  services database does not list them); it defaults to the scheme's port, 5672 for ``amqp``, 5671 for ``amqps``,
  80 for ``ws`` and 443 for ``wss`` (WSB §2.1: the HTTP ports);
* user and password are percent-decoded (``user%40example.com`` is ``user@example.com``); an empty one counts as
  absent, as in proton;
* the path, without its leading ``/``, is the address (the default node of links opened through this URL); in a
  ``ws``/``wss`` URL it is instead the WebSocket endpoint's path (with its query, if any): ``wss://host/$servicebus/websocket``
  asks for ``/$servicebus/websocket``.

Unlike proton, a missing host defaults to ``localhost`` (proton's ``Url`` fills in ``0.0.0.0``, a listening
address), and an unknown scheme or an invalid port raises :class:`InvalidURL` instead of passing.
"""

from __future__ import annotations

import socket
from urllib.parse import quote, unquote, urlsplit

import attrs

from ..errors import InvalidURL

__all__ = ["DEFAULT_PORTS", "Address", "InvalidURL", "parse_url"]

#: The IANA ports of AMQP, by scheme.
DEFAULT_PORTS: dict[str, int] = {"amqp": 5672, "amqps": 5671, "ws": 80, "wss": 443}

#: The schemes over TLS, and those over WebSocket.
TLS_SCHEMES = frozenset({"amqps", "wss"})
WEBSOCKET_SCHEMES = frozenset({"ws", "wss"})

#: The host used when a URL names none.
DEFAULT_HOST = "localhost"


def _check_scheme(_instance: object, _attribute: object, value: str) -> None:
    if value not in DEFAULT_PORTS:
        raise InvalidURL(f"unknown URL scheme {value!r} (expected 'amqp', 'amqps', 'ws' or 'wss')")


def _check_port(_instance: object, _attribute: object, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise InvalidURL(f"invalid port {value!r} (expected 1 to 65535)")


def _check_host(_instance: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidURL(f"invalid host {value!r}")


def _hide(value: str | None) -> str:
    return "None" if value is None else "'***'"


@attrs.frozen
class Address:
    """One peer to connect to, as parsed from a URL by :func:`parse_url`.

    Attributes:
        scheme: ``"amqp"`` (plain TCP), ``"amqps"`` (TLS), ``"ws"`` (WebSocket) or ``"wss"`` (WebSocket over TLS).
        host: host name (lower-cased), IPv4 dotted quad or IPv6 literal (without brackets).
        port: TCP port.
        user: the user name from the URL, percent-decoded, or None.
        password: the password from the URL, percent-decoded, or None. Never shown by ``str`` or ``repr``.
        path: the address part after the host, without its leading ``/``, or None when the URL has none (for
            ``ws``/``wss``: the WebSocket endpoint's path, with its query).
    """

    scheme: str = attrs.field(validator=_check_scheme)
    host: str = attrs.field(validator=_check_host)
    port: int = attrs.field(validator=_check_port)
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=_hide)
    path: str | None = None

    @property
    def tls(self) -> bool:
        """True when the scheme asks for TLS (``amqps`` or ``wss``)."""
        return self.scheme in TLS_SCHEMES

    @property
    def websocket(self) -> bool:
        """True when the scheme asks for AMQP over WebSocket (``ws`` or ``wss``)."""
        return self.scheme in WEBSOCKET_SCHEMES

    @property
    def resource(self) -> str:
        """The WebSocket request target: ``/`` and the path (``/`` when the URL has none)."""
        return "/" + (self.path or "")

    @property
    def host_header(self) -> str:
        """The host as an HTTP ``Host`` header names it (an IPv6 literal in brackets)."""
        return _bracket(self.host)

    @property
    def host_port(self) -> str:
        """``host:port``, with an IPv6 literal in brackets."""
        return f"{_bracket(self.host)}:{self.port}"

    def to_url(self, *, show_password: bool = False) -> str:
        """The URL of this address; the password is shown as ``***`` unless ``show_password`` is true."""
        userinfo = ""
        if self.user is not None or self.password is not None:
            userinfo = quote(self.user or "", safe="")
            if self.password is not None:
                userinfo += ":" + (quote(self.password, safe="") if show_password else "***")
            userinfo += "@"
        path = "" if self.path is None else "/" + self.path
        return f"{self.scheme}://{userinfo}{self.host_port}{path}"

    def __str__(self) -> str:
        return self.to_url()


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _port_number(text: str, url: str) -> int:
    """A port given as digits or as a service name (proton's ``Url.Port``)."""
    if text.isdigit():
        port = int(text)
    elif text in DEFAULT_PORTS:
        # Not every system's services database lists amqp/amqps; proton falls back to these.
        port = DEFAULT_PORTS[text]
    else:
        try:
            port = socket.getservbyname(text, "tcp")
        except (OSError, UnicodeError):
            raise InvalidURL(f"invalid port {text!r} in URL {_redact(url)!r}: not a number or a service name") from None
    if not 0 < port < 65536:
        raise InvalidURL(f"invalid port {text!r} in URL {_redact(url)!r} (expected 1 to 65535)")
    return port


def _redact(url: str) -> str:
    """The URL with any password replaced, for error messages."""
    head, sep, rest = url.rpartition("@")
    if not sep:
        return url
    scheme, slashes, userinfo = head.rpartition("//")
    user, colon, _password = userinfo.partition(":")
    return f"{scheme}{slashes}{user}{':***' if colon else ''}@{rest}"


def _split_host_port(hostport: str, url: str) -> tuple[str, str | None]:
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise InvalidURL(f"unterminated IPv6 literal in URL {_redact(url)!r}")
        host, after = hostport[1:end], hostport[end + 1 :]
        if after and not after.startswith(":"):
            raise InvalidURL(f"unexpected {after!r} after IPv6 literal in URL {_redact(url)!r}")
        return host, (after[1:] or None) if after else None
    if hostport.count(":") > 1:
        raise InvalidURL(f"IPv6 literal must be in brackets, as in [::1]:5672: {_redact(url)!r}")
    host, colon, port = hostport.partition(":")
    return host, (port or None) if colon else None


def parse_url(url: str | Address) -> Address:
    """Parse a connection URL into an :class:`Address`, filling in proton's defaults.

    Accepted forms include ``host``, ``host:port``, ``amqp://host``, ``amqps://user:pass@host:port/queue``,
    ``[::1]:5672`` and ``amqp://[::1]``; see the module's documentation for the rules. An :class:`Address` is
    returned unchanged.

    Raises:
        InvalidURL: (a ValueError) for an empty URL, an unknown scheme, a bad port or a malformed host.
        TypeError: when ``url`` is neither a string nor an Address.
    """
    if isinstance(url, Address):
        return url
    if not isinstance(url, str):
        raise TypeError(f"URL must be a str, not {type(url).__name__}")
    text = url.strip()
    if not text:
        raise InvalidURL("empty URL")
    # As proton does: add '//' unless the text already has a 'scheme://' prefix, so that "host:port" and
    # "user:pass@host" are not read as a scheme followed by a path.
    if not text.startswith("//"):
        before, _, after = text.partition(":")
        if "/" in before or not after.startswith("//"):
            text = "//" + text
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise InvalidURL(f"malformed URL {_redact(url)!r}: {exc}") from None
    scheme = parts.scheme.lower() or "amqp"
    if scheme not in DEFAULT_PORTS:
        raise InvalidURL(
            f"unknown URL scheme {parts.scheme!r} in {_redact(url)!r} (expected 'amqp', 'amqps', 'ws' or 'wss')"
        )
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user: str | None = None
    password: str | None = None
    if at:
        raw_user, _, raw_password = userinfo.partition(":")
        user = unquote(raw_user) or None
        password = unquote(raw_password) or None
    host, port_text = _split_host_port(hostport, url)
    host = host.lower() or DEFAULT_HOST
    port = DEFAULT_PORTS[scheme] if port_text is None else _port_number(port_text, url)
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if scheme in WEBSOCKET_SCHEMES and parts.query:
        path += "?" + parts.query  # an HTTP request target keeps its query
    return Address(scheme=scheme, host=host, port=port, user=user, password=password, path=path or None)
