"""Development sessions.

`python3 -m nox` runs tests, lint and typecheck; `python3 -m nox -s bench` runs the benchmarks,
`python3 -m nox -s docs` builds the documentation site. Development dependencies live in the PEP 735
``[dependency-groups]`` table of pyproject.toml and are read here with ``nox.project.dependency_groups``, so
any pip can install them (pip's own ``--group`` option needs pip >= 25.1).

The tests run on each supported Python found on the machine (``tests-3.10`` ... ``tests-3.13``): the whole suite
on :data:`FULL_SUITE_PYTHON` (the Python that runs nox), the tests of :data:`SUBSET` on the others
(docs/development.md says what each runs and why). Interpreters are looked up on PATH and among pyenv's builds;
one that is missing is skipped with a note, and fails the run when ``CI=true``. The other sessions run on the
interpreter that runs nox.

Sessions run side by side, one per CPU (``nox.options.parallel``; each session's output is printed as a block when
it ends): the whole suite beside the other interpreters' subsets, lint and typecheck, one after the other. Each
tests session runs pytest on pytest-xdist workers (:data:`WORKERS`). ``--parallel 1`` runs the sessions one after
the other; the benchmarks and the docs build always run alone.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2026.8.10"  # sessions in parallel (--parallel); @nox.session(download_python=...)
nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
nox.options.parallel = "auto"  # one session per CPU, for the sessions that allow it
# A developer's machine may lack an interpreter: its session is skipped (nox prints why). CI must test all four.
nox.options.error_on_missing_interpreters = os.environ.get("CI", "").lower() == "true"

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
LINT_PATHS = ("amqp_async", "tests", "benchmarks", "examples", "noxfile.py")

#: Every Python the package supports (pyproject.toml's classifiers).
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: The interpreter that runs the whole suite: the one running nox (python3: 3.11 on the development and CI
#: machines), which is there wherever nox runs, and is the Python of the developers' own venvs, where the suite's
#: timings were measured. 3.11, 3.12 and 3.13 run the suite's CPU-bound tests at the same speed; 3.10 takes 1.6x.
_RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
FULL_SUITE_PYTHON = _RUNNING_PYTHON if _RUNNING_PYTHON in PYTHONS else PYTHONS[-1]
#: What every other interpreter runs: all but the tests that spend their time in other programs (RabbitMQ, rhea,
#: Qpid Proton C, Spark's JVM), in long runs, or in exploring with Hypothesis the inputs of code whose behaviour does
#: not depend on the Python version (``hypothesis`` marks every @given test: a third of the rest's time); the
#: example-based tests beside them cover the same code on every interpreter: the codec, the engine, the client on
#: asyncio, uvloop and trio, the proton API, the broker and the command line. Nor the files that start a Python
#: program of ours for each step (``processes``: the command line, the broker as a program), which spend most of
#: their CPU importing the package again and again, but for the few of their tests that touch what a Python version
#: changes (signals, ssl, a run end to end). tests/conftest.py's MARKERS give the markers that the test files do not
#: (``matrix``: a test that runs here all the same, interop or processes).
SUBSET = "not (slow or spark or network_fuzz or hypothesis) and (matrix or not (interop or processes))"
#: pytest-xdist (3.8 or later): the suite spends most of its time waiting (for peers to start, for the timeouts
#: it proves, for Spark's JVMs), so three workers on two cores nearly halve the whole suite's time. Not more: the
#: tests that bound a wait (RabbitMQ's rabbitmqctl, Spark's Python workers given 10 s to connect back) fail when
#: the load passes what two cores give, and four workers beside a subset's two passed it. Each worker takes a file
#: at a time (``loadfile``: a file's module fixtures start once; tests/conftest.py makes the Spark files one unit),
#: handed out in tests/conftest.py's order, the longest first (``--no-loadscope-reorder``). Pass ``-n 0`` after
#: ``--`` for one process and live output.
WORKERS = {"full": 3, "subset": 2}
_XDIST = ("--dist", "loadfile", "--no-loadscope-reorder")
#: The tests cache bytecode even where the environment asks Python not to (container images often set
#: PYTHONDONTWRITEBYTECODE=1; an empty value is Python's "not set"): the suite starts about a thousand Python
#: processes that import the same helpers from tests/, and its workers read the test modules pytest rewrote once
#: for all of them (tests/rewrite_cache.py) instead of each rewriting them. The caches go to __pycache__ folders,
#: which git ignores.
_TEST_ENV = {"PYTHONDONTWRITEBYTECODE": ""}


def _add_pyenv_builds_to_path() -> None:
    """Append to PATH the bin directory of pyenv's newest build of each of :data:`PYTHONS`.

    pyenv's shims run only the versions that ``pyenv global`` (or a .python-version file) selects, so
    ``python3.12`` fails on a machine where 3.12 is built but not selected. Appended, not prepended: an interpreter
    already on PATH keeps precedence, and ``python3`` stays what it was.
    """
    versions = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    if not versions.is_dir():
        return
    path = os.environ.get("PATH", "").split(os.pathsep)
    for python in PYTHONS:
        builds = [
            build
            for build in versions.glob(f"{python}.*")
            if re.fullmatch(rf"{re.escape(python)}\.\d+", build.name) and (build / "bin" / f"python{python}").exists()
        ]
        if not builds:
            continue
        newest = max(builds, key=lambda build: int(build.name.rsplit(".", 1)[1]))
        if str(newest / "bin") not in path:
            path.append(str(newest / "bin"))
    os.environ["PATH"] = os.pathsep.join(path)


_add_pyenv_builds_to_path()


def _group(*names: str) -> tuple[str, ...]:
    return nox.project.dependency_groups(PYPROJECT, *names)


@nox.session(python=PYTHONS, download_python="never", allow_parallel=True)
def tests(session: nox.Session) -> None:
    """Run the tests on each Python (pass pytest arguments after `--`: `nox -s tests-3.12 -- -k codec -x`).

    The whole suite on FULL_SUITE_PYTHON, the SUBSET on the others."""
    # Sessions run side by side in one checkout: each keeps its own pytest cache (--lf, --ff).
    cache = ["-o", f"cache_dir={Path(session.virtualenv.location) / '.pytest_cache'}"]
    if session.python == FULL_SUITE_PYTHON:
        # PySpark, and the docs group (mkdocs for test_docs.py's site build), only here: those tests run here only
        session.install(".[spark]", *_group("test", "docs"))
        session.run("pytest", *cache, "-n", str(WORKERS["full"]), *_XDIST, *session.posargs, env=_TEST_ENV)
        return
    session.install(".", *_group("test"))
    session.log(f"Python {session.python} runs the subset -m {SUBSET!r}; the whole suite runs on {FULL_SUITE_PYTHON}")
    session.run("pytest", *cache, "-m", SUBSET, "-n", str(WORKERS["subset"]), *_XDIST, *session.posargs, env=_TEST_ENV)


@nox.session(allow_parallel=True)
def lint(session: nox.Session) -> None:
    """Check style and formatting with ruff."""
    session.install(*_group("lint"))
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session(allow_parallel=True)
def typecheck(session: nox.Session) -> None:
    """Type-check the package with mypy in strict mode (as the oldest and the newest supported Python), and the user
    programs of tests/typing (what the typed API promises, with ``assert_type``; negative.py's deliberate errors must
    stay errors) with mypy --strict and with pyright in strict mode, and the programs of docs/tutorial.md."""
    session.install(".", *_group("typecheck"))
    session.run("mypy", "--strict", "amqp_async")
    # pyproject.toml checks as Python 3.10 (what the oldest supported Python has); once more as the newest.
    session.run("mypy", "--strict", "--python-version", PYTHONS[-1], "amqp_async")
    session.run("mypy", "--strict", "tests/typing")
    session.run("python", "tests/typing/check_tutorial.py")  # the tutorial's programs, as a user's mypy sees them
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


# --- proton-suite: Qpid Proton's own Python tests, on python-qpid-proton and on amqp_async.proton -------------
# (a self-contained block: this session and its helpers only)

_PROTON_SHIM = '''"""`import proton` resolves to amqp_async.proton (written by `nox -s proton-suite`)."""
import sys

import amqp_async.proton as _proton
import amqp_async.proton.handlers
import amqp_async.proton.reactor
import amqp_async.proton.utils  # noqa: F401

for _name in ("handlers", "reactor", "utils"):
    sys.modules["proton." + _name] = sys.modules["amqp_async.proton." + _name]
sys.modules["proton"] = _proton
'''


def _proton_suite_results(report: Path) -> dict[str, str]:
    """The outcome of each test in a proton-test JUnit report: "pass", "fail" or "skip"."""
    import xml.etree.ElementTree as ElementTree

    results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        if case.find("skipped") is not None:
            results[name] = "skip"
        elif case.find("failure") is not None or case.find("error") is not None:
            results[name] = "fail"
        else:
            results[name] = "pass"
    return results


def _proton_suite_table(real: dict[str, str], ours: dict[str, str]) -> list[str]:
    """Per module: the tests real proton passes, and how many of those amqp_async.proton passes."""
    counts: dict[str, list[int]] = {}
    for name, outcome in real.items():
        module = name.split(".")[1] if name.startswith("proton_tests.") else name.split(".")[0]
        row = counts.setdefault(module, [0, 0])
        if outcome == "pass":
            row[0] += 1
            row[1] += ours.get(name) == "pass"
    lines = [f"{'module':<12} {'python-qpid-proton':>19} {'amqp_async.proton':>18}"]
    for module, (theirs, mine) in sorted(counts.items()):
        lines.append(f"{module:<12} {theirs:>19} {mine:>18}")
    total_theirs = sum(row[0] for row in counts.values())
    total_mine = sum(row[1] for row in counts.values())
    share = 100 * total_mine / max(total_theirs, 1)
    lines.append(f"{'total':<12} {total_theirs:>19} {total_mine:>18}   ({share:.1f}%)")
    skipped = sum(outcome == "skip" for outcome in real.values())
    lines.append(f"({skipped} tests that python-qpid-proton skips are not counted)")
    lines += [
        f"  not passed: {name}"
        for name, outcome in sorted(real.items())
        if outcome == "pass" and ours.get(name) != "pass"
    ]
    return lines


@nox.session(name="proton-suite", default=False)
def proton_suite(session: nox.Session) -> None:
    """Run Qpid Proton's own Python test suite (a checkout's ``python/tests``, given after ``--``; nothing is
    fetched) with python-qpid-proton 0.40 and with amqp_async.proton in its place, and print the tests each passes,
    per module: ``nox -s proton-suite -- /path/to/qpid-proton/python/tests [proton-test arguments]``."""
    import tempfile

    if not session.posargs:
        session.error("give the path of a qpid-proton checkout's python/tests directory after --")
    suite = Path(session.posargs[0]).resolve()
    if not (suite / "proton-test").exists():
        session.error(f"{suite} has no proton-test runner")
    extra = session.posargs[1:]
    session.install(".", "python-qpid-proton==0.40.0")
    with tempfile.TemporaryDirectory(prefix="proton-suite-") as scratch:
        work = Path(scratch)
        shim = work / "shim" / "proton"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text(_PROTON_SHIM)
        reports = {"real": work / "real.xml", "ours": work / "ours.xml"}
        with session.chdir(suite):  # proton-test finds its modules (and ssl_db) from there
            for label, report in reports.items():
                env = {"PYTHONPATH": str(shim.parent)} if label == "ours" else {}
                session.log(f"proton-test with {'amqp_async.proton' if label == 'ours' else 'python-qpid-proton'}")
                session.run(
                    "python", "proton-test", "-x", str(report), *extra, env=env, success_codes=[0, 1], silent=True
                )
        table = _proton_suite_table(_proton_suite_results(reports["real"]), _proton_suite_results(reports["ours"]))
    print("\n".join(table))
