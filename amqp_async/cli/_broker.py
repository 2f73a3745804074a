"""``amqp-async broker``: the embedded broker, exactly as ``python -m amqp_async.broker``.

The arguments go unparsed to the broker's own command line (:func:`amqp_async.broker.__main__.main`), so every
option it has, today's and tomorrow's, works here too: ``amqp-async broker --help`` lists them, under this
command's own name. The group's ``--debug`` (``amqp-async --debug broker``) is the broker's ``--debug``.
"""

from __future__ import annotations

import logging

import click

__all__ = ["broker"]

PROG = "amqp-async broker"


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def broker(context: click.Context, arguments: tuple[str, ...]) -> None:
    """Run the embedded broker until SIGINT or SIGTERM (options: amqp-async broker --help)."""
    from ..broker.__main__ import main

    argv = list(arguments)
    if context.find_root().params.get("debug") and "--debug" not in argv and "--quiet" not in argv:
        argv.append("--debug")
    _leave_logging_to_the_broker()
    main(argv, prog=PROG)


def _leave_logging_to_the_broker() -> None:
    """Undo the logging the group set up for the client commands, so that the broker sets up its own.

    The group logs warnings only (a client command reports its failure in one line) and hushes the connection's
    warnings; ``logging.basicConfig`` does nothing once the root logger has a handler, so the broker's own level
    (connections and links opened and closed, the signal that stops it; ``--quiet``, ``--debug``) was ignored:
    ``amqp-async broker`` logged no connection, as if none came. Only the plain stream handler ``basicConfig``
    made is removed (a test's capturing handlers are subclasses, and stay).
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    logging.getLogger("amqp_async.connection").setLevel(logging.NOTSET)
