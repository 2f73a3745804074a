"""A receiver's max-message-size (§2.7.3), both ways round: what our client takes, and what our broker sends.

- The awaitable client's ``open_receiver`` announces a limit by default (128 MiB: a message is held whole before it
  is handed over) and enforces it as the parts add up: python-qpid-proton sending a delivery that never ends gets
  its link detached with ``amqp:link:message-size-exceeded`` once the limit is passed, and the process holds no
  more than that. A message above an explicit limit is detached likewise, and stays with the peer (a receiver with
  no limit then gets it); ``open_stream_receiver`` has no limit by default.
- The embedded broker with a message larger than a receiver's limit detaches that link with the same condition
  (the size and the limit named) and keeps the message for a receiver that takes it, not counted as a delivery
  attempt; before, it closed the whole connection with ``amqp:internal-error``. Checked with python-qpid-proton's
  receiver as well as ours, and for a large message kept on disk.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import LinkError, Message
from amqp_async.broker import Broker, BrokerThread

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import utils as proton_utils  # noqa: E402 - after the importorskip that explains its absence
from proton.reactor import LinkOption  # noqa: E402

pytestmark = pytest.mark.anyio

MiB = 1 << 20
TIMEOUT = 30.0
PEER = Path(__file__).resolve().parent / "proton_stream_peer.py"
SIZE_EXCEEDED = "amqp:link:message-size-exceeded"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def endless_sender() -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """python-qpid-proton listening, sending whoever attaches one delivery that never ends."""
    popen = subprocess.Popen(
        [sys.executable, str(PEER), "listen-send-endless"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert popen.stdout is not None
        first = popen.stdout.readline()
        found = re.search(r"listening on (\d+)", first)
        assert found, f"the python-qpid-proton peer did not start: {first!r}"
        yield int(found.group(1)), popen
    finally:
        if popen.poll() is None:
            popen.kill()
        popen.wait(10)


# --- our client's limit ---------------------------------------------------------------------------------------


async def test_a_delivery_that_never_ends_is_stopped_at_the_default_limit() -> None:
    with endless_sender() as (port, popen):
        with anyio.fail_after(2 * TIMEOUT):  # 128 MiB to move: about a second, more on a busy CI host
            async with amqp_async.connect(f"amqp://127.0.0.1:{port}", reconnect=False) as conn:
                receiver = await conn.open_receiver("endless")  # every option its default
                with pytest.raises(LinkError) as raised:
                    await receiver.receive()
        stdout, stderr = await anyio.to_thread.run_sync(lambda: popen.communicate(timeout=TIMEOUT))
    assert raised.value.condition == SIZE_EXCEEDED
    assert f"exceeds max-message-size {128 * MiB}" in str(raised.value)
    [line] = [json.loads(text) for text in stdout.splitlines() if text.startswith("{")] or [{"stderr": stderr}]
    # python-qpid-proton was told why its link ended, and had streamed past the limit (the limit, not an accident
    # of the run, stopped it)
    assert line["error"] == SIZE_EXCEEDED, line
    assert line["streamed"] > 128 * MiB


async def test_a_message_above_the_receivers_limit_stays_with_python_qpid_protons_broker() -> None:
    with ProtonBroker() as broker:
        broker.put("big", proton.Message(body=b"x" * (3 * MiB)))
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                limited = await conn.open_receiver("big", max_message_size=MiB)
                with pytest.raises(LinkError) as raised:
                    await limited.receive()
                assert raised.value.condition == SIZE_EXCEEDED
                assert f"exceeds max-message-size {MiB}" in str(raised.value)
                unlimited = await conn.open_receiver("big", max_message_size=None)
                delivery = await unlimited.receive()
                assert delivery.message.body == b"x" * (3 * MiB)
                await delivery.accept()
        announced = {attach.name: attach.max_message_size for attach in broker.attaches}
        assert sorted(announced.values()) == [0, MiB]  # None: not sent (no limit)
        assert broker.queued("big") == []


async def test_the_default_is_announced_and_a_stream_receiver_has_none() -> None:
    with ProtonBroker() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                await conn.open_receiver("q", name="whole")
                await conn.open_stream_receiver("q", name="streamed")
                await conn.open_receiver("q", name="zero", max_message_size=0)  # §2.7.3: zero is no limit
        announced = {attach.name: attach.max_message_size for attach in broker.attaches}
    assert announced == {"whole": 128 * MiB, "streamed": 0, "zero": 0}


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (1 << 64, ValueError), (1.5, TypeError), ("1MiB", TypeError), (True, TypeError)],
)
async def test_a_limit_out_of_range_is_refused_at_the_call(value: Any, error: type[Exception]) -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        with pytest.raises(error, match="max_message_size"):
            conn.open_receiver("q", max_message_size=value)
        with pytest.raises(error, match="max_message_size"):
            conn.open_sender("q", max_message_size=value)


# --- our broker's answer to a receiver's limit ----------------------------------------------------------------


async def test_our_broker_detaches_only_the_link_and_keeps_the_message() -> None:
    big = Message(body=b"y" * (3 * MiB), subject="big")
    size = len(big.encode())
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        with anyio.fail_after(TIMEOUT):
            sender = await conn.open_sender("q")
            await sender.send(big)
            limited = await conn.open_receiver("q", max_message_size=MiB)
            with pytest.raises(LinkError) as raised:
                await limited.receive()
            assert raised.value.condition == SIZE_EXCEEDED
            assert f"message of {size} bytes exceeds the receiver's max-message-size {MiB}" in str(raised.value)
            # the connection goes on: its sender still sends, a receiver that takes the size gets the message
            await sender.send(Message(body="after"))
            receiver = await conn.open_receiver("q", max_message_size=4 * MiB)
            first = await receiver.receive()
            assert first.message.subject == "big"
            assert first.message.delivery_count == 0  # not counted as a delivery attempt
            await first.accept()
            second = await receiver.receive()
            assert second.message.body == "after"
            await second.accept()


async def test_a_large_message_kept_on_disk_is_measured_whole(tmp_path: Path) -> None:
    big = Message(body=b"z" * (3 * MiB))
    size = len(big.encode())
    broker = Broker(port=0, data_dir=tmp_path, large_message_size=MiB)
    async with broker, amqp_async.connect(broker.url) as conn:
        with anyio.fail_after(TIMEOUT):
            await (await conn.open_sender("q")).send(big)
            assert broker.queues["q"].entries[0].body is not None  # on disk, its leading sections in memory
            limited = await conn.open_receiver("q", max_message_size=size - 1)
            with pytest.raises(LinkError, match=f"message of {size} bytes exceeds"):
                await limited.receive()
            exact = await conn.open_receiver("q", max_message_size=size)
            delivery = await exact.receive()
            assert delivery.message.body == big.body
            await delivery.accept()


class _MaxMessageSize(LinkOption):  # type: ignore[misc]
    def __init__(self, size: int) -> None:
        self.size = size

    def apply(self, link: Any) -> None:
        link.max_message_size = self.size


def test_python_qpid_protons_receiver_is_told_the_limit_and_its_connection_goes_on() -> None:
    with BrokerThread() as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            sender = connection.create_sender("q")
            sender.send(proton.Message(body=b"w" * (2 * MiB)))
            sender.send(proton.Message(body="small"))
            limited = connection.create_receiver("q", options=_MaxMessageSize(MiB))
            with pytest.raises(proton_utils.LinkDetached) as raised:
                limited.receive(timeout=TIMEOUT)
            assert SIZE_EXCEEDED in str(raised.value)
            receiver = connection.create_receiver("q", options=_MaxMessageSize(4 * MiB))
            assert receiver.receive(timeout=TIMEOUT).body == b"w" * (2 * MiB)
            receiver.accept()
            assert receiver.receive(timeout=TIMEOUT).body == "small"
            receiver.accept()
        finally:
            connection.close()


def test_the_command_line_receive_says_how_to_take_a_larger_message() -> None:
    command = [sys.executable, "-m", "amqp_async"]
    with endless_sender() as (port, _popen):
        result = subprocess.run(
            [*command, "receive", "-u", f"amqp://127.0.0.1:{port}", "endless", "--count", "1"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(PEER.parent.parent)},
        )
    assert result.returncode == 6, result.stderr  # not accepted: larger than it takes
    assert f"{SIZE_EXCEEDED}: message on link" in result.stderr
    assert "--output-dir DIR streams a message of any size" in result.stderr
