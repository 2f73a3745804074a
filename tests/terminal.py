"""Lines for the reader's terminal from inside a test or fixture, past pytest's output capture, with or without
pytest-xdist.

In the main pytest process, pytest's terminal reporter writes them (with the capture suspended). In a pytest-xdist
worker (noxfile.py runs the suite on several) the reporter writes nowhere the reader sees, but the worker's
standard error is the controller's: the lines go there, the capture suspended all the same.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import pytest

__all__ = ["write_lines"]


def write_lines(config: pytest.Config | None, lines: Iterable[str], **markup: Any) -> None:
    """Write ``lines`` to the terminal now (``markup``: the reporter's, such as ``yellow=True``)."""
    reporter = config.pluginmanager.getplugin("terminalreporter") if config is not None else None
    capture = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    if reporter is None or capture is None:
        for line in lines:
            print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        if hasattr(config, "workerinput"):  # a pytest-xdist worker (not the environment: a pytest it runs inherits it)
            for line in lines:
                print(line, file=sys.stderr, flush=True)
            return
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line, **markup)
