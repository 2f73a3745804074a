"""Streamed messages against independent implementations: python-qpid-proton (a subprocess,
tests/proton_stream_peer.py), rhea (tests/interop/rhea_stream_receive.js), Qpid Proton C's ``direct`` example, and
RabbitMQ 3.10.

- what we stream arrives whole at each of them (one data section when the length is known, as proton keeps only the
  last data section of a message; several for rhea, which keeps them all);
- our aborted delivery is seen as aborted by python-qpid-proton and by proton C, and what came after arrives;
- a large message python-qpid-proton sends is read streamed by us (through the embedded broker, and directly), and
  its aborted delivery makes our body iterator raise DeliveryAborted;
- a proton sender above the embedded broker's max-message-size has its link detached, the limit named.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Accepted, DeliveryAborted, DeliveryInDoubt, LinkError, Message
from amqp_async.broker import Broker

try:
    from rabbitmq import RabbitMQNode
    from stalls import fails_if_the_loop_stalls
    from test_interop_matrix import ROOT, _load_bench_peers, _Process, _rhea_env, _skip_loudly
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.rabbitmq import RabbitMQNode
    from tests.stalls import fails_if_the_loop_stalls
    from tests.test_interop_matrix import ROOT, _load_bench_peers, _Process, _rhea_env, _skip_loudly

pytestmark = pytest.mark.anyio

TIMEOUT = 120.0
MiB = 1 << 20
PEER = Path(__file__).resolve().parent / "proton_stream_peer.py"
RHEA = Path(__file__).resolve().parent / "interop" / "rhea_stream_receive.js"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pattern(size: int) -> bytes:
    """What proton_stream_peer.py sends: ``bytes(range(256))`` repeated."""
    block = bytes(range(256))
    return (block * (size // 256 + 1))[:size]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextmanager
def proton_peer(*arguments: str, listening: bool) -> Iterator[_Process | subprocess.Popen[str]]:
    pytest.importorskip("proton", reason="python-qpid-proton is a test dependency")
    argv = [sys.executable, str(PEER), *arguments]
    if listening:
        process = _Process(argv, r"listening on (\d+)", "the python-qpid-proton peer")
        try:
            yield process
        finally:
            process.stop()
    else:
        popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            yield popen
        finally:
            if popen.poll() is None:
                popen.kill()
            popen.wait(10)


def json_lines(lines: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


async def wait_for_lines(process: _Process, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    with anyio.fail_after(timeout):
        while len(json_lines(process.lines)) < count:
            await anyio.sleep(0.05)
    return json_lines(process.lines)


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    async with Broker(port=0, **options) as broker:
        yield broker


# ---------------------------------------------------------------------------------------------------------------
# What we stream, received whole elsewhere


async def test_python_qpid_proton_receives_a_streamed_message_whole_and_sees_our_abort(tmp_path: Path) -> None:
    data = os.urandom(8 * MiB)
    path = tmp_path / "eight.bin"
    path.write_bytes(data)
    with proton_peer("listen-receive", "2", listening=True) as peer:
        assert isinstance(peer, _Process)
        with anyio.fail_after(TIMEOUT):
            url = f"amqp://127.0.0.1:{peer.port}"
            async with amqp_async.connect(url, reconnect=False) as conn, conn.open_stream_sender("files") as sender:
                with path.open("rb") as file:  # a regular file: its size is known, one data section
                    assert await sender.send_stream(file, Message(subject="first")) == Accepted()
                stream = await sender.open_stream(Message(subject="aborted"))
                async for chunk in chunks_of(data[: 3 * MiB], 256 << 10):
                    await stream.write(chunk)
                stream.abort()
                assert await sender.send_stream(data[:MiB], Message(subject="last")) == Accepted()
            lines = await wait_for_lines(peer, 3)
    assert lines == [
        {"size": 8 * MiB, "sha256": sha(data), "subject": "first"},
        {"aborted": True},
        {"size": MiB, "sha256": sha(data[:MiB]), "subject": "last"},
    ]


async def test_rhea_receives_a_message_of_many_data_sections_whole(tmp_path: Path) -> None:
    """Of unknown length (an async iterable): a data section per chunk, kept on the broker's disk on the way."""
    env = _rhea_env()
    data = os.urandom(6 * MiB + 12345)
    with anyio.fail_after(TIMEOUT):
        async with serving(data_dir=tmp_path) as broker, amqp_async.connect(broker.url) as conn:
            async with conn.open_stream_sender("to-rhea") as sender:
                await sender.send_stream(chunks_of(data, MiB), Message(subject="sections"))
            assert broker.queues["to-rhea"].entries[0].body is not None  # on disk
            command = ["node", str(RHEA), "--port", str(broker.port), "--address", "to-rhea", "--count", "1"]
            result = await anyio.run_process(command, env=env, check=False)
            lines = json_lines(result.stdout.decode().splitlines())
            assert lines == [{"size": len(data), "sha256": sha(data), "sections": 7, "subject": "sections"}], (
                result.stderr.decode()
            )


async def test_proton_c_sees_our_abort_and_receives_streamed_messages(tmp_path: Path) -> None:
    """Qpid Proton C's examples: ``direct`` (a listener) sees our aborted delivery as aborted (``Message aborted``)
    and takes the next message; ``receive`` takes a 2 MiB message from the embedded broker, which keeps it on disk
    and streams it out in frames of 256 KiB. (``direct`` reads a message of several frames over itself, each part
    over the start of its buffer, unlike ``receive``: its second message is one frame, what a peer that takes frames
    of any size, as proton C does, gets of a message of up to 256 KiB.)"""
    peers = _load_bench_peers()
    try:
        binaries = peers.build_c_examples(("direct", "receive"))
        direct = peers.start_direct("stream", 1)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        _skip_loudly(f"Proton C interop SKIPPED: the C examples cannot be installed or built: {exc}")
    text = (b"abcdefghijklmnopqrstuvwxyz" * 81_000)[: 2 * MiB]
    try:
        with anyio.fail_after(TIMEOUT):
            url = f"amqp://127.0.0.1:{direct.port}"
            async with amqp_async.connect(url, reconnect=False) as conn, conn.open_stream_sender("stream") as sender:
                stream = await sender.open_stream(Message(subject="aborted"))
                async for chunk in chunks_of(text, 64 << 10):
                    await stream.write(chunk)
                await anyio.sleep(0.2)
                stream.abort()
                assert await sender.send_stream(text[:200_000], Message(subject="whole")) == Accepted()
            assert await anyio.to_thread.run_sync(direct.wait, 30) == 0
    finally:
        direct.stop()
    lines = [line.rstrip("\n") for line in direct.lines]
    assert lines == ["Message aborted", 'b"' + text[:200_000].decode() + '"', "1 messages received"]

    with anyio.fail_after(TIMEOUT):
        async with serving(data_dir=tmp_path) as broker, amqp_async.connect(broker.url) as conn:
            async with conn.open_stream_sender("to-c") as sender:
                await sender.send_stream(chunks_of(text, 300_000), Message(subject="c"), body_size=len(text))
            assert broker.queues["to-c"].entries[0].body is not None  # on disk: streamed out
            command = [str(binaries["receive"]), "127.0.0.1", str(broker.port), "to-c", "1"]
            result = await anyio.run_process(command, check=False)
    output = result.stdout.decode().splitlines()
    assert output == ['b"' + text.decode() + '"', "1 messages received"], result.stderr.decode()[-2000:]


# ---------------------------------------------------------------------------------------------------------------
# What proton sends, read streamed by us


async def test_a_large_message_from_python_qpid_proton_is_read_streamed_through_the_broker() -> None:
    size = 32 * MiB
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, amqp_async.connect(broker.url) as conn:
            with proton_peer("send", broker.url, "from-proton", str(size), listening=False) as popen:
                assert isinstance(popen, subprocess.Popen)
                stdout, stderr = await anyio.to_thread.run_sync(popen.communicate, None, 60)
            assert json_lines(stdout.splitlines()) == [{"outcome": "accepted", "sha256": sha(pattern(size))}], stderr
            async with conn.open_stream_receiver("from-proton", buffer_size=256 << 10) as receiver:
                delivery = await receiver.receive()
                assert (await delivery.message()).subject == "from proton"
                digest = hashlib.sha256()
                largest = 0
                async for chunk in delivery.body_chunks():
                    digest.update(chunk)
                    largest = max(largest, len(chunk))
                assert digest.hexdigest() == sha(pattern(size))
                assert largest <= 65536  # frame by frame, never joined
                await delivery.accept()


async def test_a_delivery_aborted_before_its_body_raises_on_every_read_and_the_loop_goes_on() -> None:
    """Aborted inside its application properties (python-qpid-proton's sender): the first read raises, and so does
    every later one (a handler that logs the message's subject asks again) without waiting or blocking the loop."""
    with proton_peer("listen-send-aborted", str(1000), "head", listening=True) as peer:
        assert isinstance(peer, _Process)
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(f"amqp://127.0.0.1:{peer.port}", reconnect=False) as conn:
                async with conn.open_stream_receiver("aborts", buffer_size=16 << 10) as receiver:
                    first = await receiver.receive()
                    with pytest.raises(DeliveryAborted, match="aborted"):
                        await first.message()
                    for read in (first.message, first.read_message, first.body_chunks().__anext__):
                        with fails_if_the_loop_stalls(5), pytest.raises(DeliveryAborted, match="aborted"):
                            await read()
                    second = await receiver.receive()
                    assert (await second.message()).subject == "complete"
                    assert b"".join([chunk async for chunk in second.body_chunks()]) == pattern(1000)
                    await second.accept()
                lines = await wait_for_lines(peer, 3)
    assert lines[-1] == {"outcome": "accepted"}


async def test_python_qpid_protons_aborted_delivery_raises_on_our_body_iterator() -> None:
    size = MiB  # proton copies its whole unsent output at each write (quadratic): keep it small
    with proton_peer("listen-send-aborted", str(size), listening=True) as peer:
        assert isinstance(peer, _Process)
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(f"amqp://127.0.0.1:{peer.port}", reconnect=False) as conn:
                # a window of two frames: the delivery is handed over long before the aborted frame can come
                async with conn.open_stream_receiver("aborts", buffer_size=64 << 10) as receiver:
                    first = await receiver.receive()
                    assert (await first.message()).subject == "to be aborted"
                    read = 0
                    chunks = first.body_chunks()
                    with pytest.raises(DeliveryAborted, match="aborted"):
                        async for chunk in chunks:
                            read += len(chunk)
                    assert 0 < read < size and first.aborted and first.settled
                    with pytest.raises(DeliveryAborted, match="aborted"):  # again, not a quiet end of the body
                        await chunks.__anext__()
                    second = await receiver.receive()
                    assert (await second.message()).subject == "complete"
                    body = b"".join([chunk async for chunk in second.body_chunks()])
                    assert body == pattern(size)
                    await second.accept()
                lines = await wait_for_lines(peer, 3)
    assert lines == [{"sent": "aborted"}, {"sent": "complete", "sha256": sha(pattern(size))}, {"outcome": "accepted"}]


async def test_a_link_detached_after_the_last_frame_names_the_peers_condition_to_the_sender() -> None:
    """python-qpid-proton takes the message whole, then detaches the link with an error instead of settling it: the
    outcome is in doubt, and the error says why (the peer's condition, its LinkError as the cause), for a streamed
    message and for a whole one."""
    with proton_peer("listen-detach-on-message", listening=True) as peer:
        assert isinstance(peer, _Process)
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(f"amqp://127.0.0.1:{peer.port}", reconnect=False) as conn:
                async with conn.open_stream_sender("limited") as stream_sender:
                    with pytest.raises(DeliveryInDoubt) as streamed:
                        await stream_sender.send_stream(pattern(5000))
                sender = await conn.open_sender("limited")
                with pytest.raises(DeliveryInDoubt) as whole:
                    await sender.send(Message(body=pattern(5000)))
                await wait_for_lines(peer, 2)
    for raised in (streamed.value, whole.value):
        assert raised.condition == "amqp:link:message-size-exceeded"
        assert "message larger than 1000 bytes" in str(raised)
        assert isinstance(raised.__cause__, LinkError)
        assert raised.__cause__.condition == "amqp:link:message-size-exceeded"


async def test_a_proton_sender_above_max_message_size_is_detached_naming_the_limit() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(max_message_size=MiB) as broker:
            with proton_peer("send", broker.url, "limited", str(2 * MiB), listening=False) as popen:
                assert isinstance(popen, subprocess.Popen)
                stdout, stderr = await anyio.to_thread.run_sync(popen.communicate, None, 60)
            [line] = json_lines(stdout.splitlines())
            assert line["error"] == "amqp:link:message-size-exceeded", stderr
            assert "exceeds max-message-size 1048576" in line["description"]
            assert not broker.queues["limited"].entries


# ---------------------------------------------------------------------------------------------------------------
# RabbitMQ 3.10


async def test_a_streamed_message_through_rabbitmq(rabbitmq_broker: RabbitMQNode) -> None:
    data = os.urandom(64 * MiB)
    address = "/queue/amqp-async-stream-64"
    with anyio.fail_after(300):
        async with amqp_async.connect(rabbitmq_broker.url) as conn:
            async with conn.open_stream_sender(address) as sender:
                with tempfile.TemporaryFile() as file:
                    file.write(data)
                    file.seek(0)
                    assert await sender.send_stream(file, Message(subject="via rabbit")) == Accepted()
            async with conn.open_stream_receiver(address) as receiver:
                delivery = await receiver.receive()
                assert (await delivery.message()).subject == "via rabbit"
                digest = hashlib.sha256()
                async for chunk in delivery.body_chunks():
                    digest.update(chunk)
                assert digest.hexdigest() == sha(data)
                await delivery.accept()


def test_the_peer_program_is_in_the_repository() -> None:
    assert PEER.is_file() and RHEA.is_file() and (ROOT / "tests" / "interop").is_dir()
