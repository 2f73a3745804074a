"""The connection options every command shares: the keyword arguments of :func:`amqp_async.connect` as flags.

Without ``--url`` the command connects as ``connect()`` does without one: from connect.json (``--config`` names the
file; otherwise ``MESSAGING_CONNECT_FILE``, ``./connect.json``, ``~/.config/messaging/connect.json``,
``/etc/messaging/connect.json``), else ``amqp://localhost:5672``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from ..client._config import CONNECT_FILE_ENV, tls_context

__all__ = ["CONNECTION_OPTION_NAMES", "connect_arguments", "connection_options"]

F = TypeVar("F", bound=Callable[..., Any])

#: A command line tool should say soon that a peer does not answer; ``connect()`` itself waits 60 s.
DEFAULT_CONNECT_TIMEOUT = 10.0

_OPTIONS = [
    click.option(
        "--url",
        "-u",
        "urls",
        multiple=True,
        envvar="AMQP_ASYNC_URL",
        metavar="URL",
        help="amqp[s]://[USER[:PASSWORD]@]HOST[:PORT]; repeat for a failover list. Default: connect.json. "
        "[env: AMQP_ASYNC_URL]",
    ),
    click.option(
        "--config",
        type=click.Path(exists=True, dir_okay=False),
        help=f"the connect.json to read when no --url is given (sets {CONNECT_FILE_ENV}).",
    ),
    click.option("--user", help="SASL user name, when the URL names none."),
    click.option(
        "--password",
        envvar="AMQP_ASYNC_PASSWORD",
        help="SASL password, when the URL gives none. [env: AMQP_ASYNC_PASSWORD]",
    ),
    click.option("--sasl-mechanisms", metavar="NAMES", help="space-separated SASL mechanisms allowed."),
    click.option("--no-sasl", is_flag=True, help="no SASL layer at all."),
    click.option(
        "--allow-insecure-mechs/--no-allow-insecure-mechs",
        default=None,
        help="whether PLAIN may send a password without TLS (default: allowed, as proton).",
    ),
    click.option("--tls-ca", type=click.Path(exists=True), help="CA certificate file (or directory) to trust."),
    click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="client certificate (PEM)."),
    click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="private key of --tls-cert."),
    click.option("--tls-no-verify", is_flag=True, help="check neither the certificate nor the host name."),
    click.option("--sni", help="TLS server name (default: the virtual host, else the URL's host)."),
    click.option("--virtual-host", help="hostname for the open frame (default: the URL's host)."),
    click.option("--heartbeat", type=click.FloatRange(min=0, min_open=True), help="idle timeout, seconds."),
    click.option(
        "--connect-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=DEFAULT_CONNECT_TIMEOUT,
        show_default=True,
        help="seconds a connection attempt may take, up to the peer's open.",
    ),
    click.option(
        "--open-timeout",
        type=click.FloatRange(min=0, min_open=True),
        help="seconds to wait for the peer's answer to a session's begin or a link's attach (default: 15).",
    ),
    click.option(
        "--reconnect/--no-reconnect",
        default=False,
        show_default=True,
        help="reconnect after a network failure (messages then in doubt make the command fail).",
    ),
    click.option("--max-frame-size", type=click.IntRange(min=512), help="largest frame to accept, bytes."),
    click.option("--container-id", help="this container's id (default: a fresh UUID)."),
]

#: The parameter names the options above give a command's function.
CONNECTION_OPTION_NAMES = frozenset(
    {
        "urls",
        "config",
        "user",
        "password",
        "sasl_mechanisms",
        "no_sasl",
        "allow_insecure_mechs",
        "tls_ca",
        "tls_cert",
        "tls_key",
        "tls_no_verify",
        "sni",
        "virtual_host",
        "heartbeat",
        "connect_timeout",
        "open_timeout",
        "reconnect",
        "max_frame_size",
        "container_id",
    }
)


def connection_options(function: F) -> F:
    """Add the connection options to a click command (its function gets them as keyword arguments)."""
    for option in reversed(_OPTIONS):
        function = option(function)
    return function


def _ssl_context(values: Mapping[str, Any]) -> ssl.SSLContext | None:
    """A TLS context from the ``--tls-*`` options, or None when none is given (then connect decides)."""
    ca, cert, key, no_verify = values["tls_ca"], values["tls_cert"], values["tls_key"], values["tls_no_verify"]
    if not (ca or cert or key or no_verify):
        return None
    if key and not cert:
        raise click.UsageError("--tls-key needs --tls-cert")
    try:
        return tls_context(ca=ca, cert=cert, key=key, verify=not no_verify)
    except (OSError, ssl.SSLError) as exc:
        raise click.UsageError(f"bad TLS file: {exc}") from exc


def connect_arguments(values: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``(url, options)`` for :func:`amqp_async.connect` from the parsed connection options.

    Only the options given are passed, so connect's defaults (and connect.json) decide the rest.
    """
    options: dict[str, Any] = {}
    urls = list(values["urls"] or ())
    url = urls[0] if len(urls) == 1 else None
    if len(urls) > 1:
        options["urls"] = urls
    if values["config"]:
        # connect() reads the file named by this variable when it is given no URL, exactly as proton does.
        os.environ[CONNECT_FILE_ENV] = values["config"]
    plain = {
        "user": "user",
        "password": "password",
        "sasl_mechanisms": "allowed_mechs",
        "allow_insecure_mechs": "allow_insecure_mechs",
        "sni": "sni",
        "virtual_host": "virtual_host",
        "heartbeat": "heartbeat",
        "connect_timeout": "connect_timeout",
        "open_timeout": "open_timeout",
        "max_frame_size": "max_frame_size",
        "container_id": "container_id",
    }
    for name, option in plain.items():
        if values[name] is not None:
            options[option] = values[name]
    if values["no_sasl"]:
        options["sasl_enabled"] = False
    if not values["reconnect"]:
        options["reconnect"] = False
    context = _ssl_context(values)
    if context is not None:
        options["ssl_context"] = context
    return url, options


def split_connection_options(values: dict[str, Any]) -> dict[str, Any]:
    """Remove the connection options from a command's keyword arguments and return them."""
    return {name: values.pop(name) for name in CONNECTION_OPTION_NAMES}
