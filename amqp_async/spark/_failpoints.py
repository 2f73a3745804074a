"""Named points of the executor-side read where tests inject faults (a testing aid; off unless asked for).

The fault tests must kill a Python worker at an exact step of a task (after it received, after its log write,
after it accepted...), in a worker process that Spark starts. With the environment variable
``AMQP_ASYNC_SPARK_FAILPOINTS`` naming a directory, each point looks there for a trigger file named after it,
``POINT@BATCH.PARTITION`` (one partition of one micro-batch), ``POINT@PARTITION`` or ``POINT`` (the first task to
pass), whose text is the action:

- ``kill``: SIGKILL this process (as the OOM killer or a lost machine would);
- ``sleep SECONDS``: stall this attempt (a slow task, for speculation);
- ``raise``: fail the task with an exception.

A trigger fires once: the first process to rename it away takes it (a rename is atomic), so Spark's retry of the
task runs unharmed. Without the variable a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["ENVIRONMENT", "POINTS", "failpoint"]

ENVIRONMENT = "AMQP_ASYNC_SPARK_FAILPOINTS"
#: The points, in the order a task passes them.
POINTS = ("received", "logged", "chosen", "settled")


def failpoint(point: str, partition: int, batch: int | None = None) -> None:
    """Run the fault a test asked for at ``point`` of the task of ``partition`` (of micro-batch ``batch``)."""
    directory = os.environ.get(ENVIRONMENT)
    if not directory:
        return
    names = [f"{point}@{partition}", point]
    if batch is not None:
        names.insert(0, f"{point}@{batch}.{partition}")
    for name in names:
        trigger = os.path.join(directory, name)
        fired = f"{trigger}.fired-{os.getpid()}"
        try:
            os.rename(trigger, fired)
        except FileNotFoundError:
            continue
        with open(fired, encoding="utf-8") as file:
            action = file.read().split()
        if action[:1] == ["kill"]:
            os.kill(os.getpid(), signal.SIGKILL)
        elif action[:1] == ["sleep"]:
            time.sleep(float(action[1]))
        elif action[:1] == ["raise"]:
            raise RuntimeError(f"failpoint {point} of partition {partition}: injected failure")
        return
