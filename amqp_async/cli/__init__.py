"""``amqp-async``: the command line (also ``python -m amqp_async``).

Commands: ``send``, ``receive``, ``peek``, ``broker`` and ``bench``; ``amqp-async COMMAND --help`` lists each one's
options. Every command that talks to a peer takes the options of :func:`amqp_async.connect` (``--url``, ``--user``,
``--password``, ``--sasl-mechanisms``, ``--tls-*``, ...) and, without ``--url``, reads connect.json as ``connect``
does. It needs the optional extra ``amqp-async[cli]`` (click and rich); ``import amqp_async`` never imports it.

Exit codes (:class:`ExitCode`): 0 success, 1 an unexpected failure, 2 a usage or input error, 3 the connection
failed, 4 authentication failed, 5 a timeout, 6 a message was not accepted (rejected, released, modified or in
doubt), 7 the peer refused a link or a session (an unknown address, for instance), 130 interrupted.
"""

from __future__ import annotations

import importlib.util
import sys

from ._exit import ExitCode

__all__ = ["ExitCode", "main"]

#: What ``amqp-async`` prints when the ``cli`` extra is not installed.
INSTALL_HINT = (
    "amqp-async: the command line needs the optional 'cli' extra (click and rich):\n    pip install 'amqp-async[cli]'"
)


def main(argv: list[str] | None = None) -> int:
    """Run the command line and return its exit code (the console script exits with it)."""
    try:
        if importlib.util.find_spec("rich") is None:  # imported later, and only for a live bar or a table
            raise ModuleNotFoundError("No module named 'rich'", name="rich")
        from ._app import run
    except ImportError as exc:  # only click and rich are optional; anything else is a bug and must show
        if exc.name not in ("click", "rich") and not str(exc.name).startswith(("click.", "rich.")):
            raise
        print(f"{INSTALL_HINT}\n({exc})", file=sys.stderr)
        return ExitCode.USAGE
    return run(argv)
