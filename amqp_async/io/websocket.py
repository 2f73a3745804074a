"""AMQP over WebSocket (OASIS AMQP WebSocket Binding 1.0, "WSB"): a byte stream carried in WebSocket messages.

The driver and the engine see an ordinary :class:`anyio.abc.ByteStream`: :class:`WebSocketStream` wraps the TCP
(or TLS) stream under it and a Sans-IO `wsproto <https://pypi.org/project/wsproto/>`_ connection. The binding's
rules, each enforced here and only here:

* WSB §2.1: the client asks for the WebSocket subprotocol ``amqp`` (``Sec-WebSocket-Protocol: amqp``) and the
  server MUST answer with it; a server that answers with another (or none) is refused (:func:`client_handshake`),
  and a client that does not offer it is refused with HTTP 400 (:func:`server_handshake`).
* WSB §2.4: AMQP bytes travel as *binary* WebSocket messages; message boundaries need not match AMQP frame
  boundaries (a message may hold part of a frame, or several), so the bytes of the messages are simply
  concatenated. A text message is a protocol error: the WebSocket is closed with status 1003 (unsupported data).
* WSB §4: once the AMQP connection is closed, the WebSocket is closed with its own close handshake (status 1000)
  before the TCP connection: :meth:`WebSocketStream.aclose`.

RFC 6455 rules on a peer that breaks the WebSocket framing (a masked frame from a server or an unmasked one from a
client, §5.1; a bad length, opcode or close status, §5.2; a text message that is not UTF-8, §8.1): the WebSocket
is *failed* (§7.1.7), its close sent with the status that says why (1002 protocol error, 1007 invalid data), and
the error says the peer broke the protocol, not that it closed the WebSocket.

wsproto is an optional dependency (``pip install amqp-async[websocket]``): it is imported on first use, and a
missing wsproto is reported as such (:func:`require_wsproto`).
"""

from __future__ import annotations

import importlib
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel

if TYPE_CHECKING:
    from wsproto import WSConnection

__all__ = [
    "SUBPROTOCOL",
    "WebSocketError",
    "WebSocketStream",
    "client_handshake",
    "require_wsproto",
    "server_handshake",
]

#: WSB §2.1: the WebSocket subprotocol name of AMQP 1.0.
SUBPROTOCOL = "amqp"

#: Bytes read from the transport at a time (the WebSocket framing is parsed from whatever comes).
_READ_SIZE = 1 << 16

#: The most bytes of HTTP a handshake may take (a peer that sends an endless header is cut off).
_MAX_HANDSHAKE = 1 << 16

#: Events parsed between two yields to the event loop (:meth:`WebSocketStream._take_events`).
_EVENTS_BETWEEN_CHECKPOINTS = 64

#: WebSocket close codes (RFC 6455 §7.4.1).
_NORMAL_CLOSURE = 1000
_UNSUPPORTED_DATA = 1003
#: RFC 6455 §7.4.1: the close status (and the "none given" of §7.1.5) that say nothing went wrong; any other is the
#: peer's reason for ending the connection, and the error says it.
_UNEVENTFUL_CLOSES = (_NORMAL_CLOSURE, 1001, 1005)
#: wsproto's states once the peer's close frame came in: a close event in another state is one wsproto made up for a
#: frame it could not parse (the peer broke the protocol, RFC 6455 §7.1.7), not a close the peer sent.
_CLOSE_RECEIVED = ("REMOTE_CLOSING", "CLOSED")


class WebSocketError(OSError):
    """The WebSocket handshake failed, or the peer broke the WebSocket protocol.

    An :class:`OSError`, as a failed TCP connect is: the client tries its next URL (or reconnects) the same way.
    """


def require_wsproto() -> Any:
    """The ``wsproto`` module; raises ImportError naming the extra to install when it is missing."""
    try:
        return importlib.import_module("wsproto")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "AMQP over WebSocket (ws:// and wss:// URLs, Broker(ws_port=...)) needs wsproto: "
            "pip install 'amqp-async[websocket]'"
        ) from exc


class WebSocketStream(anyio.abc.ByteStream):
    """A byte stream over one open WebSocket: what is sent goes out as one binary message, what is received is the
    concatenated payload of the peer's binary messages (WSB §2.4).

    Pings are answered (the latest of those read together), and a close from the peer is answered and reported as
    the end of the stream. Writes to the transport (our messages, and the pongs and close answers the reading side
    makes) are serialised by a lock, so a reader and a writer task may use the stream at once, as the driver does.

    Args:
        transport: the TCP or TLS stream the WebSocket runs on, its handshake done.
        connection: the wsproto connection, in the OPEN state.
    """

    def __init__(self, transport: anyio.abc.ByteStream, connection: WSConnection) -> None:
        wsproto = require_wsproto()
        self._events = wsproto.events
        self._close_reasons = wsproto.frame_protocol.CloseReason
        self._transport = transport
        self._ws = connection
        self._chunks: deque[bytes] = deque()
        self._peer_closed = False
        #: the peer's WebSocket close, as wsproto parsed it (None: it sent none).
        self._peer_close: Any = None
        #: why we failed the WebSocket (RFC 6455 §7.1.7: the peer broke the framing, or sent text); reads and writes
        #: past it raise it again.
        self._failure: WebSocketError | None = None
        self._closed = False
        self._lock = anyio.Lock(fast_acquire=True)

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        """The transport's attributes (socket addresses, TLS details)."""
        return self._transport.extra_attributes

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        """At most ``max_bytes`` of the peer's AMQP bytes; raises EndOfStream once the peer closed the WebSocket
        (or the transport ended)."""
        chunks = self._chunks
        while not chunks:
            if self._peer_closed or self._closed:
                raise self._end()
            try:
                data = await self._transport.receive(max(max_bytes, _READ_SIZE))
            except anyio.EndOfStream:
                self._peer_closed = True  # the TCP connection ended without a WebSocket close: the end all the same
                raise
            await self._feed(data)
        chunk = chunks.popleft()
        if len(chunk) > max_bytes:
            chunks.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        return chunk

    def _end(self) -> Exception:
        """What a read past the end raises: the end of the stream, the error the peer's close status gives, or the
        one we failed the WebSocket with."""
        if self._failure is not None:
            return self._failure
        close = self._peer_close
        if close is None or close.code in _UNEVENTFUL_CLOSES:
            return anyio.EndOfStream()
        code = int(close.code)
        try:
            name = f" ({self._close_reasons(code).name.lower().replace('_', ' ')})"
        except ValueError:  # a status of the application's range (4000-4999) or unassigned
            name = ""
        reason = f": {close.reason}" if close.reason else ""
        return WebSocketError(f"the peer closed the WebSocket with status {code}{name}{reason}")

    async def _feed(self, data: bytes) -> None:
        """Hand transport bytes to wsproto and act on its events."""
        try:
            self._ws.receive_data(data)
        except require_wsproto().utilities.RemoteProtocolError as exc:
            raise WebSocketError(f"the peer broke the WebSocket protocol: {exc}") from exc
        await self._take_events()

    async def _take_events(self) -> None:
        """Act on the events wsproto has parsed: AMQP bytes queued, pings answered, a close answered and noted.

        Also called once the handshake is done: the bytes that came in the same read as its last (the peer's
        first AMQP frames right behind the 101 answer) are already in wsproto, and no read would bring them again.
        """
        events = self._events
        ws = self._ws
        ping = None
        try:
            for count, event in enumerate(ws.events(), 1):
                if count % _EVENTS_BETWEEN_CHECKPOINTS == 0:
                    # A read of tiny frames (pings: 2 bytes each) is tens of thousands of events, and pings no
                    # longer cost a write (which yielded) each: parsed all at once, a ping flood held the event loop,
                    # a broker's other clients waiting 0.3 s at a time.
                    await anyio.lowlevel.checkpoint()
                if isinstance(event, events.BytesMessage):
                    if event.data:
                        self._chunks.append(event.data)
                elif isinstance(event, events.Ping):
                    # RFC 6455 §5.5.3: an endpoint MAY answer only the most recent of the pings it has not answered
                    # yet. One pong per read, not per ping: a flood of pings answered one write each held the AMQP
                    # bytes behind them for as long as the writes took (25 s for 0.9 MB of pings; 2 s now).
                    ping = event
                elif isinstance(event, events.CloseConnection):
                    ping = None  # RFC 6455 §5.5.2: a ping is answered "unless it already received a Close frame"
                    self._peer_closed = True
                    if ws.state.name not in _CLOSE_RECEIVED:
                        await self._fail(
                            event.code, event.reason, f"the peer broke the WebSocket protocol: {event.reason}"
                        )
                    self._peer_close = event
                    if ws.state.name == "REMOTE_CLOSING":
                        await self._write(ws.send(event.response()))
                elif isinstance(event, events.TextMessage):
                    # WSB §2.4: AMQP travels in binary messages only.
                    reason = "AMQP takes binary messages only"
                    await self._fail(_UNSUPPORTED_DATA, reason, f"the peer sent a WebSocket text message: {reason}")
            if ping is not None:
                await self._write(ws.send(ping.response()))
        except require_wsproto().utilities.LocalProtocolError as exc:
            raise WebSocketError(f"WebSocket protocol error: {exc}") from exc
        except require_wsproto().utilities.RemoteProtocolError as exc:
            raise WebSocketError(f"the peer broke the WebSocket protocol: {exc}") from exc

    async def _fail(self, code: int, reason: str, message: str) -> None:
        """RFC 6455 §7.1.7, *Fail the WebSocket Connection*: the peer broke the framing (wsproto reports it as a
        close it made up, ``code`` 1002 or 1007, ``reason`` what was wrong) or the binding (a text message, 1003).
        Our close says so with that status (§7.4.1; not the 1000 of :meth:`aclose`, which would tell the peer all
        went well); the error (``message``) says what the peer did rather than that it closed the WebSocket, and
        is raised again by every later read and write (wsproto would refuse to frame a message after our close)."""
        self._peer_closed = True
        self._failure = WebSocketError(f"{message} (closed with status {code})")
        await self._close_with(code, reason)
        raise self._failure

    async def _write(self, data: bytes) -> None:
        async with self._lock:
            await self._transport.send(data)

    async def send(self, item: bytes) -> None:
        """Send ``item`` as one binary WebSocket message (WSB §2.4)."""
        if self._closed:
            raise anyio.ClosedResourceError
        if isinstance(item, memoryview):
            item = item.tobytes()
        async with self._lock:
            if self._peer_closed:  # wsproto refuses to frame a message once a close came: say why the stream ended
                end = self._end()
                raise end if isinstance(end, WebSocketError) else anyio.BrokenResourceError()
            await self._transport.send(self._ws.send(self._events.BytesMessage(data=item)))

    async def send_eof(self) -> None:
        """Not supported: a WebSocket has no half-close (its close ends both directions)."""
        raise NotImplementedError("a WebSocket cannot be half-closed")

    async def _close_with(self, code: int, reason: str) -> None:
        """Start the WebSocket close handshake, when the state allows it (ignore a transport that broke)."""
        ws = self._ws
        if ws.state.name != "OPEN":
            return
        try:
            data = ws.send(self._events.CloseConnection(code=code, reason=reason))
            with anyio.move_on_after(1.0):
                await self._write(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.BusyResourceError):
            pass

    async def aclose(self) -> None:
        """WSB §4: close the WebSocket (status 1000), then the transport."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._close_with(_NORMAL_CLOSURE, "")
            await self._transport.aclose()


async def _receive_handshake_bytes(transport: anyio.abc.ByteStream, received: int) -> bytes:
    if received > _MAX_HANDSHAKE:
        raise WebSocketError(f"the WebSocket handshake exceeds {_MAX_HANDSHAKE} bytes")
    try:
        return await transport.receive(_READ_SIZE)
    except anyio.EndOfStream:
        raise WebSocketError("the connection ended during the WebSocket handshake") from None


def _redirect_note(headers: list[tuple[bytes, bytes]]) -> str:
    """Where a refusal sends the client (RFC 9110 §10.2.2, ``Location``), for the error: redirects are not followed
    (the URL to use is the user's to give, with its credentials), so the message says where it points."""
    for name, value in headers:
        if name.lower() == b"location":
            return f" (redirected to {value.decode('latin-1')!r}, not followed)"
    return ""


async def client_handshake(
    transport: anyio.abc.ByteStream, host: str, resource: str, headers: list[tuple[str, str]] | None = None
) -> WebSocketStream:
    """Open a WebSocket on ``transport`` (WSB §2.1: subprotocol ``amqp``) and return the stream over it.

    Args:
        transport: a connected TCP (or TLS) stream to the WebSocket server (or a tunnel to it through a proxy).
        host: the ``Host`` header (``host`` or ``host:port``).
        resource: the request target, ``/path?query``.
        headers: extra request headers.

    Raises:
        WebSocketError: the server refused the upgrade (its HTTP status is in the message), answered without the
            ``amqp`` subprotocol, or broke the protocol.
    """
    wsproto = require_wsproto()
    events = wsproto.events
    ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    request = events.Request(host=host, target=resource, subprotocols=[SUBPROTOCOL], extra_headers=headers or [])
    await transport.send(ws.send(request))
    received = 0
    while True:
        data = await _receive_handshake_bytes(transport, received)
        received += len(data)
        try:
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, events.AcceptConnection):
                    if event.subprotocol != SUBPROTOCOL:
                        # WSB §2.1: the server MUST answer with the amqp subprotocol.
                        raise WebSocketError(
                            f"the WebSocket server at {host}{resource} accepted without the {SUBPROTOCOL!r} "
                            f"subprotocol (it chose {event.subprotocol!r})"
                        )
                    stream = WebSocketStream(transport, ws)
                    await stream._take_events()  # what came behind the 101 in the same read (WSB §2.4: no boundaries)
                    return stream
                if isinstance(event, events.RejectConnection):
                    raise WebSocketError(
                        f"the WebSocket server at {host}{resource} refused the upgrade: HTTP {event.status_code}"
                        f"{_redirect_note(event.headers)}"
                    )
        except (wsproto.utilities.LocalProtocolError, wsproto.utilities.RemoteProtocolError) as exc:
            raise WebSocketError(f"WebSocket handshake with {host}{resource} failed: {exc}") from exc


async def server_handshake(transport: anyio.abc.ByteStream, path: str | None = None) -> WebSocketStream:
    """Answer a client's WebSocket upgrade on ``transport`` and return the stream over it.

    Args:
        transport: the accepted TCP (or TLS) stream.
        path: the only request path served (``/ws``); None serves any path. Another path gets HTTP 404.

    Raises:
        WebSocketError: the client sent no valid upgrade, asked for another path (answered 404) or did not offer
            the ``amqp`` subprotocol (answered 400, WSB §2.1); the connection is to be closed.
    """
    wsproto = require_wsproto()
    events = wsproto.events
    ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    received = 0
    while True:
        data = await _receive_handshake_bytes(transport, received)
        received += len(data)
        try:
            ws.receive_data(data)
            for event in ws.events():
                if not isinstance(event, events.Request):
                    continue
                requested = event.target.partition("?")[0]
                if path is not None and requested != path:
                    await transport.send(ws.send(events.RejectConnection(status_code=404)))
                    raise WebSocketError(f"WebSocket upgrade for {requested!r}, not the served path {path!r}")
                if SUBPROTOCOL not in event.subprotocols:
                    await transport.send(ws.send(events.RejectConnection(status_code=400)))
                    raise WebSocketError(
                        f"WebSocket upgrade without the {SUBPROTOCOL!r} subprotocol (offered: {event.subprotocols})"
                    )
                await transport.send(ws.send(events.AcceptConnection(subprotocol=SUBPROTOCOL)))
                # (RFC 6455 §4.1: a client sends nothing more before the server's answer, so nothing is pending.)
                return WebSocketStream(transport, ws)
        except wsproto.utilities.RemoteProtocolError as exc:
            try:
                await transport.send(ws.send(events.RejectConnection(status_code=400)))
            except Exception:  # the client is being refused anyway; a failed answer changes nothing
                pass
            raise WebSocketError(f"invalid WebSocket upgrade request: {exc}") from exc
