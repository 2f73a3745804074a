"""Ctrl-C: a program sent SIGINT ends with ``KeyboardInterrupt`` on every Python, 3.10 included.

Each case runs a program in a fresh interpreter (the one running the tests), waits for it to print ``ready``
(it is then blocked waiting for a message or a timer), sends it SIGINT and asserts its exit status and the last
line of its stderr. An uncaught ``KeyboardInterrupt`` makes Python exit by the signal itself (status -2 here, 130 in
a shell). python-qpid-proton runs the same programs as the reference: ``Container.run()`` and ``BlockingConnection``
behave as proton's do.

The awaitable API under ``anyio.run`` is the one case that differs on 3.10: anyio's runner turns Ctrl-C into a
``CancelledError`` there (its backport of Python 3.11's ``asyncio.Runner`` needs ``Task.uncancel()``, new in 3.11).
Pinned here, so that docs/troubleshooting.md (which says so and gives the workaround, ``asyncio.run``, also tested
here, as is the trio backend) fails the suite the day anyio changes it.
"""

from __future__ import annotations

import selectors
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from amqp_async.broker._thread import BrokerThread
from amqp_async.proton import Message
from amqp_async.proton.utils import BlockingConnection

#: What an uncaught KeyboardInterrupt leaves: Python re-raises SIGINT on itself at exit (bpo-1054041).
KILLED_BY_SIGINT = -signal.SIGINT
INTERRUPTED = (KILLED_BY_SIGINT, "KeyboardInterrupt")
#: anyio.run on Python 3.10 (see the module's docstring).
ANYIO_RUN_ON_3_10 = (1, "asyncio.exceptions.CancelledError")

# Every program starts the way an interactive Python does: SIGINT raises KeyboardInterrupt (a test runner started
# in the background by a non-interactive shell would otherwise pass SIGINT down ignored).
PRELUDE = """\
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
URL = sys.argv[1]
IMPLEMENTATION = sys.argv[2] if len(sys.argv) > 2 else "amqp_async"
if IMPLEMENTATION == "proton":
    from proton.handlers import MessagingHandler
    from proton.reactor import Container
    from proton.utils import BlockingConnection
else:
    from amqp_async.proton.handlers import MessagingHandler
    from amqp_async.proton.reactor import Container
    from amqp_async.proton.utils import BlockingConnection
"""

CONTAINER_TIMER = """\
class Idle(MessagingHandler):
    def on_start(self, event):
        event.container.schedule(120, self)
        print("ready", flush=True)

    def on_timer_task(self, event):
        pass

Container(Idle()).run()
"""

CONTAINER_RECEIVER = """\
class Receive(MessagingHandler):
    def on_start(self, event):
        event.container.create_receiver(URL + "/sigint-container")

    def on_link_opened(self, event):
        print("ready", flush=True)

    def on_message(self, event):
        print(event.message.body, flush=True)

Container(Receive()).run()
"""

BLOCKING_RECEIVE = """\
connection = BlockingConnection(URL, timeout=30)
receiver = connection.create_receiver("sigint-blocking")
print("ready", flush=True)
receiver.receive(timeout=120)
"""

AWAITABLE = """\
import asyncio
import anyio
import amqp_async

async def main():
    async with amqp_async.connect(URL) as connection:
        receiver = await connection.open_receiver("sigint-awaitable")
        print("ready", flush=True)
        async for delivery in receiver:
            await delivery.accept()

if sys.argv[3] == "asyncio.run":
    asyncio.run(main())
else:
    anyio.run(main, backend=sys.argv[3])
"""

READY_TIMEOUT = 60.0
EXIT_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as running:
        yield running


def interrupt(argv: list[str], ready: str = "ready") -> tuple[int, str, str]:
    """Start ``argv``, wait for the line ``ready`` on its stdout, send SIGINT; (exit status, last stderr line,
    whole stderr)."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + READY_TIMEOUT
            line = ""
            while line.strip() != ready:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    pytest.fail(f"{argv[:3]} printed no {ready!r} within {READY_TIMEOUT} s")
                line = process.stdout.readline()
                if not line:
                    _, err = process.communicate(timeout=EXIT_TIMEOUT)
                    pytest.fail(f"{argv[:3]} ended before it was ready (status {process.returncode}):\n{err}")
        time.sleep(0.3)  # let it settle into its wait: the outcome must not depend on it, the case is the usual one
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=EXIT_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    lines = err.strip().splitlines()
    return process.returncode, lines[-1] if lines else "", err


def python(program: str, *args: str) -> list[str]:
    return [sys.executable, "-c", PRELUDE + textwrap.dedent(program), *args]


@pytest.mark.parametrize("implementation", ["amqp_async", "proton"])
@pytest.mark.parametrize("program", [CONTAINER_TIMER, CONTAINER_RECEIVER], ids=["timer", "receiver"])
def test_container_run_ends_with_keyboard_interrupt(broker: BrokerThread, program: str, implementation: str) -> None:
    status, last, err = interrupt(python(program, broker.url, implementation))
    assert (status, last) == INTERRUPTED, err


@pytest.mark.parametrize("implementation", ["amqp_async", "proton"])
def test_blocking_connection_ends_with_keyboard_interrupt(broker: BrokerThread, implementation: str) -> None:
    status, last, err = interrupt(python(BLOCKING_RECEIVE, broker.url, implementation))
    assert (status, last) == INTERRUPTED, err


def test_the_awaitable_api_under_asyncio_run_ends_with_keyboard_interrupt(broker: BrokerThread) -> None:
    """The workaround docs/troubleshooting.md gives for Python 3.10; the same on every interpreter."""
    status, last, err = interrupt(python(AWAITABLE, broker.url, "amqp_async", "asyncio.run"))
    assert (status, last) == INTERRUPTED, err


def test_the_awaitable_api_under_anyio_run(broker: BrokerThread) -> None:
    """anyio's own behaviour: KeyboardInterrupt from Python 3.11, CancelledError on 3.10 (documented)."""
    status, last, err = interrupt(python(AWAITABLE, broker.url, "amqp_async", "asyncio"))
    expected = INTERRUPTED if sys.version_info >= (3, 11) else ANYIO_RUN_ON_3_10
    assert (status, last) == expected, err


def test_the_awaitable_api_on_trio_ends_with_keyboard_interrupt(broker: BrokerThread) -> None:
    status, last, err = interrupt(python(AWAITABLE, broker.url, "amqp_async", "trio"))
    assert (status, last) == INTERRUPTED, err


def test_the_command_line_exits_130_on_ctrl_c(broker: BrokerThread) -> None:
    """`amqp-async receive` prints what it received, then Ctrl-C: exit code 130 and one line, no traceback."""
    with BlockingConnection(broker.url, timeout=30) as connection:
        connection.create_sender("sigint-cli").send(Message(body="first"))
    # The `amqp-async` script's code, after the same SIGINT set-up as the other programs.
    command = "import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    command += "sys.argv[0] = 'amqp-async'\nfrom amqp_async.cli import main\nsys.exit(main())\n"
    argv = [sys.executable, "-c", command, "receive", "-u", broker.url, "sigint-cli", "--count", "2"]
    status, last, err = interrupt(argv, ready="first")
    assert (status, last) == (130, "amqp-async: interrupted"), err
    assert "Traceback" not in err
