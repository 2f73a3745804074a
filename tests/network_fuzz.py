"""Network fuzzing support: record the bytes a real peer sends, mutate them reproducibly, replay them raw.

- :class:`RecordingProxy` is a TCP proxy (threads and plain sockets, so that blocking clients such as proton's work
  through it as well as our anyio client) that keeps, per connection, the bytes the client sent and those the
  server sent.
- :func:`split_stream` cuts a recorded stream into its protocol headers and frames (by the frame size field, §2.3.1),
  which the frame-aware mutations work on; :func:`mutate` applies a few seeded mutations (bit flips, truncations,
  inflated or shrunk size fields, inserted garbage, duplicated, dropped, swapped or re-channelled frames, lying size
  and count fields inside the encoding) and says which.
- :func:`replay` plays bytes at a server over a raw socket, half-closes, and reports how the session ended (the
  server closed it, or it was still open at the deadline). It sends either all at once, in seeded chunks (the
  server sees frames before it answered what they depend on: pipelining) or, given the recorded write boundaries,
  paced like the original conversation: each write once the server has answered the one before (or stayed quiet
  for a moment), so that the mutations reach the deeper states of the server.

The same seed gives the same mutated session, so a failure names its input: ``mutate(base, seed)``.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "Mutated",
    "Recorded",
    "RecordingProxy",
    "ReplayResult",
    "Segment",
    "mutate",
    "replay",
    "split_stream",
]

_HEAD = struct.Struct(">IBBH")
# Constructors whose next bytes are a size (and, for compounds, a count): the "lying size and count" targets.
_SIZED_CONSTRUCTORS = {0xA0: 1, 0xA1: 1, 0xA3: 1, 0xB0: 4, 0xB1: 4, 0xB3: 4, 0xC0: 1, 0xC1: 1, 0xD0: 4, 0xD1: 4}
_INTERESTING = (0x00, 0x01, 0x40, 0x41, 0x42, 0x45, 0x7F, 0x80, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0, 0xFE, 0xFF)
_INTERESTING_SIZES = (0, 1, 7, 8, 9, 511, 512, 513, 65535, 65536, 1 << 20, (1 << 31) - 1, 1 << 31, 0xFFFFFFFF)


class Segment(NamedTuple):
    """A piece of a recorded stream: a protocol header, a frame, or (after a corrupt size) the rest."""

    kind: str  # "header", "frame" or "rest"
    data: bytes


def split_stream(data: bytes) -> list[Segment]:
    """Cut ``data`` into headers and frames, leniently: what does not parse ends up in one ``rest`` segment."""
    segments: list[Segment] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            segments.append(Segment("header", data[pos : pos + 8]))
            pos += 8
            continue
        if pos + 8 <= len(data):
            size = _HEAD.unpack_from(data, pos)[0]
            if 8 <= size <= len(data) - pos:
                segments.append(Segment("frame", data[pos : pos + size]))
                pos += size
                continue
        segments.append(Segment("rest", data[pos:]))
        break
    return segments


def _join(segments: list[Segment]) -> bytes:
    return b"".join(segment.data for segment in segments)


def _frame_indexes(segments: list[Segment]) -> list[int]:
    return [index for index, segment in enumerate(segments) if segment.kind == "frame"]


@dataclass
class Mutated:
    """A mutated session: the bytes and the mutations that made them."""

    data: bytes
    seed: int
    mutations: list[str] = field(default_factory=list)


def _bit_flip(rng: random.Random, data: bytearray) -> str:
    index = rng.randrange(len(data))
    bit = rng.randrange(8)
    data[index] ^= 1 << bit
    return f"bit-flip@{index}.{bit}"


def _byte_set(rng: random.Random, data: bytearray) -> str:
    index = rng.randrange(len(data))
    value = rng.choice(_INTERESTING) if rng.random() < 0.7 else rng.randrange(256)
    data[index] = value
    return f"byte@{index}={value:#x}"


def _truncate(rng: random.Random, data: bytearray) -> str:
    index = rng.randrange(len(data))
    del data[index:]
    return f"truncate@{index}"


def _insert_garbage(rng: random.Random, data: bytearray) -> str:
    index = rng.randrange(len(data) + 1)
    garbage = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    data[index:index] = garbage
    return f"insert@{index}+{len(garbage)}"


def _lying_encoding(rng: random.Random, data: bytearray) -> str:
    """Change the size or count that follows a sized constructor (binary, string, symbol, list, map, array)."""
    positions = [index for index, byte in enumerate(data) if byte in _SIZED_CONSTRUCTORS]
    if not positions:
        return _byte_set(rng, data)
    index = rng.choice(positions)
    width = _SIZED_CONSTRUCTORS[data[index]]
    field_index = 1 if data[index] < 0xC0 or rng.random() < 0.5 else 2  # size, or (compounds) count
    start = index + 1 + (field_index - 1) * width
    if start + width > len(data):
        return _byte_set(rng, data)
    old = int.from_bytes(data[start : start + width], "big")
    limit = (1 << (8 * width)) - 1
    new = rng.choice([old + 1, old - 1 if old else 1, old * 2 + 1, limit, 0, rng.randrange(limit + 1)]) & limit
    data[start : start + width] = new.to_bytes(width, "big")
    return f"{'size' if field_index == 1 else 'count'}@{start}:{old}->{new}"


def _frame_mutation(rng: random.Random, segments: list[Segment]) -> str:
    frames = _frame_indexes(segments)
    if not frames:
        return "no-frames"
    kind = rng.choice(["size", "size", "duplicate", "duplicate", "drop", "swap", "channel", "doff", "type"])
    index = rng.choice(frames)
    data = bytearray(segments[index].data)
    if kind == "size":
        size = rng.choice([*_INTERESTING_SIZES, len(data) + rng.randint(1, 64), max(len(data) - rng.randint(1, 8), 0)])
        data[0:4] = size.to_bytes(4, "big")
        segments[index] = Segment("frame", bytes(data))
        return f"frame{index}-size={size}"
    if kind == "duplicate":
        segments.insert(index + rng.randint(0, 3), segments[index])
        return f"duplicate-frame{index}"
    if kind == "drop":
        del segments[index]
        return f"drop-frame{index}"
    if kind == "swap":
        other = rng.choice(frames)
        segments[index], segments[other] = segments[other], segments[index]
        return f"swap-frames{index},{other}"
    if kind == "channel":
        channel = rng.choice([1, 2, 7, 255, 0xFFFF, rng.randrange(1 << 16)])
        data[6:8] = channel.to_bytes(2, "big")
        segments[index] = Segment("frame", bytes(data))
        return f"frame{index}-channel={channel}"
    if kind == "doff":
        doff = rng.choice([0, 1, 3, 255])
        data[4] = doff
        segments[index] = Segment("frame", bytes(data))
        return f"frame{index}-doff={doff}"
    frame_type = rng.choice([1, 2, 0xFF])
    data[5] = frame_type
    segments[index] = Segment("frame", bytes(data))
    return f"frame{index}-type={frame_type}"


_BYTE_MUTATIONS = (_bit_flip, _bit_flip, _byte_set, _truncate, _insert_garbage, _lying_encoding, _lying_encoding)


def mutate(base: bytes, seed: int, *, max_mutations: int = 3) -> Mutated:
    """``base`` with 1 to ``max_mutations`` mutations chosen by ``seed`` (the same seed, the same result)."""
    rng = random.Random(seed)
    result = Mutated(base, seed)
    for _ in range(rng.randint(1, max_mutations)):
        if rng.random() < 0.4:
            segments = split_stream(result.data)
            result.mutations.append(_frame_mutation(rng, segments))
            result.data = _join(segments)
        else:
            data = bytearray(result.data)
            if not data:
                break
            result.mutations.append(rng.choice(_BYTE_MUTATIONS)(rng, data))
            result.data = bytes(data)
    return result


# ----------------------------------------------------------------------------------------------------------------
# replay


@dataclass
class ReplayResult:
    """How a replayed session ended: ``closed`` (the server closed the connection) or ``open`` (not by the
    deadline); ``received`` is what the server sent."""

    ended: str
    received: bytes
    seconds: float


def _quiet_read(sock: socket.socket, received: bytearray, quiet: float) -> bool:
    """Read what the server sends until it is quiet for ``quiet`` seconds; False once it closed."""
    sock.settimeout(quiet)
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return True
        if not chunk:
            return False
        received += chunk


def replay(
    host: str,
    port: int,
    data: bytes,
    *,
    seed: int = 0,
    deadline: float = 5.0,
    boundaries: list[int] | None = None,
    quiet: float = 0.003,
) -> ReplayResult:
    """Send ``data`` to ``host:port``, half-close, read until the server closes (or ``deadline`` passes).

    Without ``boundaries`` the data goes out at once in chunks chosen by ``seed``; with them (offsets into
    ``data``), a write ends at each boundary and the next waits until the server has been quiet for ``quiet``
    seconds. The server may close (or reset) while we still send: that ends the session too.
    """
    rng = random.Random(seed ^ 0x5EED)
    start = time.monotonic()
    received = bytearray()
    with socket.create_connection((host, port), timeout=deadline) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            pos = 0
            if boundaries is not None:
                for boundary in [*boundaries, len(data)]:
                    if boundary <= pos:
                        continue
                    sock.sendall(data[pos:boundary])
                    pos = boundary
                    if not _quiet_read(sock, received, quiet):
                        break
            while pos < len(data):
                size = rng.choice([len(data), 1, 7, 64, 512, rng.randint(1, 4096)])
                sock.sendall(data[pos : pos + size])
                pos += size
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server closed (or reset) first: the read below sees it
        while True:
            left = start + deadline - time.monotonic()
            if left <= 0:
                return ReplayResult("open", bytes(received), time.monotonic() - start)
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break  # reset by the server: it ended the session
            if not chunk:
                break
            received += chunk
    return ReplayResult("closed", bytes(received), time.monotonic() - start)


# ----------------------------------------------------------------------------------------------------------------
# recording


class Recorded(NamedTuple):
    """A recorded session: what the client sent, and where each of its writes ended (as the proxy read them)."""

    data: bytes
    boundaries: list[int]


class RecordingProxy:
    """A TCP proxy on a free local port to ``upstream``; keeps the bytes each connection's client sent.

    Use as a context manager; :attr:`sessions` holds one :class:`Recorded` per finished connection (what the client
    sent), in the order they finished.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.sessions: list[Recorded] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._closed = False

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def __enter__(self) -> RecordingProxy:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closed = True
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def wait_sessions(self, count: int, timeout: float = 10.0) -> list[Recorded]:
        """Wait until ``count`` connections have finished; return the recorded sessions."""
        deadline = time.monotonic() + timeout
        while len(self.sessions) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.sessions)} of {count} sessions recorded")
            time.sleep(0.01)
        return list(self.sessions)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, client: socket.socket) -> None:
        server = socket.create_connection(self.upstream)
        sent = bytearray()
        boundaries: list[int] = []

        def downstream() -> None:
            try:
                while chunk := server.recv(65536):
                    client.sendall(chunk)
            except OSError:
                pass
            finally:
                try:
                    client.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        thread = threading.Thread(target=downstream, daemon=True)
        thread.start()
        try:
            while chunk := client.recv(65536):
                sent += chunk
                boundaries.append(len(sent))
                server.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                server.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            thread.join(10)
            client.close()
            server.close()
            with self._lock:
                self.sessions.append(Recorded(bytes(sent), boundaries[:-1]))
