"""Nothing waits for ever (issue 22, item 3): every awaiting call of the awaitable client completes or raises
within a documented bound when the peer is gone: killed (its sockets closed), stopped (SIGSTOP: its sockets open,
nothing answers) or never there (nothing listening). The calls and their expected outcomes are
tests/bounds_scenarios.py's; the peer is the embedded broker as a process of its own.

Two sets: with small bounds passed explicitly, on asyncio and trio (fast); and with the library's DEFAULTS, which
prove the documented bounds (docs/client.md, "Defaults and their bounds"): heartbeat 30 s, connect_timeout 30 s,
open_timeout 15 s, reconnect max_time 60 s, close 10 s. The default runs take up to a minute and a half: they run
in processes of their own, all three at once (``tests/default_bounds_program.py``), and print the time each call
took.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
import amqp_async.io.driver
from amqp_async.client._backoff import DEFAULT_MAX_TIME
from amqp_async.client._config import DEFAULT_CONNECT_TIMEOUT, DEFAULT_HEARTBEAT, DEFAULT_OPEN_TIMEOUT

try:
    from bounds_scenarios import EXPECTED, Outcome, run_scenario
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.bounds_scenarios import EXPECTED, Outcome, run_scenario

pytestmark = pytest.mark.anyio

PROGRAM = Path(__file__).resolve().parent / "default_bounds_program.py"

#: What a loaded machine (2 cores, other test runs) may add to a bound.
SLACK = 2.0

# Small bounds, passed explicitly.
HEARTBEAT = 1.5
CONNECT_TIMEOUT = 1.0
OPEN_TIMEOUT = 0.25  # well within HEARTBEAT, as the defaults are (15 s and 30 s): a stalled loop must not swap them
MAX_TIME = 2.0
CLOSE_TIMEOUT = 1.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def bounds(
    scenario: str, *, heartbeat: float, connect_timeout: float, open_timeout: float, max_time: float, close: float
) -> dict[str, float]:
    """The documented bound of each call, in seconds from the moment the peer went away."""
    waits = {"killed": max_time, "stopped": heartbeat + max_time}.get(scenario, 0.0)
    result = {name: waits for name in EXPECTED[scenario]}
    result["close"] = close
    if scenario == "stopped":
        result["connect"] = connect_timeout
        for name in ("open_session", "open_sender", "open_receiver"):
            result[name] = open_timeout
    if scenario != "stopped":
        result["connect"] = 0.0  # refused at once
        result["connect_failover"] = 0.0
    return result


def check(scenario: str, outcomes: dict[str, Outcome], limits: dict[str, float]) -> None:
    assert {name: outcome["raised"] for name, outcome in outcomes.items()} == EXPECTED[scenario]
    for name, outcome in outcomes.items():
        assert outcome["seconds"] <= limits[name] + SLACK, (name, outcome)


@pytest.mark.parametrize("scenario", ["killed", "stopped", "nothing-listening"])
async def test_every_call_ends_within_small_bounds(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amqp_async.io.driver, "CLOSE_TIMEOUT", CLOSE_TIMEOUT)
    options = {
        "heartbeat": HEARTBEAT,
        "connect_timeout": CONNECT_TIMEOUT,
        "open_timeout": OPEN_TIMEOUT,
        "reconnect": amqp_async.Backoff(initial=0.05, max_time=MAX_TIME),
    }
    with anyio.fail_after(60):
        outcomes = await run_scenario(scenario, options)
    limits = bounds(
        scenario,
        heartbeat=HEARTBEAT,
        connect_timeout=CONNECT_TIMEOUT,
        open_timeout=OPEN_TIMEOUT,
        max_time=MAX_TIME,
        close=CLOSE_TIMEOUT,
    )
    check(scenario, outcomes, limits)
    if scenario == "stopped":
        # Only the idle timeout tells a silent peer: no wait on the connection ended before it.
        lost = [outcome for outcome in outcomes.values() if outcome["raised"] == "ConnectionLost"]
        assert len(lost) == 2 and all(outcome["seconds"] >= HEARTBEAT + MAX_TIME - 0.5 for outcome in lost)
        # the opens end by open_timeout, not sooner
        opens = [outcomes[name] for name in ("open_session", "open_sender", "open_receiver")]
        assert all(outcome["seconds"] >= OPEN_TIMEOUT - 0.05 for outcome in opens), opens
    if scenario == "killed":
        # the opens waited through the reconnecting (open_timeout does not count it) and ended with it
        opens = [outcomes[name] for name in ("open_session", "open_sender", "open_receiver")]
        assert all(outcome["seconds"] > OPEN_TIMEOUT + 0.5 for outcome in opens), opens


# ---------------------------------------------------------------------------------------------------------------
# The defaults


@pytest.fixture(scope="module")
def default_runs() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The three default-bound scenarios, started together (each in a process of its own)."""
    runs = {
        scenario: subprocess.Popen(
            [sys.executable, str(PROGRAM), scenario], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for scenario in ("killed", "stopped", "nothing-listening")
    }
    try:
        yield runs
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
            run.communicate()


def default_outcomes(runs: dict[str, subprocess.Popen[str]], scenario: str) -> dict[str, Any]:
    run = runs[scenario]
    try:
        stdout, stderr = run.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        run.kill()
        stdout, stderr = run.communicate()
        pytest.fail(f"the {scenario} scenario ran for more than 180 s: {stderr}")
    assert run.returncode == 0, stderr
    outcomes: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    print(f"\n{scenario} with the defaults (seconds after the peer went away):")
    for name, outcome in sorted(outcomes.items(), key=lambda item: item[1]["seconds"]):
        print(f"  {name:16} {outcome['raised']:22} {outcome['seconds']:6.1f}  {outcome['text'][:100]}")
    return outcomes


def default_bounds(scenario: str) -> dict[str, float]:
    return bounds(
        scenario,
        heartbeat=DEFAULT_HEARTBEAT,
        connect_timeout=DEFAULT_CONNECT_TIMEOUT,
        open_timeout=DEFAULT_OPEN_TIMEOUT,
        max_time=DEFAULT_MAX_TIME,
        close=amqp_async.io.driver.CLOSE_TIMEOUT,
    )


def test_the_documented_defaults() -> None:
    """The figures docs/client.md states; the slow tests below prove that they bound every wait."""
    assert (DEFAULT_HEARTBEAT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_OPEN_TIMEOUT, DEFAULT_MAX_TIME) == (30, 30, 15, 60)
    assert amqp_async.io.driver.CLOSE_TIMEOUT == 10.0
    assert max(max(default_bounds(scenario).values()) for scenario in EXPECTED) + SLACK <= 120  # the bound


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["killed", "stopped", "nothing-listening"])
def test_every_call_ends_within_the_default_bounds(
    scenario: str, default_runs: dict[str, subprocess.Popen[str]]
) -> None:
    outcomes = default_outcomes(default_runs, scenario)
    check(scenario, outcomes, default_bounds(scenario))
    if scenario == "stopped":
        # Lost by the idle timeout (not sooner: nothing else tells), and given up after max_time.
        assert outcomes["receive"]["seconds"] >= DEFAULT_MAX_TIME
        assert "the peer sent nothing for 30 s (the idle timeout, heartbeat)" in outcomes["receive"]["text"]
        assert "(max_time 60 s)" in outcomes["receive"]["text"]
    if scenario == "killed":
        assert outcomes["receive"]["cause"] == "ConnectionRefused"
        assert outcomes["receive"]["errno"] == errno.ECONNREFUSED
