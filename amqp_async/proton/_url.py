"""proton's ``Url``: a mutable parser and builder of ``<scheme>://<user>:<password>@<host>:<port>/<path>`` URLs.

It follows python-qpid-proton's ``Url`` so that programs that build or inspect URLs behave the same:

* every part may be missing and reads as None; ``defaults()`` (run by the constructor unless ``defaults=False``)
  fills in the scheme ``amqp``, the host ``0.0.0.0`` and the scheme's port (5672 for ``amqp``, 5671 for
  ``amqps``);
* ``host``, ``host:port`` and ``user:password@host`` need no ``//``; an IPv6 literal is written in brackets and
  read without them; host names are lower-cased; user and password are percent-decoded;
* the port is a :class:`Url.Port`, an ``int`` that remembers the text it was given (``amqp``, ``"5672"``) and
  equals both;
* the scheme is not checked (``Url("http://x")`` is accepted, as in proton); connecting checks it.

The awaitable API's own parser, :func:`amqp_async.client._url.parse_url`, is stricter (it refuses unknown
schemes and bad ports) and defaults the host to ``localhost``; connecting through :mod:`amqp_async.proton` goes
through it with ``str(url)``.

One difference from proton, on purpose: ``repr()`` shows the password as ``***`` (``str()`` keeps it, as it is the
URL to connect to).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import quote, unquote, urlparse, urlunparse

__all__ = ["Url"]

# ws and wss (AMQP over WebSocket): the HTTP ports, as the AMQP WebSocket Binding §2.1 says.
_DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671, "ws": 80, "wss": 443}


class Url:
    """A URL parsed into parts that can be read and replaced (proton's ``Url``).

    Args:
        url: the URL text, another :class:`Url` to copy, or None for an empty URL.
        defaults: fill in the default scheme, host and port (see :meth:`defaults`).
        **kwargs: ``scheme``, ``username``, ``password``, ``host``, ``port`` or ``path``: replace that part.

    Raises:
        AttributeError: a keyword argument that names no part.
        ValueError: a port that is neither a number nor a known service name (when ``port`` is read, or by
            ``defaults()``).

    Attributes:
        scheme: ``"amqp"``, ``"amqps"`` or whatever the URL says; None when absent.
        username: the percent-decoded user name, or None.
        password: the percent-decoded password, or None.
    """

    #: The scheme of AMQP over TLS.
    AMQPS = "amqps"
    #: The scheme of AMQP over TCP.
    AMQP = "amqp"

    class Port(int):
        """A port number made from an ``int`` or a service name, which remembers the text it was made from.

        ``str()`` gives that text; equality holds with both the number and the text (``Url.Port("amqp") ==
        5672 == "amqp"``).

        Raises:
            ValueError: the value is neither a number nor a service name the system (or AMQP) knows.
        """

        name: str

        def __new__(cls, value: Any) -> Url.Port:
            port = super().__new__(cls, cls._port_int(value))
            port.name = str(value)
            return port

        def __eq__(self, other: object) -> bool:
            return str(self) == other or int(self) == other

        def __ne__(self, other: object) -> bool:
            return not self == other

        __hash__ = int.__hash__

        def __str__(self) -> str:
            return self.name

        @staticmethod
        def _port_int(value: Any) -> int:
            try:
                return int(value)
            except ValueError:
                pass
            try:
                return socket.getservbyname(value)
            except (OSError, TypeError, UnicodeError):
                # Not every system's services database lists amqp and amqps.
                if value in _DEFAULT_PORTS:
                    return _DEFAULT_PORTS[value]
                raise ValueError(f"Not a valid port number or service name: '{value}'") from None

    def __init__(self, url: str | Url | None = None, defaults: bool = True, **kwargs: Any) -> None:
        self.scheme: str | None = None
        self.username: str | None = None
        self.password: str | None = None
        self._host: str | None = None
        self._port: Any = None
        self._path: str | None = None
        self._params: str | None = None
        self._query: str | None = None
        self._fragment: str | None = None
        if isinstance(url, Url):
            self.scheme, self.username, self.password = url.scheme, url.username, url.password
            self._host, self._port, self._path = url._host, url._port, url._path
            self._params, self._query, self._fragment = url._params, url._query, url._fragment
        elif url:
            self._parse(url)
        for name, value in kwargs.items():
            getattr(self, name)  # an AttributeError for a name that is no part, as in proton
            setattr(self, name, value)
        if defaults:
            self.defaults()

    def _parse(self, url: str) -> None:
        # Add '//' unless the text already starts with 'scheme://', so that "host:port" and "user:pw@host" are not
        # read as a scheme followed by a path.
        if not url.startswith("//"):
            before, _, after = url.partition(":")
            if "/" in before or not after.startswith("//"):
                url = "//" + url
        parts = urlparse(url)
        self.scheme = parts.scheme or None
        self.username = parts.username and unquote(parts.username)
        self.password = parts.password and unquote(parts.password)
        self._host, self._port = self._split_host_port(parts.netloc)
        self._path = parts.path or None
        self._params, self._query, self._fragment = parts.params, parts.query, parts.fragment

    @staticmethod
    def _split_host_port(netloc: str) -> tuple[str | None, str | None]:
        hostport = netloc.rpartition("@")[2]
        # An IPv6 literal keeps its brackets in _host; the port follows the closing bracket.
        bracketed, close, rest = hostport.rpartition("]")
        head = bracketed + close
        port: str | None = None
        if ":" in rest:
            fields = rest.split(":")
            host = (head + fields[0]).lower()
            port = fields[1] or None
        else:
            host = (head + rest).lower()
        return host or None, port

    @property
    def path(self) -> str | None:
        """The path without its leading ``/`` (the address of the node), or None."""
        if self._path and self._path.startswith("/"):
            return self._path[1:]
        return self._path

    @path.setter
    def path(self, path: str) -> None:
        self._path = path if path.startswith("/") else "/" + path

    @property
    def host(self) -> str | None:
        """The host name, IPv4 dotted quad or IPv6 literal (without brackets), or None."""
        if self._host and self._host.startswith("[") and self._host.endswith("]"):
            return self._host[1:-1]
        return self._host

    @host.setter
    def host(self, host: str) -> None:
        if ":" in host and not (host.startswith("[") and host.endswith("]")):
            self._host = f"[{host}]"
        else:
            self._host = host

    @property
    def port(self) -> Url.Port | None:
        """The port as a :class:`Url.Port`, or None.

        Raises:
            ValueError: the port is neither a number nor a known service name.
        """
        return Url.Port(self._port) if self._port else None

    @port.setter
    def port(self, port: Any) -> None:
        self._port = port

    @property
    def _netloc(self) -> str:
        hostport = self._host or ""
        if self._port:
            hostport += f":{self._port}"
        userpart = quote(self.username) if self.username else ""
        if self.password:
            userpart += ":" + quote(self.password)
        if self.username or self.password:
            userpart += "@"
        return userpart + hostport

    def __str__(self) -> str:
        if self.scheme and not (self._netloc or self._path or self._params or self._query or self._fragment):
            return self.scheme + "://"
        return urlunparse(
            (
                self.scheme or "",
                self._netloc,
                self._path or "",
                self._params or "",
                self._query or "",
                self._fragment or "",
            )
        )

    def __repr__(self) -> str:
        if not self.password:
            return f"Url('{self}')"
        shown = Url(self, defaults=False)
        shown.password = "***"
        return f"Url('{str(shown).replace('%2A%2A%2A', '***')}')"

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def defaults(self) -> Url:
        """Fill in the missing scheme (``amqp``), host (``0.0.0.0``) and port (the scheme's); return self.

        Raises:
            ValueError: the scheme names no known service, so it gives no default port.
        """
        self.scheme = self.scheme or self.AMQP
        self._host = self._host or "0.0.0.0"
        self._port = self._port or self.Port(self.scheme)
        return self
