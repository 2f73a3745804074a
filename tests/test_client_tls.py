"""TLS (``amqps``) in the awaitable client, against the proton broker of `tests/proton_broker.py` listening with a
server `proton.SSLDomain`.

The certificates are made for the test module with the ``openssl`` command-line tool (`tests/tls_certs.py`): a CA;
a server certificate it signs for ``localhost`` and ``127.0.0.1``; one for ``localhost`` only; one for another name
only (``broker.test``); a client certificate; and a second, unrelated CA. What is checked: a verified connection
carries messages; an unknown CA and a host name the certificate does not name are refused with a
`amqp_async.ConnectionError` that says why; ``sni`` (and ``virtual_host``) choose the name checked; a client
certificate is presented when the server requires one; connect.json's ``tls`` map (``ca``, ``cert``, ``key``,
``verify``) is used when no URL is given; ``amqps`` defaults to port 5671.

Every test is bounded with ``anyio.fail_after``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async.client._config import CONNECT_FILE_ENV, resolve_options
from amqp_async.codec.delivery_states import Accepted

proton = pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import SSL, SSLDomain  # noqa: E402

try:
    from proton_broker import ProtonBroker
    from tls_certs import CertFiles, make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker
    from tests.tls_certs import CertFiles, make_ca, make_cert, openssl_available

pytestmark = [
    pytest.mark.interop,
    pytest.mark.anyio,
    pytest.mark.skipif(not SSL.present(), reason="this python-qpid-proton has no TLS support"),
    pytest.mark.skipif(not openssl_available(), reason="the openssl command is needed to make test certificates"),
]

TIMEOUT = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True)
class Certs:
    ca: CertFiles
    other_ca: CertFiles
    server: CertFiles  #: localhost and 127.0.0.1
    localhost_only: CertFiles  #: DNS:localhost, no IP address
    other_name: CertFiles  #: DNS:broker.test only
    client: CertFiles
    client_of_other_ca: CertFiles


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    directory = tmp_path_factory.mktemp("tls")
    ca = make_ca(directory, "ca")
    other_ca = make_ca(directory, "other-ca")
    return Certs(
        ca=ca,
        other_ca=other_ca,
        server=make_cert(directory, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"]),
        localhost_only=make_cert(directory, "localhost-only", ca, "localhost", san=["DNS:localhost"]),
        other_name=make_cert(directory, "other-name", ca, "broker.test", san=["DNS:broker.test"]),
        client=make_cert(directory, "client", ca, "amqp-async-test-client", client=True),
        client_of_other_ca=make_cert(directory, "client-other", other_ca, "stranger", client=True),
    )


def server_domain(server: CertFiles, require_client_ca: CertFiles | None = None) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_SERVER)
    domain.set_credentials(server.cert, server.key, None)
    if require_client_ca is not None:
        domain.set_trusted_ca_db(require_client_ca.cert)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER, require_client_ca.cert)
    else:
        domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
    return domain


@asynccontextmanager
async def tls_broker(server: CertFiles, require_client_ca: CertFiles | None = None) -> AsyncIterator[ProtonBroker]:
    broker = ProtonBroker(ssl_domain=server_domain(server, require_client_ca))
    await anyio.to_thread.run_sync(broker.start)
    try:
        yield broker
    finally:
        await anyio.to_thread.run_sync(broker.stop)


def context(ca: CertFiles, client: CertFiles | None = None) -> ssl.SSLContext:
    result = ssl.create_default_context(cafile=ca.cert)
    if client is not None:
        result.load_cert_chain(client.cert, client.key)
    return result


async def round_trip(conn: amqp_async.Connection, address: str = "tls-q", body: Any = "over TLS") -> None:
    sender = await conn.open_sender(address)
    assert await sender.send(amqp_async.Message(body=body)) == Accepted()
    receiver = await conn.open_receiver(address)
    delivery = await receiver.receive()
    assert delivery.message.body == body
    await delivery.accept()


async def connect_error(url: str, **options: Any) -> amqp_async.ConnectionError:
    with pytest.raises(amqp_async.ConnectionError) as caught:
        conn = await amqp_async.connect(url, reconnect=False, **options)
        await conn.close()  # pragma: no cover - only reached when the test fails
    return caught.value


# ---------------------------------------------------------------------------------------------------------------
# Server verification


async def test_verified_connection_sends_and_receives(certs: Certs) -> None:
    async with tls_broker(certs.server) as broker:
        with anyio.fail_after(TIMEOUT):
            url = f"amqps://localhost:{broker.port}"
            async with amqp_async.connect(url, ssl_context=context(certs.ca)) as conn:
                assert conn.address is not None and conn.address.tls
                await round_trip(conn)
            [message] = await anyio.to_thread.run_sync(lambda: broker.wait_messages(1, address="tls-q"))
            assert message.body == "over TLS"
            [info] = broker.connections
            assert info.hostname == "localhost"
            assert info.sasl_mechanism == "ANONYMOUS"


async def test_ip_address_url_verified_against_the_ip_san(certs: Certs) -> None:
    async with tls_broker(certs.server) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(f"amqps://127.0.0.1:{broker.port}", ssl_context=context(certs.ca)) as conn:
                await round_trip(conn)


async def test_unknown_ca_is_a_clear_connection_error(certs: Certs) -> None:
    async with tls_broker(certs.server) as broker:
        with anyio.fail_after(TIMEOUT):
            error = await connect_error(f"amqps://localhost:{broker.port}", ssl_context=context(certs.other_ca))
            assert "CERTIFICATE_VERIFY_FAILED" in str(error)
            assert "certificate verify failed" in str(error)
            assert isinstance(error.__cause__, ssl.SSLCertVerificationError)
            assert broker.connections == []  # refused before any AMQP was spoken


async def test_default_context_verifies_against_the_system_cas(certs: Certs) -> None:
    """An ``amqps`` URL without ``ssl_context`` gets `ssl.create_default_context()`: a test CA is not trusted."""
    async with tls_broker(certs.server) as broker:
        with anyio.fail_after(TIMEOUT):
            error = await connect_error(f"amqps://localhost:{broker.port}")
            assert "certificate verify failed" in str(error)


async def test_host_name_not_in_the_certificate_is_refused(certs: Certs) -> None:
    """The certificate names ``localhost`` only: connecting to ``127.0.0.1`` fails the host name check."""
    async with tls_broker(certs.localhost_only) as broker:
        with anyio.fail_after(TIMEOUT):
            error = await connect_error(f"amqps://127.0.0.1:{broker.port}", ssl_context=context(certs.ca))
            assert "certificate verify failed" in str(error)
            assert "IP address mismatch" in str(error)
            assert "127.0.0.1" in str(error)
            # ...while the name it does hold is fine.
            async with amqp_async.connect(f"amqps://localhost:{broker.port}", ssl_context=context(certs.ca)) as conn:
                await round_trip(conn)


async def test_sni_names_the_host_checked(certs: Certs) -> None:
    """The certificate is for ``broker.test`` only: ``sni`` makes the client check (and send) that name."""
    async with tls_broker(certs.other_name) as broker:
        with anyio.fail_after(TIMEOUT):
            url = f"amqps://127.0.0.1:{broker.port}"
            error = await connect_error(url, ssl_context=context(certs.ca))
            assert "certificate verify failed" in str(error)
            assert "mismatch" in str(error)
            async with amqp_async.connect(url, ssl_context=context(certs.ca), sni="broker.test") as conn:
                await round_trip(conn)


async def test_sni_for_another_name_is_refused(certs: Certs) -> None:
    async with tls_broker(certs.server) as broker:
        with anyio.fail_after(TIMEOUT):
            url = f"amqps://localhost:{broker.port}"
            error = await connect_error(url, ssl_context=context(certs.ca), sni="elsewhere.test")
            assert "Hostname mismatch" in str(error)
            assert "elsewhere.test" in str(error)


async def test_virtual_host_is_the_tls_name_without_sni(certs: Certs) -> None:
    """As proton: without ``sni`` the TLS name is ``virtual_host``, also sent as the open's hostname."""
    async with tls_broker(certs.other_name) as broker:
        with anyio.fail_after(TIMEOUT):
            url = f"amqps://127.0.0.1:{broker.port}"
            async with amqp_async.connect(url, ssl_context=context(certs.ca), virtual_host="broker.test") as conn:
                await round_trip(conn)
            assert broker.connections[0].hostname == "broker.test"


# ---------------------------------------------------------------------------------------------------------------
# Client certificates


async def test_client_certificate_accepted_when_required(certs: Certs) -> None:
    async with tls_broker(certs.server, require_client_ca=certs.ca) as broker:
        with anyio.fail_after(TIMEOUT):
            url = f"amqps://localhost:{broker.port}"
            async with amqp_async.connect(url, ssl_context=context(certs.ca, client=certs.client)) as conn:
                await round_trip(conn)
            assert len(broker.connections) == 1


async def test_missing_client_certificate_is_a_clear_connection_error(certs: Certs) -> None:
    """With TLS 1.3 the client's handshake completes before the server checks the client certificate: the server's
    refusal is an alert (``certificate required``) on the client's first read. The error must say so, not just that
    the transport ended."""
    async with tls_broker(certs.server, require_client_ca=certs.ca) as broker:
        with anyio.fail_after(TIMEOUT):
            error = await connect_error(f"amqps://localhost:{broker.port}", ssl_context=context(certs.ca))
            assert broker.connections == []
            assert "certificate required" in str(error).lower()


async def test_client_certificate_of_an_unknown_ca_is_a_clear_connection_error(certs: Certs) -> None:
    async with tls_broker(certs.server, require_client_ca=certs.ca) as broker:
        with anyio.fail_after(TIMEOUT):
            options = {"ssl_context": context(certs.ca, client=certs.client_of_other_ca)}
            error = await connect_error(f"amqps://localhost:{broker.port}", **options)
            assert broker.connections == []
            assert "unknown ca" in str(error).lower()


# ---------------------------------------------------------------------------------------------------------------
# connect.json


@pytest.fixture
def connect_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "connect.json"
    monkeypatch.setenv(CONNECT_FILE_ENV, str(path))
    yield path


def write_config(path: Path, **config: Any) -> None:
    path.write_text(json.dumps(config))


async def test_connect_json_tls_map_with_client_certificate(certs: Certs, connect_file: Path) -> None:
    async with tls_broker(certs.server, require_client_ca=certs.ca) as broker:
        write_config(
            connect_file,
            scheme="amqps",
            host="localhost",
            port=broker.port,
            tls={"ca": certs.ca.cert, "cert": certs.client.cert, "key": certs.client.key, "verify": True},
        )
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect() as conn:
                assert conn.address is not None
                assert (conn.address.scheme, conn.address.host, conn.address.port) == (
                    "amqps",
                    "localhost",
                    broker.port,
                )
                await round_trip(conn)
            assert len(broker.connections) == 1


async def test_connect_json_without_scheme_means_amqps(certs: Certs, connect_file: Path) -> None:
    async with tls_broker(certs.server) as broker:
        write_config(connect_file, host="localhost", port=broker.port, tls={"ca": certs.ca.cert})
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect() as conn:
                assert conn.address is not None and conn.address.tls
                await round_trip(conn)


async def test_connect_json_tls_ca_is_checked(certs: Certs, connect_file: Path) -> None:
    async with tls_broker(certs.server) as broker:
        write_config(connect_file, scheme="amqps", host="localhost", port=broker.port, tls={"ca": certs.other_ca.cert})
        with anyio.fail_after(TIMEOUT):
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await amqp_async.connect(reconnect=False)
            assert "certificate verify failed" in str(caught.value)


async def test_connect_json_verify_false_connects_despite_the_wrong_ca(certs: Certs, connect_file: Path) -> None:
    async with tls_broker(certs.localhost_only) as broker:
        # The wrong CA *and* a host name the certificate does not hold: verify false skips both checks.
        write_config(
            connect_file,
            scheme="amqps",
            host="127.0.0.1",
            port=broker.port,
            tls={"ca": certs.other_ca.cert, "verify": False},
        )
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect() as conn:
                await round_trip(conn)


async def test_connect_json_is_ignored_when_a_url_is_given(certs: Certs, connect_file: Path) -> None:
    """As proton: with a URL, connect.json is not read, so its ``verify: false`` does not weaken that connection."""
    async with tls_broker(certs.server) as broker:
        write_config(connect_file, scheme="amqps", host="localhost", port=broker.port, tls={"verify": False})
        with anyio.fail_after(TIMEOUT):
            error = await connect_error(f"amqps://localhost:{broker.port}")
            assert "certificate verify failed" in str(error)


# ---------------------------------------------------------------------------------------------------------------
# Defaults (no listener)


def test_amqps_default_port_is_5671() -> None:
    options = resolve_options("amqps://localhost", {}, config=None)
    [address] = options.urls
    assert (address.scheme, address.host, address.port, address.tls) == ("amqps", "localhost", 5671, True)
    assert options.ssl_context is not None
    assert options.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert options.ssl_context.check_hostname is True
    assert options.sni_for(address) == "localhost"


def test_amqp_default_port_is_5672_and_needs_no_context() -> None:
    options = resolve_options("amqp://localhost", {}, config=None)
    assert options.urls[0].port == 5672
    assert options.ssl_context is None


def test_connect_json_amqps_default_port_is_5671(certs: Certs) -> None:
    options = resolve_options(
        None, {}, config={"scheme": "amqps", "host": "example.test", "tls": {"ca": certs.ca.cert}}
    )
    [address] = options.urls
    assert (address.scheme, address.host, address.port) == ("amqps", "example.test", 5671)
    assert options.ssl_context is not None and options.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_connect_json_verify_false_turns_off_both_checks() -> None:
    options = resolve_options(None, {}, config={"host": "example.test", "tls": {"verify": False}})
    assert options.urls[0].port == 5671
    assert options.ssl_context is not None
    assert options.ssl_context.verify_mode == ssl.CERT_NONE
    assert options.ssl_context.check_hostname is False


def test_explicit_ssl_context_wins_over_connect_json() -> None:
    mine = ssl.create_default_context()
    options = resolve_options(None, {"ssl_context": mine}, config={"host": "example.test", "tls": {"verify": False}})
    assert options.ssl_context is mine
