"""Proof that the threaded proton broker (`tests/proton_broker.py`) works, with proton's own BlockingConnection as the
client in the test thread.

These tests exercise proton against proton only; they pin down the broker's behaviour and what it records before
the amqp_async client tests rely on it. Every wait has a timeout: a broken broker fails a test, it never hangs it.

BlockingConnection quirks met on the way (python-qpid-proton 0.40):

* It does I/O only inside its own calls, and `BlockingConnection.wait` re-checks its condition only when input
  arrived or after its whole timeout: waiting for a broker-side effect that sends nothing back (an outcome, a
  settle) needs `pump` below.
* A receiver created with ``credit=N`` keeps N credits topped up (its Fetcher has a FlowController), so the next
  messages are already on their way while the test looks at the first; ``credit=0`` gives one message per
  ``receive()``. `BlockingReceiver.accept` etc. only queue the disposition.
* `BlockingSender.send` waits until the *broker settles*, so with rcv-settle-mode second use the raw link.
* `BlockingConnection.close` waits the full timeout if the peer vanished after the close began (its "closing" flag
  hides the disconnect): pump until ``conn.disconnected`` first.
* The transaction controller link has its own handler, so a refused coordinator raises no `LinkDetached`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

proton = pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Condition, Delivery, Endpoint, Link, Message, Terminus, symbol  # noqa: E402
from proton.reactor import AtMostOnce, Copy, DurableSubscription, DynamicNodeProperties, LinkOption, Selector  # noqa: E402
from proton.utils import BlockingConnection, ConnectionClosed, LinkDetached, SendException  # noqa: E402

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

TIMEOUT = 5.0


class Configure(LinkOption):
    """A link option that runs any function on the link before it is attached."""

    def __init__(self, function: Callable[[Link], None]) -> None:
        self.function = function

    def apply(self, link: Link) -> None:
        self.function(link)


@pytest.fixture
def broker() -> Iterator[ProtonBroker]:
    with ProtonBroker(timeout=TIMEOUT) as running:
        yield running


@pytest.fixture
def client(broker: ProtonBroker) -> Iterator[BlockingConnection]:
    conn = BlockingConnection(broker.url, timeout=TIMEOUT)
    try:
        yield conn
    finally:
        conn.close()


def pump(conn: BlockingConnection, predicate: Callable[[], Any], timeout: float = TIMEOUT) -> None:
    """Run the client's event loop until ``predicate()`` holds (the client only does I/O inside its calls).

    Not `BlockingConnection.wait`: that re-checks its condition only after some input arrived or its whole timeout
    passed in ``select``, and many broker-side effects (an outcome recorded, a settle seen) send nothing back.
    """
    deadline = time.monotonic() + timeout
    saved = conn.container.timeout
    conn.container.timeout = 0.02
    try:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("client pump timed out")
            conn.container.process()
    finally:
        conn.container.timeout = saved


# ---------------------------------------------------------------------------------------------------------------
# Lifecycle


def test_starts_on_a_free_port_and_stops_quickly() -> None:
    broker = ProtonBroker()
    broker.start()
    try:
        assert broker.port > 0
        assert broker.url == f"amqp://127.0.0.1:{broker.port}"
        other = ProtonBroker().start()
        assert other.port != broker.port
        other.stop()
    finally:
        started = time.monotonic()
        broker.stop()
        assert time.monotonic() - started < 1.0
    broker.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not running"):
        broker.put("q", Message(body=1))


def test_stop_closes_open_connections_with_connection_forced() -> None:
    broker = ProtonBroker(timeout=TIMEOUT).start()
    conn = BlockingConnection(broker.url, timeout=TIMEOUT)
    try:
        broker.stop()
        with pytest.raises(ConnectionClosed) as info:
            conn.create_sender("after-stop")
        assert info.value.condition == "amqp:connection:forced"
    finally:
        conn.close()


def test_a_crash_in_the_broker_thread_is_reported() -> None:
    broker = ProtonBroker(timeout=TIMEOUT).start()
    broker.outcome_for["q-bad"] = "no-such-outcome"
    conn = BlockingConnection(broker.url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("q-bad")
        sender.link.send(Message(body=1))
        with pytest.raises(RuntimeError, match="no-such-outcome"):
            # wait_for notices the dead thread at once; the client must be pumped for its transfer to go out
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                conn.container.process()
                try:
                    broker.wait_for(lambda: False, timeout=0.05)
                except TimeoutError:
                    pass
    finally:
        with pytest.raises(RuntimeError, match="proton broker thread failed"):
            broker.stop()
        # the dead broker's sockets were closed, so the client sees its connection drop rather than hanging
        pump(conn, lambda: conn.disconnected)
        conn.close()


# ---------------------------------------------------------------------------------------------------------------
# Queues


def test_send_and_receive_through_a_queue(broker: ProtonBroker, client: BlockingConnection) -> None:
    sender = client.create_sender("q1", name="s1")
    sender.send(Message(body="one", properties={"k": 1}, subject="first"))
    sender.send(Message(body=b"two"))
    assert [m.body for m in broker.queued("q1")] == ["one", b"two"]

    receiver = client.create_receiver("q1", name="r1", credit=10)
    first = receiver.receive(timeout=TIMEOUT)
    second = receiver.receive(timeout=TIMEOUT)
    assert (first.body, first.properties, first.subject, second.body) == ("one", {"k": 1}, "first", b"two")
    receiver.accept()
    receiver.accept()
    pump(client, lambda: len(broker.outcomes) == 2)

    one, two = broker.messages
    assert (one.link, one.address, one.body, one.properties, one.tag, one.settled, one.outcome) == (
        "s1",
        "q1",
        "one",
        {"k": 1},
        b"1",
        False,
        "accepted",
    )
    assert one.message.subject == "first"
    assert (two.body, two.tag) == (b"two", b"2")
    assert [(o.link, o.address, o.outcome, o.settled, o.message.body) for o in broker.outcomes] == [
        ("r1", "q1", "accepted", True, "one"),
        ("r1", "q1", "accepted", True, b"two"),
    ]
    assert broker.queued("q1") == []
    assert "q1" in broker.queue_names()


def test_put_preloads_a_queue_from_the_test_thread(broker: ProtonBroker, client: BlockingConnection) -> None:
    original = Message(body="preloaded", properties={"a": "b"})
    broker.put("q-pre", original)
    broker.put("q-pre", 42)  # anything but a Message becomes the body
    receiver = client.create_receiver("q-pre", credit=2)
    assert receiver.receive(timeout=TIMEOUT).properties == {"a": "b"}
    assert receiver.receive(timeout=TIMEOUT).body == 42
    receiver.accept()
    receiver.accept()


def test_two_consumers_share_a_queue(broker: ProtonBroker, client: BlockingConnection) -> None:
    # credit=0: no prefetch (BlockingConnection's receivers otherwise keep their credit topped up)
    r1 = client.create_receiver("q-shared", name="c1", credit=0)
    r2 = client.create_receiver("q-shared", name="c2", credit=0)
    r1.link.flow(2)
    r2.link.flow(2)
    pump(client, lambda: len([f for f in broker.flows if f.credit == 2]) == 2)
    for n in range(4):
        broker.put("q-shared", n)
    bodies = {r1.receive(timeout=TIMEOUT).body, r1.receive(timeout=TIMEOUT).body}
    bodies |= {r2.receive(timeout=TIMEOUT).body, r2.receive(timeout=TIMEOUT).body}
    assert bodies == {0, 1, 2, 3}


def test_dynamic_receiver_gets_a_temporary_address(broker: ProtonBroker, client: BlockingConnection) -> None:
    receiver = client.create_receiver(
        None, dynamic=True, name="dyn", options=DynamicNodeProperties({"lifetime-policy": "delete-on-close"})
    )
    address = receiver.link.remote_source.address
    assert address and address.startswith("dynamic-")
    [attach] = broker.attaches
    assert (attach.name, attach.role, attach.source.dynamic, attach.source.address) == ("dyn", "receiver", True, None)
    assert attach.source.dynamic_node_properties == {symbol("lifetime-policy"): "delete-on-close"}

    broker.put(address, Message(body="to the temporary queue"))
    assert receiver.receive(timeout=TIMEOUT).body == "to the temporary queue"
    receiver.accept()

    other = client.create_receiver(None, dynamic=True)
    assert other.link.remote_source.address not in (None, address)


def test_anonymous_relay_routes_by_message_address(broker: ProtonBroker, client: BlockingConnection) -> None:
    assert symbol("ANONYMOUS-RELAY") in client.conn.remote_offered_capabilities
    sender = client.create_sender(None, name="anon")
    sender.send(Message(address="q-a", body="to a"))
    sender.send(Message(address="q-b", body="to b"))
    assert [(m.link, m.address, m.body) for m in broker.messages] == [("anon", "q-a", "to a"), ("anon", "q-b", "to b")]
    assert broker.attaches[0].target.address is None
    assert client.create_receiver("q-b").receive(timeout=TIMEOUT).body == "to b"

    # a message with no address at all cannot be routed
    delivery = sender.send(Message(body="nowhere"), error_states=[])
    assert delivery.remote_state == Delivery.REJECTED
    assert delivery.remote.condition.name == "amqp:not-found"


def test_browse_with_copy_leaves_the_message(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.put("q-browse", "kept")
    browser = client.create_receiver("q-browse", name="browser", options=Copy())
    assert browser.receive(timeout=TIMEOUT).body == "kept"
    browser.accept()
    pump(client, lambda: broker.outcomes)
    assert broker.attaches[0].source.distribution_mode == "copy"
    assert [m.body for m in broker.queued("q-browse")] == ["kept"]
    # a browser never sees the same message twice ...
    with pytest.raises(proton.Timeout):
        browser.receive(timeout=0.3)
    # ... and a consuming receiver still gets it
    consumer = client.create_receiver("q-browse", name="consumer")
    assert consumer.receive(timeout=TIMEOUT).body == "kept"
    consumer.accept()
    pump(client, lambda: len(broker.outcomes) == 2)
    assert broker.queued("q-browse") == []


# ---------------------------------------------------------------------------------------------------------------
# Outcomes the broker gives


def test_default_outcome_is_accepted(broker: ProtonBroker, client: BlockingConnection) -> None:
    delivery = client.create_sender("q-ok").send(Message(body=1))
    assert delivery.remote_state == Delivery.ACCEPTED
    assert broker.messages[0].outcome == "accepted"


def test_configured_rejected(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.outcome_for["q-reject"] = ("rejected", "amqp:precondition-failed", "nope")
    sender = client.create_sender("q-reject")
    with pytest.raises(SendException) as info:
        sender.send(Message(body="bad"))
    assert info.value.state == Delivery.REJECTED
    delivery = sender.send(Message(body="bad again"), error_states=[])
    condition = delivery.remote.condition
    assert (condition.name, condition.description) == ("amqp:precondition-failed", "nope")
    assert [m.outcome for m in broker.messages] == ["rejected", "rejected"]
    assert broker.queued("q-reject") == []


def test_configured_released(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.outcome_for["q-release"] = "released"
    with pytest.raises(SendException) as info:
        client.create_sender("q-release").send(Message(body="x"))
    assert info.value.state == Delivery.RELEASED
    assert broker.queued("q-release") == []


def test_configured_modified(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.outcome_for["q-modify"] = ("modified", True, True, {"x-reason": "busy"})
    sender = client.create_sender("q-modify")
    with pytest.raises(SendException) as info:
        sender.send(Message(body="x"), error_states=[Delivery.MODIFIED])
    assert info.value.state == Delivery.MODIFIED
    delivery = sender.send(Message(body="y"), error_states=[])
    assert (delivery.remote.failed, delivery.remote.undeliverable) == (True, True)
    assert delivery.remote.annotations == {symbol("x-reason"): "busy"}
    broker.outcome_for["q-modify"] = ("modified", False, False)
    delivery = sender.send(Message(body="z"), error_states=[])
    assert (delivery.remote_state, delivery.remote.failed, delivery.remote.undeliverable) == (
        Delivery.MODIFIED,
        False,
        False,
    )


def test_presettled_message_is_recorded_settled(broker: ProtonBroker, client: BlockingConnection) -> None:
    sender = client.create_sender("q-presettled", options=AtMostOnce())
    sender.send(Message(body="fire and forget"))
    pump(client, lambda: broker.messages)
    assert broker.attaches[0].snd_settle_mode == "settled"
    [received] = broker.messages
    assert (received.settled, received.outcome) == (True, "accepted")
    assert [m.body for m in broker.queued("q-presettled")] == ["fire and forget"]


def test_rcv_settle_mode_second_waits_for_the_client(broker: ProtonBroker, client: BlockingConnection) -> None:
    def second(link: Link) -> None:
        link.rcv_settle_mode = Link.RCV_SECOND

    sender = client.create_sender("q-second", options=Configure(second))
    assert sender.link.remote_rcv_settle_mode == Link.RCV_SECOND
    delivery = sender.link.send(Message(body="twice"))
    pump(client, lambda: delivery.remote_state == Delivery.ACCEPTED)
    assert not delivery.settled  # the broker waits for the client to settle first
    [received] = broker.messages
    assert not received.client_settled
    delivery.settle()
    pump(client, lambda: broker.messages[0].client_settled)
    assert broker.attaches[0].rcv_settle_mode == "second"


def test_credit_for_and_grant_credit(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.credit_for["q-credit"] = 0
    sender = client.create_sender("q-credit", name="starved")
    assert sender.link.credit == 0
    delivery = sender.link.send(Message(body="waiting"))
    with pytest.raises(TimeoutError):
        pump(client, lambda: broker.messages, timeout=0.3)
    broker.grant_credit("starved", 3)
    pump(client, lambda: delivery.remote_state == Delivery.ACCEPTED)
    pump(client, lambda: sender.link.credit == 3)


def test_delay_credit(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.delay_credit["q-slow"] = 0.3
    started = time.monotonic()
    sender = client.create_sender("q-slow")
    sender.send(Message(body="late"))
    assert time.monotonic() - started >= 0.25


# ---------------------------------------------------------------------------------------------------------------
# Outcomes the client gives


def test_client_outcomes_are_recorded_and_requeue(broker: ProtonBroker, client: BlockingConnection) -> None:
    for body in ("accept me", "reject me", "release me", "modify me", "undeliverable"):
        broker.put("q-out", body)
    # credit=0: one message at a time (receive() grants 1), so what comes next is decided by the last outcome
    receiver = client.create_receiver("q-out", name="r-out", credit=0)

    def receive() -> Any:
        return receiver.receive(timeout=TIMEOUT).body

    def settled(count: int) -> None:
        pump(client, lambda: len(broker.outcomes) == count)

    assert receive() == "accept me"
    receiver.accept()
    settled(1)

    assert receive() == "reject me"
    receiver.fetcher.unsettled[0].local.condition = Condition("amqp:decode-error", "garbled", {"why": "test"})
    receiver.reject()
    settled(2)

    assert receive() == "release me"
    receiver.release(delivered=False)  # RELEASED: back to the head of the queue
    settled(3)
    assert receive() == "release me"
    receiver.accept()
    settled(4)

    assert receive() == "modify me"
    local = receiver.fetcher.unsettled[0].local
    local.failed = True
    local.annotations = {symbol("x-opt-note"): "retry"}
    receiver.release(delivered=True)  # MODIFIED, delivery-failed: requeued with delivery-count + 1
    settled(5)
    again = receiver.receive(timeout=TIMEOUT)
    assert (again.body, again.delivery_count) == ("modify me", 1)
    receiver.accept()
    settled(6)

    assert receive() == "undeliverable"
    receiver.fetcher.unsettled[0].local.undeliverable = True
    receiver.release(delivered=True)  # MODIFIED, undeliverable-here: dropped
    settled(7)

    got = [(o.message.body, o.outcome, o.settled) for o in broker.outcomes]
    assert got == [
        ("accept me", "accepted", True),
        ("reject me", "rejected", True),
        ("release me", "released", True),
        ("release me", "accepted", True),
        ("modify me", "modified", True),
        ("modify me", "accepted", True),
        ("undeliverable", "modified", True),
    ]
    rejected, modified, undeliverable = broker.outcomes[1], broker.outcomes[4], broker.outcomes[6]
    assert rejected.condition == ("amqp:decode-error", "garbled", {symbol("why"): "test"})
    assert (modified.delivery_failed, modified.undeliverable_here) == (True, False)
    assert modified.message_annotations == {symbol("x-opt-note"): "retry"}
    assert (undeliverable.delivery_failed, undeliverable.undeliverable_here) == (False, True)
    assert {o.link for o in broker.outcomes} == {"r-out"}
    assert [o.tag for o in broker.outcomes] == [b"1", b"2", b"3", b"4", b"5", b"6", b"7"]
    assert broker.queued("q-out") == []


def test_unsettled_messages_return_when_the_link_detaches(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.put("q-back", "a")
    broker.put("q-back", "b")
    receiver = client.create_receiver("q-back", name="greedy", credit=2)
    assert receiver.receive(timeout=TIMEOUT).body == "a"
    assert receiver.receive(timeout=TIMEOUT).body == "b"
    assert broker.queued("q-back") == []
    receiver.close()
    broker.wait_detaches(1, link="greedy")
    assert broker.detaches[0].closed is True
    assert [m.body for m in broker.queued("q-back")] == ["a", "b"]  # in their original order


def test_unsettled_messages_return_when_the_connection_closes(broker: ProtonBroker) -> None:
    broker.put("q-conn", "held")
    conn = BlockingConnection(broker.url, timeout=TIMEOUT)
    try:
        assert conn.create_receiver("q-conn").receive(timeout=TIMEOUT).body == "held"
    finally:
        conn.close()
    broker.wait_closes(1, by="client")
    assert [m.body for m in broker.queued("q-conn")] == ["held"]


def test_unsettled_messages_return_when_the_link_detaches_unclosed(
    broker: ProtonBroker, client: BlockingConnection
) -> None:
    broker.put("q-suspend", "held")
    receiver = client.create_receiver("q-suspend", name="suspended")
    assert receiver.receive(timeout=TIMEOUT).body == "held"
    receiver.link.detach()  # detach with closed=false: proton raises only on_link_remote_detach at the broker
    pump(client, lambda: broker.detaches)
    [detach] = broker.detaches
    assert (detach.link, detach.role, detach.closed, detach.condition) == ("suspended", "receiver", False, None)
    assert [m.body for m in broker.queued("q-suspend")] == ["held"]


def test_unsettled_messages_return_when_the_client_vanishes(broker: ProtonBroker) -> None:
    broker.put("q-vanish", "held")
    conn = BlockingConnection(broker.url, timeout=TIMEOUT)
    try:
        assert conn.create_receiver("q-vanish").receive(timeout=TIMEOUT).body == "held"
        transport = conn.conn.transport
        transport.close_head()  # drop the socket without a close frame
        transport.close_tail()
        pump(conn, lambda: broker.closes)
    finally:
        conn.close()
    [close] = broker.closes
    assert close.by == "disconnect"
    assert [m.body for m in broker.queued("q-vanish")] == ["held"]


def test_drain_is_recorded_and_answered(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.put("q-drain", 1)
    broker.put("q-drain", 2)
    receiver = client.create_receiver("q-drain", name="drainer", credit=0)
    receiver.link.drain(5)
    pump(client, lambda: not receiver.link.draining())
    assert receiver.link.drained() == 3
    assert [receiver.receive(timeout=TIMEOUT).body for _ in range(2)] == [1, 2]
    # (receive() granted 1 more credit, still in drain mode: proton keeps a receiver's drain flag until cleared)
    drain = broker.wait_drains(1, link="drainer")[0]
    assert (drain.address, drain.credit, drain.sent, drain.returned) == ("q-drain", 5, 2, 3)
    assert any(f.link == "drainer" and f.drain and f.credit == 5 for f in broker.flows)


# ---------------------------------------------------------------------------------------------------------------
# Fault injection


def test_detach_on_attach(broker: ProtonBroker, client: BlockingConnection) -> None:
    broker.detach_on_attach["bad-address"] = ("amqp:not-found", "no such node")
    with pytest.raises(LinkDetached) as info:
        sender = client.create_sender("bad-address")
        sender.send(Message(body="never"), timeout=TIMEOUT)  # only if the detach came in a later read
    assert info.value.condition == "amqp:not-found"
    assert "no such node" in str(info.value)
    with pytest.raises(LinkDetached):
        receiver = client.create_receiver("bad-address")
        receiver.receive(timeout=TIMEOUT)
    # the connection is still fine
    client.create_sender("good-address").send(Message(body="fine"))
    assert [a.address for a in broker.attaches] == ["bad-address", "bad-address", "good-address"]


def test_close_connection_on_attach(broker: ProtonBroker) -> None:
    broker.close_connection_on["close-me"] = ("amqp:connection:forced", "go away")
    conn = BlockingConnection(broker.url, timeout=TIMEOUT)
    try:
        with pytest.raises(ConnectionClosed) as info:
            conn.create_receiver("close-me").receive(timeout=TIMEOUT)
        assert info.value.condition == "amqp:connection:forced"
    finally:
        conn.close()
    [close] = broker.wait_closes(1)
    assert close.by == "broker"
    assert close.condition == ("amqp:connection:forced", "go away", None)


def test_transaction_coordinator_is_refused(broker: ProtonBroker, client: BlockingConnection) -> None:
    client.container.declare_transaction(client.conn)
    controller = client.conn._txn_ctrl
    pump(client, lambda: controller.state & Endpoint.REMOTE_CLOSED)
    assert controller.remote_condition.name == "amqp:not-implemented"
    assert broker.attaches[0].target.type == "coordinator"


# ---------------------------------------------------------------------------------------------------------------
# Recording


def test_connection_open_is_recorded() -> None:
    with ProtonBroker(
        timeout=TIMEOUT, idle_timeout=4.0, max_frame_size=4096, properties={"product": "test-broker"}
    ) as broker:
        conn = BlockingConnection(
            broker.url,
            timeout=TIMEOUT,
            container_id="client-42",
            virtual_host="vhost.example",
            properties={"client": "proton"},
            offered_capabilities=["cap-offered"],
            desired_capabilities=["ANONYMOUS-RELAY"],
            heartbeat=10,
        )
        try:
            # what the client saw of the broker: container-id, capabilities, properties, idle-time-out (halved!)
            assert conn.conn.remote_container == "proton-broker"
            assert conn.conn.remote_properties == {symbol("product"): "test-broker"}
            assert conn.conn.transport.remote_idle_timeout == 2.0
            assert conn.conn.transport.remote_max_frame_size == 4096
        finally:
            conn.close()
        [info] = broker.connections
        assert info.index == 0
        assert info.container_id == "client-42"
        assert info.hostname == "vhost.example"
        assert info.properties == {symbol("client"): "proton"}
        assert info.offered_capabilities == ["cap-offered"]
        assert info.desired_capabilities == ["ANONYMOUS-RELAY"]
        assert info.idle_timeout == 5.0  # proton advertises half its configured timeout
        assert info.max_frame_size > 0
        assert (info.sasl_mechanism, info.sasl_user, info.authenticated) == ("ANONYMOUS", "anonymous", True)


def test_client_without_sasl_is_accepted(broker: ProtonBroker) -> None:
    conn = BlockingConnection(broker.url, timeout=TIMEOUT, sasl_enabled=False)
    try:
        conn.create_sender("q-nosasl").send(Message(body=1))
    finally:
        conn.close()
    [info] = broker.connections
    assert (info.sasl_mechanism, info.authenticated) == (None, False)


def test_attach_fields_are_recorded(broker: ProtonBroker, client: BlockingConnection) -> None:
    def sender_fields(link: Link) -> None:
        link.target.durability = Terminus.CONFIGURATION
        link.target.expiry_policy = Terminus.EXPIRE_WITH_CONNECTION
        link.target.timeout = 30
        link.target.capabilities.put_array(False, proton.Data.SYMBOL)
        link.target.capabilities.enter()
        link.target.capabilities.put_symbol(symbol("queue"))
        link.target.capabilities.exit()
        link.max_message_size = 65536
        link.properties = {symbol("link-prop"): "value"}

    def receiver_fields(link: Link) -> None:
        link.source.outcomes.put_array(False, proton.Data.SYMBOL)
        link.source.outcomes.enter()
        for name in ("amqp:accepted:list", "amqp:rejected:list"):
            link.source.outcomes.put_symbol(symbol(name))
        link.source.outcomes.exit()

    client.create_sender("q-fields", name="fields-out", options=Configure(sender_fields))
    client.create_receiver(
        "q-fields",
        name="fields-in",
        options=[DurableSubscription(), Selector("colour = 'red'"), Configure(receiver_fields)],
    )
    sent, received = broker.wait_attaches(2)

    assert (sent.connection, sent.name, sent.role, sent.address) == (0, "fields-out", "sender", "q-fields")
    assert (sent.target.durable, sent.target.expiry_policy, sent.target.timeout) == (1, "connection-close", 30)
    assert sent.target.capabilities == ["queue"]
    assert (sent.snd_settle_mode, sent.rcv_settle_mode) == ("mixed", "first")
    assert sent.max_message_size == 65536
    assert sent.properties == {symbol("link-prop"): "value"}

    assert (received.name, received.role, received.address) == ("fields-in", "receiver", "q-fields")
    assert (received.source.durable, received.source.expiry_policy) == (2, "never")
    assert received.source.distribution_mode is None
    [(key, value)] = received.source.filter.items()
    assert key == symbol("selector")
    assert (value.descriptor, value.value) == (symbol("apache.org:selector-filter:string"), "colour = 'red'")
    assert received.source.outcomes == ["amqp:accepted:list", "amqp:rejected:list"]
    assert received.max_message_size == 0 and received.properties is None

    broker.clear()
    assert broker.attaches == []


def test_detaches_and_closes_are_recorded(broker: ProtonBroker) -> None:
    conn = BlockingConnection(broker.url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("q-detach", name="leaving")
        sender.link.condition = Condition("amqp:internal-error", "client gave up")
        sender.close()
    finally:
        conn.close()
    [detach] = broker.wait_detaches(1)
    assert (detach.link, detach.role, detach.closed) == ("leaving", "sender", True)
    assert detach.condition == ("amqp:internal-error", "client gave up", None)
    [close] = broker.wait_closes(1)
    assert (close.connection, close.by, close.condition) == (0, "client", None)


def test_wait_helpers_time_out(broker: ProtonBroker) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="1 messages with address='nowhere'"):
        broker.wait_messages(1, address="nowhere", timeout=0.2)
    assert time.monotonic() - started < 1.0
