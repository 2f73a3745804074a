"""``python -m amqp_async.broker``: run the embedded broker.

    python -m amqp_async.broker [--host H] [--port P] [--user NAME:PASSWORD ...] [--users-file FILE]
                                [--allow-anonymous] [--tls-cert CERT --tls-key KEY]
                                [--max-connections N] [--max-queue-depth N] [--max-message-size BYTES]
                                [--dead-letter-queue ADDRESS] [--transaction-timeout SECONDS]
                                [--ws-port P [--ws-path PATH]]
                                [--max-memory BYTES] [--when-full block|reject] [--data-dir DIR]

Prints ``listening on amqp://H:P`` once listening (and ``listening on ws://H:P/PATH`` with ``--ws-port``), logs
one line per connection and link opened or closed, and shuts down cleanly on SIGINT or SIGTERM. A users file holds
one ``name:password`` per line (or a JSON object).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import ssl
import sys
from pathlib import Path

import anyio

from ._server import Broker


def _users(arguments: argparse.Namespace) -> dict[str, str]:
    users: dict[str, str] = {}
    if arguments.users_file:
        text = Path(arguments.users_file).read_text()
        if text.lstrip().startswith("{"):
            users.update({str(name): str(password) for name, password in json.loads(text).items()})
        else:
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    name, _, password = line.partition(":")
                    users[name] = password
    for pair in arguments.user or ():
        name, separator, password = pair.partition(":")
        if not separator:
            raise SystemExit(f"--user takes NAME:PASSWORD, got {pair!r}")
        users[name] = password
    return users


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, parsed."""
    parser = argparse.ArgumentParser(prog="python -m amqp_async.broker", description="The embedded AMQP 1.0 broker.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5672, help="0: a free port (printed)")
    parser.add_argument("--user", action="append", help="NAME:PASSWORD (repeatable): enables SASL PLAIN and SCRAM")
    parser.add_argument("--users-file", help="a file of NAME:PASSWORD lines, or a JSON object")
    parser.add_argument("--allow-anonymous", action="store_true", help="also accept SASL ANONYMOUS with users")
    parser.add_argument("--tls-cert", help="certificate (PEM) to serve amqps")
    parser.add_argument("--tls-key", help="private key (PEM) of --tls-cert")
    parser.add_argument("--max-connections", type=int)
    parser.add_argument("--max-queue-depth", type=int, help="the most messages waiting in a queue")
    parser.add_argument("--max-memory", type=int, help="the most bytes of messages held (producers then wait)")
    parser.add_argument(
        "--when-full",
        choices=("block", "reject"),
        default="block",
        help="a full queue withholds credit from its producers (block, the default) or rejects messages",
    )
    parser.add_argument("--data-dir", help="keep queues, durable subscriptions and durable messages here (SQLite)")
    parser.add_argument("--max-message-size", type=int)
    parser.add_argument("--dead-letter-queue")
    parser.add_argument("--transaction-timeout", type=float, help="roll back transactions open longer (seconds)")
    parser.add_argument(
        "--ws-port", type=int, help="also serve AMQP over WebSocket on this port (0: a free port; wss with --tls-cert)"
    )
    parser.add_argument("--ws-path", help="the only WebSocket path served (default: any path)")
    parser.add_argument("--quiet", action="store_true", help="log warnings only")
    return parser.parse_args(argv)


async def _main(arguments: argparse.Namespace) -> None:
    users = _users(arguments)
    context = None
    if arguments.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(arguments.tls_cert, arguments.tls_key)
    broker = Broker(
        arguments.host,
        arguments.port,
        users=users or None,
        allow_anonymous=True if arguments.allow_anonymous else None,
        ssl_context=context,
        max_connections=arguments.max_connections,
        max_queue_depth=arguments.max_queue_depth,
        max_message_size=arguments.max_message_size,
        dead_letter_queue=arguments.dead_letter_queue,
        transaction_timeout=arguments.transaction_timeout,
        ws_port=arguments.ws_port,
        ws_path=arguments.ws_path,
        max_memory=arguments.max_memory,
        when_full=arguments.when_full,
        data_dir=arguments.data_dir,
    )
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


def main(argv: list[str] | None = None) -> None:
    """Run the broker until SIGINT or SIGTERM."""
    arguments = parse_arguments(argv)
    logging.basicConfig(
        level=logging.WARNING if arguments.quiet else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    anyio.run(_main, arguments)


if __name__ == "__main__":
    main()
