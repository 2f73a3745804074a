"""AMQP over WebSocket against hostile and broken peers, both ways: HTTP answers that are no upgrade, WebSocket
framing that breaks RFC 6455 (masking, lengths, fragments), peers that trickle or never finish their handshake.

Each case ends with an error that names what went wrong, within the documented bounds (``connect_timeout`` for
the client, ``handshake_timeout`` for the broker), and a hostile peer leaves the broker's other clients alone.
The peers here speak HTTP and WebSocket frames by hand (or through wsproto where the framing is not the point).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.codec.delivery_states import Accepted

pytest.importorskip("wsproto", reason="AMQP over WebSocket needs wsproto (the websocket extra; CI installs it)")

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
#: RFC 6455 §1.3: the GUID the server's Sec-WebSocket-Accept hashes with the client's key.
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_SASL_HEADER = b"AMQP\x03\x01\x00\x00"
_BINARY, _CONTINUATION = 0x2, 0x0
_PROTOCOL_ERROR = 1002


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def ws_frame(opcode: int, payload: bytes = b"", *, fin: bool = True, masked: bool = False) -> bytes:
    """One WebSocket frame (RFC 6455 §5.2), made by hand so that it may break the rules wsproto keeps."""
    mask_bit = 0x80 if masked else 0
    size = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if size < 126:
        head += bytes([mask_bit | size])
    elif size < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", size)
    if masked:
        key = os.urandom(4)
        payload = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
        head += key
    return head + payload


def switching_protocols(request: bytes, subprotocol: str = "amqp") -> bytes:
    """The 101 answer to ``request`` (its key's Sec-WebSocket-Accept, RFC 6455 §4.2.2)."""
    key = next(
        line.split(b":", 1)[1].strip()
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {subprotocol}\r\n\r\n"
    ).encode()


Script = Callable[[anyio.abc.ByteStream, bytes], Awaitable[None]]


@asynccontextmanager
async def raw_ws_server(script: Script) -> AsyncIterator[int]:
    """A server that reads a client's upgrade request and hands the stream and the request to ``script`` (which
    answers by hand); yields its port."""

    async def serve(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            request = b""
            while b"\r\n\r\n" not in request:
                request += await stream.receive()
            try:
                await script(stream, request)
            except (anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                pass  # the client gave up on us: what the test wanted

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        group.cancel_scope.cancel()


async def connect_ws(port: int, **options: Any) -> amqp_async.Connection:
    return await amqp_async.connect(f"ws://127.0.0.1:{port}/", reconnect=False, http_proxy=False, **options)


async def peer_close_code(stream: anyio.abc.ByteStream, ws: Any) -> int | None:
    """Feed what comes on ``stream`` to ``ws`` (a wsproto connection in its OPEN state) until the peer's close:
    its status (None: the TCP connection ended without one)."""
    from wsproto.events import CloseConnection

    while True:
        try:
            ws.receive_data(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
        for event in ws.events():
            if isinstance(event, CloseConnection):
                return int(event.code)


# ---------------------------------------------------------------------------------------------------------------
# Against the client


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\n\r\n", "HTTP 401"),
        (b"HTTP/1.1 500 Internal Server Error\r\n\r\nno length, the body ends with the connection", "HTTP 500"),
        (
            b"HTTP/1.1 302 Found\r\nLocation: wss://elsewhere.example/amqp\r\nContent-Length: 0\r\n\r\n",
            "HTTP 302 (redirected to 'wss://elsewhere.example/amqp', not followed)",
        ),
    ],
    ids=["401", "500-body-to-the-end", "302"],
)
async def test_an_http_answer_that_is_no_upgrade_is_named(answer: bytes, said: str) -> None:
    """A redirect said only "HTTP 302": where it pointed (the URL the user may have meant) was dropped."""

    async def script(stream: anyio.abc.ByteStream, request: bytes) -> None:
        await stream.send(answer)

    with anyio.fail_after(TIMEOUT):
        async with raw_ws_server(script) as port:
            with pytest.raises(amqp_async.ConnectError, match=re.escape(f"refused the upgrade: {said}")):
                await connect_ws(port)


async def test_a_wrong_accept_key_and_an_endless_header_are_refused_at_once() -> None:
    """RFC 6455 §4.1: a Sec-WebSocket-Accept that is not the key's hash fails the handshake; a header section that
    never ends is cut off by its size (h11's bound), not read into memory until connect_timeout."""

    async def wrong_accept(stream: anyio.abc.ByteStream, request: bytes) -> None:
        await stream.send(switching_protocols(b"Sec-WebSocket-Key: not the client's\r\n"))
        await anyio.sleep(TIMEOUT)

    async def endless_header(stream: anyio.abc.ByteStream, request: bytes) -> None:
        await stream.send(b"HTTP/1.1 101 Switching Protocols\r\n")
        while True:
            await stream.send(b"X-Padding: " + b"a" * 1000 + b"\r\n")

    for script, said in ((wrong_accept, "Bad accept token"), (endless_header, "Bad HTTP message")):
        with anyio.fail_after(TIMEOUT):
            async with raw_ws_server(script) as port:
                with pytest.raises(amqp_async.ConnectError, match=said):
                    await connect_ws(port, connect_timeout=TIMEOUT * 2)


@pytest.mark.parametrize(
    ("frames", "said"),
    [
        # RFC 6455 §5.1: "A client MUST close a connection if it detects a masked frame."
        (ws_frame(_BINARY, _SASL_HEADER, masked=True), "client received unexpected masked frame"),
        # §5.2: the most significant bit of a 64-bit length MUST be 0.
        (b"\x82\x7f" + struct.pack("!Q", (1 << 63) + 8), "8-byte payload length with non-zero MSB"),
        # §7.4: 999 is no close status.
        (ws_frame(0x8, struct.pack("!H", 999)), "CLOSE with invalid code"),
    ],
    ids=["masked", "length-msb", "close-status-999"],
)
async def test_a_server_breaking_the_framing_fails_the_websocket_with_1002(frames: bytes, said: str) -> None:
    """RFC 6455 §7.1.7: a peer that breaks the framing fails the WebSocket, our close saying 1002 (protocol error).
    It was answered with 1000 (normal closure), and the error said "the peer closed the WebSocket with status 1002",
    as if the server had closed it."""
    import wsproto
    from wsproto.events import AcceptConnection, Request

    closed_with: list[int | None] = []

    async def script(stream: anyio.abc.ByteStream, request: bytes) -> None:
        ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
        ws.receive_data(request)
        event = next(ws.events())
        assert isinstance(event, Request)
        await stream.send(ws.send(AcceptConnection(subprotocol="amqp")) + frames)
        closed_with.append(await peer_close_code(stream, ws))

    with anyio.fail_after(TIMEOUT):
        async with raw_ws_server(script) as port:
            with pytest.raises(amqp_async.ConnectError, match=f"broke the WebSocket protocol: {said}") as caught:
                await connect_ws(port)
            assert "the peer closed" not in str(caught.value)
            while not closed_with:
                await anyio.sleep(0.01)
    assert closed_with == [_PROTOCOL_ERROR]


async def test_endless_fragments_and_a_cut_frame_end_within_the_amqp_bounds() -> None:
    """Continuation frames that never finish a message are AMQP bytes like any (WSB §2.4): the frame they make is
    refused by its size (max_frame_size) as soon as its header is read, not gathered; a TCP end in the middle of a
    WebSocket frame is the end of the connection, at once."""

    async def endless_fragments(stream: anyio.abc.ByteStream, request: bytes) -> None:
        await stream.send(switching_protocols(request) + ws_frame(_BINARY, _SASL_HEADER, fin=False))
        huge_sasl_frame = b"\x7f\xff\xff\xff\x02\x01\x00\x00"  # 2 GiB announced
        await stream.send(ws_frame(_CONTINUATION, huge_sasl_frame, fin=False))
        while True:
            await stream.send(ws_frame(_CONTINUATION, bytes(60000), fin=False))

    async def cut_frame(stream: anyio.abc.ByteStream, request: bytes) -> None:
        await stream.send(switching_protocols(request) + ws_frame(_BINARY, _SASL_HEADER + bytes(92))[:10])

    with anyio.fail_after(TIMEOUT):
        async with raw_ws_server(endless_fragments) as port:
            with pytest.raises(amqp_async.ConnectionError, match=r"amqp:connection:framing-error.*maximum frame size"):
                await connect_ws(port, connect_timeout=TIMEOUT * 2)
        async with raw_ws_server(cut_frame) as port:
            with pytest.raises(amqp_async.ConnectError, match="closed the socket before it opened the connection"):
                await connect_ws(port, connect_timeout=TIMEOUT * 2)


# ---------------------------------------------------------------------------------------------------------------
# Against the broker's WebSocket listener


async def round_trip(broker: Broker, address: str) -> None:
    assert broker.ws_url is not None
    async with await amqp_async.connect(broker.ws_url, http_proxy=False, reconnect=False) as conn:
        sender = await conn.open_sender(address)
        assert await sender.send(Message(body=address)) == Accepted()
        delivery = await (await conn.open_receiver(address)).receive()
        assert delivery.message.body == address
        await delivery.accept()


async def test_the_broker_fails_a_websocket_with_an_unmasked_frame_with_1002(caplog: pytest.LogCaptureFixture) -> None:
    """RFC 6455 §5.1: "The server MUST close the connection upon receiving a frame that is not masked", failing it
    (§7.1.7) with 1002; it answered 1000, normal closure. Another client is served meanwhile and after. The
    broker's log says why the connection ended (it said only that the transport ended before the peer closed)."""
    import wsproto
    from wsproto.events import AcceptConnection, Request

    caplog.set_level(logging.INFO, logger="amqp_async.broker")
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0, ws_port=0) as broker:
            async with await anyio.connect_tcp("127.0.0.1", broker.ws_port or 0) as stream:
                ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
                await stream.send(ws.send(Request(host="127.0.0.1", target="/", subprotocols=["amqp"])))
                while not any(isinstance(event, AcceptConnection) for event in ws.events()):
                    ws.receive_data(await stream.receive())
                await round_trip(broker, "before")
                await stream.send(ws_frame(_BINARY, b"AMQP\x00\x01\x00\x00", masked=False))
                assert await peer_close_code(stream, ws) == _PROTOCOL_ERROR
            await round_trip(broker, "after")
    closed = [record.getMessage() for record in caplog.records if " closed" in record.getMessage()]
    assert any("the peer broke the WebSocket protocol" in line for line in closed), closed


async def test_the_broker_bounds_a_trickled_upgrade_by_its_handshake_timeout() -> None:
    """``handshake_timeout`` bounds a WebSocket upgrade as it does a TLS handshake: a client that trickles its
    request (or says nothing) is cut off then. It had a fixed 30 s, whatever the time-out said; the broker's other
    clients are served all along."""
    request = (
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Protocol: amqp\r\n\r\n"
    )

    async def trickle(stream: anyio.abc.ByteStream) -> None:
        try:
            for byte in request:
                await stream.send(bytes([byte]))
                await anyio.sleep(0.2)
            pytest.fail("the whole request went through")  # 35 s: the time-out did not cut it
        except (anyio.BrokenResourceError, OSError):
            pass

    async with Broker(port=0, ws_port=0, handshake_timeout=1, max_connections=1) as broker:
        with anyio.fail_after(TIMEOUT - 5):  # under the old fixed 30 s, with room for a loaded machine
            port = broker.ws_port or 0
            async with (
                await anyio.connect_tcp("127.0.0.1", port) as silent,
                await anyio.connect_tcp("127.0.0.1", port) as trickling,
                anyio.create_task_group() as group,
            ):
                group.start_soon(trickle, trickling)
                await round_trip(broker, "meanwhile")
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await silent.receive()


async def test_a_ping_flood_is_answered_by_one_pong_per_read() -> None:
    """RFC 6455 §5.5.3: an endpoint MAY answer only the latest of the pings it has not answered yet. Each ping had
    its own write: 1 MB of pings held the AMQP bytes behind them 25 s. The latest ping is the one answered."""
    import wsproto
    from wsproto.events import AcceptConnection, BytesMessage, Pong, Request

    from amqp_async.io.websocket import client_handshake

    pings = 100_000
    answered: list[bytes] = []
    done = anyio.Event()

    async def script(stream: anyio.abc.ByteStream, request: bytes) -> None:
        ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
        ws.receive_data(request)
        assert isinstance(next(ws.events()), Request)
        flood = ws_frame(0x9, b"x") * (pings - 1) + ws_frame(0x9, b"last")
        await stream.send(ws.send(AcceptConnection(subprotocol="amqp")) + flood + ws_frame(_BINARY, b"after"))
        while True:
            ws.receive_data(await stream.receive())
            for event in ws.events():
                if isinstance(event, Pong):
                    answered.append(bytes(event.payload))
                elif isinstance(event, BytesMessage):
                    done.set()  # the client's "done", written after every pong it answered the flood with
                    return

    with anyio.fail_after(TIMEOUT * 3):
        async with raw_ws_server(script) as port:
            transport = await anyio.connect_tcp("127.0.0.1", port)
            async with await client_handshake(transport, f"127.0.0.1:{port}", "/") as stream:
                received = b""
                while received != b"after":
                    received += await stream.receive()
                await stream.send(b"done")
                await done.wait()
    assert answered[-1] == b"last"
    assert len(answered) < pings // 100, len(answered)  # one per read of the transport (64 KiB): a few dozen


async def test_after_a_text_message_reads_and_writes_raise_the_same_error() -> None:
    """WSB §2.4: a text message fails the WebSocket (our close, status 1003). A write after it raised wsproto's
    LocalProtocolError ("cannot be sent in state LOCAL_CLOSING"), no OSError: not taken for a lost transport."""
    import wsproto
    from wsproto.events import AcceptConnection, BytesMessage, Request, TextMessage

    from amqp_async.io.websocket import WebSocketError, client_handshake

    async def script(stream: anyio.abc.ByteStream, request: bytes) -> None:
        ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
        ws.receive_data(request)
        assert isinstance(next(ws.events()), Request)
        await stream.send(ws.send(AcceptConnection(subprotocol="amqp")))
        while not any(isinstance(event, BytesMessage) for event in ws.events()):  # the client's first message
            ws.receive_data(await stream.receive())
        await stream.send(ws.send(TextMessage(data="AMQP\x00\x01\x00\x00")))
        await peer_close_code(stream, ws)

    said = "the peer sent a WebSocket text message: AMQP takes binary messages only"
    with anyio.fail_after(TIMEOUT):
        async with raw_ws_server(script) as port:
            transport = await anyio.connect_tcp("127.0.0.1", port)
            async with await client_handshake(transport, f"127.0.0.1:{port}", "/") as stream:
                await stream.send(b"AMQP\x00\x01\x00\x00")
                with pytest.raises(WebSocketError, match=said):
                    await stream.receive()
                with pytest.raises(WebSocketError, match=said):
                    await stream.send(b"\x00\x00\x00\x08\x02\x00\x00\x00")
                with pytest.raises(WebSocketError, match=said):
                    await stream.receive()
