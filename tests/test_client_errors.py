"""Errors that say what failed (issue 22, item 2): each way a connection fails raises its own class, whose message
names the URL (host and port) and the condition, with the OS error chained (``__cause__``) and its ``errno`` kept;
``amqp_async.ConnectionError`` is also the builtin ``ConnectionError``; what the application closed raises
``ClosedByApplication``; ``async for`` over a receiver ends quietly when the application closes it (or its session
or connection) and raises when the peer detaches it with an error or the connection is lost; and the connection's
state changes are published to ``conn.state_changes()``.

Peers: the embedded broker in-process and as a process of its own (``tests/broker_process.py``: killed), python-
qpid-proton (``tests/proton_broker.py``: TLS, a close with a condition, detaches), RabbitMQ 3.10 (wrong
credentials), and scripted servers (``tests/scripted_server.py``: a reset, a silent peer). Every test runs on
asyncio and on trio unless it says otherwise.
"""

from __future__ import annotations

import builtins
import errno
import logging
import pickle
import socket
import ssl
import struct
import time
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
import amqp_async.errors
from amqp_async import ConnectionState
from amqp_async.broker import Broker
from amqp_async.cli._exit import ExitCode, exit_code_for
from amqp_async.client._url import parse_url

try:
    from broker_process import BrokerProcess, free_port
    from proton_broker import ProtonBroker
    from rabbitmq import RabbitMQNode
    from scripted_server import Peer, ScriptedServer, open_then
    from tls_certs import CertFiles, make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_process import BrokerProcess, free_port
    from tests.proton_broker import ProtonBroker
    from tests.rabbitmq import RabbitMQNode
    from tests.scripted_server import Peer, ScriptedServer, open_then
    from tests.tls_certs import CertFiles, make_ca, make_cert, openssl_available

proton = pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Condition, Endpoint, SSLDomain  # noqa: E402

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


@asynccontextmanager
async def embedded(**options: Any) -> AsyncIterator[Broker]:
    async with Broker(port=0, **options) as broker:
        yield broker


@asynccontextmanager
async def proton_broker(**options: Any) -> AsyncIterator[ProtonBroker]:
    broker = ProtonBroker(**options)
    await anyio.to_thread.run_sync(broker.start)
    try:
        yield broker
    finally:
        await anyio.to_thread.run_sync(broker.stop)


@contextmanager
def full_backlog() -> Iterator[int]:
    """A port whose listen backlog is full: the kernel drops new SYNs, so a TCP connect there hangs (as towards
    a host that does not answer)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            try:
                filler.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(filler)
        time.sleep(0.1)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


# ---------------------------------------------------------------------------------------------------------------
# The classes


def test_amqp_async_connection_error_is_also_the_builtin() -> None:
    """One ``except ConnectionError`` catches both, whichever name is in scope (the lead's decision, docs/client.md:
    the builtin is what asyncio, anyio and the socket module raise for the same failures)."""
    assert issubclass(amqp_async.ConnectionError, builtins.ConnectionError)
    assert issubclass(amqp_async.ConnectionError, OSError)
    assert issubclass(amqp_async.ConnectionError, amqp_async.AMQPError)
    assert issubclass(amqp_async.ConnectionRefused, builtins.ConnectionRefusedError)
    assert issubclass(amqp_async.ConnectTimeout, builtins.TimeoutError)
    for name in ("NameResolutionError", "ConnectionRefused", "ConnectTimeout", "TLSError", "AuthenticationError"):
        assert issubclass(getattr(amqp_async, name), amqp_async.ConnectError), name
    assert issubclass(amqp_async.CertificateVerifyFailed, amqp_async.TLSError)
    for name in ("ConnectError", "ConnectionClosed", "ConnectionLost"):
        assert issubclass(getattr(amqp_async, name), amqp_async.ConnectionError), name
    # Use after close is the program's mistake, not a connection failure (a retry loop must not catch it).
    assert not issubclass(amqp_async.ClosedByApplication, builtins.ConnectionError)
    assert issubclass(amqp_async.ClosedByApplication, amqp_async.AMQPError)
    try:
        raise amqp_async.ConnectionLost("lost", url="amqp://h:1", host="h", port=1)
    except ConnectionError as caught:  # the builtin name
        assert (caught.host, caught.port, caught.url) == ("h", 1, "amqp://h:1")
    cause = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    error = amqp_async.ConnectionLost("lost", cause=cause)
    assert (error.errno, error.strerror, error.__cause__) == (errno.ECONNRESET, "Connection reset by peer", cause)


def test_connection_errors_survive_a_pickle() -> None:
    """As they cross process boundaries (Spark's workers, multiprocessing): type, message, place and errno."""
    cause = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    error = amqp_async.ConnectionRefused(
        "cannot connect to amqp://h:1", url="amqp://h:1", host="h", port=1, cause=cause
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is amqp_async.ConnectionRefused
    assert (str(copy), copy.errno, copy.strerror, copy.url, copy.host, copy.port) == (
        "amqp-async:io: cannot connect to amqp://h:1",
        errno.ECONNREFUSED,
        "Connection refused",
        "amqp://h:1",
        "h",
        1,
    )
    closed = pickle.loads(pickle.dumps(amqp_async.ConnectionClosed("bye", condition="amqp:connection:forced")))
    assert str(closed) == "amqp:connection:forced: the peer closed the connection: bye"


def test_invalid_url_is_public() -> None:
    assert amqp_async.InvalidURL is amqp_async.errors.InvalidURL
    assert issubclass(amqp_async.InvalidURL, ValueError)
    with pytest.raises(amqp_async.InvalidURL) as caught:
        parse_url("amqp://host:99999")
    assert (
        one_line(caught.value)
        == "amqp:invalid-field: invalid port '99999' in URL 'amqp://host:99999' (expected 1 to 65535)"
    )


def test_every_error_class_is_in_the_documentation_table() -> None:
    table = (DOCS / "client.md").read_text()
    for name in amqp_async.errors.__all__:
        if name[0].isupper() and not name.isupper():
            assert f"`{name}`" in table, f"docs/client.md does not name {name}"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (amqp_async.ConnectionRefused("refused"), ExitCode.CONNECTION),
        (amqp_async.NameResolutionError("unknown host"), ExitCode.CONNECTION),
        (amqp_async.ConnectTimeout("slow"), ExitCode.CONNECTION),  # a TimeoutError, but a connection failure
        (amqp_async.CertificateVerifyFailed("untrusted"), ExitCode.CONNECTION),
        (amqp_async.ConnectionClosed("bye", condition="amqp:connection:forced"), ExitCode.CONNECTION),
        (amqp_async.ConnectionLost("lost"), ExitCode.CONNECTION),
        (amqp_async.AuthenticationError("refused", sasl_code=1), ExitCode.AUTHENTICATION),
        (amqp_async.ClosedByApplication("closed"), ExitCode.FAILURE),
        (amqp_async.InvalidURL("bad"), ExitCode.USAGE),
    ],
)
def test_cli_exit_codes(error: BaseException, code: ExitCode) -> None:
    assert exit_code_for(error) is code


# ---------------------------------------------------------------------------------------------------------------
# Could not connect


async def test_a_name_that_does_not_resolve() -> None:
    with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.NameResolutionError) as caught:
        await amqp_async.connect("amqp://no-such-host.invalid:5672")
    error = caught.value
    assert isinstance(error.__cause__, socket.gaierror)
    # EAI_NONAME from a resolver that answered; EAI_AGAIN where no DNS server is reachable at all.
    assert error.errno == error.__cause__.errno
    assert error.errno in (socket.EAI_NONAME, socket.EAI_AGAIN)
    assert (error.host, error.port, error.condition) == ("no-such-host.invalid", 5672, "amqp-async:io")
    assert one_line(error).startswith(
        "amqp-async:io: cannot connect to amqp://no-such-host.invalid:5672: name resolution failed for "
        "'no-such-host.invalid': "
    )


async def test_a_closed_port() -> None:
    port = free_port()
    with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionRefusedError) as caught:  # the builtin catches it
        await amqp_async.connect(f"amqp://127.0.0.1:{port}")
    error = caught.value
    assert isinstance(error, amqp_async.ConnectionRefused)
    assert isinstance(error.__cause__, ConnectionRefusedError) and error.__cause__.errno == errno.ECONNREFUSED
    assert error.errno == errno.ECONNREFUSED
    assert (
        one_line(error)
        == f"amqp-async:io: cannot connect to amqp://127.0.0.1:{port}: connection refused (ECONNREFUSED)"
    )


async def test_a_failover_list_names_every_url_and_raises_the_last_failure() -> None:
    port = free_port()
    urls = ["amqp://no-such-host.invalid", f"amqp://127.0.0.1:{port}"]
    with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.ConnectionRefused) as caught:
        await amqp_async.connect(urls=urls)
    text = one_line(caught.value)
    assert text.startswith(
        "amqp-async:io: cannot connect to any of the 2 URLs: amqp://no-such-host.invalid:5672: name resolution "
        "failed for 'no-such-host.invalid': "
    )
    assert text.endswith(f"; amqp://127.0.0.1:{port}: connection refused (ECONNREFUSED)")
    assert caught.value.errno == errno.ECONNREFUSED


async def test_a_tcp_connect_that_takes_longer_than_connect_timeout() -> None:
    with full_backlog() as port:
        started = anyio.current_time()
        with anyio.fail_after(TIMEOUT), pytest.raises(TimeoutError) as caught:  # the builtin catches it
            await amqp_async.connect(f"amqp://127.0.0.1:{port}", connect_timeout=0.5)
        elapsed = anyio.current_time() - started
    error = caught.value
    assert isinstance(error, amqp_async.ConnectTimeout)
    assert 0.5 <= elapsed < 3.0
    assert one_line(error) == (
        f"amqp:resource-limit-exceeded: cannot connect to amqp://127.0.0.1:{port}: no connection within 0.5 s "
        "(connect_timeout)"
    )


async def test_a_peer_that_accepts_and_never_opens() -> None:
    async def silent(peer: Peer) -> None:
        await peer.wait_received(8, timeout=5.0)

    async with ScriptedServer(silent, linger=True) as server:
        with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.ConnectTimeout) as caught:
            await amqp_async.connect(server.url, connect_timeout=0.5)
    assert one_line(caught.value) == (
        f"amqp:resource-limit-exceeded: cannot connect to {server.url}: the peer did not open the connection "
        "within 0.5 s (connect_timeout)"
    )


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertFiles, CertFiles]:
    """(a server certificate for localhost, a CA that did not sign it)."""
    if not openssl_available():  # pragma: no cover - CI installs openssl
        pytest.fail("the openssl command is needed to make test certificates")
    directory = tmp_path_factory.mktemp("tls")
    ca = make_ca(directory, "ca")
    server = make_cert(directory, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    return server, make_ca(directory, "stranger")


async def test_a_tls_server_whose_certificate_is_not_trusted(tls_files: tuple[CertFiles, CertFiles]) -> None:
    server, stranger = tls_files
    domain = SSLDomain(SSLDomain.MODE_SERVER)
    domain.set_credentials(server.cert, server.key, None)
    domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
    context = ssl.create_default_context(cafile=stranger.cert)
    async with proton_broker(ssl_domain=domain) as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.CertificateVerifyFailed) as caught:
            await amqp_async.connect(f"amqps://localhost:{broker.port}", ssl_context=context)
    error = caught.value
    assert isinstance(error, amqp_async.TLSError) and isinstance(error.__cause__, ssl.SSLCertVerificationError)
    assert (error.verify_code, error.verify_message) == (20, "unable to get local issuer certificate")
    assert error.errno == error.__cause__.errno
    assert one_line(error) == (
        f"amqp-async:tls: cannot connect to amqps://localhost:{broker.port}: TLS handshake failed: "
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate"
    )


async def test_tls_to_a_port_that_does_not_speak_it() -> None:
    async with embedded() as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.TLSError) as caught:
            await amqp_async.connect(f"amqps://127.0.0.1:{broker.port}")
    error = caught.value
    assert not isinstance(error, amqp_async.CertificateVerifyFailed)
    assert isinstance(error.__cause__, ssl.SSLError)
    assert one_line(error).startswith(
        f"amqp-async:tls: cannot connect to amqps://127.0.0.1:{broker.port}: TLS handshake failed: [SSL: "
    )


async def test_wrong_credentials_at_the_embedded_broker() -> None:
    async with embedded(users={"alice": "secret"}) as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.AuthenticationError) as caught:
            await amqp_async.connect(broker.url, user="alice", password="wrong")
    error = caught.value
    assert isinstance(error, amqp_async.ConnectError) and error.sasl_code == 1
    assert one_line(error) == (
        f"amqp:unauthorized-access: cannot connect to {broker.url}: authentication failed: the credentials were "
        "refused (check user name, password or token)"
    )


@pytest.mark.interop
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_wrong_credentials_at_rabbitmq(rabbitmq_broker: RabbitMQNode) -> None:
    url = f"amqp://{rabbitmq_broker.host}:{rabbitmq_broker.port}"
    with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.AuthenticationError) as caught:
        await amqp_async.connect(url, user="guest", password="wrong", allowed_mechs="PLAIN")
    assert caught.value.sasl_code == 1
    assert one_line(caught.value).startswith(
        f"amqp:unauthorized-access: cannot connect to {url}: authentication failed"
    )


# ---------------------------------------------------------------------------------------------------------------
# Closed by the peer, lost while open


def close_every_connection(broker: ProtonBroker, condition: str, description: str) -> None:
    def close() -> None:
        for conn in list(broker._handler.connections):
            if conn.state & Endpoint.LOCAL_ACTIVE:
                conn.condition = Condition(condition, description)
                conn.close()

    broker.call(close)


async def test_a_peer_that_closes_with_a_condition() -> None:
    async with proton_broker() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url)
            receiver = await conn.open_receiver("q")
            await anyio.to_thread.run_sync(
                close_every_connection, broker, "amqp:connection:forced", "the operator closed it"
            )
            with pytest.raises(amqp_async.ConnectionClosed) as caught:
                await receiver.receive()
            error = caught.value
            assert (error.condition, error.description) == ("amqp:connection:forced", "the operator closed it")
            assert error.errno is None and error.__cause__ is None
            assert one_line(error) == (
                f"amqp:connection:forced: amqp://127.0.0.1:{broker.port} closed the connection: the operator closed it"
            )
            assert (conn.state, conn.error) == (ConnectionState.FAILED, error)
            depths = []
            for _ in range(3):
                with pytest.raises(amqp_async.ConnectionClosed) as again:
                    await conn.open_sender("q")  # the same error, not a claim that the application closed it
                assert again.value is error
                depths.append(len(traceback.extract_tb(again.value.__traceback__)))
            assert depths[0] == depths[1] == depths[2]  # raised again, its traceback does not grow
            await conn.close()


async def test_a_connection_lost_when_the_peer_is_killed() -> None:
    with BrokerProcess() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=False)
            receiver = await conn.open_receiver("q")
            broker.kill()
            with pytest.raises(amqp_async.ConnectionLost) as caught:
                await receiver.receive()
    assert caught.value.condition == "amqp-async:io"
    assert one_line(caught.value).startswith(f"amqp-async:io: connection to {broker.url} lost: ")
    assert conn.state is ConnectionState.FAILED


async def test_a_reset_keeps_its_errno() -> None:
    async def open_then_reset(peer: Peer) -> None:
        await open_then()(peer)
        raw = peer.stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends an RST
        await peer.stream.aclose()

    async with ScriptedServer(open_then_reset) as server:
        with anyio.fail_after(TIMEOUT):
            try:
                conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=False)
            except amqp_async.ConnectionLost as lost:  # the reset came with the open: connect() raises it
                error: amqp_async.AMQPError | None = lost
            else:
                while conn.state is ConnectionState.OPEN:
                    await anyio.sleep(0.01)
                error = conn.error
    assert isinstance(error, amqp_async.ConnectionLost)
    assert isinstance(error.__cause__, ConnectionResetError)
    assert error.errno == errno.ECONNRESET
    assert one_line(error) == f"amqp-async:io: connection to {server.url} lost: Connection reset by peer (ECONNRESET)"


async def test_a_peer_silent_past_the_idle_timeout() -> None:
    async with ScriptedServer(open_then(), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=False, heartbeat=0.5)
            with pytest.raises(amqp_async.ConnectionLost) as caught:
                await conn.open_sender("q")  # the attach is never answered
            await conn.close()
    assert one_line(caught.value) == (
        f"amqp:resource-limit-exceeded: connection to {server.url} lost: the peer sent nothing for 0.5 s (the idle "
        "timeout, heartbeat)"
    )


async def test_reconnect_that_gives_up_chains_the_last_attempts_error() -> None:
    with BrokerProcess() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=amqp_async.Backoff(initial=0.05, max_time=1.0))
            receiver = await conn.open_receiver("q")
            broker.kill()
            started = anyio.current_time()
            with pytest.raises(amqp_async.ConnectionLost) as caught:
                await receiver.receive()
            elapsed = anyio.current_time() - started
    error = caught.value
    assert elapsed < 1.0 + 1.0  # max_time, with room for a loaded machine
    assert isinstance(error.__cause__, amqp_async.ConnectionRefused)
    assert error.errno == errno.ECONNREFUSED
    text = one_line(error)
    assert text.startswith(f"amqp-async:io: connection to {broker.url} lost: ")
    assert "; reconnecting gave up after " in text and " (max_time 1 s); the last attempt: cannot connect to " in text
    assert text.endswith(": connection refused (ECONNREFUSED)")


async def test_in_doubt_deliveries_carry_the_connection_error_as_their_cause() -> None:
    with BrokerProcess() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=False)
            sender = await conn.open_sender("q")
            broker.stop()  # the transfer goes out, its outcome never comes
            tracker = await sender.submit(amqp_async.Message(body="in flight"))
            broker.kill()
            with pytest.raises(amqp_async.DeliveryInDoubt) as caught:
                await tracker
    assert isinstance(caught.value.__cause__, amqp_async.ConnectionLost)
    assert caught.value.__cause__ is conn.error


# ---------------------------------------------------------------------------------------------------------------
# Used after the application closed it


async def test_everything_used_after_the_application_closed_it() -> None:
    async with embedded() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url)
            sender = await conn.open_sender("q")
            await sender.send(amqp_async.Message(body="one"))
            await sender.send(amqp_async.Message(body="two"))
            receiver = await conn.open_receiver("q")
            first = await receiver.receive()
            await sender.close()
            with pytest.raises(amqp_async.ClosedByApplication) as caught:
                await sender.send(amqp_async.Message(body="after"))
            assert one_line(caught.value) == (
                "amqp-async:closed-by-application: the sender to 'q' was closed by the application "
                f"(link {sender.name!r})"
            )
            await receiver.close()
            with pytest.raises(amqp_async.ClosedByApplication):
                await first.accept()
            with pytest.raises(amqp_async.ClosedByApplication):
                await receiver.receive()
            # a stream receiver's session is its own, and ends with it: the error still names the link
            stream = await conn.open_stream_receiver("q")
            await stream.close()
            with pytest.raises(amqp_async.ClosedByApplication) as caught:
                await stream.receive()
            assert one_line(caught.value) == (
                "amqp-async:closed-by-application: the stream receiver from 'q' was closed by the application "
                f"(link {stream.name!r})"
            )
            session = await conn.open_session()
            session_sender = await session.open_sender("q")
            await session.close()
            with pytest.raises(amqp_async.ClosedByApplication):
                await session.open_receiver("q")
            with pytest.raises(amqp_async.ClosedByApplication):
                await session_sender.send(amqp_async.Message(body="after"))
            other = await conn.open_receiver("q")
            await conn.close()
            assert (conn.state, conn.error) == (ConnectionState.CLOSED, None)
            for call in (
                lambda: conn.open_sender("q"),
                lambda: conn.open_receiver("q"),
                lambda: conn.open_session(),
                lambda: other.receive(),
            ):
                with pytest.raises(amqp_async.ClosedByApplication) as caught:
                    await call()
                assert caught.value.condition == "amqp-async:closed-by-application"
                assert not isinstance(caught.value, ConnectionError)
                assert one_line(caught.value) == (
                    f"amqp-async:closed-by-application: the connection to {broker.url} was closed by the application"
                )
            with pytest.raises(amqp_async.ClosedByApplication):
                conn.transaction()


# ---------------------------------------------------------------------------------------------------------------
# async for over a receiver


async def iterate(receiver: amqp_async.Receiver, got: list[Any], started: anyio.Event) -> None:
    started.set()
    async for delivery in receiver:
        got.append(delivery.message.body)
        await delivery.accept()


@pytest.mark.parametrize("closes", ["receiver", "session", "connection"])
async def test_async_for_ends_quietly_when_the_application_closes(closes: str) -> None:
    async with embedded() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url)
            await (await conn.open_sender("q")).send(amqp_async.Message(body="queued"))
            session = await conn.open_session()
            receiver = await session.open_receiver("q")
            got: list[Any] = []
            started = anyio.Event()
            async with anyio.create_task_group() as group:
                group.start_soon(iterate, receiver, got, started)
                await started.wait()
                while got != ["queued"]:
                    await anyio.sleep(0.01)
                await {"receiver": receiver, "session": session, "connection": conn}[closes].close()
            # the loop ended without an exception (the task group would have raised it)
            assert got == ["queued"]
            await conn.close()


async def test_async_for_ends_quietly_with_deliveries_still_queued_once_the_application_closed() -> None:
    async with embedded() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url)
            sender = await conn.open_sender("q")
            for number in range(5):
                await sender.send(amqp_async.Message(body=number))
            receiver = await conn.open_receiver("q", credit=10)
            while receiver.queued < 5:
                await anyio.sleep(0.01)
            got = []
            async for delivery in receiver:
                got.append(delivery.message.body)
                await delivery.accept()
                await receiver.close()  # the four still queued are not handed out (the broker keeps them)
            assert got == [0]
            await conn.close()


def detach_link(broker: ProtonBroker, name: str, condition: tuple[str, str] | None) -> None:
    def detach() -> None:
        for conn in list(broker._handler.connections):
            link = conn.link_head(Endpoint.LOCAL_ACTIVE)
            while link is not None:
                if link.name == name:
                    if condition is not None:
                        link.condition = Condition(*condition)
                    link.close()
                link = link.next(Endpoint.LOCAL_ACTIVE)

    broker.call(detach)


async def test_async_for_raises_when_the_peer_detaches_with_an_error() -> None:
    async with proton_broker() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url)
            receiver = await conn.open_receiver("q", name="detached-with-error")
            await anyio.to_thread.run_sync(lambda: broker.wait_attaches(1))
            condition = ("amqp:resource-deleted", "queue deleted")
            caught: list[BaseException] = []
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.to_thread.run_sync, detach_link, broker, "detached-with-error", condition)
                try:
                    async for _ in receiver:
                        pass
                except amqp_async.LinkError as exc:
                    caught.append(exc)
            [error] = caught
            assert isinstance(error, amqp_async.LinkError)
            assert (error.condition, error.description) == condition
            await conn.close()


async def test_async_for_ends_when_the_peer_closes_the_link_without_an_error() -> None:
    async with proton_broker() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url)
            receiver = await conn.open_receiver("q", name="closed-cleanly")
            await anyio.to_thread.run_sync(lambda: broker.wait_attaches(1))
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.to_thread.run_sync, detach_link, broker, "closed-cleanly", None)
                async for _ in receiver:
                    pass
            assert receiver.is_closed
            await conn.close()


async def test_async_for_raises_when_the_connection_is_lost() -> None:
    with BrokerProcess() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url, reconnect=False)
            receiver = await conn.open_receiver("q")
            broker.kill()
            with pytest.raises(amqp_async.ConnectionLost):
                async for _ in receiver:
                    pass


# ---------------------------------------------------------------------------------------------------------------
# The state hook


async def collect(changes: Any, into: list[amqp_async.StateChange]) -> None:
    async with changes:
        async for change in changes:
            into.append(change)


async def test_state_changes_through_an_outage_a_reconnect_and_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="amqp_async.connection")
    with BrokerProcess() as broker:
        # max_time must outlast the broker's restart in between (a Python process: seconds on a loaded machine),
        # and the second outage lasts max_time: the block's bound is larger still.
        with anyio.fail_after(60):
            conn = await amqp_async.connect(broker.url, reconnect=amqp_async.Backoff(initial=0.2, max_time=15.0))
            sender = await conn.open_sender("q")
            changes: list[amqp_async.StateChange] = []
            async with anyio.create_task_group() as group:
                group.start_soon(collect, conn.state_changes(), changes)
                assert conn.state is ConnectionState.OPEN
                broker.kill()
                while not any(change.state is ConnectionState.RECONNECTING for change in changes):
                    await anyio.sleep(0.01)
                await anyio.to_thread.run_sync(broker.start)  # again, on the same port
                while conn.state is not ConnectionState.OPEN:
                    await anyio.sleep(0.01)
                assert await sender.send(amqp_async.Message(body="after the outage")) is not None
                broker.kill()  # for good: reconnecting gives up after max_time
                while conn.state is not ConnectionState.FAILED:
                    await anyio.sleep(0.01)
            # the stream ended after the final change (the task group's collector returned)
    states = [change.state for change in changes]
    assert states[0] is ConnectionState.DISCONNECTED and changes[0].previous is ConnectionState.OPEN
    assert isinstance(changes[0].error, amqp_async.ConnectionLost) and changes[0].url == broker.url
    reconnected = [index for index, change in enumerate(changes) if change.reconnected]
    assert len(reconnected) == 1
    first_outage, second_outage = changes[: reconnected[0]], changes[reconnected[0] + 1 :]
    for outage in (first_outage, second_outage[:-1]):
        # lost, then attempts (each RECONNECTING, and DISCONNECTED with the attempt's error when it failed)
        assert outage[0].state is ConnectionState.DISCONNECTED
        assert isinstance(outage[0].error, amqp_async.ConnectionLost)
        for index, change in enumerate(outage[1:], start=1):
            expected = ConnectionState.RECONNECTING if index % 2 else ConnectionState.DISCONNECTED
            assert change.state is expected
            if expected is ConnectionState.DISCONNECTED:
                assert isinstance(change.error, amqp_async.ConnectionRefused)
                assert change.attempt == outage[index - 1].attempt
    # One count of attempts across both outages: the connection in between was not open long enough (the
    # Backoff's maximum) to count as restored, so the delays and max_time went on (docs/client.md, "Reconnect").
    attempts = [change.attempt for change in changes if change.state is ConnectionState.RECONNECTING]
    assert attempts == list(range(1, len(attempts) + 1))
    assert changes[reconnected[0]].previous is ConnectionState.RECONNECTING
    assert changes[-1].state is ConnectionState.FAILED and changes[-1].error is conn.error
    assert isinstance(conn.error, amqp_async.ConnectionLost)
    assert isinstance(conn.error.__cause__, amqp_async.ConnectionRefused)
    assert [change.time for change in changes] == sorted(change.time for change in changes)
    # What the amqp_async.connection logger said (docs/client.md, "Logging"), by level.
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "amqp_async.connection"]
    lost = [text for level, text in logged if level == "WARNING" and text.endswith("; reconnecting for up to 15 s")]
    assert len(lost) == 2 and all(text.startswith(f"amqp-async:io: connection to {broker.url} lost: ") for text in lost)
    assert sum(level == "INFO" and text.startswith(f"reconnected to {broker.url} ") for level, text in logged) == 1
    assert [text for level, text in logged if level == "WARNING" and text.startswith("connection failed: ")] == [
        f"connection failed: {conn.error}"
    ]
    assert [level for level, _ in logged if level not in ("INFO", "WARNING")] == []


async def test_state_changes_end_with_the_applications_close() -> None:
    async with embedded() as broker:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(broker.url)
            changes: list[amqp_async.StateChange] = []
            async with anyio.create_task_group() as group:
                group.start_soon(collect, conn.state_changes(), changes)
                await anyio.sleep(0.05)
                await conn.close()
            assert [(c.previous, c.state, c.error) for c in changes] == [
                (ConnectionState.OPEN, ConnectionState.CLOSED, None)
            ]
            late: list[amqp_async.StateChange] = []
            await collect(conn.state_changes(), late)  # a final state: the stream ends at once
            assert late == []
            with pytest.raises(ValueError):
                conn.state_changes(max_buffer=0)
