"""One large transfer in a process of its own, timed and its memory sampled: run by benchmarks/streaming.py (and through
it by tests/test_streaming_memory.py). Prints one line of JSON.

    python stream_program.py MODE URL ADDRESS [SIZE] [--chunk BYTES] [--buffer BYTES]

Modes (SIZE bytes of generated data: a random mebibyte, rotated chunk by chunk):

- ``send``: ours, one message streamed (``StreamSender.send_stream`` from an async iterable: its length unknown,
  a data section per ``--chunk``; with ``--known-size`` its length given, one data section), ``--buffer`` bytes
  of frames let wait for the peer;
- ``send-whole``: ours, the same bytes as one message built whole in memory (``Sender.send``);
- ``send-many``: ours, the same bytes as 1 MiB messages, 8 unsettled at a time (``submit``);
- ``receive``: ours, one message read streamed (``StreamReceiver``, ``body_chunks``), ``--buffer`` its window;
- ``receive-whole``: ours, one message received whole (``Receiver``, credit 1);
- ``receive-many``: ours, SIZE bytes of 1 MiB messages (credit 8);
- ``proton-send`` / ``proton-receive``: python-qpid-proton, one message whole (its API has no streaming).

Each prints ``{"size", "seconds", "idle", "peak", "idle_total", "peak_total"}`` (and ``sha256`` of the body where
there is one message): ``idle`` is the process's anonymous resident memory (what it allocated: /proc/self/status
``RssAnon``) once connected and attached, ``peak`` the largest sampled (every 10 ms) while the bytes moved, so
``peak - idle`` is what the transfer cost in memory; ``*_total`` the same of the whole resident set (with the pages
of shared libraries and files, which the transfer does not allocate), for the record. The clock runs from
the first byte handed over to the outcome (send), or from the first delivery to the last byte (receive).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import amqp_async  # after the path: this checkout's package
from amqp_async import Message

BLOCK = random.Random(26).randbytes(1 << 20)
MANY = 1 << 20  # the size of each message of the *-many modes
WINDOW = 8


def memory() -> tuple[int, int]:
    """This process's (anonymous, total) resident memory in bytes (Linux): what it allocated, and that with the
    pages of the files it maps (its shared libraries)."""
    found = dict.fromkeys(("RssAnon:", "VmRSS:"), 0)
    with open("/proc/self/status") as status:
        for line in status:
            key = line.split(None, 1)[0]
            if key in found:
                found[key] = int(line.split()[1]) * 1024
    return found["RssAnon:"], found["VmRSS:"]


class Sampler:
    """The most anonymous (and total) resident memory seen, sampled in a thread."""

    def __init__(self) -> None:
        self.peak, self.peak_total = memory()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        anonymous, total = memory()
        self.peak = max(self.peak, anonymous)
        self.peak_total = max(self.peak_total, total)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self._sample()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def piece(index: int, length: int) -> bytes:
    """The ``index``-th chunk of the generated data: ``length`` bytes of the block, from a rotating offset."""
    offset = (index * 7919) % len(BLOCK)
    data = BLOCK[offset : offset + length]
    while len(data) < length:  # wraps around the block
        data += BLOCK[: length - len(data)]
    return data


def generated(size: int, chunk: int) -> list[int]:
    """The chunk lengths of ``size`` bytes."""
    return [min(chunk, size - start) for start in range(0, size, chunk)]


async def chunks(size: int, chunk: int, digest: Any) -> AsyncIterator[bytes]:
    for index, length in enumerate(generated(size, chunk)):
        data = piece(index, length)
        digest.update(data)
        yield data


def result(size: int, seconds: float, idle: tuple[int, int], sampler: Sampler, digest: Any = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "size": size,
        "seconds": seconds,
        "idle": idle[0],
        "peak": sampler.peak,
        "idle_total": idle[1],
        "peak_total": sampler.peak_total,
    }
    if digest is not None:
        found["sha256"] = digest.hexdigest()
    return found


async def send(url: str, address: str, size: int, chunk: int, buffer: int, known: bool) -> dict[str, Any]:
    digest = hashlib.sha256()
    body_size = size if known else None
    async with amqp_async.connect(url) as conn, conn.open_stream_sender(address, buffer_size=buffer) as sender:
        idle = memory()
        with Sampler() as sampler:
            started = time.perf_counter()
            await sender.send_stream(chunks(size, chunk, digest), Message(subject="generated"), body_size=body_size)
            seconds = time.perf_counter() - started
    return result(size, seconds, idle, sampler, digest)


async def send_whole(url: str, address: str, size: int, chunk: int) -> dict[str, Any]:
    async with amqp_async.connect(url) as conn, conn.open_sender(address) as sender:
        idle = memory()
        with Sampler() as sampler:
            started = time.perf_counter()
            body = b"".join(piece(index, length) for index, length in enumerate(generated(size, chunk)))
            await sender.send(Message(body=body, subject="generated"))
            seconds = time.perf_counter() - started
    return result(size, seconds, idle, sampler, hashlib.sha256(body))


async def send_many(url: str, address: str, size: int) -> dict[str, Any]:
    async with amqp_async.connect(url) as conn, conn.open_sender(address) as sender:
        idle = memory()
        with Sampler() as sampler:
            started = time.perf_counter()
            pending: list[Any] = []
            for index, length in enumerate(generated(size, MANY)):
                pending.append(await sender.submit(Message(body=piece(index, length))))
                if len(pending) >= WINDOW:
                    for tracker in pending[: WINDOW // 2]:
                        await tracker
                    del pending[: WINDOW // 2]
            for tracker in pending:
                await tracker
            seconds = time.perf_counter() - started
    return result(size, seconds, idle, sampler)


async def receive(url: str, address: str, buffer: int) -> dict[str, Any]:
    digest = hashlib.sha256()
    size = 0
    async with amqp_async.connect(url) as conn, conn.open_stream_receiver(address, buffer_size=buffer) as receiver:
        idle = memory()
        with Sampler() as sampler:
            delivery = await receiver.receive()
            started = time.perf_counter()
            async for data in delivery.body_chunks():
                digest.update(data)
                size += len(data)
            await delivery.accept()
            seconds = time.perf_counter() - started
    return result(size, seconds, idle, sampler, digest)


async def receive_whole(url: str, address: str) -> dict[str, Any]:
    async with amqp_async.connect(url) as conn, conn.open_receiver(address, credit=1) as receiver:
        idle = memory()
        with Sampler() as sampler:
            started = time.perf_counter()
            delivery = await receiver.receive()
            body = delivery.message.body
            await delivery.accept()
            seconds = time.perf_counter() - started
    data = body if isinstance(body, bytes) else b"".join(section.value for section in body)
    return result(len(data), seconds, idle, sampler, hashlib.sha256(data))


async def receive_many(url: str, address: str, size: int) -> dict[str, Any]:
    count = len(generated(size, MANY))
    received = 0
    async with amqp_async.connect(url) as conn, conn.open_receiver(address, credit=WINDOW) as receiver:
        idle = memory()
        with Sampler() as sampler:
            started = time.perf_counter()
            for _ in range(count):
                delivery = await receiver.receive()
                received += len(delivery.message.body)
                await delivery.accept()
            seconds = time.perf_counter() - started
    return result(received, seconds, idle, sampler)


def proton(mode: str, url: str, address: str, size: int, chunk: int) -> dict[str, Any]:
    """python-qpid-proton, one message whole: ``proton-send`` builds and sends it, ``proton-receive`` takes it."""
    from proton import Message as ProtonMessage
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    found: dict[str, Any] = {}

    class Handler(MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url)
            if mode == "proton-send":
                event.container.create_sender(connection, address)
            else:
                event.container.create_receiver(connection, address, prefetch=1)
            self.sent = False

        def on_link_opened(self, event: Any) -> None:
            found["idle"], found["idle_total"] = memory()
            self.sampler = Sampler().__enter__()
            self.started = time.perf_counter()

        def on_sendable(self, event: Any) -> None:
            if self.sent:
                return
            self.sent = True
            body = b"".join(piece(index, length) for index, length in enumerate(generated(size, chunk)))
            found["sha256"] = hashlib.sha256(body).hexdigest()
            event.sender.send(ProtonMessage(body=body, subject="generated", inferred=True))

        def on_accepted(self, event: Any) -> None:
            self.done(event, size)

        def on_message(self, event: Any) -> None:
            body = bytes(event.message.body)
            found["sha256"] = hashlib.sha256(body).hexdigest()
            self.done(event, len(body))

        def done(self, event: Any, moved: int) -> None:
            found["seconds"] = time.perf_counter() - self.started
            self.sampler.__exit__()
            found["peak"], found["peak_total"] = self.sampler.peak, self.sampler.peak_total
            found["size"] = moved
            event.connection.close()

    Container(Handler()).run()
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "mode",
        choices=(
            "send",
            "send-whole",
            "send-many",
            "receive",
            "receive-whole",
            "receive-many",
            "proton-send",
            "proton-receive",
        ),
    )
    parser.add_argument("url")
    parser.add_argument("address")
    parser.add_argument("size", type=int, nargs="?", default=0)
    parser.add_argument("--chunk", type=int, default=256 << 10)
    parser.add_argument("--buffer", type=int, default=1 << 20)
    parser.add_argument("--known-size", action="store_true", help="send: the body's size given (one data section)")
    arguments = parser.parse_args()
    mode, url, address, size = arguments.mode, arguments.url, arguments.address, arguments.size
    found: dict[str, Any]
    if mode == "send":
        found = anyio.run(send, url, address, size, arguments.chunk, arguments.buffer, arguments.known_size)
    elif mode == "send-whole":
        found = anyio.run(send_whole, url, address, size, arguments.chunk)
    elif mode == "send-many":
        found = anyio.run(send_many, url, address, size)
    elif mode == "receive":
        found = anyio.run(receive, url, address, arguments.buffer)
    elif mode == "receive-whole":
        found = anyio.run(receive_whole, url, address)
    elif mode == "receive-many":
        found = anyio.run(receive_many, url, address, size)
    else:
        found = proton(mode, url, address, size, arguments.chunk)
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
