"""The documentation: every program of the tutorial runs against the embedded broker and prints what the page says,
and the site builds in strict mode (broken links, missing references and unreadable docstrings fail it).

A tutorial program is a ```` ```python ```` block preceded by ``<!-- tutorial: run [users|tls] -->``; the
```` ```text ```` block right after it, if any, is its exact output. ``run`` blocks go to a plain broker,
``run users`` ones to a broker with the user ``alice:secret``, ``run tls`` ones to a broker serving amqps with a
certificate of our test CA. The page's URLs (``amqp://localhost:5672``, ``amqps://localhost:5671``) and ``ca.pem``
are replaced by the real ones. Every Python block of the page must be marked, so that none goes untested.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    from test_broker_cli import BrokerProcess, broker_process
    from tls_certs import make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_broker_cli import BrokerProcess, broker_process
    from tests.tls_certs import make_ca, make_cert, openssl_available

REPO = Path(__file__).resolve().parent.parent
TUTORIAL = REPO / "docs" / "tutorial.md"
TIMEOUT = 60.0
PLAIN_URL = "amqp://localhost:5672"
TLS_URL = "amqps://localhost:5671"

_BLOCK = re.compile(
    r"(?:<!-- tutorial: (?P<mark>[a-z ]+?) -->\n)?```python\n(?P<code>.*?)```\n(?:\n```text\n(?P<output>.*?)```\n)?",
    re.DOTALL,
)


@dataclass(frozen=True)
class Program:
    """One Python block of the tutorial."""

    line: int
    mark: str | None
    code: str
    output: str | None

    @property
    def broker(self) -> str:
        """Which broker it needs: ``plain``, ``users`` or ``tls``."""
        assert self.mark is not None
        words = self.mark.split()
        return words[1] if len(words) > 1 else "plain"


def tutorial_programs() -> list[Program]:
    text = TUTORIAL.read_text(encoding="utf-8")
    return [
        Program(text.count("\n", 0, m.start()) + 1, m["mark"], m["code"], m["output"]) for m in _BLOCK.finditer(text)
    ]


PROGRAMS = tutorial_programs()


def test_every_python_block_of_the_tutorial_is_run() -> None:
    assert len(PROGRAMS) >= 9, "the tutorial's programs were not found"
    unmarked = [p.line for p in PROGRAMS if p.mark is None or not p.mark.startswith("run")]
    assert not unmarked, f"python blocks at lines {unmarked} of docs/tutorial.md are not marked to run"
    assert {p.broker for p in PROGRAMS} == {"plain", "users", "tls"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[BrokerProcess, dict[str, str]]]]:
    """The three brokers the tutorial needs, each with the substitutions for its programs."""
    tmp = tmp_path_factory.mktemp("tutorial")
    started: dict[str, tuple[BrokerProcess, dict[str, str]]] = {}
    with broker_process(tmp) as plain, broker_process(tmp, "--user", "alice:secret") as users:
        started["plain"] = (plain, {PLAIN_URL: plain.url})
        started["users"] = (users, {PLAIN_URL: users.url})
        if not openssl_available():
            yield started
            return
        ca = make_ca(tmp, "ca")
        server = make_cert(tmp, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
        with broker_process(tmp, "--tls-cert", server.cert, "--tls-key", server.key) as tls:
            started["tls"] = (tls, {TLS_URL: f"amqps://localhost:{tls.port}", '"ca.pem"': repr(ca.cert)})
            yield started


@pytest.mark.parametrize("program", PROGRAMS, ids=[f"line-{p.line}" for p in PROGRAMS])
def test_tutorial_program(
    program: Program, brokers: dict[str, tuple[BrokerProcess, dict[str, str]]], tmp_path: Path
) -> None:
    if program.broker not in brokers:
        pytest.skip("the openssl command makes the test certificates")
    _, substitutions = brokers[program.broker]
    code = program.code
    for old, new in substitutions.items():
        assert old in code, f"the program at line {program.line} does not use {old}"
        code = code.replace(old, new)
    path = tmp_path / f"tutorial_{program.line}.py"
    path.write_text(code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("AMQP_ASYNC_TRACE_FRM", None)
    result = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=tmp_path
    )
    assert result.returncode == 0, f"docs/tutorial.md line {program.line} failed:\n{result.stderr}"
    if program.output is not None:
        assert result.stdout == program.output, f"docs/tutorial.md line {program.line} printed:\n{result.stdout}"


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    why = "the site build needs the docs dependency group (the full-suite session of noxfile.py installs it)"
    pytest.importorskip("mkdocs", reason=why)
    pytest.importorskip("material", reason=why)
    pytest.importorskip("mkdocstrings_handlers.python", reason=why)
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        timeout=120,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    site = tmp_path / "site"
    for page in ("index.html", "tutorial/index.html", "cli/index.html", "troubleshooting/index.html"):
        assert (site / page).is_file(), page
    reference = (site / "reference" / "amqp_async" / "index.html").read_text(encoding="utf-8")
    for name in ("amqp_async.connect", "amqp_async.Connection", "amqp_async.AuthenticationError"):
        assert f'id="{name}"' in reference, f"{name} is missing from the API reference"
    assert (site / "benchmarks.png").is_file()
