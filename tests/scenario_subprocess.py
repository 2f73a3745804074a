"""Running a parity scenario in a subprocess of its own: a test file that compares a callback-API program on
python-qpid-proton and on ``amqp_async.proton`` runs each scenario as ``python THAT_FILE SCENARIO IMPL OPTIONS``
(a hang fails the test, never the suite), the scenario printing its record as one ``RESULT <json>`` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUBPROCESS_TIMEOUT = 30.0

Scenario = Callable[[str, dict[str, Any]], Any]


def run_scenario(
    script: str,
    scenario: str,
    impl: str,
    options: dict[str, Any],
    *,
    extra_env: dict[str, str] | None = None,
    timeout: float = SUBPROCESS_TIMEOUT,
) -> Any:
    """Run ``scenario`` of the test file ``script`` on ``impl`` (a module name: ``proton`` or ``amqp_async.proton``)
    in a subprocess (its environment with ``extra_env``, for ``timeout`` seconds at most), and return what it
    recorded."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra_env or {})
    command = [sys.executable, script, scenario, impl, json.dumps(options)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{scenario} on {impl} timed out; stderr: {exc.stderr!r}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"{scenario} on {impl}: no result (exit {done.returncode}); stderr:\n{done.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def scenario_main(scenarios: dict[str, Scenario]) -> None:
    """The subprocess's side: run the scenario its arguments name, and print its record."""
    scenario_name, implementation, raw_options = sys.argv[1], sys.argv[2], sys.argv[3]
    print("RESULT " + json.dumps(scenarios[scenario_name](implementation, json.loads(raw_options))))
