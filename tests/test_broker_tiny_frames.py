"""A message in frames of one byte each: the broker holds about what it counts against its memory limit.

The broker takes a message of several frames as they come (``_assembly``), counting their payload bytes in
``Flow.assembling``. It kept each frame's own ``bytes`` object, some forty bytes beyond the one it counts: a producer
sending one-byte frames made it hold ~43 times what the memory limit saw (200,000 frames: 8.6 MB held, 0.2 MB
counted). The parts go into one buffer now. The producer here writes its frames by hand, as a hostile one would.
"""

from __future__ import annotations

import socket
import struct
import time
import tracemalloc

from amqp_async.broker import BrokerThread
from amqp_async.codec.performatives import Attach, Begin, Flow, Open, Transfer
from amqp_async.codec.terminus import Source, Target

try:
    from frames import AMQP_HEADER, ParsedFrame, frame, parse_stream
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, ParsedFrame, frame, parse_stream

FRAMES = 30_000
TIMEOUT = 30.0


class Seen:
    credit = 0  # the link credit the broker last granted


def window_limit(sock: socket.socket, buffer: bytearray, limit: int, wait: float) -> int:
    """Read what the broker wrote within ``wait`` seconds; the transfer id its session window reaches now."""
    sock.settimeout(wait)
    try:
        buffer += sock.recv(1 << 16)
    except TimeoutError:
        return limit
    while True:
        if buffer.startswith(b"AMQP"):
            del buffer[:8]
            continue
        if len(buffer) < 8 or len(buffer) < struct.unpack(">I", buffer[:4])[0]:
            return limit
        size = struct.unpack(">I", buffer[:4])[0]
        for item in parse_stream(bytes(buffer[:size])):
            body = item.body if isinstance(item, ParsedFrame) else None
            if isinstance(body, Begin):
                limit = body.incoming_window
            elif isinstance(body, Flow) and body.next_incoming_id is not None:
                limit = body.next_incoming_id + body.incoming_window
                if body.handle is not None:
                    Seen.credit = body.link_credit or 0
        del buffer[:size]


def test_a_message_in_one_byte_frames_holds_about_what_it_counts() -> None:
    tracemalloc.start()
    try:
        with BrokerThread() as broker:
            sock = socket.create_connection(("127.0.0.1", int(broker.url.rsplit(":", 1)[1])), timeout=TIMEOUT)
            sock.sendall(AMQP_HEADER + frame(Open(container_id="tiny-frames")))
            sock.sendall(frame(Begin(next_outgoing_id=0, incoming_window=100_000, outgoing_window=2**31 - 1)))
            producer = Attach(
                name="s", handle=0, role=False, source=Source(), target=Target(address="q"), initial_delivery_count=0
            )
            sock.sendall(frame(producer))
            buffer = bytearray()
            limit, deadline = 0, time.monotonic() + TIMEOUT
            while not Seen.credit and time.monotonic() < deadline:  # a transfer before credit breaks §2.6.7
                limit = window_limit(sock, buffer, limit, 0.05)
            before = tracemalloc.get_traced_memory()[0]
            first = Transfer(handle=0, delivery_id=0, delivery_tag=b"t", message_format=0, more=True)
            sock.sendall(frame(first, payload=b"\x00"))
            more = frame(Transfer(handle=0, more=True), payload=b"S")
            sent = 1
            while sent < FRAMES and time.monotonic() < deadline:
                room = min(limit - sent, FRAMES - sent, 5000)
                if room > 0:
                    sock.sendall(more * room)
                    sent += room
                limit = window_limit(sock, buffer, limit, 0.01 if room > 0 else 0.05)
            assert sent == FRAMES
            while broker.broker.flow.assembling < FRAMES and time.monotonic() < deadline:
                time.sleep(0.05)  # the broker takes what it read
            counted = broker.broker.flow.assembling
            held = tracemalloc.get_traced_memory()[0] - before
            sock.close()
    finally:
        tracemalloc.stop()
    assert counted == FRAMES  # every byte counted against the memory limit
    assert held < 4 * counted + (256 << 10), (held, counted)  # and about that much held (before: ~43 times it)
