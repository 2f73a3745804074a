"""AMQP over WebSocket (AMQP WebSocket Binding 1.0): URLs, the broker's WebSocket listener, wss, HTTP proxies, the
proton-compatible API and connect.json.

Our client against our broker (in-process, ``Broker(ws_port=0)``), with real sockets; the independent peer (rhea
and its WebSocket transport) is in `tests/test_websocket_interop.py`. What is checked here:

* URL parsing: ``ws``/``wss`` schemes, default ports 80/443, the path (and query) as the request target;
* a round trip over ``ws://`` (with a Service Bus-like path) and over ``wss://`` with the test certificates
  (`tests/tls_certs.py`), TLS verified as for amqps, a wrong CA refused;
* the broker's handshake rules (WSB §2.1): a client that does not offer the ``amqp`` subprotocol gets HTTP 400,
  another path than ``ws_path`` 404; a server that answers without ``amqp`` is refused by the client; a text
  message (WSB §2.4: binary only) ends the connection with WebSocket status 1003;
* an HTTP CONNECT proxy (a small one in this module), given by option or by ``http_proxy``/``https_proxy``, with
  ``no_proxy`` and ``http_proxy=False`` bypassing it, Basic credentials sent, a refusal reported;
* ``python -m amqp_async.broker --ws-port 0`` prints its WebSocket URL;
* the proton-compatible API (``Container.connect`` and ``BlockingConnection``) on ``ws://`` URLs; connect.json
  with ``"scheme": "ws"`` and a ``path``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.broker._thread import BrokerThread
from amqp_async.client._config import CONNECT_FILE_ENV, resolve_options
from amqp_async.client._proxy import parse_proxy, proxy_for
from amqp_async.client._url import InvalidURL, parse_url
from amqp_async.codec.delivery_states import Accepted

pytest.importorskip("wsproto", reason="AMQP over WebSocket needs wsproto (the websocket extra; CI installs it)")

try:
    from tls_certs import CertFiles, make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.tls_certs import CertFiles, make_ca, make_cert, openssl_available

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 15.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def round_trip(conn: amqp_async.Connection, address: str = "ws-q", body: Any = "over WebSocket") -> None:
    sender = await conn.open_sender(address)
    assert await sender.send(Message(body=body)) == Accepted()
    receiver = await conn.open_receiver(address)
    delivery = await receiver.receive()
    assert delivery.message.body == body
    await delivery.accept()


# ---------------------------------------------------------------------------------------------------------------
# URLs


def test_ws_urls_parse_with_http_default_ports_and_the_path_as_request_target() -> None:
    address = parse_url("wss://user:pw@example.com/$servicebus/websocket")
    assert (address.scheme, address.host, address.port, address.tls, address.websocket) == (
        "wss",
        "example.com",
        443,
        True,
        True,
    )
    assert address.resource == "/$servicebus/websocket"
    assert (address.user, address.password) == ("user", "pw")
    plain = parse_url("ws://[::1]:8080/amqp?tenant=a")
    assert (plain.port, plain.tls, plain.resource, plain.host_header) == (8080, False, "/amqp?tenant=a", "[::1]")
    assert parse_url("ws://host").resource == "/"
    assert parse_url("ws://host").port == 80
    assert not parse_url("amqps://host").websocket
    with pytest.raises(InvalidURL, match="'ws' or 'wss'"):
        parse_url("http://host")


def test_wss_gets_a_default_tls_context_like_amqps() -> None:
    options = resolve_options("wss://example.com/ws", {})
    assert isinstance(options.ssl_context, ssl.SSLContext)
    assert resolve_options("ws://example.com/ws", {}).ssl_context is None


def test_connect_json_with_the_ws_scheme_and_a_path(tmp_path: Path) -> None:
    config = {"scheme": "wss", "host": "example.com", "path": "/$servicebus/websocket", "http_proxy": False}
    options = resolve_options(None, {}, config=config)
    (address,) = options.urls
    assert (address.scheme, address.port, address.resource) == ("wss", 443, "/$servicebus/websocket")
    assert options.http_proxy is False


# ---------------------------------------------------------------------------------------------------------------
# Our client and our broker


@asynccontextmanager
async def ws_broker(**options: Any) -> AsyncIterator[Broker]:
    async with Broker(port=0, ws_port=0, **options) as broker:
        yield broker


async def test_round_trip_over_ws_with_a_service_bus_like_path() -> None:
    with anyio.fail_after(TIMEOUT):
        async with ws_broker() as broker:
            assert broker.ws_url is not None and broker.ws_url.startswith("ws://")
            async with amqp_async.connect(broker.ws_url + "$servicebus/websocket", http_proxy=False) as conn:
                await round_trip(conn)
                # Frames larger than one read and one WebSocket message: a 1 MiB body in both directions.
                await round_trip(conn, "ws-large", os.urandom(1 << 20))


async def test_broker_serving_one_path_answers_404_to_another() -> None:
    with anyio.fail_after(TIMEOUT):
        async with ws_broker(ws_path="/amqp") as broker:
            assert broker.ws_url is not None and broker.ws_url.endswith("/amqp")
            async with amqp_async.connect(broker.ws_url, http_proxy=False) as conn:
                await round_trip(conn)
            with pytest.raises(amqp_async.ConnectionError, match="HTTP 404"):
                await amqp_async.connect(f"ws://127.0.0.1:{broker.ws_port}/other", reconnect=False, http_proxy=False)


async def _raw_upgrade(port: int, protocol_header: str) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        request = (
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            f"{protocol_header}\r\n"
        )
        await stream.send(request.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += await stream.receive()
        return answer


async def test_broker_refuses_an_upgrade_without_the_amqp_subprotocol() -> None:
    with anyio.fail_after(TIMEOUT):
        async with ws_broker() as broker:
            assert broker.ws_port is not None
            refused = await _raw_upgrade(broker.ws_port, "Sec-WebSocket-Protocol: mqtt\r\n")
            assert refused.startswith(b"HTTP/1.1 400"), refused
            accepted = await _raw_upgrade(broker.ws_port, "Sec-WebSocket-Protocol: mqtt, amqp\r\n")
            assert accepted.startswith(b"HTTP/1.1 101"), accepted
            assert b"sec-websocket-protocol: amqp" in accepted.lower(), accepted


@asynccontextmanager
async def scripted_ws_server(answer: Callable[[Any], bytes], subprotocol: str | None = "amqp") -> AsyncIterator[int]:
    """A WebSocket server that accepts the upgrade (choosing ``subprotocol``) and writes, in the same write as its
    101, ``answer(ws)`` (frames made with its wsproto connection); yields its port."""
    import wsproto
    from wsproto.events import AcceptConnection, Request

    async def serve(stream: anyio.abc.ByteStream) -> None:
        ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
        async with stream:
            while True:
                ws.receive_data(await stream.receive())
                for event in ws.events():
                    if isinstance(event, Request):
                        await stream.send(ws.send(AcceptConnection(subprotocol=subprotocol)) + answer(ws))
                        await anyio.sleep(TIMEOUT)
                        return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        group.cancel_scope.cancel()


async def test_client_refuses_a_server_that_answers_without_the_amqp_subprotocol() -> None:
    with anyio.fail_after(TIMEOUT):
        async with scripted_ws_server(lambda ws: b"", subprotocol=None) as port:
            with pytest.raises(amqp_async.ConnectionError, match="without the 'amqp' subprotocol"):
                await amqp_async.connect(f"ws://127.0.0.1:{port}/", reconnect=False, http_proxy=False)


async def test_a_text_message_ends_the_connection_with_1003() -> None:
    """WSB §2.4: AMQP travels in binary messages; a text message is refused with status 1003."""
    import wsproto
    from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

    with anyio.fail_after(TIMEOUT):
        async with ws_broker() as broker, await anyio.connect_tcp("127.0.0.1", broker.ws_port or 0) as stream:
            ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
            await stream.send(ws.send(Request(host="127.0.0.1", target="/", subprotocols=["amqp"])))
            accepted = closed = None
            while closed is None:
                try:
                    ws.receive_data(await stream.receive())
                except anyio.EndOfStream:
                    break
                for event in ws.events():
                    if isinstance(event, AcceptConnection):
                        accepted = event
                        await stream.send(ws.send(TextMessage(data="AMQP\x00\x01\x00\x00")))
                    elif isinstance(event, CloseConnection):
                        closed = event
            assert accepted is not None and accepted.subprotocol == "amqp"
            assert closed is not None and closed.code == 1003, closed


async def test_bytes_in_the_same_read_as_the_101_are_not_left_unread() -> None:
    """WSB §2.4: message boundaries mean nothing. The server's first AMQP bytes, written with its 101, came in the
    client's last handshake read: the client waited for more (connect_timeout), since no read would bring them."""
    from wsproto.events import BytesMessage

    from amqp_async.io.websocket import client_handshake

    header = b"AMQP\x00\x01\x00\x00"
    with anyio.fail_after(TIMEOUT):
        async with scripted_ws_server(lambda ws: ws.send(BytesMessage(data=header))) as port:
            transport = await anyio.connect_tcp("127.0.0.1", port)
            stream = await client_handshake(transport, f"127.0.0.1:{port}", "/")
            async with stream:
                with anyio.fail_after(5):  # before: waited for ever
                    assert await stream.receive() == header


@pytest.mark.parametrize(
    ("code", "reason", "said"),
    [
        (1008, "token expired", "status 1008 (policy violation): token expired"),
        (1011, "", "status 1011 (internal error)"),
        (4001, "quota", "status 4001: quota"),
    ],
)
async def test_the_peers_close_status_and_reason_are_in_the_error(code: int, reason: str, said: str) -> None:
    """RFC 6455 §7.1.5-6: a close carries why. It was dropped: "the peer closed the socket without closing the
    connection", as for a TCP reset."""
    from wsproto.events import CloseConnection

    from amqp_async.io.websocket import WebSocketError, client_handshake

    with anyio.fail_after(TIMEOUT):
        async with scripted_ws_server(lambda ws: ws.send(CloseConnection(code=code, reason=reason))) as port:
            transport = await anyio.connect_tcp("127.0.0.1", port)
            async with await client_handshake(transport, f"127.0.0.1:{port}", "/") as stream:
                with pytest.raises(WebSocketError, match=re.escape(said)):
                    await stream.receive()
            with pytest.raises(amqp_async.ConnectionError, match=re.escape(said)):
                await amqp_async.connect(f"ws://127.0.0.1:{port}/", reconnect=False, http_proxy=False)


async def test_a_normal_close_is_the_end_of_the_stream() -> None:
    from wsproto.events import CloseConnection

    from amqp_async.io.websocket import client_handshake

    with anyio.fail_after(TIMEOUT):
        async with scripted_ws_server(lambda ws: ws.send(CloseConnection(code=1000))) as port:
            transport = await anyio.connect_tcp("127.0.0.1", port)
            async with await client_handshake(transport, f"127.0.0.1:{port}", "/") as stream:
                with pytest.raises(anyio.EndOfStream):
                    await stream.receive()


# ---------------------------------------------------------------------------------------------------------------
# wss


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertFiles, CertFiles, CertFiles]:
    if not openssl_available():
        pytest.skip("the openssl command is needed to make test certificates")
    directory = tmp_path_factory.mktemp("wss")
    ca = make_ca(directory, "ca")
    other_ca = make_ca(directory, "other-ca")
    server = make_cert(directory, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    return ca, other_ca, server


def _server_context(server: CertFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server.cert, server.key)
    return context


async def test_wss_with_the_test_certificates(certs: tuple[CertFiles, CertFiles, CertFiles]) -> None:
    ca, other_ca, server = certs
    with anyio.fail_after(TIMEOUT):
        async with ws_broker(ssl_context=_server_context(server), ws_path="/ws") as broker:
            url = broker.ws_url
            assert url is not None and url.startswith("wss://127.0.0.1:") and url.endswith("/ws")
            context = ssl.create_default_context(cafile=ca.cert)
            async with amqp_async.connect(url, ssl_context=context, http_proxy=False) as conn:
                await round_trip(conn, body="over wss")
                assert conn.engine.remote_open is not None
            # The certificate is verified as for amqps: another CA is refused, with the TLS reason.
            wrong = ssl.create_default_context(cafile=other_ca.cert)
            with pytest.raises(amqp_async.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
                await amqp_async.connect(url, ssl_context=wrong, reconnect=False, http_proxy=False)


# ---------------------------------------------------------------------------------------------------------------
# HTTP proxy


class ConnectProxy:
    """A small HTTP CONNECT proxy for the tests: relays bytes both ways; records each request's head; refuses
    targets in ``refuse`` with 403, and answers 407 without the ``credentials`` (``user:password``) when set."""

    def __init__(self, credentials: str | None = None) -> None:
        self.credentials = credentials
        self.requests: list[str] = []
        self.refuse: set[str] = set()
        self.port = 0

    async def _relay(self, source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            await sink.aclose()

    async def _handle(self, client: anyio.abc.ByteStream) -> None:
        async with client:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await client.receive(1)
            text = head.decode("latin-1")
            self.requests.append(text)
            method, target, _ = text.split("\r\n", 1)[0].split(" ", 2)
            assert method == "CONNECT"
            if self.credentials is not None:
                token = base64.b64encode(self.credentials.encode()).decode()
                if f"Proxy-Authorization: Basic {token}" not in text:
                    await client.send(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                    return
            if target in self.refuse:
                await client.send(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            host, _, port = target.rpartition(":")
            upstream = await anyio.connect_tcp(host.strip("[]"), int(port))
            await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            async with upstream, anyio.create_task_group() as group:
                group.start_soon(self._relay, client, upstream)
                group.start_soon(self._relay, upstream, client)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ConnectProxy]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, self._handle)
            yield self
            group.cancel_scope.cancel()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def test_ws_through_a_proxy_given_by_option_with_credentials() -> None:
    with anyio.fail_after(TIMEOUT):
        async with ws_broker() as broker, ConnectProxy("alice:s3cret").running() as proxy:
            assert broker.ws_url is not None
            proxy_url = f"http://alice:s3cret@127.0.0.1:{proxy.port}"
            async with amqp_async.connect(broker.ws_url, http_proxy=proxy_url) as conn:
                await round_trip(conn, body="through the proxy")
            assert len(proxy.requests) == 1
            assert proxy.requests[0].startswith(f"CONNECT 127.0.0.1:{broker.ws_port} HTTP/1.1\r\n")
            with pytest.raises(amqp_async.ConnectionError, match="407"):
                await amqp_async.connect(broker.ws_url, http_proxy=proxy.url, reconnect=False)


async def test_wss_through_the_https_proxy_variable(
    certs: tuple[CertFiles, CertFiles, CertFiles], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, _, server = certs
    with anyio.fail_after(TIMEOUT):
        async with ws_broker(ssl_context=_server_context(server)) as broker, ConnectProxy().running() as proxy:
            assert broker.ws_url is not None
            monkeypatch.setenv("https_proxy", proxy.url)
            monkeypatch.delenv("no_proxy", raising=False)
            monkeypatch.delenv("NO_PROXY", raising=False)
            context = ssl.create_default_context(cafile=ca.cert)
            async with amqp_async.connect(broker.ws_url, ssl_context=context) as conn:
                await round_trip(conn, body="wss through the proxy")
            assert len(proxy.requests) == 1  # TLS ran end to end inside the tunnel
            # no_proxy bypasses it; so does http_proxy=False.
            monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
            async with amqp_async.connect(broker.ws_url, ssl_context=context) as conn:
                await round_trip(conn)
            monkeypatch.delenv("no_proxy")
            async with amqp_async.connect(broker.ws_url, ssl_context=context, http_proxy=False) as conn:
                await round_trip(conn)
            assert len(proxy.requests) == 1
            # A refused CONNECT is a connection error that says so.
            proxy.refuse.add(f"127.0.0.1:{broker.ws_port}")
            with pytest.raises(amqp_async.ConnectionError, match="403 Forbidden"):
                await amqp_async.connect(broker.ws_url, ssl_context=context, reconnect=False)


def test_proxy_selection_rules() -> None:
    env = {"http_proxy": "http://p:3128", "HTTPS_PROXY": "proxy.example:8443", "no_proxy": ".internal,other.test"}
    ws, wss = parse_url("ws://broker.example/ws"), parse_url("wss://broker.example/ws")
    chosen = proxy_for(ws, None, env)
    assert chosen is not None and (chosen.host, chosen.port) == ("p", 3128)
    chosen = proxy_for(wss, None, env)
    assert chosen is not None and (chosen.host, chosen.port) == ("proxy.example", 8443)
    assert proxy_for(parse_url("ws://a.internal/"), None, env) is None
    assert proxy_for(parse_url("wss://other.test/"), None, env) is None
    assert proxy_for(parse_url("amqp://broker.example"), None, env) is None  # AMQP's own port: never proxied
    assert proxy_for(ws, False, env) is None
    chosen = proxy_for(ws, "http://u:p@explicit:1", env)
    assert chosen is not None and (chosen.host, chosen.port, chosen.user, chosen.password) == ("explicit", 1, "u", "p")
    assert parse_proxy("proxy:9").port == 9 and parse_proxy("http://proxy").port == 8080
    with pytest.raises(InvalidURL, match="unsupported proxy URL scheme"):
        parse_proxy("https://proxy:443")
    with pytest.raises(InvalidURL):
        resolve_options("ws://h/", {"http_proxy": "socks5://proxy:1080"})


# ---------------------------------------------------------------------------------------------------------------
# the command line, the proton-compatible API


def test_broker_command_line_serves_websocket() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "amqp_async.broker", "--port", "0", "--ws-port", "0", "--ws-path", "/ws", "--quiet"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        first, second = process.stdout.readline(), process.stdout.readline()
        assert first.startswith("listening on amqp://127.0.0.1:"), first
        assert second.startswith("listening on ws://127.0.0.1:") and second.rstrip().endswith("/ws"), second
        url = second.split()[-1]

        async def check() -> None:
            with anyio.fail_after(TIMEOUT):
                async with amqp_async.connect(url, http_proxy=False) as conn:
                    await round_trip(conn, body="to the command-line broker")

        anyio.run(check)
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def ws_broker_thread() -> Iterator[BrokerThread]:
    with BrokerThread(ws_port=0, ws_path="/ws") as broker:
        yield broker


def test_proton_blocking_connection_over_ws(ws_broker_thread: BrokerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    from amqp_async.proton import Message as ProtonMessage
    from amqp_async.proton.utils import BlockingConnection

    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    url = ws_broker_thread.broker.ws_url
    assert url is not None
    connection = BlockingConnection(url, timeout=TIMEOUT)
    try:
        sender = connection.create_sender("proton-ws")
        sender.send(ProtonMessage(body="from BlockingConnection over ws"))
        receiver = connection.create_receiver("proton-ws")
        message = receiver.receive(timeout=TIMEOUT)
        receiver.accept()
        assert message.body == "from BlockingConnection over ws"
    finally:
        connection.close()


def test_proton_container_connect_over_ws(ws_broker_thread: BrokerThread) -> None:
    from amqp_async.proton import Message as ProtonMessage
    from amqp_async.proton.handlers import MessagingHandler
    from amqp_async.proton.reactor import Container

    url = ws_broker_thread.broker.ws_url
    received: list[Any] = []

    class Handler(MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url, http_proxy=False, reconnect=False)
            event.container.create_sender(connection, "proton-ws-callbacks")
            event.container.create_receiver(connection, "proton-ws-callbacks")

        def on_sendable(self, event: Any) -> None:
            if not received and event.sender.credit and not getattr(self, "sent", False):
                self.sent = True
                event.sender.send(ProtonMessage(body="callbacks over ws"))

        def on_message(self, event: Any) -> None:
            received.append(event.message.body)
            event.connection.close()

    Container(Handler()).run()
    assert received == ["callbacks over ws"]


def test_connect_json_ws_round_trip(
    ws_broker_thread: BrokerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "connect.json"
    port = ws_broker_thread.broker.ws_port
    path.write_text(json.dumps({"scheme": "ws", "host": "127.0.0.1", "port": port, "path": "/ws", "http_proxy": False}))
    monkeypatch.setenv(CONNECT_FILE_ENV, str(path))

    async def check() -> None:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect() as conn:
                assert conn.address is not None and conn.address.resource == "/ws"
                await round_trip(conn, body="configured by connect.json")

    anyio.run(check)


def test_round_trip_over_ws_on_trio() -> None:
    """The WebSocket stream is plain anyio: the client and the broker run on trio too."""
    pytest.importorskip("trio")

    async def check() -> None:
        with anyio.fail_after(TIMEOUT):
            async with ws_broker() as broker:
                assert broker.ws_url is not None
                async with amqp_async.connect(broker.ws_url, http_proxy=False) as conn:
                    await round_trip(conn, body="over ws on trio")

    anyio.run(check, backend="trio")
