"""Type-check the programs of docs/tutorial.md as a user's strict mypy would (run by the ``typecheck`` nox session).

The tutorial's functions are left unannotated, for brevity, so mypy runs with ``--strict`` less the rules that want
annotations; their bodies are still checked (``check_untyped_defs``): a body used as a ``str`` without narrowing,
a dict whose key type is too narrow... is an error here, as in a user's project that copied the program. Run from
the repository's root; exits with mypy's status.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

TUTORIAL = Path("docs/tutorial.md")
_BLOCK = re.compile(r"```python\n(?P<code>.*?)```\n", re.DOTALL)
_RELAXED = ["--allow-untyped-defs", "--allow-incomplete-defs", "--allow-untyped-calls", "--no-warn-return-any"]


def main() -> int:
    text = TUTORIAL.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="tutorial-types-") as directory:
        paths: list[str] = []
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            path = Path(directory) / f"tutorial_line_{line}.py"
            path.write_text(match["code"], encoding="utf-8")
            paths.append(str(path))
        if len(paths) < 9:
            print(f"only {len(paths)} python blocks found in {TUTORIAL}", file=sys.stderr)
            return 1
        # The package is checked on its own (with its own settings): here only what the programs do with it.
        silent = "--follow-imports=silent"
        command = [sys.executable, "-m", "mypy", "--strict", *_RELAXED, silent, "--no-incremental", *paths]
        return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
