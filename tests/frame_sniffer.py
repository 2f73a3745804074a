"""A TCP proxy that decodes, with python-qpid-proton's own decoder, every AMQP frame a client writes: an independent
view of what went over the wire (tests/test_proton_api.py, tests/test_client_proton.py)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import proton

__all__ = ["FrameSniffer"]


class FrameSniffer:
    """A TCP proxy in front of a peer that decodes, with proton's own decoder (`proton.Data`), every AMQP frame the
    client writes: an independent view of what went over the wire.

    ``frames`` holds ``(descriptor code, fields)`` for each performative, and ``(None, [])`` for empty frames
    (heartbeats). One client connection at a time.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frames: list[tuple[int | None, list[Any]]] = []
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(4)
        self.port = int(self._server.getsockname()[1])
        self._sockets: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def performatives(self, code: int) -> list[list[Any]]:
        with self._lock:
            return [fields for descriptor, fields in self.frames if descriptor == code]

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, parse: bool) -> None:
        buffer = b""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                for sock in (source, sink):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            if parse:  # recorded before the peer sees it: once the peer has answered a frame, the test can read it
                buffer = self._parse(buffer + data)
            try:
                sink.sendall(data)
            except OSError:
                return

    def _parse(self, buffer: bytes) -> bytes:
        while True:
            if buffer.startswith(b"AMQP"):
                if len(buffer) < 8:
                    return buffer
                buffer = buffer[8:]
                continue
            if len(buffer) < 8:
                return buffer
            size = int.from_bytes(buffer[:4], "big")
            if len(buffer) < size:
                return buffer
            frame, buffer = buffer[:size], buffer[size:]
            body = frame[frame[4] * 4 :]
            if not body:
                record: tuple[int | None, list[Any]] = (None, [])
            else:
                data = proton.Data()
                data.decode(body)
                data.rewind()
                data.next()
                described = data.get_object()
                record = (int(described.descriptor), list(described.value))
            with self._lock:
                self.frames.append(record)

    def close(self) -> None:
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass
