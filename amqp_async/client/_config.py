"""Connection options: the keyword arguments of :func:`amqp_async.connect`, merged with the URL and connect.json.

:func:`resolve_options` turns ``connect(url, **options)`` into one validated, frozen :class:`ResolvedOptions`;
:func:`find_connect_config` reads the connection configuration file python-qpid-proton reads. The merge follows
proton 0.40's ``Container.connect`` (see :func:`resolve_options` for the exact precedence).
"""

from __future__ import annotations

import copy
import json
import os
import re
import ssl
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

import attrs

from ..errors import ConnectConfigError
from ..io.tls_files import load_cert_chain
from ._arguments import check_encodable
from ._backoff import Backoff
from ._proxy import parse_proxy
from ._url import Address, InvalidURL, parse_url

__all__ = [
    "CONNECT_FILE_ENV",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_HEARTBEAT",
    "ConnectConfigError",
    "ResolvedOptions",
    "connect_config_paths",
    "find_connect_config",
    "find_connect_config_file",
    "load_connect_config",
    "resolve_options",
]

#: The environment variable naming the connection configuration file (it wins over the search path).
CONNECT_FILE_ENV = "MESSAGING_CONNECT_FILE"

#: The scheme, host and port used when neither a URL nor a connect.json gives one: ``amqp://localhost:5672``.
DEFAULT_URL = "amqp://localhost:5672"

#: The scheme used when a connect.json exists but has no ``scheme`` key. The connect.json specification and proton
#: 0.40 both say ``amqps``.
CONFIG_DEFAULT_SCHEME = "amqps"

#: As python-qpid-proton's Container: PLAIN over plain TCP is allowed unless the caller forbids it.
DEFAULT_ALLOW_INSECURE_MECHS = True

#: The smallest max-frame-size AMQP allows (§2.7.1, MIN-MAX-FRAME-SIZE) and the largest a uint holds.
MIN_MAX_FRAME_SIZE = 512
MAX_MAX_FRAME_SIZE = 0xFFFFFFFF

#: Every option name :func:`resolve_options` accepts (besides ``url``).
OPTION_NAMES = frozenset(
    {
        "urls",
        "user",
        "password",
        "sasl_enabled",
        "allowed_mechs",
        "allow_insecure_mechs",
        "heartbeat",
        "connect_timeout",
        "open_timeout",
        "drain_timeout",
        "reconnect",
        "max_frame_size",
        "virtual_host",
        "properties",
        "offered_capabilities",
        "desired_capabilities",
        "sni",
        "ssl_context",
        "container_id",
        "http_proxy",
        "tracing",
    }
)

#: Seconds a connection attempt may take, from the TCP connect to the peer's open frame (TLS and SASL included),
#: unless ``connect_timeout`` says otherwise: a peer that accepts the socket and then says nothing (or not enough)
#: must not hold ``connect`` (or a reconnect) for ever. Two attempts fit in the reconnect's default ``max_time``.
DEFAULT_CONNECT_TIMEOUT = 30.0

#: Seconds ``open_session``, ``open_sender`` and ``open_receiver`` wait for the peer's begin or attach on one
#: transport, unless ``open_timeout`` says otherwise: a peer that keeps the connection alive (it answers
#: heartbeats) but never answers would hold the call for ever. ProtonJ2's ``openTimeout`` bounds the same waits,
#: with the same default. Shorter than ``heartbeat``, so that a peer stopped with its socket open fails an open by
#: this bound alone, not by whichever of the two comes first.
DEFAULT_OPEN_TIMEOUT = 15.0

#: Seconds ``Receiver.drain()`` waits for the sender's answer, unless ``drain_timeout`` (or its ``timeout``) says
#: otherwise. Longer than ``open_timeout``: the sender may first have to send up to the whole credit. Some peers
#: never answer a drain (Qpid Proton's C broker example); ProtonJ2's ``drainTimeout`` is 60 s too.
DEFAULT_DRAIN_TIMEOUT = 60.0

#: Our idle timeout in seconds (``heartbeat``) unless the caller says otherwise (None: none): a peer silent for
#: that long is declared gone (§2.4.5), so that a peer stopped with its socket open (a frozen process or host)
#: does not hold the connection's waiters for ever. We ask the peer for a frame every half of it (§2.4.5: "the
#: value in idle-time-out SHOULD be half the peer's actual timeout threshold"), as proton does.
DEFAULT_HEARTBEAT = 30.0


# ----------------------------------------------------------------------------------------------------------------
# connect.json


def connect_config_paths(env: Mapping[str, str] = os.environ) -> list[str]:
    """The files searched for the connection configuration, in order (proton's order).

    1. the file named by the environment variable ``MESSAGING_CONNECT_FILE``, when it is set and not empty (then
       it is the only candidate);
    2. ``./connect.json`` (in the current directory);
    3. ``~/.config/messaging/connect.json`` (``~`` is ``HOME`` from ``env``, else the user's home);
    4. ``/etc/messaging/connect.json``.
    """
    named = env.get(CONNECT_FILE_ENV)
    if named:
        return [named]
    home = env.get("HOME") or os.path.expanduser("~")
    return [
        os.path.join(".", "connect.json"),
        os.path.join(home, ".config", "messaging", "connect.json"),
        os.path.join("/etc", "messaging", "connect.json"),
    ]


# C-style comments outside strings (proton strips them, and the connect.json specification allows them).
_COMMENTS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^\\"])*"', re.DOTALL)


def _strip_comments(text: str) -> str:
    return _COMMENTS.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text)


def load_connect_config(path: str) -> dict[str, Any]:
    """Read one connection configuration file: a JSON object, ``//`` and ``/* */`` comments allowed.

    Raises:
        ConnectConfigError: naming the file, when it cannot be read, is not valid JSON or not a JSON object.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConnectConfigError(path, f"cannot be read: {exc}") from exc
    try:
        config = json.loads(_strip_comments(text))
    except json.JSONDecodeError as exc:
        raise ConnectConfigError(path, f"invalid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ConnectConfigError(path, f"must hold a JSON object, not {type(config).__name__}")
    return config


def find_connect_config_file(env: Mapping[str, str] = os.environ) -> str | None:
    """The first file of :func:`connect_config_paths` that exists, or None.

    Unlike proton, which then silently ignores it, a ``MESSAGING_CONNECT_FILE`` naming a file that does not exist
    is an error: a typo there must not go unnoticed.

    Raises:
        ConnectConfigError: when ``MESSAGING_CONNECT_FILE`` names no file.
    """
    named = env.get(CONNECT_FILE_ENV)
    if named and not os.path.isfile(named):
        raise ConnectConfigError(named, f"named by {CONNECT_FILE_ENV} but not found")
    for path in connect_config_paths(env):
        if os.path.isfile(path):
            return path
    return None


def find_connect_config(env: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """The connection configuration from the first file of :func:`connect_config_paths` that exists, or None.

    Raises:
        ConnectConfigError: naming the file, when the file found is not valid (see :func:`load_connect_config`),
            or when ``MESSAGING_CONNECT_FILE`` names no file.
    """
    path = find_connect_config_file(env)
    return None if path is None else load_connect_config(path)


# ----------------------------------------------------------------------------------------------------------------
# The result


@attrs.frozen(kw_only=True)
class ResolvedOptions:
    """Validated connection options, as :func:`resolve_options` makes them.

    Attributes:
        urls: the peers to try, in order (the failover list); never empty.
        user: the user for SASL when a URL names none.
        password: the password for SASL when a URL gives none. Not shown by ``repr``.
        sasl_enabled: whether a SASL layer is used.
        allowed_mechs: space-separated SASL mechanism names allowed, or None for the library's default.
        allow_insecure_mechs: whether mechanisms sending secrets in clear (PLAIN) may be used without TLS.
        heartbeat: our idle timeout, in seconds (the peer is asked for a frame every half of it), or None for none.
        connect_timeout: the seconds one connection attempt may take, from the TCP connect to the peer's open
            frame, or None for no limit.
        open_timeout: the seconds opening a session or a link waits for the peer's begin or attach on one
            transport (time spent reconnecting is not counted), or None for no limit.
        drain_timeout: the seconds ``Receiver.drain()`` waits for the sender's answer by default, or None for no
            limit.
        reconnect: the reconnect delays, or False when reconnecting is disabled.
        max_frame_size: the largest frame to accept, or None for the library's default.
        virtual_host: the hostname for the open performative as given, or None to use each URL's host; an empty
            string sends no hostname. :meth:`virtual_host_for` applies the rule.
        properties: connection properties (str or symbol keys), or None.
        offered_capabilities: capabilities offered to the peer, or None.
        desired_capabilities: capabilities desired from the peer, or None.
        sni: the TLS server name as given, or None; :meth:`sni_for` applies proton's fallbacks.
        ssl_context: the TLS context for ``amqps`` URLs, or None when no URL needs one and none was given.
        container_id: this container's identifier.
        http_proxy: the HTTP proxy for ``ws``/``wss`` URLs: a URL, ``False`` for none, or None (the default) to
            follow the ``https_proxy``/``http_proxy``/``no_proxy`` environment variables (see ``_proxy``).
        tracing: None (off), True (OpenTelemetry's global tracer provider) or a ``TracerProvider``: see
            ``_tracing``.
    """

    urls: tuple[Address, ...]
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=lambda v: "None" if v is None else "'***'")
    sasl_enabled: bool = True
    allowed_mechs: str | None = None
    allow_insecure_mechs: bool = DEFAULT_ALLOW_INSECURE_MECHS
    heartbeat: float | None = DEFAULT_HEARTBEAT
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT
    open_timeout: float | None = DEFAULT_OPEN_TIMEOUT
    drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT
    reconnect: Backoff | Literal[False] = attrs.field(factory=Backoff)
    max_frame_size: int | None = None
    virtual_host: str | None = None
    properties: dict[Any, Any] | None = None
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    sni: str | None = None
    ssl_context: ssl.SSLContext | None = None
    container_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    http_proxy: str | Literal[False] | None = None
    tracing: Any = None

    def credentials_for(self, address: Address) -> tuple[str | None, str | None]:
        """The (user, password) to authenticate with at ``address``.

        As proton: the URL's user wins over :attr:`user`, and separately the URL's password over :attr:`password`.
        """
        return (address.user or self.user, address.password or self.password)

    def virtual_host_for(self, address: Address) -> str | None:
        """The hostname to put in the open performative for ``address`` (None: send none).

        :attr:`virtual_host` when given (an empty string means none, as in proton), else the URL's host.
        """
        if self.virtual_host is None:
            return address.host
        return self.virtual_host or None

    def sni_for(self, address: Address) -> str:
        """The TLS server name (and the name the certificate is checked against) for ``address``.

        As proton: :attr:`sni`, else :attr:`virtual_host`, else the URL's host.
        """
        return self.sni or self.virtual_host or address.host

    def attempts(self) -> Iterator[tuple[float, Address]]:
        """(delay, address) pairs to try in turn, as proton's connector: wait ``delay`` seconds, then try ``address``.

        Each delay of :attr:`reconnect` is used for one pass over all the URLs (every URL of a pass waits the same
        delay, as in proton). With ``reconnect=False`` every URL is still tried once, without delay. Iterates a
        fresh copy of :attr:`reconnect`, so the options stay shareable between connections.
        """
        backoff = Backoff(max_tries=1, jitter=0.0) if self.reconnect is False else copy.copy(self.reconnect)
        backoff.reset()
        for delay in backoff:
            for address in self.urls:
                yield delay, address


# ----------------------------------------------------------------------------------------------------------------
# Validation of each option


def _opt_str(name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")


def _opt_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


def _mechs(name: str, value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        names = value.split()
    elif isinstance(value, Iterable) and all(isinstance(v, str) for v in value):
        names = [n for v in value for n in str(v).split()]
    else:
        raise TypeError(f"{name} must be a space-separated str or a list of str, not {type(value).__name__}")
    return " ".join(names) or None


def _heartbeat(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"heartbeat must be a number of seconds or None, not {type(value).__name__}")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"heartbeat must be > 0 seconds, not {value!r}")
    if value > MAX_HEARTBEAT:
        raise ValueError(
            f"heartbeat must be at most {MAX_HEARTBEAT:.0f} seconds (half of it, in milliseconds, is the idle-time-out "
            f"the open frame announces: a uint, §2.7.1), not {value!r}"
        )
    return float(value)


#: The longest heartbeat: half of it, in milliseconds, must fit the open frame's idle-time-out (a uint, §2.7.1).
MAX_HEARTBEAT = (2**32 - 1) // 500


def timeout_option(name: str, value: object) -> float | None:
    """A time limit in seconds: a number > 0, or None (or infinity) for none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, not {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be > 0 seconds, not {value!r}")
    return None if value == float("inf") else float(value)


def _max_frame_size(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_frame_size must be an int or None, not {type(value).__name__}")
    if not MIN_MAX_FRAME_SIZE <= value <= MAX_MAX_FRAME_SIZE:
        raise ValueError(f"max_frame_size must be between {MIN_MAX_FRAME_SIZE} and {MAX_MAX_FRAME_SIZE}, not {value}")
    return value


def _reconnect(value: object) -> Backoff | Literal[False]:
    if value is None or value is True:
        return Backoff()
    if value is False:
        return False
    if isinstance(value, Backoff):
        return value
    raise TypeError(f"reconnect must be None, False or a Backoff, not {type(value).__name__}")


def _capabilities(name: str, value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        items = tuple(value)
        if all(isinstance(v, str) for v in items):
            return items
    raise TypeError(f"{name} must be a list of str (or symbol), not {value!r}")


def _properties(value: object) -> dict[Any, Any] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("properties must have str (or symbol) keys")
        properties = dict(value)
        check_encodable(properties, "properties")
        return properties
    raise TypeError(f"properties must be a map with str (or symbol) keys, not {type(value).__name__}")


def _http_proxy(value: object) -> str | Literal[False] | None:
    if value is None or value is False:
        return value
    if isinstance(value, str):
        if value:
            parse_proxy(value)  # a bad proxy URL is reported by connect(), not at the first attempt
        return value or False
    raise TypeError(f"http_proxy must be a URL, False or None, not {type(value).__name__}")


def tracing_option(value: object) -> Any:
    """The ``tracing`` option: None or False (off: None), True (the global tracer provider), or a tracer provider
    (anything with ``get_tracer``)."""
    if value is None or value is False:
        return None
    if value is True or callable(getattr(value, "get_tracer", None)):
        return value
    raise TypeError(f"tracing must be a bool, None or an OpenTelemetry TracerProvider, not {type(value).__name__}")


def _url_list(url: str | Address | None, urls: object) -> list[Address]:
    if url and urls:
        raise TypeError("give url or urls, not both")
    if url:
        return [parse_url(url)]
    if isinstance(urls, (str, Address)):
        raise TypeError("urls must be a list of URLs; use url= for a single one")
    if not isinstance(urls, Iterable):
        raise TypeError(f"urls must be a list of URLs, not {type(urls).__name__}")
    return [parse_url(u) for u in urls]


# ----------------------------------------------------------------------------------------------------------------
# connect.json -> options


def _config_get(config: Mapping[str, Any], key: str, kinds: tuple[type, ...], path: str, where: str = "") -> Any:
    """``config[key]`` (None when absent) after checking its JSON type; bool is not taken for int."""
    value = config.get(key)
    if value is None:
        return None
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise ConnectConfigError(path, f"{where}{key!r} has the wrong type ({type(value).__name__})")
    return value


def _config_address(config: Mapping[str, Any], path: str) -> Address:
    scheme = _config_get(config, "scheme", (str,), path) or CONFIG_DEFAULT_SCHEME
    host = _config_get(config, "host", (str,), path) or "localhost"
    port = _config_get(config, "port", (str, int), path)
    text = f"{scheme}://[{host}]" if ":" in host else f"{scheme}://{host}"
    if port is not None and port != "":
        text += f":{port}"
    # Our extension for ws/wss: the WebSocket endpoint's path (connect.json has no key for it).
    resource = _config_get(config, "path", (str,), path)
    if resource and scheme in ("ws", "wss"):
        text += resource if resource.startswith("/") else "/" + resource
    try:
        return parse_url(text)
    except InvalidURL as exc:
        raise ConnectConfigError(path, exc.description) from None


def _config_ssl_context(config: Mapping[str, Any], path: str) -> ssl.SSLContext:
    tls = _config_get(config, "tls", (dict,), path) or {}
    ca = _config_get(tls, "ca", (str,), path, "tls.")
    cert = _config_get(tls, "cert", (str,), path, "tls.")
    key = _config_get(tls, "key", (str,), path, "tls.")
    verify = _config_get(tls, "verify", (bool,), path, "tls.")
    if key and not cert:
        raise ConnectConfigError(path, "'tls.key' given without 'tls.cert'")
    try:
        return tls_context(ca=ca, cert=cert, key=key, verify=verify is not False)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectConfigError(path, f"bad TLS file: {exc}") from exc


def tls_context(
    *, ca: str | None = None, cert: str | None = None, key: str | None = None, verify: bool = True
) -> ssl.SSLContext:
    """A client TLS context from files: ``ca`` (a PEM file, or a directory of hashed certificates) to trust instead
    of the system's, ``cert`` and ``key`` (PEM; the key may sit in ``cert``) to present; ``verify=False`` checks
    neither the peer's certificate nor its name. One place for connect.json, the command line and the Spark options.

    Raises:
        OSError, ssl.SSLError: a file that cannot be read or used.
    """
    context = ssl.create_default_context()
    if ca:
        if os.path.isdir(ca):
            context.load_verify_locations(capath=ca)
        else:
            context.load_verify_locations(cafile=ca)
    if cert:
        load_cert_chain(context, cert, key)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


# ----------------------------------------------------------------------------------------------------------------
# The merge


_NO_CONFIG: Any = object()


def resolve_options(
    url: str | Address | None,
    options: Mapping[str, Any],
    *,
    env: Mapping[str, str] = os.environ,
    config: Mapping[str, Any] | None = _NO_CONFIG,
) -> ResolvedOptions:
    """Validate ``connect(url, **options)`` and merge it with connect.json as proton 0.40's Container.connect.

    Precedence, exactly as proton:

    * With a ``url`` or ``urls``, connect.json is not read at all: the options and the URLs are all there is.
    * With neither, the configuration file is looked up (:func:`find_connect_config`) and:

      - its ``scheme``, ``host`` and ``port`` make the one URL. Defaults: ``host`` ``localhost``, ``port`` the
        scheme's (``amqp`` 5672, ``amqps`` 5671; a port may be a service name), ``scheme`` ``amqps`` (the
        connect.json specification's default and proton's). Without any file the URL is ``amqp://localhost:5672``.
      - its ``user`` overrides the ``user`` option, and (only when it has a ``user``) its ``password`` overrides
        the ``password`` option;
      - its ``sasl`` map overrides: ``enabled`` the ``sasl_enabled`` option, ``mechanisms`` (a list or a
        space-separated string) the ``allowed_mechs`` option, ``allow_insecure`` the ``allow_insecure_mechs``
        option (proton's C++ client reads it; proton's Python client ignores it). The connect.json
        specification's spelling ``enable`` is accepted for ``enabled``.
      - for the schemes ``ws`` and ``wss`` (AMQP over WebSocket), its ``path`` (our extension) is the WebSocket
        endpoint's path (default ``/``), and its ``http_proxy`` (our extension) the ``http_proxy`` option when that
        is not given;
      - when the scheme is ``amqps`` (or ``wss``), its ``tls`` map configures the TLS context: ``ca`` (a file or
        directory of trusted CA certificates, added to the system's), ``cert`` and ``key`` (the client certificate
        and its private key), ``verify`` (false: neither the certificate nor the host name is checked). An explicit
        ``ssl_context`` option wins over it.

    * Credentials in a URL win over the ``user`` and ``password`` options, for that URL
      (:meth:`ResolvedOptions.credentials_for`).
    * For an ``amqps`` URL without an ``ssl_context`` option a default context is made:
      :func:`ssl.create_default_context` (system CAs, certificate required, host name checked).

    Arguments:
        url: one URL (a str or an :class:`Address`), or None.
        options: the keyword arguments of ``connect``: ``urls``, ``user``, ``password``, ``sasl_enabled``,
            ``allowed_mechs``, ``allow_insecure_mechs``, ``heartbeat``, ``connect_timeout``, ``open_timeout``,
            ``drain_timeout``, ``reconnect``, ``max_frame_size``, ``virtual_host``, ``properties``,
            ``offered_capabilities``, ``desired_capabilities``, ``sni``, ``ssl_context``, ``container_id``,
            ``http_proxy``, ``tracing``.
        env: the environment used to find connect.json.
        config: the configuration to use instead of looking for connect.json (None: no file); for tests.

    Raises:
        TypeError: for an unknown option name (all are named), an option of the wrong type, or both ``url`` and
            ``urls``.
        ValueError: for a bad value (:class:`InvalidURL` for a bad URL, :class:`ConnectConfigError` for a bad
            configuration file).
    """
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"connect() got unexpected keyword argument(s): {', '.join(unknown)}")
    if url is not None and not isinstance(url, (str, Address)):
        raise TypeError(f"url must be a str or None, not {type(url).__name__}")

    opts = dict(options)
    urls_option = opts.get("urls")
    ssl_context = opts.get("ssl_context")
    if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
        raise TypeError(f"ssl_context must be an ssl.SSLContext or None, not {type(ssl_context).__name__}")

    if url or urls_option:
        addresses = _url_list(url, urls_option)
    else:
        file_config: Mapping[str, Any] | None
        if config is _NO_CONFIG:
            path = find_connect_config_file(env) or ""
            file_config = load_connect_config(path) if path else None
        else:
            path, file_config = "connect.json", config
        if file_config is None:
            addresses = [parse_url(DEFAULT_URL)]
        else:
            address = _config_address(file_config, path)
            addresses = [address]
            if file_config.get("user"):
                opts["user"] = _config_get(file_config, "user", (str,), path)
                if file_config.get("password"):
                    opts["password"] = _config_get(file_config, "password", (str,), path)
            sasl = _config_get(file_config, "sasl", (dict,), path) or {}
            enabled = _config_get(sasl, "enabled", (bool,), path, "sasl.")
            if enabled is None:
                enabled = _config_get(sasl, "enable", (bool,), path, "sasl.")
            if enabled is not None:
                opts["sasl_enabled"] = enabled
            mechanisms = _config_get(sasl, "mechanisms", (str, list), path, "sasl.")
            if mechanisms:
                try:
                    opts["allowed_mechs"] = _mechs("sasl.mechanisms", mechanisms)
                except TypeError as exc:
                    raise ConnectConfigError(path, str(exc)) from None
            allow_insecure = _config_get(sasl, "allow_insecure", (bool,), path, "sasl.")
            if allow_insecure is not None:
                opts["allow_insecure_mechs"] = allow_insecure
            if address.tls and ssl_context is None:
                ssl_context = _config_ssl_context(file_config, path)
            if address.websocket and opts.get("http_proxy") is None:
                opts["http_proxy"] = _config_get(file_config, "http_proxy", (str, bool), path)

    if ssl_context is None and any(a.tls for a in addresses):
        ssl_context = ssl.create_default_context()

    container_id = _opt_str("container_id", opts.get("container_id"))
    return ResolvedOptions(
        urls=tuple(addresses),
        user=_opt_str("user", opts.get("user")),
        password=_opt_str("password", opts.get("password")),
        sasl_enabled=_opt_bool("sasl_enabled", opts.get("sasl_enabled", True)),
        allowed_mechs=_mechs("allowed_mechs", opts.get("allowed_mechs")),
        allow_insecure_mechs=_opt_bool(
            "allow_insecure_mechs", opts.get("allow_insecure_mechs", DEFAULT_ALLOW_INSECURE_MECHS)
        ),
        heartbeat=_heartbeat(opts.get("heartbeat", DEFAULT_HEARTBEAT)),
        connect_timeout=timeout_option("connect_timeout", opts.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)),
        open_timeout=timeout_option("open_timeout", opts.get("open_timeout", DEFAULT_OPEN_TIMEOUT)),
        drain_timeout=timeout_option("drain_timeout", opts.get("drain_timeout", DEFAULT_DRAIN_TIMEOUT)),
        reconnect=_reconnect(opts.get("reconnect")),
        max_frame_size=_max_frame_size(opts.get("max_frame_size")),
        virtual_host=_opt_str("virtual_host", opts.get("virtual_host")),
        properties=_properties(opts.get("properties")),
        offered_capabilities=_capabilities("offered_capabilities", opts.get("offered_capabilities")),
        desired_capabilities=_capabilities("desired_capabilities", opts.get("desired_capabilities")),
        sni=_opt_str("sni", opts.get("sni")),
        ssl_context=ssl_context,
        container_id=container_id or str(uuid.uuid4()),
        http_proxy=_http_proxy(opts.get("http_proxy")),
        tracing=tracing_option(opts.get("tracing")),
    )
