"""amqp_async.proton.utils (the blocking API) against our embedded broker and against real Qpid Proton.

Most tests are parametrized over the implementation: the same code runs on real python-qpid-proton's
``proton.utils`` and on ``amqp_async.proton.utils``, against the same peer, and must see the same results. The peers
are our embedded broker (`BrokerThread`) and `ProtonBroker` (a broker written on real proton's reactor, which records
every outcome and detach it sees). Request-response servers are written with real proton's MessagingHandler and with
ours. The helloworld_blocking and sync_client examples are covered by test_proton_api_examples.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proton_broker import ProtonBroker

from amqp_async.broker import BrokerThread

IMPLS = ["proton", "amqp_async.proton"]
THREAD_NAME = "amqp_async-blocking-container"


def api(impl: str) -> SimpleNamespace:
    """The modules of one implementation, by proton's names."""
    if impl == "proton":
        import proton
        import proton.handlers
        import proton.reactor
        import proton.utils
    else:
        import amqp_async.proton as proton  # type: ignore[no-redef]
        import amqp_async.proton.handlers
        import amqp_async.proton.reactor
        import amqp_async.proton.utils  # noqa: F401
    return SimpleNamespace(
        proton=proton,
        Message=proton.Message,
        Delivery=proton.Delivery,
        Timeout=proton.Timeout,
        ConnectionException=proton.ConnectionException,
        ProtonException=proton.ProtonException,
        utils=proton.utils,
        BlockingConnection=proton.utils.BlockingConnection,
        SendException=proton.utils.SendException,
        LinkDetached=proton.utils.LinkDetached,
        ConnectionClosed=proton.utils.ConnectionClosed,
        MessagingHandler=proton.handlers.MessagingHandler,
        Container=proton.reactor.Container,
        reactor=proton.reactor,
    )


def blocking_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(blocking_threads())
    yield
    leaked = [t for t in blocking_threads() if t not in before]
    assert not leaked, f"container threads left running: {leaked}"


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as b:
        yield b


@pytest.fixture(scope="module")
def pbroker() -> Iterator[ProtonBroker]:
    with ProtonBroker() as b:
        yield b


_unique = iter(range(1_000_000))


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_unique)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- messaging ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sender_impl", IMPLS)
@pytest.mark.parametrize("receiver_impl", IMPLS)
def test_send_receive_across_implementations(broker: BrokerThread, sender_impl: str, receiver_impl: str) -> None:
    s_api, r_api = api(sender_impl), api(receiver_impl)
    sending = s_api.BlockingConnection(broker.url, timeout=5)
    receiving = r_api.BlockingConnection(broker.url, timeout=5)
    try:
        sender = sending.create_sender("q")
        receiver = receiving.create_receiver("q")
        for i in range(3):
            delivery = sender.send(s_api.Message(body={"n": i}, properties={"k": f"v{i}"}, subject="s"))
            assert delivery.remote_state == s_api.Delivery.ACCEPTED
            assert delivery.settled
        for i in range(3):
            message = receiver.receive(timeout=5)
            assert (message.body, message.properties, message.subject) == ({"n": i}, {"k": f"v{i}"}, "s")
            receiver.accept()
        assert sending.url == receiving.url == f"amqp://{broker.url.split('://')[1]}"
    finally:
        sending.close()
        receiving.close()
    assert len(broker.broker.queue("q")) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_settlement_outcomes_seen_by_proton_peer(pbroker: ProtonBroker, impl: str) -> None:
    """accept / reject / release() / release(False) / settle() reach a real-proton broker as the same outcomes."""
    a = api(impl)
    address = unique("outcomes")
    for i in range(5):
        pbroker.put(address, a.Message(body=f"m{i}") if impl == "proton" else api("proton").Message(body=f"m{i}"))
    with_conn = a.BlockingConnection(pbroker.url, timeout=5)
    try:
        receiver = with_conn.create_receiver(address, credit=5)
        bodies = [receiver.receive(timeout=5).body for _ in range(5)]
        assert bodies == [f"m{i}" for i in range(5)]
        receiver.accept()
        receiver.reject()
        receiver.release()
        receiver.release(delivered=False)
        receiver.settle()
        name = receiver.link.name
    finally:
        with_conn.close()  # real proton writes the dispositions only when it next does I/O
    outcomes = sorted(pbroker.wait_outcomes(5, link=name), key=lambda o: o.tag)
    seen = [(o.outcome, o.settled, o.delivery_failed, o.message.body) for o in outcomes]
    assert seen == [
        ("accepted", True, False, "m0"),
        ("rejected", True, False, "m1"),
        ("modified", True, False, "m2"),
        ("released", True, False, "m3"),
        (None, True, False, "m4"),
    ]


def test_reject_and_release_seen_by_our_broker() -> None:
    a = api("amqp_async.proton")
    with BrokerThread(dead_letter_queue="dlq") as b:
        with a.BlockingConnection(b.url, timeout=5) as conn:
            sender = conn.create_sender("work")
            for body in ("bad", "again", "good"):
                sender.send(a.Message(body=body))
            receiver = conn.create_receiver("work")
            assert receiver.receive().body == "bad"
            receiver.reject()
            assert receiver.receive().body == "again"
            receiver.release(delivered=False)
            rest = []
            for _ in range(2):
                rest.append(receiver.receive().body)
                receiver.accept()
            assert sorted(rest) == ["again", "good"]  # released: redelivered (the broker picks the order)
            dlq = conn.create_receiver("dlq")
            assert dlq.receive(timeout=5).body == "bad"
            dlq.accept()
            with pytest.raises(IndexError):
                dlq.accept()  # nothing left to settle
        assert len(b.broker.queue("work")) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_send_outcomes_raise_send_exception(pbroker: ProtonBroker, impl: str) -> None:
    a = api(impl)
    rejected, released, modified = unique("rej"), unique("rel"), unique("mod")
    pbroker.outcome_for[rejected] = ("rejected", "amqp:precondition-failed", "nope")
    pbroker.outcome_for[released] = "released"
    pbroker.outcome_for[modified] = ("modified", True, False)
    conn = a.BlockingConnection(pbroker.url, timeout=5)
    try:
        with pytest.raises(a.SendException) as info:
            conn.create_sender(rejected).send(a.Message(body=1))
        assert info.value.state == a.Delivery.REJECTED
        if impl != "proton":  # ours also says why
            assert "amqp:precondition-failed: nope" in str(info.value)
            assert info.value.condition == "amqp:precondition-failed"
        with pytest.raises(a.SendException) as info:
            conn.create_sender(released).send(a.Message(body=2))
        assert info.value.state == a.Delivery.RELEASED
        sender = conn.create_sender(modified)
        assert sender.send(a.Message(body=3)).remote_state == a.Delivery.MODIFIED  # not an error by default
        with pytest.raises(a.SendException) as info:
            sender.send(a.Message(body=4), error_states=[a.Delivery.MODIFIED])
        assert info.value.state == a.Delivery.MODIFIED
        # the connection is still fine
        assert conn.create_sender(unique("ok")).send(a.Message(body=5)).remote_state == a.Delivery.ACCEPTED
    finally:
        conn.close()


@pytest.mark.parametrize("impl", IMPLS)
def test_send_returns_its_delivery_settled_on_both_ends(pbroker: ProtonBroker, impl: str) -> None:
    """proton's ``send()`` settles the delivery before it returns, whatever the outcome: the sender's ``unsettled``
    is back to 0 at once (ours used to settle it a moment later, on the container's thread) and the delivery reads
    settled both ways. At most once the link settles what it sends: nothing is waited for."""
    a = api(impl)
    rejected = unique("unsettled-rej")
    pbroker.outcome_for[rejected] = ("rejected", "amqp:precondition-failed", "nope")
    conn = a.BlockingConnection(pbroker.url, timeout=5)
    try:
        sender = conn.create_sender(unique("unsettled"))
        seen = []
        for n in range(5):
            delivery = sender.send(a.Message(body=n))
            seen.append((sender.unsettled, delivery.settled, delivery.remote_state))
        assert seen == [(0, True, a.Delivery.ACCEPTED)] * 5
        refused = conn.create_sender(rejected)
        with pytest.raises(a.SendException):
            refused.send(a.Message(body="no"))
        assert refused.unsettled == 0
        at_most_once = conn.create_sender(unique("unsettled-amo"), options=a.reactor.AtMostOnce())
        seen = []
        for n in range(3):
            delivery = at_most_once.send(a.Message(body=n))
            seen.append((at_most_once.unsettled, delivery.settled, delivery.remote_state))
        assert seen == [(0, False, 0)] * 3
    finally:
        conn.close()


@pytest.mark.parametrize("impl", IMPLS)
def test_receive_timeout_then_message(broker: BrokerThread, impl: str) -> None:
    a = api(impl)
    with_conn = a.BlockingConnection(broker.url, timeout=5)
    try:
        receiver = with_conn.create_receiver("late")
        start = time.monotonic()
        with pytest.raises(a.Timeout) as info:
            receiver.receive(timeout=0.3)
        assert 0.25 < time.monotonic() - start < 2.0
        assert "Receiving on receiver" in str(info.value)
        with_conn.create_sender("late").send(a.Message(body="now"))
        assert receiver.receive(timeout=5).body == "now"
        receiver.accept()
    finally:
        with_conn.close()


def test_prefetch_is_bounded(broker: BrokerThread) -> None:
    """credit=N: the credit plus the messages waiting in the receiver never exceed N."""
    a = api("amqp_async.proton")
    with a.BlockingConnection(broker.url, timeout=5) as conn:
        sender = conn.create_sender("many")
        for i in range(30):
            sender.send(a.Message(body=i))
        receiver = conn.create_receiver("many", credit=4)
        conn.wait(lambda: receiver.fetcher.has_message == 4)
        time.sleep(0.1)
        assert receiver.fetcher.has_message == 4
        assert len(broker.broker.queue("many")) == 26
        got = []
        for _ in range(30):
            got.append(receiver.receive(timeout=5).body)
            receiver.accept()
            assert receiver.fetcher.has_message + receiver.link.credit <= 4
        assert got == list(range(30))


# --- request-response -------------------------------------------------------------------------------------------


def run_server(impl: str, url: str, address: str, count: int) -> threading.Thread:
    """A request-response server (proton's server.py) on ``impl``'s MessagingHandler, in a thread; it answers
    ``count`` requests with the body upper-cased, then closes its connection."""
    a = api(impl)

    class Server(a.MessagingHandler):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.settled = 0

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(url, reconnect=False)
            event.container.create_receiver(self.conn, address)
            self.sender = event.container.create_sender(self.conn, None)

        def on_message(self, event: Any) -> None:
            request = event.message
            self.sender.send(
                a.Message(address=request.reply_to, body=request.body.upper(), correlation_id=request.correlation_id)
            )

        def on_settled(self, event: Any) -> None:
            if event.link.is_sender:
                self.settled += 1
                if self.settled == count:
                    event.connection.close()

    thread = threading.Thread(target=a.Container(Server()).run, name=f"server-{impl}", daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("peer", ["broker", "proton-broker"])
@pytest.mark.parametrize("server_impl", IMPLS)
@pytest.mark.parametrize("client_impl", IMPLS)
def test_sync_request_response(
    broker: BrokerThread, pbroker: ProtonBroker, peer: str, server_impl: str, client_impl: str
) -> None:
    url = broker.url if peer == "broker" else pbroker.url
    address = unique("requests")
    server = run_server(server_impl, url, address, 3)
    a = api(client_impl)
    conn = a.BlockingConnection(url, timeout=5)
    try:
        client = a.utils.SyncRequestResponse(conn, address)
        assert client.reply_to
        for word in ("one", "two", "three"):
            response = client.call(a.Message(body=word))
            assert response.body == word.upper()
            assert response.correlation_id is not None
    finally:
        conn.close()
    server.join(5)
    assert not server.is_alive()


def test_sync_request_response_needs_an_address(broker: BrokerThread) -> None:
    a = api("amqp_async.proton")
    with a.BlockingConnection(broker.url, timeout=5) as conn:
        client = a.utils.SyncRequestResponse(conn)
        with pytest.raises(ValueError, match="no address"):
            client.call(a.Message(body="x"))
        with pytest.raises(a.Timeout):
            conn.timeout = 0.3
            client.call(a.Message(address="nobody-listens", body="x"))


# --- errors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_link_refused_by_proton_peer(pbroker: ProtonBroker, impl: str) -> None:
    a = api(impl)
    refused = unique("refused")
    pbroker.detach_on_attach[refused] = ("amqp:not-found", "no such node")
    conn = a.BlockingConnection(pbroker.url, timeout=5)
    try:
        with pytest.raises(a.LinkDetached) as info:
            conn.create_sender(refused)
        assert info.value.condition == "amqp:not-found"
        assert "no such node" in str(info.value)
        assert info.value.link.is_sender
        with pytest.raises(a.LinkDetached) as info:
            conn.create_receiver(refused)
        assert info.value.condition == "amqp:not-found"
        # the connection goes on
        assert conn.create_sender(unique("fine")).send(a.Message(body=1)).remote_state == a.Delivery.ACCEPTED
    finally:
        conn.close()


def run_detaching_peer(url: str) -> threading.Thread:
    """A real-proton listener that takes one connection and, 0.5 s after each link opened, detaches it with
    ``amqp:resource-deleted``; it ends when that connection does. Returns once it listens."""
    a = api("proton")
    listening = threading.Event()

    class DetachLater:
        def __init__(self, link: Any) -> None:
            self.link = link

        def on_timer_task(self, event: Any) -> None:
            self.link.condition = a.proton.Condition("amqp:resource-deleted", "node deleted")
            self.link.close()

    class Peer(a.MessagingHandler):  # type: ignore[misc,name-defined]
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(url)
            listening.set()

        def on_connection_opening(self, event: Any) -> None:
            self.acceptor.close()

        def on_link_opening(self, event: Any) -> None:
            event.link.source.copy(event.link.remote_source)
            event.link.target.copy(event.link.remote_target)

        def on_link_opened(self, event: Any) -> None:
            event.container.schedule(0.5, DetachLater(event.link))

    container = a.Container(Peer())
    thread = threading.Thread(target=container.run, name="detaching-peer", daemon=True)
    thread.start()
    assert listening.wait(5)
    return thread


@pytest.mark.parametrize("impl", IMPLS)
def test_link_detached_later_by_proton_peer(impl: str) -> None:
    a = api(impl)
    url = f"amqp://127.0.0.1:{free_port()}"
    peer = run_detaching_peer(url)
    conn = a.BlockingConnection(url, timeout=5)
    try:
        receiver = conn.create_receiver("doomed")
        start = time.monotonic()
        with pytest.raises(a.LinkDetached) as info:
            receiver.receive(timeout=5)
        assert time.monotonic() - start < 3
        assert info.value.condition == "amqp:resource-deleted"
        assert "node deleted" in str(info.value)
    finally:
        conn.close()
    peer.join(5)
    assert not peer.is_alive()


@pytest.mark.parametrize("impl", IMPLS)
def test_link_used_after_the_programs_own_close(pbroker: ProtonBroker, impl: str) -> None:
    """A sender or receiver the program closed itself, used again: proton waits out the timeout and raises
    ``Timeout``; ours raises at once a ``LinkDetached`` that says the program closed it (it said "closed by peer",
    which was false) and is also ``amqp_async.ClosedByApplication``."""
    import amqp_async

    a = api(impl)
    conn = a.BlockingConnection(pbroker.url, timeout=10)  # proton's is not a context manager
    try:
        sender = conn.create_sender(unique("closed-sender"))
        receiver = conn.create_receiver(unique("closed-receiver"))
        sender.close()
        receiver.close()
        calls = [lambda: sender.send(a.Message(body="late"), timeout=0.5), lambda: receiver.receive(timeout=0.5)]
        for call in calls:
            if impl == "proton":
                with pytest.raises(a.Timeout):
                    call()
                continue
            with pytest.raises(a.LinkDetached) as raised:
                call()
            error = raised.value
            assert "closed by the program" in str(error) and "peer" not in str(error)
            assert isinstance(error, amqp_async.ClosedByApplication)
            assert error.condition == amqp_async.errors.CLOSED_BY_APPLICATION
    finally:
        conn.close()


def _close_on_the_container_thread(a: SimpleNamespace, conn: Any, link: Any, how: str) -> None:
    """``link.close()`` as a program does it while a blocking connection's container runs: proton's runs on the
    caller's thread (a direct call); ours on a thread of its own, reached by ``call_threadsafe`` or an event
    injected with an ``EventInjector`` whose handler closes the link."""
    if how == "direct":
        link.close()
        return
    closed = threading.Event()
    if how == "call_threadsafe":
        conn.container.call_threadsafe(lambda: (link.close(), closed.set()))
    else:

        class Closer:
            def on_close_link(self, event: Any) -> None:
                link.close()
                closed.set()

        injector = a.reactor.EventInjector()
        conn.container.call_threadsafe(lambda: conn.container.handler.add(Closer()))
        conn.container.selectable(injector)
        injector.trigger(a.reactor.ApplicationEvent("close_link"))
    assert closed.wait(10)


@pytest.mark.parametrize(
    ("impl", "how"),
    [("proton", "direct"), ("amqp_async.proton", "call_threadsafe"), ("amqp_async.proton", "injected")],
)
def test_link_closed_by_the_program_on_the_container_thread(pbroker: ProtonBroker, impl: str, how: str) -> None:
    """A link the program closed with ``link.close()`` on the container's thread, then used through its blocking
    sender or receiver: proton (whose ``link.close()`` is a direct call) waits out the timeout and raises
    ``Timeout``; ours says at once that the program closed it, as after ``BlockingSender.close()`` (it said
    "closed by peer", which was false)."""
    import amqp_async

    a = api(impl)
    conn = a.BlockingConnection(pbroker.url, timeout=10)
    try:
        sender = conn.create_sender(unique("closed-sender"))
        receiver = conn.create_receiver(unique("closed-receiver"))
        for link in (sender.link, receiver.link):
            _close_on_the_container_thread(a, conn, link, how)
        # the peer's detach, answering ours, has come: it is what ours took for a close by the peer
        conn.wait(lambda: all(link.state & a.proton.Endpoint.REMOTE_CLOSED for link in (sender.link, receiver.link)))
        calls = [lambda: sender.send(a.Message(body="late"), timeout=0.5), lambda: receiver.receive(timeout=0.5)]
        for call in calls:
            if impl == "proton":
                with pytest.raises(a.Timeout):
                    call()
                continue
            with pytest.raises(a.LinkDetached) as raised:
                call()
            assert "closed by the program" in str(raised.value) and "peer" not in str(raised.value)
            assert isinstance(raised.value, amqp_async.ClosedByApplication)
    finally:
        conn.close()


def test_link_the_engine_closed_for_the_peer_is_not_the_programs_close() -> None:
    """A link our engine closes because the peer broke a link rule (a message above the receiver's
    max-message-size, §2.8.17 ``amqp:link:message-size-exceeded``) is closed on our side first, yet not by the
    program: the receiver reports a detach, not ``ClosedByApplication``. (proton 0.40 does not enforce the limit
    on what it receives: it hands over the message.)"""
    import amqp_async

    a = api("amqp_async.proton")
    peer_api = api("proton")
    url = f"amqp://127.0.0.1:{free_port()}"
    listening = threading.Event()

    class Peer(peer_api.MessagingHandler):  # type: ignore[misc,name-defined]
        """Sends one 100 kB message to each receiver, whatever its max-message-size; keeps the connection open when
        the client detaches with an error (proton's default closes it)."""

        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(url)
            listening.set()

        def on_connection_opening(self, event: Any) -> None:
            self.acceptor.close()

        def on_link_opening(self, event: Any) -> None:
            event.link.source.copy(event.link.remote_source)
            event.link.target.copy(event.link.remote_target)

        def on_sendable(self, event: Any) -> None:
            if not getattr(event.link, "sent_one", False):
                event.link.sent_one = True
                event.sender.send(peer_api.Message(body="x" * 100_000))

        def on_link_error(self, event: Any) -> None:
            pass

    class Small(a.reactor.ReceiverOption):  # type: ignore[misc,name-defined]
        def apply(self, link: Any) -> None:
            link.max_message_size = 1000

    container = peer_api.Container(Peer())
    thread = threading.Thread(target=container.run, name="oversize-peer", daemon=True)
    thread.start()
    assert listening.wait(5)
    conn = a.BlockingConnection(url, timeout=10)
    try:
        receiver = conn.create_receiver("big", options=Small())
        with pytest.raises(a.LinkDetached) as raised:
            receiver.receive(timeout=5)
        assert not isinstance(raised.value, amqp_async.ClosedByApplication)
    finally:
        conn.close()
    thread.join(5)


def test_link_refused_by_our_broker(broker: BrokerThread) -> None:
    a = api("amqp_async.proton")
    with a.BlockingConnection(broker.url, timeout=5) as conn:
        with pytest.raises(a.LinkDetached) as info:
            conn.create_receiver(None)  # neither an address nor dynamic
        assert info.value.condition == "amqp:not-found"
        assert isinstance(info.value, a.proton.LinkException)
        import amqp_async

        assert isinstance(info.value, amqp_async.AMQPError)


@pytest.mark.parametrize("impl", IMPLS)
def test_connection_closed_by_peer(pbroker: ProtonBroker, impl: str) -> None:
    a = api(impl)
    fatal = unique("fatal")
    pbroker.close_connection_on[fatal] = ("amqp:internal-error", "going away")
    conn = a.BlockingConnection(pbroker.url, timeout=5)
    try:
        with pytest.raises(a.ConnectionClosed) as info:
            receiver = conn.create_receiver(fatal)
            receiver.receive(timeout=5)
        assert info.value.condition == "amqp:internal-error"
        assert "going away" in str(info.value)
        assert isinstance(info.value, a.ConnectionException)
    finally:
        start = time.monotonic()
        conn.close()
        assert time.monotonic() - start < 3
    if impl != "proton":
        with pytest.raises(a.ConnectionException):
            conn.create_sender("after-close")


def test_connection_closed_by_peer_stays_reported() -> None:
    a = api("amqp_async.proton")
    b = BrokerThread().start()
    try:
        conn = a.BlockingConnection(b.url, timeout=5)
        receiver = conn.create_receiver("q")
        sender = conn.create_sender("q")
    finally:
        b.stop()
    try:
        for _ in range(2):
            with pytest.raises(a.ConnectionException):
                receiver.receive(timeout=5)
        with pytest.raises(a.ConnectionException):
            sender.send(a.Message(body=1))
    finally:
        conn.close()


@pytest.mark.parametrize("impl", IMPLS)
def test_authentication(impl: str) -> None:
    a = api(impl)
    with BrokerThread(users={"alice": "secret"}) as b:
        host_port = b.url.split("://")[1]
        start = time.monotonic()
        with pytest.raises(a.ConnectionException) as info:
            a.BlockingConnection(f"amqp://alice:wrong@{host_port}", timeout=5, allowed_mechs="PLAIN")
        assert time.monotonic() - start < 3
        assert "unauthorized" in str(info.value).lower() or "auth" in str(info.value).lower()
        good = a.BlockingConnection(f"amqp://alice:secret@{host_port}", timeout=5, allowed_mechs="PLAIN")
        try:
            good.create_sender("q").send(a.Message(body="authenticated"))
        finally:
            good.close()
        if impl != "proton":
            kwargs_auth = a.BlockingConnection(b.url, timeout=5, user="alice", password="secret")
            kwargs_auth.close()


@pytest.mark.parametrize("impl", IMPLS)
def test_connection_refused(impl: str) -> None:
    a = api(impl)
    url = f"amqp://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(a.ConnectionException) as info:
        a.BlockingConnection(url, timeout=10)
    assert time.monotonic() - start < 3
    if impl != "proton":
        assert url in str(info.value)
        assert "refused" in str(info.value).lower()


def test_unknown_option_leaks_nothing() -> None:
    a = api("amqp_async.proton")
    with pytest.raises(TypeError):
        a.BlockingConnection("amqp://127.0.0.1:1", no_such_option=1)


# --- life -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_close_is_idempotent(broker: BrokerThread, impl: str) -> None:
    a = api(impl)
    conn = a.BlockingConnection(broker.url, timeout=5)
    sender = conn.create_sender("c")
    receiver = conn.create_receiver("c")
    sender.close()
    receiver.close()
    sender.close()
    conn.close()
    conn.close()


def test_close_ends_thread_and_socket(broker: BrokerThread) -> None:
    a = api("amqp_async.proton")
    before = len(broker.broker.connections)
    with a.BlockingConnection(broker.url, timeout=5) as conn:
        assert len(blocking_threads()) >= 1
        conn.create_sender("x").send(a.Message(body=1))
        assert len(broker.broker.connections) == before + 1
    assert not [t for t in blocking_threads() if t.is_alive()]
    deadline = time.monotonic() + 5
    while len(broker.broker.connections) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(broker.broker.connections) == before
    with pytest.raises(a.ConnectionException):
        conn.create_receiver("x")
    with pytest.raises(a.ConnectionException):
        conn.wait(lambda: False, timeout=0.1)


def test_connections_share_a_container(broker: BrokerThread) -> None:
    a = api("amqp_async.proton")
    container = a.Container()
    first = a.BlockingConnection(broker.url, timeout=5, container=container)
    second = a.BlockingConnection(broker.url, timeout=5, container=container)
    try:
        assert len(blocking_threads()) == 1
        first.create_sender("shared").send(a.Message(body="via first"))
        receiver = second.create_receiver("shared")
        assert receiver.receive(timeout=5).body == "via first"
        receiver.accept()
        first.close()
        second.create_sender("shared").send(a.Message(body="via second"))
        assert receiver.receive(timeout=5).body == "via second"
    finally:
        first.close()
        second.close()


# --- handlers on the container's thread ---------------------------------------------------------------------------


def test_receiver_with_handler_runs_on_container_thread(broker: BrokerThread) -> None:
    a = api("amqp_async.proton")
    seen: list[tuple[Any, str]] = []
    errors: list[BaseException] = []

    class Handler(a.MessagingHandler):  # type: ignore[misc,name-defined]
        def on_message(self, event: Any) -> None:
            seen.append((event.message.body, threading.current_thread().name))
            try:
                conn.create_sender("from-handler")
            except a.ProtonException as exc:
                errors.append(exc)

    with a.BlockingConnection(broker.url, timeout=5) as conn:
        receiver = conn.create_receiver("h", handler=Handler())
        with pytest.raises(Exception, match="handler was not provided"):
            receiver.receive()
        conn.create_sender("h").send(a.Message(body="hi"))
        conn.wait(lambda: len(seen) == 1, msg="handler")
        assert seen == [("hi", THREAD_NAME)]
        assert errors and "container's thread" in str(errors[0])
        assert receiver.credit >= 0  # attributes read through the blocking receiver
        receiver.flow(1)  # methods run on the container's thread
        with pytest.raises(a.Timeout, match="never"):
            conn.wait(lambda: False, timeout=0.2, msg="never")


def test_exception_in_handler_is_raised_by_the_waiting_call(broker: BrokerThread) -> None:
    a = api("amqp_async.proton")

    class Boom(a.MessagingHandler):  # type: ignore[misc,name-defined]
        def on_message(self, event: Any) -> None:
            raise RuntimeError("boom in handler")

    conn = a.BlockingConnection(broker.url, timeout=5)
    try:
        conn.create_receiver("boom", handler=Boom())
        conn.create_sender("boom").send(a.Message(body=1))
        with pytest.raises(RuntimeError, match="boom in handler"):
            conn.wait(lambda: False, timeout=5)
        with pytest.raises(a.ConnectionException):
            conn.create_sender("after")
    finally:
        conn.close()
