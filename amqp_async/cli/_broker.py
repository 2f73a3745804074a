"""``amqp-async broker``: the embedded broker, exactly as ``python -m amqp_async.broker``.

The arguments go unparsed to the broker's own command line (:func:`amqp_async.broker.__main__.main`), so every
option it has, today's and tomorrow's, works here too: ``amqp-async broker --help`` lists them, under this
command's own name. The group's ``--debug`` (``amqp-async --debug broker``) is the broker's ``--debug``.
"""

from __future__ import annotations

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
    main(argv, prog=PROG)
