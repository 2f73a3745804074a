"""``amqp-async broker``: the embedded broker, exactly as ``python -m amqp_async.broker``.

The arguments go unparsed to the broker's own command line (:func:`amqp_async.broker.__main__.main`), so every
option it has, today's and tomorrow's, works here too: ``amqp-async broker --help`` lists them.
"""

from __future__ import annotations

import click

__all__ = ["broker"]


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def broker(arguments: tuple[str, ...]) -> None:
    """Run the embedded broker until SIGINT or SIGTERM (options: amqp-async broker --help)."""
    from ..broker.__main__ import main

    main(list(arguments))
