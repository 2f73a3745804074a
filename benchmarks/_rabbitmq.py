"""A private RabbitMQ 3.10 node for the benchmarks, started and stopped with tests/rabbitmq.py's own machinery.

tests/rabbitmq.py is written for pytest (it defines a session fixture), but its ``ensure_installed`` and
``start_node`` are plain functions: this module imports them. It needs pytest only for the fixture's decorator at
import time; where pytest is not installed (a benchmark-only virtualenv) a stand-in with that decorator is put in
its place, so nothing of pytest is needed to run a node.

Not a benchmark itself (the leading underscore keeps ``nox -s bench`` from running it).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent / "tests"

__all__ = ["rabbitmq_node"]


def _load() -> Any:
    if importlib.util.find_spec("pytest") is None and "pytest" not in sys.modules:
        stand_in = types.ModuleType("pytest")

        def fixture(*args: Any, **kwargs: Any) -> Any:
            if args and callable(args[0]):
                return args[0]
            return lambda function: function

        stand_in.fixture = fixture  # type: ignore[attr-defined]
        stand_in.PytestWarning = UserWarning  # type: ignore[attr-defined]
        sys.modules["pytest"] = stand_in
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import rabbitmq

    return rabbitmq


@contextmanager
def rabbitmq_node() -> Iterator[Any]:
    """A running private node (``.url``, ``.port``), installed first if needed; stopped and removed after.

    Raises:
        RuntimeError: RabbitMQ cannot be installed or started here (the message says why).
    """
    rabbitmq = _load()
    try:
        rabbitmq.ensure_installed()
    except rabbitmq.RabbitMQUnavailable as exc:
        raise RuntimeError(str(exc)) from exc
    node = rabbitmq.start_node()
    try:
        yield node
    finally:
        node.stop()
        shutil.rmtree(node.base, ignore_errors=True)
