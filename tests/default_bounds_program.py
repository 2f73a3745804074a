"""One scenario of tests/bounds_scenarios.py with the library's defaults (``connect(url)`` and nothing else), in a
process of its own: tests/test_client_bounds.py runs one per scenario, all at once, so that the suite waits for
the longest only. Prints the outcomes as one JSON line.

Usage: ``python tests/default_bounds_program.py killed|stopped|nothing-listening``
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bounds_scenarios import dump, run_scenario


async def main(scenario: str) -> None:
    print(dump(await run_scenario(scenario, {})), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
