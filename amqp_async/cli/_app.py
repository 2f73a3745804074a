"""The ``amqp-async`` command group: global options, and the commands of their modules."""

from __future__ import annotations

import importlib
import logging
import sys

import click

from .. import __version__
from ._exit import ExitCode

__all__ = ["cli", "run"]

#: Each command, and the module that defines it: a command's module is imported only when that command runs (or
#: when the group's help lists them all), so ``amqp-async send`` never loads what ``bench`` or ``receive`` need.
COMMANDS = {
    "send": "._send",
    "receive": "._receive",
    "peek": "._receive",
    "broker": "._broker",
    "bench": "._bench",
}


class _LazyGroup(click.Group):
    """A group whose commands are the :data:`COMMANDS`, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        command = getattr(importlib.import_module(COMMANDS[cmd_name], __package__), cmd_name)
        assert isinstance(command, click.Command), command
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="amqp-async")
@click.option("--debug", is_flag=True, help="log what the library does (and tracebacks) on stderr.")
def cli(debug: bool) -> None:
    """amqp-async: send, receive, browse and benchmark over AMQP 1.0, or run the embedded broker.

    \b
    Exit codes: 0 ok, 1 unexpected failure, 2 usage or input error, 3 connection failed,
    4 authentication failed, 5 timeout, 6 message not accepted, 7 link or session refused,
    130 interrupted, 141 the output's reader went away.
    """
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if not debug:
        # A command reports its own failure in one line (amqp-async: error: ...): the connection's warning of
        # the same failure (its state change to failed) would print it twice.
        logging.getLogger("amqp_async.connection").setLevel(logging.ERROR)


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
