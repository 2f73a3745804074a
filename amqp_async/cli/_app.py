"""The ``amqp-async`` command group: global options, and the commands of their modules."""

from __future__ import annotations

import logging
import sys

import click

from .. import __version__
from ._bench import bench
from ._broker import broker
from ._exit import ExitCode
from ._receive import peek, receive
from ._send import send

__all__ = ["cli", "run"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="amqp-async")
@click.option("--debug", is_flag=True, help="log what the library does (and tracebacks) on stderr.")
def cli(debug: bool) -> None:
    """amqp-async: send, receive, browse and benchmark over AMQP 1.0, or run the embedded broker.

    \b
    Exit codes: 0 ok, 1 unexpected failure, 2 usage or input error, 3 connection failed,
    4 authentication failed, 5 timeout, 6 message not accepted, 7 link or session refused,
    130 interrupted.
    """
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )


for command in (send, receive, peek, broker, bench):
    cli.add_command(command)


def run(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    try:
        cli.main(args=argv, prog_name="amqp-async", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("amqp-async: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return ExitCode.USAGE
    except SystemExit as exc:  # the commands exit with their code (run_command, the broker's argparse)
        return exc.code if isinstance(exc.code, int) else (ExitCode.OK if exc.code is None else ExitCode.FAILURE)
    return ExitCode.OK
