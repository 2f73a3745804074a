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
