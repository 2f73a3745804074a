"""Spark drivers of their own, in subprocesses (tests/spark_stream_program.py): a driver killed mid-batch and
restarted from its checkpoint, and speculation on a standalone cluster whose two workers are distinct hosts."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from spark_support import (
    PROGRAM,
    broker_fixture,  # noqa: F401 -- the fixture "broker"
    drain,
    failure_of,
    fill,
    fired,
    run_program,
    running,
    spark_environment,
    standalone_cluster,
)

import amqp_async
from amqp_async.broker import BrokerThread

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_query_killed_mid_batch_restarts_from_its_checkpoint_losing_nothing(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """The driver (and its workers) killed with SIGKILL while the sink writes batch 2, before Spark commits it:
    restarted from the checkpoint, batch 2 is replayed from the log (its messages were accepted when it was
    received), the sink gets it again, and nothing else comes twice."""
    count = 5_000
    fill(broker.url, "killed", [amqp_async.Message(body=f"k{n}", id=f"k-{n}") for n in range(count)])
    arguments = ["restart", broker.url, "killed", str(tmp_path / "checkpoint"), str(tmp_path / "out.txt")]
    marker = tmp_path / "stalled"
    environment = spark_environment()
    process = subprocess.Popen(
        [*PROGRAM, *arguments, "--stall-at-batch", "2", str(marker)],
        env=environment,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with running(process):
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "the program never reached batch 2"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)  # driver, runner and workers: mid-batch, before Spark's commit
        process.wait(30)
    killed_lines = (tmp_path / "out.txt").read_text().splitlines()
    interrupted = {line.split()[1] for line in killed_lines if line.startswith("2 ")}
    assert len(interrupted) == int(marker.read_text()) == 1000
    assert len(drain(broker.url, "killed", accept=False)) == count - 3000  # batches 0-2 were accepted

    finished = run_program(*arguments, env=environment, timeout=300)
    assert "done" in finished.stdout, failure_of(finished)
    lines = [line.split() for line in (tmp_path / "out.txt").read_text().splitlines()]
    seen = collections.Counter(message_id for _, message_id in lines)
    assert set(seen) == {f"k-{n}" for n in range(count)}  # 0 lost
    duplicates = {message_id for message_id, times in seen.items() if times > 1}
    assert duplicates == interrupted  # exactly the interrupted batch, once more
    replayed = {message_id for batch, message_id in lines[len(killed_lines) :] if batch == "2"}
    assert replayed == interrupted  # ... as batch 2 again: the same messages, from the log
    assert all(times <= 2 for times in seen.values())
    assert len(lines) == count + len(interrupted)
    assert drain(broker.url, "killed") == []


@pytest.mark.interop
def test_a_speculative_copy_of_a_slow_read_task_wins_and_nothing_is_accepted_twice(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """``spark.speculation`` on a standalone cluster of two workers on distinct hosts; the first attempt of batch
    1's partition 0 stalls after it received. Spark runs a copy on the other host, whose entry is chosen (its name
    says attempt 1); the stalled attempt is killed (or finds the choice made) and its deliveries go back. Every
    message reaches the sink once, or (held by the stalled attempt when the run ended) stays in the queue: none
    accepted twice, none lost."""
    count = 3_000
    fill(broker.url, "spec", [amqp_async.Message(body="s", id=f"s-{n}") for n in range(count)])
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "received@1.0").write_text("sleep 25")
    environment = {**spark_environment(), "AMQP_ASYNC_SPARK_FAILPOINTS": str(faults)}
    out = tmp_path / "seen.json"
    with standalone_cluster(tmp_path) as master:
        result = run_program(
            "speculation", master, broker.url, "spec", str(tmp_path), str(out), env=environment, timeout=600
        )
    assert result.returncode == 0, failure_of(result)
    findings = json.loads(out.read_text())
    assert findings["exception"] is None and not findings["active"]
    assert fired(str(faults), "received@1.0")
    assert re.search(r"Marking task 0 in stage \d+\.\d+ .* as speculatable", result.stderr)  # slow, Spark saw...
    assert [name for name in findings["chosen"]["1"] if name.startswith("chosen.1-")]  # ... and its copy won
    counted = collections.Counter(message_id for _, message_id in findings["seen"])
    assert max(counted.values()) == 1  # none accepted twice
    # AvailableNow ends at the first batch that finds the queue empty. On a loaded machine the stalled attempt may
    # still hold its deliveries then (Spark's kill reaches its Python worker late): they are not lost but back in
    # the queue once its connection is gone, for the next run. Every message: in the sink once, or in the queue.
    left = collections.Counter(str(message.id) for message in drain(broker.url, "spec"))
    assert counted + left == collections.Counter(f"s-{n}" for n in range(count)), sorted(left)[:10]
    assert len(counted) >= count - 500  # at most the stalled attempt's share (a partition's budget) waits
