"""Behaviour of `amqp_async.proton`'s callback API beyond proton's example programs, each checked against an
independent peer where one applies.

Peers: `tests/proton_broker.py`'s `ProtonBroker` (a python-qpid-proton reactor in a thread, which records every
open, attach, message, outcome, flow and drain it sees) and our embedded broker (`amqp_async.broker.BrokerThread`:
SASL users, TLS, selectors, browsing, dynamic nodes). For the ``amqps`` listener the client is real proton's
`proton.utils.BlockingConnection`.

Every `Container` runs in a thread joined with a timeout (`run_container`), so a hang fails the test instead of
blocking the run; the asyncio and trio tests bound themselves with `anyio.fail_after`.

Covered: the open frame (container id, virtual host, properties, capabilities, max-frame-size, heartbeat) as
proton sees it; SASL PLAIN (good and bad credentials); failover; reconnect off and on (with `Backoff`, across a
peer restart); TLS client and listener with `SSLDomain`; `create_sender`/`create_receiver` on a connection and on a
URL, link names, scoped handlers, tag generators; the link options; timers; `EventInjector`; `run_async` under
asyncio and trio; `stop()`; handler exceptions; the delivery API (unsettled dispositions, settlement, outcomes,
release); sender buffering without credit, low-level send and receive, ``offered``; receiver credit and drain;
endpoint state bits; `Terminus.copy`; transactions refused; `Message.send`/`Message.recv`.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; the test dependency group has it")

import proton
import proton.handlers
import proton.reactor
import proton.utils

from amqp_async.broker import BrokerThread
from amqp_async.proton import (
    Delivery,
    Described,
    Endpoint,
    Link,
    Message,
    SSLDomain,
    Terminus,
    symbol,
)
from amqp_async.proton.handlers import MessagingHandler
from amqp_async.proton.reactor import (
    ApplicationEvent,
    AtLeastOnce,
    AtMostOnce,
    Backoff,
    Container,
    Copy,
    DurableSubscription,
    DynamicNodeProperties,
    EventInjector,
    Filter,
    LinkOption,
    Move,
    ReceiverOption,
    Selector,
    SenderOption,
)

try:
    from frame_sniffer import FrameSniffer
    from proton_broker import ProtonBroker
    from tls_certs import CertFiles, make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frame_sniffer import FrameSniffer
    from tests.proton_broker import ProtonBroker
    from tests.tls_certs import CertFiles, make_ca, make_cert, openssl_available

pytestmark = pytest.mark.interop

#: Seconds a container may run before the test fails.
TIMEOUT = 10.0


# ---------------------------------------------------------------------------------------------------------------
# Helpers


def run_container(container: Container, timeout: float = TIMEOUT) -> None:
    """Run ``container`` in a thread; fail if it is still running after ``timeout``; re-raise what run() raised."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            container.run()
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="container", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        container.stop()
        thread.join(5)
        pytest.fail(f"the container did not finish within {timeout} s")
    if errors:
        raise errors[0]


def start_container(container: Container) -> Callable[[float], None]:
    """Run ``container`` in a thread; the returned function joins it (failing after its timeout)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            container.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="container", daemon=True)
    thread.start()

    def join(timeout: float = TIMEOUT) -> None:
        thread.join(timeout)
        if thread.is_alive():
            container.stop()
            thread.join(5)
            pytest.fail(f"the container did not finish within {timeout} s")
        if errors:
            raise errors[0]

    return join


def _api(impl: str) -> tuple[Any, Any]:
    """(MessagingHandler, Container) of real proton or of ours."""
    if impl == "proton":
        return proton.handlers.MessagingHandler, proton.reactor.Container
    return MessagingHandler, Container


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def refused_port() -> int:
    """A port nothing listens on (bound then closed)."""
    return free_port()


_FLOW = 0x13
_DISPOSITION = 0x15


class Recorder(MessagingHandler):
    """A messaging handler that records the name of every callback it gets (and ``on_message`` bodies)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[str] = []
        self.bodies: list[Any] = []
        self.conditions: list[tuple[str, str | None]] = []
        self.threads: set[int] = set()

    def note(self, name: str) -> None:
        self.calls.append(name)
        self.threads.add(threading.get_ident())

    def on_connection_opened(self, event: Any) -> None:
        self.note("connection_opened")

    def on_link_opened(self, event: Any) -> None:
        self.note("link_opened")

    def on_sendable(self, event: Any) -> None:
        self.note("sendable")

    def on_message(self, event: Any) -> None:
        self.note("message")
        self.bodies.append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        self.note("accepted")

    def on_rejected(self, event: Any) -> None:
        self.note("rejected")

    def on_released(self, event: Any) -> None:
        self.note("released")

    def on_settled(self, event: Any) -> None:
        self.note("settled")

    def on_disconnected(self, event: Any) -> None:
        self.note("disconnected")

    def on_connection_closed(self, event: Any) -> None:
        self.note("connection_closed")

    def on_transport_error(self, event: Any) -> None:
        self.note("transport_error")
        condition = event.transport.condition
        self.conditions.append((str(condition.name), condition.description))
        super().on_transport_error(event)


class SendN(Recorder):
    """Sends ``bodies`` on the first sendable, closes the connection once all are settled."""

    def __init__(self, url: str, address: str, bodies: list[Any], options: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url = url
        self.address = address
        self.to_send = list(bodies)
        self.options = options
        self.deliveries: list[Delivery] = []
        self.done = 0

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(self.connection, self.address, options=self.options)

    def on_sendable(self, event: Any) -> None:
        super().on_sendable(event)
        while self.to_send and event.sender.credit:
            self.deliveries.append(event.sender.send(Message(body=self.to_send.pop(0))))
            if event.sender.snd_settle_mode == Link.SND_SETTLED and not self.to_send:
                event.connection.close()

    def on_settled(self, event: Any) -> None:
        super().on_settled(event)
        self.done += 1
        if self.done == len(self.deliveries) and not self.to_send:
            event.connection.close()


class ReceiveN(Recorder):
    """Receives ``count`` messages from ``address`` (accepting each) then closes the connection; with ``count`` 0,
    closes it once the link is open."""

    def __init__(self, url: str, address: str, count: int, options: Any = None, **kwargs: Any) -> None:
        super().__init__(auto_accept=False, **kwargs)
        self.url = url
        self.address = address
        self.count = count
        self.options = options

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url, reconnect=False)
        self.receiver = event.container.create_receiver(self.connection, self.address, options=self.options)

    def on_link_opened(self, event: Any) -> None:
        super().on_link_opened(event)
        if self.count == 0:
            event.connection.close()

    def on_message(self, event: Any) -> None:
        if len(self.bodies) >= self.count:
            return  # arrived in the same batch as the last one wanted: left unsettled, the peer keeps it
        super().on_message(event)
        self.accept(event.delivery)
        if len(self.bodies) == self.count:
            event.connection.close()


@pytest.fixture
def peer() -> Iterator[ProtonBroker]:
    """A python-qpid-proton broker that records what it sees."""
    with ProtonBroker(timeout=TIMEOUT) as running:
        yield running


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    """Our embedded broker (anonymous)."""
    with BrokerThread() as running:
        yield running


def send_to_our_broker(url: str, address: str, messages: list[Message]) -> None:
    """Put messages on a queue of our broker (through our own client: only used to set up a scenario)."""

    class Put(MessagingHandler):
        def on_start(self, event: Any) -> None:
            self.pending = list(messages)
            self.unsettled = 0
            event.container.create_sender(url + "/" + address)

        def on_sendable(self, event: Any) -> None:
            while self.pending and event.sender.credit:
                event.sender.send(self.pending.pop(0))
                self.unsettled += 1

        def on_settled(self, event: Any) -> None:
            self.unsettled -= 1
            if not self.pending and not self.unsettled:
                event.connection.close()

    run_container(Container(Put()))


# ---------------------------------------------------------------------------------------------------------------
# Connecting


def test_open_frame_fields_as_proton_sees_them(peer: ProtonBroker) -> None:
    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(
                peer.url,
                reconnect=False,
                heartbeat=4,
                max_frame_size=4096,
                virtual_host="vhost.example",
                properties={symbol("product"): "test-app", symbol("version"): 7},
                offered_capabilities=[symbol("cap-offered")],
                desired_capabilities=[symbol("cap-desired")],
            )

        def on_connection_opened(self, event: Any) -> None:
            self.remote = (event.connection.remote_container, event.connection.remote_offered_capabilities)
            event.connection.close()

    handler = H()
    run_container(Container(handler, container_id="my-container-id"))
    [seen] = peer.connections
    assert seen.container_id == "my-container-id"
    assert seen.hostname == "vhost.example"
    assert seen.properties == {symbol("product"): "test-app", symbol("version"): 7}
    assert seen.offered_capabilities == ["cap-offered"]
    assert seen.desired_capabilities == ["cap-desired"]
    assert seen.max_frame_size == 4096
    assert seen.idle_timeout == 2.0  # half of heartbeat=4, as proton's transport announces (§2.4.5)
    # What the peer said, as this end sees it.
    assert handler.remote[0] == "proton-broker"
    assert list(handler.remote[1]) == ["ANONYMOUS-RELAY"]


def test_container_id_default_is_unique_and_used_in_link_names(peer: ProtonBroker) -> None:
    containers = [Container(SendN(peer.url, "q", ["x"])) for _ in range(2)]
    for container in containers:
        run_container(container)
    ids = [c.container_id for c in containers]
    assert ids[0] != ids[1]
    assert [c.container_id for c in peer.connections] == ids
    assert [a.name for a in peer.attaches] == [f"{ids[0]}-q", f"{ids[1]}-q"]


def test_heartbeat_keeps_a_quiet_connection_alive(peer: ProtonBroker) -> None:
    """The peer closes a connection silent for 1 s; ours stays up for 2.5 s of application silence."""
    slow_peer_timeout = 1.0

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(quiet.url, heartbeat=1, reconnect=False)

        def on_connection_opened(self, event: Any) -> None:
            super().on_connection_opened(event)
            event.container.schedule(2.5, self)

        def on_timer_task(self, event: Any) -> None:
            self.note("timer")
            self.sender = event.container.create_sender(self.connection, "hb")

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            if self.calls.count("sendable") == 1:
                event.sender.send(Message(body="still here"))

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            event.connection.close()

    with ProtonBroker(timeout=TIMEOUT, idle_timeout=slow_peer_timeout) as quiet:
        handler = H()
        run_container(Container(handler))
        assert [m.body for m in quiet.messages] == ["still here"]
        assert quiet.transport_errors == []
        [seen] = quiet.connections
        assert seen.idle_timeout > 0
    assert "transport_error" not in handler.calls
    assert "disconnected" not in handler.calls


def test_unknown_connect_keyword_is_a_type_error(peer: ProtonBroker) -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        Container().connect(peer.url, no_such_option=1)

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            event.container.connect(peer.url, bogus_kwarg=True)

    with pytest.raises(TypeError, match="bogus_kwarg"):
        run_container(Container(H()))
    assert peer.connections == []


def test_sasl_plain_good_credentials() -> None:
    with BrokerThread(users={"alice": "secret"}) as secured:
        handler = SendN(secured.url, "q", ["authenticated"])

        def on_start(event: Any) -> None:
            handler.connection = event.container.connect(secured.url, user="alice", password="secret", reconnect=False)
            handler.sender = event.container.create_sender(handler.connection, "q")

        handler.on_start = on_start  # type: ignore[method-assign]
        run_container(Container(handler))
        assert "accepted" in handler.calls
        assert len(secured.broker.queue("q")) == 1
        assert handler.connection.transport.user == "alice"
        # Credentials in the URL work too.
        host_port = secured.url.split("://", 1)[1]
        in_url = SendN(f"amqp://alice:secret@{host_port}", "q", ["credentials in the url"])
        run_container(Container(in_url))
        assert "accepted" in in_url.calls
        assert len(secured.broker.queue("q")) == 2


def test_sasl_plain_bad_password_is_a_fatal_transport_error() -> None:
    with BrokerThread(users={"alice": "secret"}) as secured:
        handler = Recorder()

        def on_start(event: Any) -> None:
            # reconnect left at its default: an authentication failure must still end the connection.
            event.container.connect(secured.url, user="alice", password="wrong")

        handler.on_start = on_start  # type: ignore[method-assign]
        started = time.monotonic()
        run_container(Container(handler))
        assert time.monotonic() - started < 5
    assert handler.calls.count("transport_error") == 1
    assert handler.conditions[0][0] == "amqp:unauthorized-access"
    assert "connection_opened" not in handler.calls


def test_failover_to_the_second_url(peer: ProtonBroker) -> None:
    dead = f"amqp://127.0.0.1:{refused_port()}"

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(urls=[dead, peer.url], reconnect=Backoff(initial=0.01))
            event.container.create_sender(self.connection, "fo")

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            self.address = event.connection.connected_address
            if self.calls.count("sendable") == 1:
                event.sender.send(Message(body="via failover"))

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            event.connection.close()

    handler = H()
    run_container(Container(handler))
    assert [m.body for m in peer.messages] == ["via failover"]
    assert str(peer.port) in handler.address
    assert "connection_opened" in handler.calls


@pytest.mark.parametrize("impl", ["proton", "ours"])
def test_reconnect_false_against_a_refused_port_ends_the_container(impl: str) -> None:
    handler_class, container_class = _api(impl)
    url = f"amqp://127.0.0.1:{refused_port()}"

    class H(handler_class):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.conditions: list[Any] = []

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, reconnect=False)

        def on_connection_opened(self, event: Any) -> None:  # pragma: no cover - nothing listens
            self.conditions.append("opened")

        def on_transport_error(self, event: Any) -> None:
            self.conditions.append(event.transport.condition.name)

    handler = H()
    run_container(container_class(handler), timeout=5)
    assert handler.conditions == ["proton.pythonio"]


def test_reconnect_with_backoff_after_the_peer_restarts() -> None:
    """The link opened before the peer went away is attached again on the new connection and carries a message."""
    port = free_port()
    first_open = threading.Event()

    class H(Recorder):
        opened = 0

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(
                f"amqp://127.0.0.1:{port}", reconnect=Backoff(initial=0.05, factor=2, max_delay=0.2)
            )
            self.sender = event.container.create_sender(self.connection, "across-restart", name="kept")

        def on_connection_opened(self, event: Any) -> None:
            super().on_connection_opened(event)
            self.opened += 1
            if self.opened == 1:
                first_open.set()

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            if self.opened == 2 and "accepted" not in self.calls and not event.sender.unsettled:
                event.sender.send(Message(body="after restart"))

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            event.connection.close()

    handler = H()
    container = Container(handler)
    with ProtonBroker(timeout=TIMEOUT, port=port) as first:
        join = start_container(container)
        assert first_open.wait(TIMEOUT)
        first.wait_attaches(1, name="kept")
    time.sleep(0.3)  # a few refused attempts while nothing listens
    with ProtonBroker(timeout=TIMEOUT, port=port) as second:
        join(TIMEOUT)
        assert [m.body for m in second.messages] == ["after restart"]
        assert [a.name for a in second.attaches] == ["kept"]
        assert len(second.connections) == 1
    assert handler.opened == 2
    assert "disconnected" in handler.calls


def test_connect_and_create_sender_before_run(peer: ProtonBroker) -> None:
    """proton programs may set up connections and links before ``run()``."""
    handler = Recorder()
    container = Container(handler)
    connection = container.connect(peer.url, reconnect=False)
    sender = container.create_sender(connection, "early")
    delivery = sender.send(Message(body="queued before run"))
    assert sender.queued == 1

    def on_accepted(event: Any) -> None:
        handler.note("accepted")
        event.connection.close()

    handler.on_accepted = on_accepted  # type: ignore[method-assign]
    run_container(container)
    assert [m.body for m in peer.messages] == ["queued before run"]
    assert delivery.remote_state == Delivery.ACCEPTED


def test_sasl_disabled(peer: ProtonBroker) -> None:
    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            event.container.connect(peer.url, sasl_enabled=False, reconnect=False)

        def on_connection_opened(self, event: Any) -> None:
            event.connection.close()

    run_container(Container(H()))
    [seen] = peer.connections
    assert seen.sasl_mechanism is None and not seen.authenticated


# ---------------------------------------------------------------------------------------------------------------
# TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CertFiles]:
    if not openssl_available():
        pytest.skip("the openssl command is needed to make test certificates")
    directory: Path = tmp_path_factory.mktemp("certs")
    ca = make_ca(directory, "ca")
    return {
        "ca": ca,
        "localhost": make_cert(directory, "localhost", ca, "localhost", san=["DNS:localhost"]),
        "both": make_cert(directory, "both", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"]),
    }


def _tls_broker(cert: CertFiles) -> BrokerThread:
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert.cert, cert.key)
    return BrokerThread(ssl_context=context)


def _tls_send(url: str, domain: SSLDomain | None, container: Container | None = None) -> Recorder:
    class H(Recorder):
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, ssl_domain=domain, reconnect=False)
            event.container.create_sender(self.connection, "tls-q")

        def on_connection_opened(self, event: Any) -> None:
            super().on_connection_opened(event)
            self.encrypted = event.transport.encrypted
            self.cipher = event.transport.ssl().cipher_name()

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            if self.calls.count("sendable") == 1:
                event.sender.send(Message(body="secret"))

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            event.connection.close()

    handler = H()
    if container is None:
        container = Container(handler)
    else:
        container.handler.add(handler)
    run_container(container)
    return handler


def test_amqps_verify_peer_name(certs: dict[str, CertFiles]) -> None:
    with _tls_broker(certs["localhost"]) as secured:
        port = secured.url.rsplit(":", 1)[1]
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(certs["ca"].cert)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        good = _tls_send(f"amqps://localhost:{port}", domain)
        assert good.calls.count("accepted") == 1
        assert good.encrypted and good.cipher
        # The certificate names localhost only: 127.0.0.1 fails verification.
        bad = _tls_send(f"amqps://127.0.0.1:{port}", domain)
        assert "connection_opened" not in bad.calls
        assert bad.calls.count("transport_error") == 1
        assert len(secured.broker.queue("tls-q")) == 1


def test_amqps_untrusted_ca_fails_and_anonymous_peer_skips_verification(certs: dict[str, CertFiles]) -> None:
    with _tls_broker(certs["localhost"]) as secured:
        port = secured.url.rsplit(":", 1)[1]
        untrusted = SSLDomain(SSLDomain.MODE_CLIENT)  # the system CAs only
        bad = _tls_send(f"amqps://localhost:{port}", untrusted)
        assert "connection_opened" not in bad.calls
        assert bad.calls.count("transport_error") == 1
        anonymous = SSLDomain(SSLDomain.MODE_CLIENT)
        anonymous.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
        good = _tls_send(f"amqps://127.0.0.1:{port}", anonymous)
        assert good.calls.count("accepted") == 1


def test_amqps_uses_the_container_ssl_client_domain(certs: dict[str, CertFiles]) -> None:
    with _tls_broker(certs["both"]) as secured:
        container = Container()
        container.ssl.client.set_trusted_ca_db(certs["ca"].cert)
        handler = _tls_send(secured.url, None, container)
        assert handler.calls.count("accepted") == 1


def test_listen_amqps_with_the_container_server_credentials(certs: dict[str, CertFiles]) -> None:
    """A real proton client sends to our TLS listener."""
    received: list[Any] = []
    listening = threading.Event()
    port = free_port()

    class Server(MessagingHandler):
        def on_start(self, event: Any) -> None:
            container = event.container
            container.ssl.server.set_credentials(certs["both"].cert, certs["both"].key, None)
            self.acceptor = container.listen(f"amqps://127.0.0.1:{port}")
            listening.set()

        def on_link_opening(self, event: Any) -> None:
            # As proton's own servers do: answer with the terminus the client asked for.
            event.link.target.copy(event.link.remote_target)

        def on_connection_opened(self, event: Any) -> None:
            self.encrypted = event.transport.encrypted

        def on_message(self, event: Any) -> None:
            received.append(event.message.body)
            self.acceptor.close()

    server = Server()
    join = start_container(Container(server))
    assert listening.wait(TIMEOUT)
    domain = proton.SSLDomain(proton.SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(certs["ca"].cert)
    domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER_NAME)
    client = proton.utils.BlockingConnection(f"amqps://localhost:{port}", ssl_domain=domain, timeout=TIMEOUT)
    try:
        sender = client.create_sender("anywhere")
        sender.send(proton.Message(body="over tls"))
    finally:
        client.close()
    join(TIMEOUT)
    assert received == ["over tls"]
    assert server.encrypted


# ---------------------------------------------------------------------------------------------------------------
# Links


def test_create_sender_and_receiver_with_a_url_and_names(peer: ProtonBroker) -> None:
    peer.put("from-url", "queued")

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            self.sender = event.container.create_sender(peer.url + "/to-url", name="my-sender")
            self.receiver = event.container.create_receiver(peer.url + "/from-url", name="my-receiver")

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            if self.calls.count("sendable") == 1:
                event.sender.send(Message(body="sent"))

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            event.connection.close()

        def on_message(self, event: Any) -> None:
            super().on_message(event)
            event.connection.close()

    handler = H()
    run_container(Container(handler))
    assert handler.sender.connection is not handler.receiver.connection  # a URL makes a new connection each
    attaches = {a.name: a for a in peer.attaches}
    assert attaches["my-sender"].role == "sender" and attaches["my-sender"].target.address == "to-url"
    assert attaches["my-receiver"].role == "receiver" and attaches["my-receiver"].source.address == "from-url"
    assert [m.body for m in peer.messages] == ["sent"]
    assert handler.bodies == ["queued"]
    assert len(peer.connections) == 2


def test_link_scoped_handler_gets_the_link_events(peer: ProtonBroker) -> None:
    container_handler = Recorder()
    link_handler = Recorder()

    class Start(MessagingHandler):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            self.connection = connection
            event.container.create_sender(connection, "scoped", handler=link_handler)

    class LinkHandler(Recorder):
        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            if not self.calls.count("sendable") > 1:
                event.sender.send(Message(body="from the link handler"))

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            event.connection.close()

    link_handler = LinkHandler()
    start = Start()
    container = Container(start, container_handler)
    run_container(container)
    assert [m.body for m in peer.messages] == ["from the link handler"]
    assert "sendable" in link_handler.calls and "accepted" in link_handler.calls
    # The container's handlers saw the connection's events, not the link's.
    assert "connection_opened" in container_handler.calls
    assert "sendable" not in container_handler.calls and "accepted" not in container_handler.calls
    assert "connection_opened" not in link_handler.calls


def test_connection_scoped_handler_gets_the_connection_events(peer: ProtonBroker) -> None:
    peer.put("conn-scope", "m1")
    container_handler = Recorder()

    class ConnHandler(Recorder):
        def on_connection_opened(self, event: Any) -> None:
            super().on_connection_opened(event)
            event.container.create_receiver(event.connection, "conn-scope")

        def on_message(self, event: Any) -> None:
            super().on_message(event)
            event.connection.close()

    conn_handler = ConnHandler()

    class Start(MessagingHandler):
        def on_start(self, event: Any) -> None:
            event.container.connect(peer.url, handler=conn_handler, reconnect=False)

    run_container(Container(Start(), container_handler))
    assert conn_handler.bodies == ["m1"]
    assert "connection_opened" in conn_handler.calls and "connection_closed" in conn_handler.calls
    assert container_handler.calls == []


def test_tags_generator(peer: ProtonBroker) -> None:
    tags = (f"tag-{n}".encode() for n in itertools.count(100))

    class H(SendN):
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(peer.url, reconnect=False)
            event.container.create_sender(self.connection, "tagged", tags=tags)

    handler = H(peer.url, "tagged", ["a", "b", "c"])
    run_container(Container(handler))
    assert [m.tag for m in peer.messages] == [b"tag-100", b"tag-101", b"tag-102"]
    # Read back as proton reads tags: decoded from UTF-8.
    assert [d.tag for d in handler.deliveries] == ["tag-100", "tag-101", "tag-102"]


def test_at_most_once_sends_settled(peer: ProtonBroker) -> None:
    handler = SendN(peer.url, "amo", ["x", "y"], options=AtMostOnce())
    run_container(Container(handler))
    [attach] = peer.attaches
    assert attach.snd_settle_mode == "settled"
    messages = peer.wait_messages(2)
    assert [m.body for m in messages] == ["x", "y"]
    assert all(m.settled for m in messages)
    assert all(d.local_settled for d in handler.deliveries)


def test_at_most_once_receiver_gets_settled_transfers_and_sends_no_disposition(peer: ProtonBroker) -> None:
    for n in range(3):
        peer.put("amo-in", n)
    sniffer = FrameSniffer(peer.port)
    handler = ReceiveN(sniffer.url, "amo-in", 3, options=AtMostOnce())
    try:
        run_container(Container(handler))
    finally:
        sniffer.close()
    assert handler.bodies == [0, 1, 2]
    [attach] = peer.attaches
    assert attach.snd_settle_mode == "settled"
    assert sniffer.performatives(_DISPOSITION) == []
    assert peer.queued("amo-in") == []


def test_credit_top_up_is_written_while_the_handlers_work_through_a_read(peer: ProtonBroker) -> None:
    """The flow controller's top-up goes to the socket while the handlers work through the read that brought the
    deliveries, not once they have been called for every one of them: meanwhile the sender, out of credit, would
    wait (through our broker that halved the callback API's receive rate). It waits for a few events' callbacks
    (Container._write_soon: a drain asked for in the last message of a default prefetch goes in the same frame, as
    proton's), so with a prefetch of 100 a handler that stops at its 80th message sees the top-up on the wire (read
    by proton's decoder in a proxy) before it returns.

    Why the 80th is enough however the reads fall: the top-up is granted at the first delivery of the read that
    brings the deliveries past a quarter of the prefetch (the 25th at the latest, the earlier reads having brought
    fewer); if that read reaches the 80th, the sender has less credit left than the top-up gives, so it is written
    early, 16 events later (the 41st at the latest); if not, it is written with that read's output."""
    for n in range(300):
        peer.put("cb-top-up", n)
    sniffer = FrameSniffer(peer.port)
    seen: list[int] = []

    def link_flows_with_credit() -> int:
        return sum(
            1 for fields in sniffer.performatives(_FLOW) if len(fields) > 6 and fields[4] is not None and fields[6]
        )

    class StopsAtTheEightieth(ReceiveN):
        def on_message(self, event: Any) -> None:
            super().on_message(event)
            if len(self.bodies) == 80:
                deadline = time.monotonic() + 3.0
                while link_flows_with_credit() < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)  # the container's thread is held here: only a flow written already can arrive
                seen.append(link_flows_with_credit())

    handler = StopsAtTheEightieth(sniffer.url, "cb-top-up", 300, prefetch=100)
    try:
        run_container(Container(handler))
    finally:
        sniffer.close()
    assert handler.bodies == list(range(300))
    assert seen and seen[0] >= 2  # the first grant (100) and a top-up, before the 80th message's handler returned


def test_at_least_once_sends_unsettled(peer: ProtonBroker) -> None:
    handler = SendN(peer.url, "alo", ["x"], options=AtLeastOnce())
    run_container(Container(handler))
    [attach] = peer.attaches
    assert (attach.snd_settle_mode, attach.rcv_settle_mode) == ("unsettled", "first")
    [message] = peer.messages
    assert not message.settled and message.outcome == "accepted"
    assert handler.calls.count("accepted") == 1 and handler.calls.count("settled") == 1


def test_a_long_callback_hands_its_output_to_the_peer_before_it_returns() -> None:
    """proton writes what a callback sent once it returns; a callback that sends its whole credit would leave the
    peer idle (and the output growing) meanwhile. Ours hands the output to the socket as it grows: the peer has
    messages while the callback is still running (it waits for them, with the GIL released by ``sleep``)."""
    with ProtonBroker(timeout=TIMEOUT, credit_window=2000) as peer:
        seen_during_callback: list[int] = []

        class SendAll(MessagingHandler):
            def on_start(self, event: Any) -> None:
                event.container.create_sender(event.container.connect(peer.url, reconnect=False), "long")

            def on_sendable(self, event: Any) -> None:
                sender = event.sender
                if seen_during_callback:
                    return
                for n in range(sender.credit):
                    sender.send(Message(body="x" * 100, id=n))
                deadline = time.monotonic() + 5
                while not peer.messages and time.monotonic() < deadline:
                    time.sleep(0.01)
                seen_during_callback.append(len(peer.messages))
                event.connection.close()

        run_container(Container(SendAll()))
        assert seen_during_callback[0] > 0, "the peer got nothing until the callback returned"
        messages = peer.wait_messages(2000)
        assert [m.message.id for m in messages] == list(range(2000))  # all of them, in order


def test_settled_deliveries_are_freed_without_the_garbage_collector(peer: ProtonBroker) -> None:
    """A settled delivery and its engine delivery do not keep each other alive: at a thousand messages a second, a
    reference cycle each would have the collector run (and stall) all the time."""
    import gc

    def alive() -> int:
        return sum(1 for thing in gc.get_objects() if isinstance(thing, Delivery))

    handler = SendN(peer.url, "freed", list(range(300)))
    gc.collect()
    before = alive()
    gc.disable()
    try:
        run_container(Container(handler))
        handler.deliveries.clear()
        left = alive() - before
    finally:
        gc.enable()
    assert handler.done == 300
    assert left == 0, f"{left} deliveries wait for the garbage collector"


def test_dynamic_receiver_with_node_properties(peer: ProtonBroker) -> None:
    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            self.receiver = event.container.create_receiver(
                connection, None, dynamic=True, options=DynamicNodeProperties({"x-opt-lifetime": "delete-on-close"})
            )

        def on_link_opened(self, event: Any) -> None:
            self.address = event.receiver.remote_source.address
            event.connection.close()

    handler = H()
    run_container(Container(handler))
    [attach] = peer.attaches
    assert attach.source.dynamic
    assert attach.source.dynamic_node_properties == {symbol("x-opt-lifetime"): "delete-on-close"}
    assert handler.address == "dynamic-1"


def test_dynamic_receiver_on_our_broker_gets_messages_sent_to_its_address(broker: BrokerThread) -> None:
    class H(Recorder):
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(broker.url, reconnect=False)
            self.receiver = event.container.create_receiver(self.connection, None, dynamic=True)

        def on_link_opened(self, event: Any) -> None:
            super().on_link_opened(event)
            if event.receiver is not None:
                self.address = event.receiver.remote_source.address
                event.container.create_sender(self.connection, self.address)

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            if "message" not in self.calls and self.calls.count("sendable") == 1:
                event.sender.send(Message(body="to the temporary queue"))

        def on_message(self, event: Any) -> None:
            super().on_message(event)
            event.connection.close()

    handler = H()
    run_container(Container(handler))
    assert handler.address
    assert handler.bodies == ["to the temporary queue"]


def test_selector_filters_on_our_broker(broker: BrokerThread) -> None:
    send_to_our_broker(
        broker.url,
        "colours",
        [Message(body=c, properties={"colour": c}) for c in ["red", "blue", "red", "green"]],
    )
    handler = ReceiveN(broker.url, "colours", 2, options=Selector("colour = 'red'"))
    run_container(Container(handler))
    assert handler.bodies == ["red", "red"]
    assert sorted(e.message.body for e in broker.broker.queue("colours").entries) == ["blue", "green"]


def test_filter_option_is_sent_in_the_source(peer: ProtonBroker) -> None:
    described = proton.Described(proton.symbol("apache.org:selector-filter:string"), "a = 1")
    handler = ReceiveN(
        peer.url,
        "filtered",
        0,
        options=Filter({symbol("my-filter"): Described(symbol("apache.org:selector-filter:string"), "a = 1")}),
    )
    run_container(Container(handler))
    [attach] = peer.attaches
    assert attach.source.filter == {proton.symbol("my-filter"): described}


def test_copy_browses_and_messages_stay(broker: BrokerThread) -> None:
    send_to_our_broker(broker.url, "browse", [Message(body=n) for n in range(3)])
    browser = ReceiveN(broker.url, "browse", 3, options=Copy())
    run_container(Container(browser))
    assert browser.bodies == [0, 1, 2]
    assert len(broker.broker.queue("browse")) == 3
    consumer = ReceiveN(broker.url, "browse", 3, options=Move())
    run_container(Container(consumer))
    assert consumer.bodies == [0, 1, 2]
    assert len(broker.broker.queue("browse")) == 0


def test_move_and_durable_subscription_in_the_attach(peer: ProtonBroker) -> None:
    handler = ReceiveN(peer.url, "sub", 0, options=[Move(), DurableSubscription()])
    run_container(Container(handler))
    [attach] = peer.attaches
    assert attach.source.distribution_mode == "move"
    assert attach.source.durable == Terminus.DELIVERIES
    assert attach.source.expiry_policy == "never"


def test_custom_link_options_apply_where_their_test_says(peer: ProtonBroker) -> None:
    class Capability(LinkOption):
        def apply(self, link: Any) -> None:
            link.properties = {symbol("applied-to"): "sender" if link.is_sender else "receiver"}

    class OnlyNamed(LinkOption):
        def test(self, link: Any) -> bool:
            return link.name.endswith("-yes")

        def apply(self, link: Any) -> None:
            link.target.capabilities.put_object([symbol("chosen")])

    class SenderCap(SenderOption):
        def apply(self, link: Any) -> None:
            link.target.capabilities.put_object([symbol("sender-only")])

    class ReceiverCap(ReceiverOption):
        def apply(self, link: Any) -> None:
            link.source.capabilities.put_object([symbol("receiver-only")])

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            options = [Capability(), SenderCap(), ReceiverCap()]
            event.container.create_sender(connection, "a", name="s", options=options)
            event.container.create_receiver(connection, "b", name="r", options=options)
            event.container.create_sender(connection, "c", name="s-yes", options=OnlyNamed())
            event.container.create_sender(connection, "d", name="s-no", options=OnlyNamed())
            self.links = 4

        def on_link_opened(self, event: Any) -> None:
            self.links -= 1
            if not self.links:
                event.connection.close()

    run_container(Container(H()))
    attaches = {a.name: a for a in peer.wait_attaches(4)}
    assert attaches["s"].properties == {symbol("applied-to"): "sender"}
    assert attaches["r"].properties == {symbol("applied-to"): "receiver"}
    assert attaches["s"].target.capabilities == ["sender-only"]
    assert attaches["s"].source.capabilities is None
    assert attaches["r"].source.capabilities == ["receiver-only"]
    assert attaches["r"].target.capabilities is None
    assert attaches["s-yes"].target.capabilities == ["chosen"]
    assert attaches["s-no"].target.capabilities is None


# ---------------------------------------------------------------------------------------------------------------
# Timers, injected events, running


def test_schedule_and_cancel() -> None:
    fired: list[tuple[str, float]] = []
    started = time.monotonic()

    class Tick:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_timer_task(self, event: Any) -> None:
            fired.append((self.name, time.monotonic() - started))

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            container = event.container
            container.schedule(0.2, Tick("late"))
            cancelled = container.schedule(0.1, Tick("cancelled"))
            container.schedule(0.05, Tick("early"))
            cancelled.cancel()
            self.long = container.schedule(30, Tick("never"))

        def on_timer_task(self, event: Any) -> None:  # pragma: no cover - every task has its own handler
            fired.append(("container", 0))

    class Canceller:
        def __init__(self, handler: H) -> None:
            self.handler = handler

        def on_timer_task(self, event: Any) -> None:
            fired.append(("canceller", time.monotonic() - started))
            self.handler.long.cancel()

    handler = H()
    container = Container(handler)
    container.schedule(0.3, Canceller(handler))
    run_container(container, timeout=5)
    assert [name for name, _ in fired] == ["early", "late", "canceller"]
    assert fired[0][1] >= 0.05 and fired[1][1] >= 0.2 and fired[2][1] >= 0.3
    assert time.monotonic() - started < 5  # the cancelled 30 s timer did not keep the container running


def test_schedule_without_handler_calls_the_container_handlers() -> None:
    calls: list[Any] = []

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            self.task = event.container.schedule(0.01)

        def on_timer_task(self, event: Any) -> None:
            calls.append(event.context)

    handler = H()
    run_container(Container(handler), timeout=5)
    assert calls == [handler.task]


def test_event_injector_from_another_thread() -> None:
    injector = EventInjector()
    got: list[tuple[Any, int]] = []
    ready = threading.Event()

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            self.thread = threading.get_ident()
            ready.set()

        def on_work(self, event: Any) -> None:
            got.append((event.subject, threading.get_ident()))
            assert event.container is not None

        def on_finish(self, event: Any) -> None:
            got.append(("finish", threading.get_ident()))

    handler = H()
    container = Container(handler)
    container.selectable(injector)
    join = start_container(container)
    assert ready.wait(TIMEOUT)

    def produce() -> None:
        for n in range(50):
            injector.trigger(ApplicationEvent("work", subject=n))
            if n % 10 == 0:
                time.sleep(0.01)
        injector.trigger(ApplicationEvent("finish"))
        injector.close()

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join(TIMEOUT)
    join(TIMEOUT)  # the container ends once the injector is closed and drained
    assert [subject for subject, _ in got] == [*range(50), "finish"]
    assert {thread for _, thread in got} == {handler.thread}
    assert handler.thread != threading.get_ident()


def test_run_async_inside_asyncio(broker: BrokerThread) -> None:
    ticks: list[int] = []

    async def main() -> tuple[SendN, float]:
        handler = SendN(broker.url, "async-q", ["from asyncio"])
        container = Container(handler)

        async def ticker() -> None:
            for n in range(1000):
                ticks.append(n)
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        with anyio.fail_after(TIMEOUT):
            await container.run_async()
        task.cancel()
        return handler, len(ticks)

    handler, _ = asyncio.run(main())
    assert handler.calls.count("accepted") == 1
    assert len(ticks) > 0  # other tasks of the loop ran meanwhile
    assert len(broker.broker.queue("async-q")) == 1


def test_run_async_under_trio(broker: BrokerThread) -> None:
    pytest.importorskip("trio")

    async def main() -> SendN:
        handler = SendN(broker.url, "trio-q", ["from trio"])
        with anyio.fail_after(TIMEOUT):
            await Container(handler).run_async()
        return handler

    handler = anyio.run(main, backend="trio")
    assert handler.calls.count("accepted") == 1
    assert len(broker.broker.queue("trio-q")) == 1


@pytest.mark.parametrize("impl", ["proton", "ours"])
def test_stepping_by_hand_with_start_process_stop(peer: ProtonBroker, impl: str) -> None:
    """proton's ``run()`` spelled out, as programs that share their thread write it: ``start()``, ``process()``
    until it returns False, ``stop()``, a last ``process()``. The same program on real proton and on ours."""
    handler_class, container_class = _api(impl)

    class Send(handler_class):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []
            self.to_send = ["a", "b", "c"]

        def on_start(self, event: Any) -> None:
            self.calls.append("start")
            event.container.create_sender(event.container.connect(peer.url, reconnect=False), "stepped")

        def on_sendable(self, event: Any) -> None:
            while self.to_send and event.sender.credit:
                body = self.to_send.pop(0)
                event.sender.send(Message(body=body) if impl == "ours" else proton.Message(body=body))

        def on_accepted(self, event: Any) -> None:
            self.calls.append("accepted")
            if self.calls.count("accepted") == 3:
                event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            self.calls.append("closed")

    handler = Send()
    container = container_class(handler)
    container.timeout = 0.05
    container.start()
    steps = 0
    deadline = time.monotonic() + TIMEOUT
    while container.process():
        steps += 1
        assert time.monotonic() < deadline, "process() kept returning True"
    container.stop()
    assert container.process() is False
    assert handler.calls == ["start", "accepted", "accepted", "accepted", "closed"]
    assert len(peer.wait_messages(3)) == 3
    assert steps >= 2  # it came back between rounds, not only at the end


def test_do_work_returns_within_its_timeout_while_waiting_for_a_timer() -> None:
    class Timed(MessagingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.fired = 0.0

        def on_start(self, event: Any) -> None:
            event.container.schedule(0.3, self)

        def on_timer_task(self, event: Any) -> None:
            self.fired = time.monotonic()

    handler = Timed()
    container = Container(handler)
    started = time.monotonic()
    assert container.do_work(0.05) is True  # on_start
    returns = []
    while not handler.fired and time.monotonic() - started < TIMEOUT:
        before = time.monotonic()
        assert container.do_work(0.05) is True or handler.fired
        returns.append(time.monotonic() - before)
    assert handler.fired - started >= 0.3
    assert max(returns) < 0.25  # each call came back after about its timeout, not at the timer
    container.stop()
    assert container.process() is False


def test_a_handler_error_while_stepping_is_raised_by_process() -> None:
    class Fails(MessagingHandler):
        def on_start(self, event: Any) -> None:
            raise ValueError("from on_start")

    container = Container(Fails())
    with pytest.raises(ValueError, match="from on_start"):
        while container.process():
            pass
    assert container.process() is False


def test_run_refuses_a_container_being_stepped() -> None:
    container = Container(MessagingHandler())
    container.start()
    with pytest.raises(Exception, match="already running"):
        container.run()
    container.stop()
    while container.process():
        pass


def test_stop_from_a_callback(peer: ProtonBroker) -> None:
    class H(Recorder):
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(f"127.0.0.1:{free_port()}")  # would keep the container running
            self.connection = event.container.connect(peer.url)

        def on_connection_opened(self, event: Any) -> None:
            super().on_connection_opened(event)
            event.container.stop()

    handler = H()
    started = time.monotonic()
    run_container(Container(handler), timeout=5)
    assert time.monotonic() - started < 3
    assert handler.calls[0] == "connection_opened"
    # The peer sees the connection go.
    peer.wait_closes(1)


def test_handler_exception_propagates_out_of_run(peer: ProtonBroker) -> None:
    class Boom(Exception):
        pass

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            event.container.connect(peer.url)

        def on_connection_opened(self, event: Any) -> None:
            raise Boom("from a callback")

    with pytest.raises(Boom, match="from a callback"):
        run_container(Container(H()), timeout=5)


# ---------------------------------------------------------------------------------------------------------------
# Deliveries


def test_update_without_settle_sends_an_unsettled_disposition(peer: ProtonBroker) -> None:
    peer.put("unsettled", "m")

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            event.container.create_receiver(connection, "unsettled")

        def on_message(self, event: Any) -> None:
            super().on_message(event)
            self.delivery = event.delivery
            event.delivery.update(Delivery.ACCEPTED)
            self.local_state = event.delivery.local_state
            self.settled_in_callback = event.delivery.local_settled

        def on_settled(self, event: Any) -> None:
            # The peer settled after seeing our (unsettled) accepted state.
            super().on_settled(event)
            self.remote_settled = event.delivery.settled
            event.delivery.settle()
            event.connection.close()

    handler = H(auto_accept=False)
    run_container(Container(handler))
    [outcome] = peer.outcomes
    assert outcome.outcome == "accepted"
    assert outcome.settled is False  # the state went before the settlement
    assert handler.local_state == Delivery.ACCEPTED
    assert handler.settled_in_callback is False
    assert handler.remote_settled is True
    assert handler.delivery.local_settled


def test_sender_sees_remote_state_and_settlement(peer: ProtonBroker) -> None:
    peer.outcome_for["rej"] = ("rejected", "amqp:precondition-failed", "not today")

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            event.container.create_sender(connection, "rej")

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            if not hasattr(self, "delivery"):
                self.delivery = event.sender.send(Message(body="x"))
                self.before = (self.delivery.remote_state, self.delivery.settled)

        def on_rejected(self, event: Any) -> None:
            super().on_rejected(event)
            delivery = event.delivery
            self.seen = (delivery.remote_state, delivery.settled, delivery.local_settled)
            self.condition = delivery.remote.condition

        def on_settled(self, event: Any) -> None:
            super().on_settled(event)
            event.delivery.settle()
            self.after = event.delivery.local_settled
            event.connection.close()

    handler = H(auto_settle=False)
    run_container(Container(handler))
    assert handler.before == (0, False)
    assert handler.seen == (Delivery.REJECTED, True, False)
    assert handler.condition.name == "amqp:precondition-failed"
    assert handler.condition.description == "not today"
    assert handler.after is True
    assert handler.calls.index("rejected") < handler.calls.index("settled")


@pytest.mark.parametrize(("delivered", "expected", "failed"), [(True, "modified", True), (False, "released", False)])
def test_release_as_the_peer_sees_it(peer: ProtonBroker, delivered: bool, expected: str, failed: bool) -> None:
    peer.put("rel", "m")

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            event.container.create_receiver(connection, "rel")

        def on_message(self, event: Any) -> None:
            super().on_message(event)
            self.release(event.delivery, delivered=delivered)
            self.state = event.delivery.local_state
            event.connection.close()

    handler = H(auto_accept=False, prefetch=1)
    run_container(Container(handler))
    [outcome] = peer.wait_outcomes(1)
    assert outcome.outcome == expected
    assert outcome.settled
    assert outcome.delivery_failed is failed
    assert handler.state == (Delivery.MODIFIED if delivered else Delivery.RELEASED)
    # The message went back to the queue.
    peer.wait_for(lambda: len(peer.queued("rel")) == 1, what="the message back in its queue")


def test_sender_queues_without_credit_and_sends_when_credit_comes(peer: ProtonBroker) -> None:
    peer.credit_for["no-credit"] = 0
    queued: list[int] = []
    attached = threading.Event()

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            self.sender = event.container.create_sender(connection, "no-credit", name="nc")
            # Sent before the link is even attached: they wait in the sender.
            for n in range(3):
                self.sender.send(Message(body=n))
            queued.append(self.sender.queued)

        def on_link_opened(self, event: Any) -> None:
            super().on_link_opened(event)
            queued.append(event.sender.queued)
            attached.set()

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            if self.calls.count("accepted") == 3:
                queued.append(event.sender.queued)
                event.connection.close()

    join = start_container(Container(H()))
    assert attached.wait(TIMEOUT)
    time.sleep(0.1)
    assert peer.messages == []
    peer.grant_credit("nc", 10)
    join(TIMEOUT)
    assert queued == [3, 3, 0]
    assert [m.body for m in peer.messages] == [0, 1, 2]


def test_low_level_send_with_delivery_stream_advance(peer: ProtonBroker) -> None:
    payload = Message(body="streamed", subject="low-level").encode()

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            event.container.create_sender(connection, "raw", name="raw")

        def on_sendable(self, event: Any) -> None:
            super().on_sendable(event)
            sender = event.sender
            if sender.current is None and not hasattr(self, "delivery"):
                self.delivery = sender.delivery(b"raw-tag")
                assert sender.current is self.delivery
                half = len(payload) // 2
                assert sender.stream(payload[:half]) == half
                assert sender.stream(payload[half:]) == len(payload) - half
                assert sender.advance()
                assert sender.current is None

        def on_accepted(self, event: Any) -> None:
            super().on_accepted(event)
            event.connection.close()

    handler = H()
    run_container(Container(handler))
    [message] = peer.messages
    assert message.tag == b"raw-tag"
    assert (message.body, message.message.subject) == ("streamed", "low-level")
    assert handler.calls.count("accepted") == 1


def test_offered_sends_available_in_a_flow(peer: ProtonBroker) -> None:
    """proton's engine ignores a flow's ``available``; the frame, decoded by proton's codec, shows it."""
    sniffer = FrameSniffer(peer.port)

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(sniffer.url, reconnect=False)
            event.container.create_sender(connection, "offer", name="offer")

        def on_sendable(self, event: Any) -> None:
            event.sender.offered(42)
            event.connection.close()

    try:
        run_container(Container(H()))
    finally:
        sniffer.close()
    flows = sniffer.performatives(_FLOW)
    assert flows, "no flow frame was sent"
    # flow fields: ..., handle (4), delivery-count (5), link-credit (6), available (7), drain (8)
    assert flows[-1][4] == 0 and flows[-1][7] == 42


def test_receiver_flow_with_prefetch_zero(peer: ProtonBroker) -> None:
    for n in range(5):
        peer.put("credit", n)

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            self.receiver = event.container.create_receiver(connection, "credit", name="cr")

        def on_link_opened(self, event: Any) -> None:
            super().on_link_opened(event)
            self.credit_before = event.receiver.credit
            event.receiver.flow(2)

        def on_message(self, event: Any) -> None:
            super().on_message(event)
            if len(self.bodies) == 2:
                event.container.schedule(0.2, self)

        def on_timer_task(self, event: Any) -> None:
            self.receiver.connection.close()

    handler = H(prefetch=0)
    run_container(Container(handler))
    assert handler.credit_before == 0
    assert handler.bodies == [0, 1]
    assert next(f.credit for f in peer.flows if f.link == "cr") == 2
    assert [m.body for m in peer.queued("credit")] == [2, 3, 4]


def test_drain_gets_what_there_is_then_the_credit_back(peer: ProtonBroker) -> None:
    for n in range(3):
        peer.put("drain", n)

    class H(Recorder):
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            self.receiver = event.container.create_receiver(connection, "drain", name="dr")

        def on_link_opened(self, event: Any) -> None:
            super().on_link_opened(event)
            event.receiver.drain(10)
            self.draining_after_request = event.receiver.draining()

        def on_link_flow(self, event: Any) -> None:
            receiver = event.receiver
            if receiver is not None and not receiver.draining() and len(self.bodies) == 3:
                self.drained = receiver.drained()
                self.credit_after = receiver.credit
                event.connection.close()

    handler = H(prefetch=0)
    run_container(Container(handler))
    assert handler.draining_after_request
    assert handler.bodies == [0, 1, 2]
    drain = peer.drains[0]
    assert (drain.credit, drain.sent, drain.returned) == (10, 3, 7)
    assert handler.credit_after == 0
    # What drained() returns is checked against proton in test_receiver_drained_is_the_credit_given_back.


def test_low_level_receive_with_recv_and_advance(peer: ProtonBroker) -> None:
    peer.put("raw-in", proton.Message(body="x" * 3000, subject="big"))

    class Raw:
        """Not a MessagingHandler: reads the delivery by hand."""

        def on_reactor_init(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            connection.open()
            self.receiver = event.container.create_receiver(connection, "raw-in")
            self.receiver.flow(1)

        def on_delivery(self, event: Any) -> None:
            delivery = event.delivery
            receiver = event.receiver
            assert receiver.current is delivery and delivery.readable
            chunks = []
            while True:
                chunk = receiver.recv(1000)
                if chunk is None:
                    break
                chunks.append(chunk)
            self.chunk_sizes = [len(c) for c in chunks]
            assert receiver.advance()
            assert receiver.current is None
            message = Message()
            message.decode(b"".join(chunks))
            self.message = message
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
            event.connection.close()

    handler = Raw()
    run_container(Container(handler))
    assert (handler.message.subject, handler.message.body) == ("big", "x" * 3000)
    assert all(size <= 1000 for size in handler.chunk_sizes) and len(handler.chunk_sizes) > 3
    [outcome] = peer.wait_outcomes(1)
    assert outcome.outcome == "accepted"


def test_message_send_and_recv(peer: ProtonBroker) -> None:
    class Raw:
        def on_reactor_init(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            connection.open()
            self.sender = event.container.create_sender(connection, "loop")
            self.receiver = event.container.create_receiver(connection, "loop")
            self.receiver.flow(1)
            self.sent = False

        def on_link_flow(self, event: Any) -> None:
            if event.link is self.sender and self.sender.credit and not self.sent:
                self.sent = True
                self.delivery = Message(body="via Message.send", id=7).send(self.sender)

        def on_delivery(self, event: Any) -> None:
            if event.link is self.receiver:
                message = Message()
                delivery = message.recv(self.receiver)
                self.received = (message.body, message.id, delivery is event.delivery)
                delivery.update(Delivery.ACCEPTED)
                delivery.settle()
            elif event.delivery is self.delivery and event.delivery.settled:
                self.remote_state = event.delivery.remote_state
                event.delivery.settle()
            if hasattr(self, "received") and hasattr(self, "remote_state"):
                event.connection.close()

    handler = Raw()
    run_container(Container(handler))
    assert handler.received == ("via Message.send", 7, True)
    assert handler.remote_state == Delivery.ACCEPTED
    assert [m.body for m in peer.messages] == ["via Message.send"]


# ---------------------------------------------------------------------------------------------------------------
# Endpoints, termini, transactions


def test_endpoint_state_bits(peer: ProtonBroker) -> None:
    local_active_remote_uninit = Endpoint.LOCAL_ACTIVE | Endpoint.REMOTE_UNINIT
    both_active = Endpoint.LOCAL_ACTIVE | Endpoint.REMOTE_ACTIVE
    both_closed = Endpoint.LOCAL_CLOSED | Endpoint.REMOTE_CLOSED
    states: dict[str, int] = {}

    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(peer.url, reconnect=False)
            self.sender = event.container.create_sender(self.connection, "states")
            states["connection_start"] = self.connection.state
            states["sender_start"] = self.sender.state

        def on_link_opened(self, event: Any) -> None:
            states["connection_opened"] = event.connection.state
            states["session_opened"] = event.session.state
            states["sender_opened"] = event.sender.state
            event.sender.close()
            states["sender_closing"] = event.sender.state

        def on_link_closed(self, event: Any) -> None:
            states["sender_closed"] = event.sender.state
            event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            states["connection_closed"] = event.connection.state

    run_container(Container(H()))
    assert states == {
        "connection_start": local_active_remote_uninit,
        "sender_start": local_active_remote_uninit,
        "connection_opened": both_active,
        "session_opened": both_active,
        "sender_opened": both_active,
        "sender_closing": Endpoint.LOCAL_CLOSED | Endpoint.REMOTE_ACTIVE,
        "sender_closed": both_closed,
        "connection_closed": both_closed,
    }
    peer.wait_detaches(1, link=peer.attaches[0].name)


def test_terminus_copy() -> None:
    source = Terminus(Terminus.SOURCE)
    source.address = "queue-a"
    source.durability = Terminus.DELIVERIES
    source.expiry_policy = Terminus.EXPIRE_NEVER
    source.timeout = 30
    source.dynamic = True
    source.distribution_mode = Terminus.DIST_MODE_COPY
    source.properties.put_dict({symbol("lifetime"): "delete-on-close"})
    source.capabilities.put_object([symbol("queue")])
    source.filter.put_dict({symbol("f"): Described(symbol("apache.org:selector-filter:string"), "a > 1")})

    copy = Terminus(Terminus.TARGET)
    copy.copy(source)
    assert (copy.type, copy.address, copy.durability, copy.expiry_policy, copy.timeout, copy.dynamic) == (
        Terminus.SOURCE,
        "queue-a",
        Terminus.DELIVERIES,
        Terminus.EXPIRE_NEVER,
        30,
        True,
    )
    assert copy.distribution_mode == Terminus.DIST_MODE_COPY
    for name in ("properties", "capabilities", "filter"):
        mine, theirs = getattr(copy, name), getattr(source, name)
        mine.rewind()
        theirs.rewind()
        mine.next()
        theirs.next()
        assert mine.get_object() == theirs.get_object()
    # The copy is independent of the original.
    assert copy.properties is not source.properties
    source.filter.clear()
    copy.filter.rewind()
    assert copy.filter.next() is not None


# ---------------------------------------------------------------------------------------------------------------
# Behaviour checked side by side with real proton (``proton``: the reference; ``ours``: amqp_async.proton)


@pytest.mark.parametrize("closing", ["connection", "receiver-and-connection"])
@pytest.mark.parametrize("impl", ["proton", "ours"])
def test_closing_in_on_message_still_accepts_the_message(peer: ProtonBroker, impl: str, closing: str) -> None:
    """simple_recv.py's pattern: close on the last expected message; the peer must see it accepted."""
    handler_class, container_class = _api(impl)
    for n in range(2):
        peer.put("close-in-cb", n)

    class H(handler_class):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.bodies: list[Any] = []

        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            event.container.create_receiver(connection, "close-in-cb")

        def on_message(self, event: Any) -> None:
            self.bodies.append(event.message.body)
            if len(self.bodies) == 2:
                if closing != "connection":
                    event.receiver.close()
                event.connection.close()

    handler = H()
    run_container(container_class(handler))
    assert handler.bodies == [0, 1]
    peer.wait_closes(1)
    assert [(o.tag, o.outcome, o.settled) for o in peer.outcomes] == [
        (b"1", "accepted", True),
        (b"2", "accepted", True),
    ]
    assert peer.queued("close-in-cb") == []


@pytest.mark.parametrize("impl", ["proton", "ours"])
def test_receiver_drained_is_the_credit_given_back(peer: ProtonBroker, impl: str) -> None:
    handler_class, container_class = _api(impl)
    for n in range(3):
        peer.put("drained", n)

    class H(handler_class):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__(prefetch=0)
            self.bodies: list[Any] = []
            self.drained: int | None = None

        def on_start(self, event: Any) -> None:
            connection = event.container.connect(peer.url, reconnect=False)
            event.container.create_receiver(connection, "drained")

        def on_link_opened(self, event: Any) -> None:
            event.receiver.drain(10)

        def on_message(self, event: Any) -> None:
            self.bodies.append(event.message.body)

        def on_link_flow(self, event: Any) -> None:
            receiver = event.receiver
            if receiver is not None and not receiver.draining() and len(self.bodies) == 3:
                self.drained = receiver.drained()
                event.connection.close()

    handler = H()
    run_container(container_class(handler))
    assert handler.bodies == [0, 1, 2]
    assert handler.drained == 7  # 10 granted, 3 used


def test_listen_on_port_zero_binds_a_free_port() -> None:
    class H(MessagingHandler):
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen("127.0.0.1:0")
            self.port = self.acceptor.port
            self.acceptor.close()

    handler = H()
    run_container(Container(handler), timeout=5)
    assert handler.port not in (0, 5672)


def test_outcome_after_the_sender_closed_is_still_reported() -> None:
    """A sender closed right after sending still hears the outcome (proton keeps the delivery until it settles),
    even from a broker that answers the detach before it settles what came with it."""

    class H(MessagingHandler):
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url
            self.outcomes: list[str] = []

        def on_start(self, event: Any) -> None:
            event.container.create_sender(self.url + "/after-close")

        def on_sendable(self, event: Any) -> None:
            event.sender.send(Message(body="only one"))
            event.sender.close()

        def on_accepted(self, event: Any) -> None:
            self.outcomes.append("accepted")
            event.connection.close()

    with BrokerThread() as broker:
        handler = H(broker.url)
        run_container(Container(handler), timeout=10)
        assert handler.outcomes == ["accepted"]
        assert len(broker.broker.queues["after-close"]) == 1


def test_changes_from_another_thread_are_refused_with_a_clear_error() -> None:
    """While the container runs, its objects belong to its thread: a send from elsewhere is refused, not raced."""
    errors: list[BaseException] = []

    class H(MessagingHandler):
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url

        def on_start(self, event: Any) -> None:
            event.container.create_sender(self.url + "/from-a-thread")

        def on_sendable(self, event: Any) -> None:
            sender = event.sender

            def elsewhere() -> None:
                try:
                    sender.send(Message(body="from a thread"))
                except Exception as exc:
                    errors.append(exc)

            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join()
            event.connection.close()

    with BrokerThread() as broker:
        run_container(Container(H(broker.url)), timeout=10)
        assert "from-a-thread" not in broker.broker.queues or len(broker.broker.queues["from-a-thread"]) == 0
    assert len(errors) == 1 and "call_threadsafe" in str(errors[0]), errors
