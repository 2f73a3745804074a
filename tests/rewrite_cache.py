"""pytest-xdist's workers share one assertion-rewriting pass instead of each making its own.

pytest rewrites the asserts of every test module it imports and caches the result beside the source
(``__pycache__/*-pytest-*.pyc``), but a session's workers start together and each finds the cache empty: on the
2-core development machine each worker spent 7 of its 11 CPU-seconds of collection rewriting the suite's 5,000
asserts, for nine workers in a run of README's test command. :func:`rewrite_before_the_workers_start` does it once,
in the controlling process, before it starts the workers, which then read the cache (3.8 s of collection each).

It uses pytest's own rewriting functions, which are private: if they move, nothing is done and each worker
rewrites for itself as before. Nothing is written where pytest itself would not write: not with
``PYTHONDONTWRITEBYTECODE`` set, nor in a read-only checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def rewrite_before_the_workers_start(config: pytest.Config, ignored: set[str]) -> int:
    """Rewrite and cache the test modules of ``config``'s test paths (``test_*.py`` and ``conftest.py`` under
    them, but the file names in ``ignored``) when this process is a pytest-xdist controller about to start workers
    and the cache may be written; return how many were written."""
    if sys.dont_write_bytecode or hasattr(config, "workerinput") or not _xdist_workers(config):
        return 0
    try:
        from _pytest.assertion import assertstate_key
        from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir
    except ImportError:  # pragma: no cover - pytest moved them: each worker rewrites for itself
        return 0
    if config.getoption("assertmode", "rewrite") != "rewrite" or assertstate_key not in config.stash:
        return 0
    state = config.stash[assertstate_key]
    written = 0
    for path in _test_modules(config, ignored):
        cache_dir = get_cache_dir(path)
        pyc = cache_dir / (path.name[:-3] + PYC_TAIL)
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only checkout: pytest would not write either
            return written
        if _read_pyc(path, pyc, state.trace) is not None:
            continue
        source_hash, code = _rewrite_test(path, config)
        written += bool(_write_pyc(state, code, source_hash, pyc))
    return written


def _xdist_workers(config: pytest.Config) -> int:
    option = getattr(config.option, "numprocesses", None)
    return option if isinstance(option, int) else 0


def _test_modules(config: pytest.Config, ignored: set[str]) -> list[Path]:
    roots = [Path(config.rootpath, path) for path in config.getini("testpaths")] or [config.rootpath]
    modules: list[Path] = []
    for root in roots:
        if root.is_dir():
            modules += [
                path
                for path in sorted(root.rglob("*.py"))
                if (path.name == "conftest.py" or path.name.startswith("test_")) and path.name not in ignored
            ]
    return modules
