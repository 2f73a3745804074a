"""``python -m amqp_async.broker`` (also ``amqp-async broker``): run the embedded broker.

    python -m amqp_async.broker [--host H] [--port P] [--user NAME:PASSWORD ...] [--users-file FILE]
                                [--allow-anonymous] [--tls-cert CERT [--tls-key KEY]]
                                [--max-connections N] [--max-queue-depth N] [--max-memory SIZE]
                                [--queue-share FRACTION]
                                [--when-full block|reject] [--max-message-size SIZE] [--max-transactions N]
                                [--handshake-timeout SECONDS] [--idle-timeout SECONDS]
                                [--dead-letter-queue ADDRESS] [--delivery-limit N] [--expiry-interval SECONDS]
                                [--transaction-timeout SECONDS] [--ws-port P [--ws-path PATH]] [--data-dir DIR]
                                [--quiet | --debug] [--version]

Once listening it prints one line per listener on stdout, ``listening on amqp://H:P`` (the port chosen when
``--port 0``; ``amqps`` with ``--tls-cert``) and, with ``--ws-port``, ``listening on ws://H:P/PATH``: a script
waits for the first line and reads the URL from it. It logs one line per connection and link opened or closed on
stderr, and shuts down cleanly (exit code 0) on SIGINT or SIGTERM.

What cannot start ends with one line on stderr, ``PROG: error: WHAT``, and an exit code: 2 for a bad option or
an unreadable file (certificate, key, users file), 1 when the broker cannot serve (a port in use, a host that
does not resolve, a data directory that cannot be opened or that another broker uses). ``--debug`` adds the
traceback (and debug logging).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import math
import os
import re
import signal
import socket
import sqlite3
import ssl
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import anyio

from ..io.exception_groups import leaves as exception_leaves
from ..io.tls_files import load_cert_chain
from ..protocol.connection import LEAST_IDLE_TIMEOUT
from ._connection import DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_IDLE_TIMEOUT
from ._flow import QUEUE_SHARE
from ._server import (
    DEFAULT_EXPIRY_INTERVAL,
    DEFAULT_MAX_MEMORY,
    Broker,
    ListenError,
    check_dead_letter_queue,
    check_ws_path,
)
from ._store import DataDirInUse
from ._transactions import DEFAULT_MAX_TRANSACTIONS

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "make_broker",
    "message_budget",
    "parse_arguments",
    "parse_size",
    "process_memory",
]

#: The exit code when the broker cannot serve (a port in use, a host that does not resolve...).
EXIT_FAILURE = 1
#: The exit code for a bad option or an unreadable file.
EXIT_USAGE = 2
#: The exit code after Ctrl-C before the broker listened (as shells report it: 128 + SIGINT).
EXIT_INTERRUPTED = 130
#: Memory ``--max-memory`` keeps aside for what is in flight rather than held: the messages a connection received
#: and has not routed yet (up to a credit window per producer), output waiting for slow sockets (up to 1 MiB per
#: connection), the store's batch being written.
IN_FLIGHT_RESERVE = 16 << 20

DEFAULT_PROG = "python -m amqp_async.broker"

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3}
_UNITS.update({"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "t": 1000**4, "tb": 1000**4})
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


class StartupError(Exception):
    """What keeps the broker from starting, said in one line; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def parse_size(text: str) -> int | None:
    """A number of bytes: ``268435456``, ``256MiB``, ``512M``, ``1GiB``, ``1.5G``; ``0``, ``unlimited`` or
    ``none`` for no limit (None).

    Raises:
        argparse.ArgumentTypeError: not a size.
    """
    if text.strip().lower() in ("unlimited", "none", "0"):
        return None
    match = _SIZE.match(text.lower())
    if match is None or match.group(2) not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 1048576, 512KiB, 256MiB, 1GiB; 0: unlimited)")
    size = int(float(match.group(1)) * _UNITS[match.group(2)])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size above 0 (0 means unlimited)")
    return size


#: The least ``--max-memory`` the broker starts with: what it leaves the messages, sessions and links (a quarter at
#: least, see :func:`message_budget`) holds a few hundred of them. Below it, every client was refused its session.
LEAST_MAX_MEMORY = 1 << 20


def _memory_limit(text: str) -> int | None:
    """``--max-memory``: a size of :data:`LEAST_MAX_MEMORY` or more, or none."""
    size = parse_size(text)
    if size is not None and size < LEAST_MAX_MEMORY:
        raise argparse.ArgumentTypeError(
            f"{text!r} is less than the broker runs in (1MiB: its own memory comes first; 0: unlimited)"
        )
    return size


def _positive_size(text: str) -> int:
    size = parse_size(text)
    if size is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size above 0")
    return size


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0-65535; 0: a free port)")
    return port


def _share(text: str) -> float:
    """``--queue-share``: a fraction above 0 and at most 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, not {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not above 0")
    return value


def _dead_letter_queue(text: str) -> str:
    try:
        check_dead_letter_queue(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _ws_path(text: str) -> str:
    try:
        check_ws_path(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:  # inf would mean never: the periodic work it paces would never run
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds above 0")
    return value


def _timeout(text: str) -> float | None:
    """Seconds of a time limit; 0 (or ``none``) for none (said in the error: "above 0" alone read as if 0 were
    refused too)."""
    if text.strip().lower() in ("0", "none"):
        return None
    try:
        return _seconds(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (0: no limit)") from None


def _idle_timeout(text: str) -> float | None:
    """``--idle-timeout``: 0 for none; else at least twice the least idle-time-out a peer takes (the broker's open
    asks for half, and our clients and proton's containers refuse an ask under :data:`LEAST_IDLE_TIMEOUT`)."""
    value = _timeout(text)
    if value is not None and value < 2 * LEAST_IDLE_TIMEOUT:
        raise argparse.ArgumentTypeError(f"{text!r} is under {2 * LEAST_IDLE_TIMEOUT} seconds (0: none)")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (the usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (--help lists the options)\n")


def _version() -> str:
    # The package's own version: amqp_async (the facade) is imported before any of its subpackages.
    return str(getattr(sys.modules.get("amqp_async"), "__version__", "unknown"))


def build_parser(prog: str = DEFAULT_PROG) -> argparse.ArgumentParser:
    """The command line's parser (``prog``: the command's name in its usage, help and error lines)."""
    parser = _Parser(
        prog=prog,
        description="The embedded AMQP 1.0 broker: queues, topics, dynamic nodes, selectors, transactions, "
        "expiry and dead-lettering, in memory (or kept on disk with --data-dir). For development and tests, not "
        "production. Prints 'listening on URL' once it serves; stops cleanly on SIGINT or SIGTERM.",
        epilog="Exit codes: 0 stopped by a signal, 1 cannot serve (port in use...), 2 bad option or unreadable file. "
        "Sizes take units: 1048576, 512KiB, 256MiB, 1GiB.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s (amqp_async {_version()})")
    listen = parser.add_argument_group("listening")
    listen.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    listen.add_argument(
        "--port", type=_port, default=5672, help="the port (default: %(default)s; 0: a free port, printed)"
    )
    listen.add_argument("--tls-cert", metavar="CERT", help="certificate chain (PEM) to serve amqps:// instead")
    listen.add_argument("--tls-key", metavar="KEY", help="private key (PEM) of --tls-cert (default: in CERT)")
    listen.add_argument(
        "--ws-port",
        type=_port,
        metavar="PORT",
        help="also serve AMQP over WebSocket on this port (0: a free one; wss:// with --tls-cert)",
    )
    listen.add_argument(
        "--ws-path",
        type=_ws_path,
        metavar="PATH",
        help="the only WebSocket path served, starting with / (e.g. /ws; default: any path)",
    )
    auth = parser.add_argument_group("authentication")
    auth.add_argument(
        "--user",
        action="append",
        metavar="NAME:PASSWORD",
        help="a user (repeatable): enables SASL PLAIN and SCRAM, and turns ANONYMOUS off",
    )
    auth.add_argument("--users-file", metavar="FILE", help="a file of NAME:PASSWORD lines, or a JSON object")
    auth.add_argument("--allow-anonymous", action="store_true", help="also accept SASL ANONYMOUS with users")
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--max-memory",
        type=_memory_limit,
        default=DEFAULT_MAX_MEMORY,
        metavar="SIZE",
        help=f"the most memory the broker takes: its messages, sessions and links get what its own memory (~35MB) "
        f"leaves; producers then wait for credit (default: {DEFAULT_MAX_MEMORY >> 20}MiB, at least 1MiB; 0 or "
        "'unlimited': no limit)",
    )
    limits.add_argument(
        "--queue-share",
        type=_share,
        default=QUEUE_SHARE,
        metavar="FRACTION",
        help="the part of --max-memory one queue (or topic subscription) may hold, of what the other queues leave: "
        "a queue whose consumer is stuck or slow stops its own producers there, not those of the others "
        f"(default: {QUEUE_SHARE}; 1: the whole)",
    )
    limits.add_argument(
        "--max-queue-depth", type=_positive_int, metavar="N", help="the most messages waiting in one queue"
    )
    limits.add_argument(
        "--when-full",
        choices=("block", "reject"),
        default="block",
        help="a full queue withholds credit from its producers (block, the default) or rejects their messages "
        "(reject: then dead-lettered too, with reason queue-full, when there is a --dead-letter-queue)",
    )
    limits.add_argument(
        "--max-message-size",
        type=_positive_size,
        metavar="SIZE",
        help="the largest message taken (larger ones are rejected with amqp:link:message-size-exceeded)",
    )
    limits.add_argument(
        "--max-connections",
        type=_positive_int,
        metavar="N",
        help="refuse connections opened beyond N (amqp:resource-limit-exceeded; one not opened yet takes no place)",
    )
    limits.add_argument(
        "--max-transactions",
        type=_positive_int,
        default=DEFAULT_MAX_TRANSACTIONS,
        metavar="N",
        help="the most transactions one connection holds open; a declare beyond it (or beyond --max-memory, each "
        "counted as a queue is) is rejected with amqp:resource-limit-exceeded (default: %(default)s)",
    )
    limits.add_argument(
        "--handshake-timeout",
        type=_timeout,
        default=DEFAULT_HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="close a connection whose client has not opened it (protocol header, SASL, open) this long after "
        "connecting, or after its TLS handshake, itself bounded by as long (default: %(default)s; 0: no limit)",
    )
    limits.add_argument(
        "--idle-timeout",
        type=_idle_timeout,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="close a connection whose client sends nothing this long (amqp:resource-limit-exceeded); clients are "
        "asked for a frame every half of it (default: %(default)s; 0: never)",
    )
    messages = parser.add_argument_group("messages")
    messages.add_argument(
        "--dead-letter-queue",
        metavar="ADDRESS",
        type=_dead_letter_queue,
        help="where rejected, expired, over-limit and (with --when-full reject) refused messages go, annotated "
        "with why (default: they are dropped)",
    )
    messages.add_argument(
        "--delivery-limit",
        type=_positive_int,
        metavar="N",
        help="dead-letter (or drop) a message after N failed deliveries (modified delivery-failed, rolled back, "
        "held by a consumer whose connection was lost)",
    )
    messages.add_argument(
        "--expiry-interval",
        type=_seconds,
        default=DEFAULT_EXPIRY_INTERVAL,
        metavar="SECONDS",
        help="how often expired messages (header ttl, absolute-expiry-time) are swept from the queues (default: "
        "%(default)s)",
    )
    messages.add_argument(
        "--transaction-timeout", type=_seconds, metavar="SECONDS", help="roll back transactions open longer"
    )
    messages.add_argument(
        "--data-dir", metavar="DIR", help="keep queues, durable subscriptions and durable messages here (SQLite)"
    )
    output = parser.add_argument_group("output").add_mutually_exclusive_group()
    output.add_argument("--quiet", action="store_true", help="log warnings only")
    output.add_argument("--debug", action="store_true", help="log everything, and tracebacks of failures")
    return parser


def parse_arguments(argv: list[str] | None = None, *, prog: str = DEFAULT_PROG) -> argparse.Namespace:
    """The command line, parsed (a bad option exits with code 2 and one line on stderr)."""
    parser = build_parser(prog)
    arguments = parser.parse_args(argv)
    if arguments.tls_key and not arguments.tls_cert:
        parser.error("--tls-key needs --tls-cert")
    if arguments.ws_path is not None and arguments.ws_port is None:
        parser.error("--ws-path needs --ws-port")
    return arguments


def _read(path: str, option: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise StartupError(f"cannot read {option} {path}: {_reason(exc)}") from exc


def _users(arguments: argparse.Namespace) -> dict[str, str]:
    users: dict[str, str] = {}
    if arguments.users_file:
        text = _read(arguments.users_file, "--users-file")
        if text.lstrip().startswith(("{", "[")):  # JSON (an array is refused below, not read as lines)
            try:
                loaded = json.loads(text)
            except json.JSONDecodeError as exc:
                raise StartupError(f"--users-file {arguments.users_file} is not valid JSON: {exc}") from exc
            if not isinstance(loaded, dict):
                raise StartupError(
                    f"--users-file {arguments.users_file}: a JSON file holds an object of names to passwords, "
                    f"not {type(loaded).__name__}"
                )
            for name, password in loaded.items():
                if not isinstance(password, str):
                    # null read as the password "None" (anyone could log in as that user with it)
                    raise StartupError(
                        f"--users-file {arguments.users_file}: the password of {name!r} is not a string "
                        f"({json.dumps(password)})"
                    )
                users[name] = password
        else:
            for number, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if line and not line.startswith("#"):
                    name, separator, password = line.partition(":")
                    if not separator or not name:
                        raise StartupError(
                            f"--users-file {arguments.users_file}, line {number}: NAME:PASSWORD expected"
                        )
                    users[name] = password
        if not users:
            # Passing a users file asks for authentication: without a user in it the broker would have no user to
            # check, and let everyone in as ANONYMOUS (an empty file, or one of comments only, did so silently).
            raise StartupError(
                f"--users-file {arguments.users_file} names no user (NAME:PASSWORD lines, or a JSON object of names "
                "to passwords): the broker would let anyone in as ANONYMOUS"
            )
    for pair in arguments.user or ():
        name, separator, password = pair.partition(":")
        if not separator:
            raise StartupError(f"--user takes NAME:PASSWORD, got {pair!r}")
        users[name] = password
    for name, password in users.items():
        if not name or not password:
            # RFC 4616 (PLAIN) and RFC 5802 (SCRAM) take neither empty: such a user could never log in
            what = "a user name" if not name else f"the password of {name!r}"
            raise StartupError(f"{what} is empty: SASL PLAIN and SCRAM take none (no client could log in with it)")
    return users


def _tls_context(arguments: argparse.Namespace) -> ssl.SSLContext | None:
    if not arguments.tls_cert:
        return None
    # A missing or unreadable file, named as such (ssl's error does not name it).
    cert_text = _read_pem(arguments.tls_cert, "--tls-cert")
    key_text = None if arguments.tls_key is None else _read_pem(arguments.tls_key, "--tls-key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    key = f" with --tls-key {arguments.tls_key}" if arguments.tls_key else ""
    what = f"--tls-cert {arguments.tls_cert}{key}"
    problem = _pem_problem(arguments.tls_cert, cert_text, arguments.tls_key, key_text)
    if problem is not None:  # ssl would say only "[SSL] PEM lib (_ssl.c:3905)", or blame the key
        raise StartupError(f"cannot load {what}: {problem}")
    try:
        load_cert_chain(context, arguments.tls_cert, arguments.tls_key)
    except ssl.SSLError as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        if reason == "KEY_VALUES_MISMATCH":  # OpenSSL's name for it
            reason = "the private key does not match the certificate (the key of another certificate?)"
        raise StartupError(f"cannot load {what}: {reason}") from exc
    return context


#: What a PEM certificate and a PEM private key (PKCS#8 ``PRIVATE KEY``, or ``RSA``/``EC PRIVATE KEY``) start with.
_PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"
_PEM_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z ]+ )?PRIVATE KEY-----")


def _read_pem(path: str, option: str) -> str:
    """A TLS file's text; any bytes read (a DER file is then found to hold no PEM, not undecodable)."""
    try:
        return Path(path).read_bytes().decode("latin-1")
    except OSError as exc:
        raise StartupError(f"cannot read {option} {path}: {_reason(exc)}") from exc


def _pem_problem(cert: str, cert_text: str, key: str | None, key_text: str | None) -> str | None:
    """What the PEM files lack, in words (None: they look right and ssl decides).

    ``ssl.SSLContext.load_cert_chain`` reports a file holding no certificate or no key as "PEM lib": the user
    learns neither which file nor what is wrong (a DER file, a key given as the certificate, a truncated copy).
    """
    if _PEM_CERTIFICATE not in cert_text:
        return f"{cert} holds no PEM certificate ({_PEM_CERTIFICATE} ...): give the certificate chain in PEM"
    if key is None or key_text is None:
        return None  # the key is in the certificate's file, or load_cert_chain says it is missing
    if _PEM_PRIVATE_KEY.search(key_text) is None:
        return f"{key} holds no PEM private key (-----BEGIN PRIVATE KEY----- ...): give the key of the certificate"
    return None


def process_memory() -> int:
    """The memory this process holds now (its resident set, in bytes; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as statm:  # Linux: pages resident, the second field
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # at start, the peak is the current size
    return int(peak if sys.platform == "darwin" else peak * 1024)


def message_budget(limit: int | None, own: int) -> int | None:
    """What ``--max-memory`` leaves the messages: it bounds the whole process, whose own memory at start (``own``
    bytes: the interpreter, the library) and a reserve for what is in flight (:data:`IN_FLIGHT_RESERVE`) come
    first; a limit that leaves less than a quarter of itself gives the messages that quarter."""
    if limit is None:
        return None
    return max(limit - own - IN_FLIGHT_RESERVE, limit // 4, 1)  # a limit of a few bytes still leaves one


def make_broker(arguments: argparse.Namespace) -> Broker:
    """The broker the command line describes (files read and checked now).

    Raises:
        StartupError: an unreadable or invalid file.
    """
    users = _users(arguments)
    return Broker(
        arguments.host,
        arguments.port,
        users=users or None,
        allow_anonymous=True if arguments.allow_anonymous else None,
        ssl_context=_tls_context(arguments),
        max_connections=arguments.max_connections,
        max_queue_depth=arguments.max_queue_depth,
        max_message_size=arguments.max_message_size,
        dead_letter_queue=arguments.dead_letter_queue,
        delivery_limit=arguments.delivery_limit,
        expiry_interval=arguments.expiry_interval,
        transaction_timeout=arguments.transaction_timeout,
        max_transactions=arguments.max_transactions,
        handshake_timeout=arguments.handshake_timeout,
        idle_timeout=arguments.idle_timeout,
        ws_port=arguments.ws_port,
        ws_path=arguments.ws_path,
        max_memory=message_budget(arguments.max_memory, process_memory()),
        when_full=arguments.when_full,
        queue_share=arguments.queue_share,
        data_dir=arguments.data_dir,
    )


async def _serve(broker: Broker) -> None:
    # The signal handlers are in place before "listening on" is printed: a signal sent as soon as that line is
    # read still shuts the broker down cleanly.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:
            await group.start(broker.serve)
            print(f"listening on {broker.url}", flush=True)
            if broker.ws_url is not None:
                print(f"listening on {broker.ws_url}", flush=True)
            async for signum in signals:
                logging.getLogger("amqp_async.broker").info("signal %s: shutting down", signal.Signals(signum).name)
                group.cancel_scope.cancel()
                break


def _reason(exc: BaseException) -> str:
    """An OS error's reason in words, lower case (``no such file or directory``)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    return str(exc) or type(exc).__name__


def describe_failure(exc: BaseException, arguments: argparse.Namespace) -> tuple[str, int]:
    """One line saying why the broker stopped or could not start, and the exit code."""
    leaves = exception_leaves(exc)
    known = [leaf for leaf in leaves if isinstance(leaf, (StartupError, ListenError, OSError, sqlite3.Error))]
    leaf = known[0] if known else leaves[0]
    if isinstance(leaf, StartupError):
        return str(leaf), leaf.code
    if isinstance(leaf, ListenError):
        hint = ""
        if leaf.errno == errno.EADDRINUSE:
            hint = " (another broker? choose another port, or 0 for a free one)"
        elif leaf.errno == errno.EACCES:
            hint = " (ports below 1024 need privileges)"
        return f"{leaf}{hint}", EXIT_FAILURE
    if isinstance(leaf, socket.gaierror):
        return f"cannot resolve --host {arguments.host!r}: {_reason(leaf)}", EXIT_FAILURE
    if isinstance(leaf, DataDirInUse):
        holder = f"pid {leaf.pid}" if leaf.pid is not None else "its pid unknown"
        return f"--data-dir {arguments.data_dir} is in use by another broker ({holder})", EXIT_FAILURE
    if isinstance(leaf, (OSError, sqlite3.Error)) and arguments.data_dir:
        return f"cannot use --data-dir {arguments.data_dir}: {_reason(leaf)}", EXIT_FAILURE
    if isinstance(leaf, OSError):
        where = f": {leaf.filename}" if leaf.filename else ""
        return f"{_reason(leaf)}{where}", EXIT_FAILURE
    return f"unexpected {type(leaf).__name__}: {leaf} (--debug shows the traceback)", EXIT_FAILURE


def main(argv: list[str] | None = None, *, prog: str = DEFAULT_PROG) -> None:
    """Run the broker until SIGINT or SIGTERM.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).
        prog: the command's name in its usage and error lines (``amqp-async broker`` passes its own).

    Raises:
        SystemExit: with code 1 or 2 when the broker cannot start or fails (one line on stderr says why; the
            traceback too with ``--debug``), 130 when interrupted before it listened.
    """
    arguments = parse_arguments(argv, prog=prog)
    level = logging.DEBUG if arguments.debug else logging.WARNING if arguments.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    try:
        broker = make_broker(arguments)
        anyio.run(_serve, broker)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were in place
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except Exception as exc:
        message, code = describe_failure(exc, arguments)
        if arguments.debug:
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(code) from None


if __name__ == "__main__":
    main()
