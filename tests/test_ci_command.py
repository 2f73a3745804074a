"""CI runs what README.md tells a contributor to run: .ci/run's command is the README Quickstart's test command."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def quickstart_test_command() -> str:
    """The second fenced block of README.md's Quickstart section (the first installs and runs the example)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) >= 2, "README's Quickstart lost its test command block"
    return blocks[1].strip()


def ci_command() -> str:
    """The last line of .ci/run: the command it runs from the repository root."""
    lines = [line for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[-1].strip()


def test_ci_runs_the_readme_test_command() -> None:
    command = ci_command()
    assert "nox" in command
    assert command == quickstart_test_command()
