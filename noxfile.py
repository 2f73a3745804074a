"""Development sessions.

`python3 -m nox` runs tests, lint and typecheck; `python3 -m nox -s bench` runs the benchmarks,
`python3 -m nox -s docs` builds the documentation site. Every session
builds its own virtualenv with the interpreter that runs nox. Development dependencies live in the PEP 735
``[dependency-groups]`` table of pyproject.toml and are read here with ``nox.project.dependency_groups``, so
any pip can install them (pip's own ``--group`` option needs pip >= 25.1).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

nox.needs_version = ">=2024.10.9"  # nox.project.dependency_groups
nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
LINT_PATHS = ("amqp_async", "tests", "benchmarks", "examples", "noxfile.py")


def _group(*names: str) -> tuple[str, ...]:
    return nox.project.dependency_groups(PYPROJECT, *names)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest arguments after `--`)."""
    session.install(".", *_group("test"))
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Check style and formatting with ruff."""
    session.install(*_group("lint"))
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def typecheck(session: nox.Session) -> None:
    """Type-check the package with mypy in strict mode, and the user programs of tests/typing (what the typed API
    promises, with ``assert_type``; negative.py's deliberate errors must stay errors) with mypy --strict and with
    pyright in strict mode."""
    session.install(".", *_group("typecheck"))
    session.run("mypy", "--strict", "amqp_async")
    session.run("mypy", "--strict", "tests/typing")
    python = Path(session.virtualenv.location) / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    session.run("pyright", "-p", "tests/typing", "--pythonpath", str(python))


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs.yml, docs/) into site/ in strict mode: a broken link, a missing
    reference or a docstring griffe cannot read fails the build. Pass `serve` after `--` to preview it."""
    session.install(".", *_group("docs"))
    env = {"NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor, printed on every build
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:], env=env)
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs, env=env)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Run the whole benchmark suite (benchmarks/report.py): one table beside python-qpid-proton's figures,
    written into docs/benchmarks.md with a plot. Pass options after `--` (e.g. `--quick`)."""
    session.install(".", *_group("bench"))
    session.run("python", "benchmarks/report.py", *session.posargs)
