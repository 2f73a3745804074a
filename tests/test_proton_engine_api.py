"""proton's engine API (``Transport``, ``Collector``, standalone endpoints, ``SASL``) on our engine, beside real proton.

The engine programs in ``tests/proton_engine_program.py`` run with python-qpid-proton on both sides (the reference),
then with ``amqp_async.proton`` as the client, as the server, and as both: each side must collect the same events,
in the same order, and read the same values from its endpoints.
"""

from __future__ import annotations

from typing import Any

import pytest
from proton_engine_program import SCENARIOS, Side, pump, record

pytest.importorskip("proton")

PROTON = "proton"
OURS = "amqp_async.proton"
MIXES = [(OURS, PROTON), (PROTON, OURS), (OURS, OURS)]


@pytest.fixture(scope="module")
def references() -> dict[str, Any]:
    return {name: record(name, PROTON, PROTON) for name in SCENARIOS}


@pytest.mark.parametrize("client,server", MIXES, ids=["ours-client", "ours-server", "ours-both"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_same_events_as_proton(scenario: str, client: str, server: str, references: dict[str, Any]) -> None:
    got = record(scenario, client, server)
    reference = references[scenario]
    assert got["A"] == reference["A"]
    assert got["B"] == reference["B"]


def test_reference_covers_the_engine_events(references: dict[str, Any]) -> None:
    """The scenarios exercise what the comparison claims (a guard against a scenario that silently does less)."""
    methods = {entry[0] for log in references.values() for side in log.values() for entry in side}
    for method in (
        "on_connection_init",
        "on_connection_bound",
        "on_connection_local_open",
        "on_connection_remote_open",
        "on_session_init",
        "on_session_remote_open",
        "on_session_remote_close",
        "on_link_init",
        "on_link_remote_open",
        "on_link_flow",
        "on_link_remote_close",
        "on_delivery",
        "on_transport",
        "on_transport_error",
        "on_transport_head_closed",
        "on_transport_tail_closed",
        "on_transport_closed",
        "on_connection_remote_close",
    ):
        assert method in methods
    transfer = dict(entry[:2] for entry in references["transfer"]["B"] if entry[0] == "partial-seen")
    assert transfer == {"partial-seen": True}


# --- SASL --------------------------------------------------------------------------------------------------


def _sasl_pair(
    client: str,
    server: str,
    mech: str,
    user: str | None = None,
    password: str | None = None,
    server_mechs: str | None = None,
    credentials: dict[str, str] | None = None,
) -> tuple[Side, Side, Any, Any]:
    log: list[tuple[Any, ...]] = []
    a = Side("A", client, False, log)
    b = Side("B", server, True, log)
    client_sasl = a.transport.sasl()
    client_sasl.allowed_mechs(mech)
    client_sasl.allow_insecure_mechs = True
    if user is not None:
        a.connection.user = user
        a.connection.password = password
    server_sasl = b.mod.SASL(b.transport)
    assert server_sasl is b.transport.sasl() or server == PROTON
    if server_mechs is not None:
        server_sasl.allowed_mechs(server_mechs)
    if credentials is not None:
        server_sasl.credentials = credentials
    a.bind()
    b.bind()
    a.connection.open()
    b.connection.open()
    pump(a, b)
    a.drain()
    b.drain()
    return a, b, client_sasl, server_sasl


@pytest.mark.parametrize("client,server", [(PROTON, PROTON), *MIXES])
def test_sasl_anonymous(client: str, server: str) -> None:
    a, b, client_sasl, server_sasl = _sasl_pair(client, server, "ANONYMOUS")
    assert (client_sasl.outcome, server_sasl.outcome) == (0, 0)
    assert (server_sasl.mech, b.transport.user) == ("ANONYMOUS", "anonymous")
    assert a.connection.state == b.connection.state == 18  # LOCAL_ACTIVE | REMOTE_ACTIVE


# python-qpid-proton's wheel has no Cyrus SASL, so its client has no SCRAM (and its server checks no passwords).
@pytest.mark.parametrize(
    "client,mech",
    [(PROTON, "PLAIN"), (OURS, "PLAIN"), (OURS, "SCRAM-SHA-256"), (OURS, "SCRAM-SHA-1"), (OURS, "SCRAM-SHA-512")],
)
def test_sasl_password_mechanisms(client: str, mech: str) -> None:
    a, b, client_sasl, server_sasl = _sasl_pair(client, OURS, mech, "bob", "secret", mech, {"bob": "secret"})
    assert (client_sasl.outcome, server_sasl.outcome) == (0, 0)
    assert (server_sasl.mech, b.transport.user, server_sasl.user) == (mech, "bob", "bob")
    assert a.connection.remote_container == "container-B"


@pytest.mark.parametrize("client", [PROTON, OURS])
def test_sasl_wrong_password(client: str) -> None:
    a, b, client_sasl, server_sasl = _sasl_pair(client, OURS, "PLAIN", "bob", "wrong", "PLAIN", {"bob": "secret"})
    assert (client_sasl.outcome, server_sasl.outcome) == (1, 1)  # SASL.AUTH both ways
    assert b.transport.condition is not None
    assert b.transport.condition.name == "amqp:unauthorized-access"
    assert a.transport.condition is not None
    assert ("A", "on_transport_error", "Transport") in a.log
    assert a.transport.closed and b.transport.closed
    assert a.connection.state & a.mod.Endpoint.REMOTE_ACTIVE == 0


def test_sasl_external_client_to_proton() -> None:
    """EXTERNAL to proton's server, without TLS (no identity from outside SASL): ours ends as proton's client."""

    def outcome(client: str) -> Any:
        a, b, client_sasl, server_sasl = _sasl_pair(client, PROTON, "EXTERNAL", server_mechs="EXTERNAL")
        return (client_sasl.outcome, server_sasl.outcome, a.connection.state, b.connection.state, a.transport.closed)

    assert outcome(OURS) == outcome(PROTON)


# --- proton's own engine tests (python/tests/proton_tests/engine.py), run on amqp_async.proton ----------------


def _pair() -> tuple[Any, Any, Any, Any]:
    from amqp_async.proton import Connection, Transport

    c1, c2 = Connection(), Connection()
    t1, t2 = Transport(), Transport(Transport.SERVER)
    t1.bind(c1)
    t2.bind(c2)
    return c1, c2, t1, t2


class _Pair:
    def __init__(self) -> None:
        self.c1, self.c2, self.t1, self.t2 = _pair()

    def pump(self) -> None:
        class End:
            def __init__(self, transport: Any) -> None:
                self.transport = transport

        pump(End(self.t1), End(self.t2))


def test_open_wait() -> None:
    """ConnectionTest.testOpenWait."""
    from amqp_async.proton import Endpoint

    pair = _Pair()
    pair.c1.open()
    pair.pump()
    assert pair.c1.state == Endpoint.LOCAL_ACTIVE | Endpoint.REMOTE_UNINIT
    assert pair.c2.state == Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE
    pair.c2.open()
    pair.pump()
    assert pair.c1.state == pair.c2.state == Endpoint.LOCAL_ACTIVE | Endpoint.REMOTE_ACTIVE


def test_close_with_condition() -> None:
    """ConnectionTest.testCondition: the remote condition arrives with the close."""
    from amqp_async.proton import Condition

    pair = _Pair()
    pair.c1.open()
    pair.c2.open()
    pair.pump()
    pair.c1.condition = Condition("blah:bleh", "this is a description", {"foo": "bar"})
    pair.c1.close()
    pair.pump()
    remote = pair.c2.remote_condition
    assert (remote.name, remote.description) == ("blah:bleh", "this is a description")
    assert dict(remote.info) == {"foo": "bar"}


def test_link_credit_and_settle() -> None:
    """LinkTest / TransferTest: credit, a transfer, its outcome and settlement, queued and unsettled counts."""
    from amqp_async.proton import Delivery, Endpoint

    pair = _Pair()
    pair.c1.open()
    pair.c2.open()
    s1 = pair.c1.session()
    s1.open()
    snd = s1.sender("test-link")
    snd.open()
    pair.pump()
    s2 = pair.c2.session_head(Endpoint.LOCAL_UNINIT)
    s2.open()
    rcv = pair.c2.link_head(Endpoint.LOCAL_UNINIT)
    rcv.open()
    rcv.flow(10)
    pair.pump()
    assert snd.credit == 10
    d = snd.delivery("tag")
    assert snd.current is d
    assert snd.send(b"this is a test") == 14
    assert snd.advance()
    assert snd.current is None
    assert snd.credit == 9
    pair.pump()
    current = rcv.current
    assert current.tag == "tag"  # proton's: a tag that is UTF-8 reads as a str
    assert rcv.recv(1024) == b"this is a test"
    assert rcv.recv(1024) is None
    assert rcv.unsettled == 1
    current.update(Delivery.ACCEPTED)
    pair.pump()
    assert d.remote_state == Delivery.ACCEPTED and not d.settled
    current.settle()
    pair.pump()
    assert d.settled
    d.settle()
    assert rcv.unsettled == 0 and snd.unsettled == 0


def test_a_delivery_written_in_several_sends() -> None:
    """The bytes of several ``send`` calls (an empty one among them) make one delivery; ``pending`` counts them all."""
    from amqp_async.proton import Endpoint

    pair = _Pair()
    pair.c1.open()
    pair.c2.open()
    s1 = pair.c1.session()
    s1.open()
    snd = s1.sender("chunks")
    snd.open()
    pair.pump()
    pair.c2.session_head(Endpoint.LOCAL_UNINIT).open()
    rcv = pair.c2.link_head(Endpoint.LOCAL_UNINIT)
    rcv.open()
    rcv.flow(2)
    pair.pump()
    d = snd.delivery("one")
    assert d.pending == 0
    assert snd.send(b"") == 0
    assert snd.send(b"abc") == 3
    assert d.pending == 3
    assert snd.send(bytearray(b"de")) == 2
    assert snd.send(b"fgh") == 3
    assert d.pending == 8
    assert snd.advance()
    single = snd.delivery("two")
    assert snd.send(b"only") == 4
    assert single.pending == 4
    assert snd.advance()
    pair.pump()
    assert rcv.current.tag == "one"
    assert rcv.recv(100) == b"abcdefgh"
    rcv.advance()
    assert rcv.current.tag == "two"
    assert rcv.recv(100) == b"only"


def test_idle_timeout() -> None:
    """TransportTest idle timeout: heartbeats keep an idle connection up; silence past the timeout fails it."""
    pair = _Pair()
    pair.t1.idle_timeout = 10.0
    pair.c1.open()
    pair.c2.open()
    pair.pump()
    assert pair.t2.remote_idle_timeout == 5.0  # as proton: the client advertises half its timeout (§2.4.5)
    deadline = pair.t2.tick(1.0)
    # The server writes at half what the client advertised, counted (as proton counts) from its first tick.
    assert deadline == 3.5
    pair.t2.tick(6.0)
    assert pair.t2.pending() > 0  # a heartbeat (an empty frame)
    pair.pump()
    pair.t1.tick(12.0)
    pair.t1.tick(30.0)  # nothing arrived since 6: the client gives up
    assert pair.t1.condition is not None
    assert pair.t1.condition.name == "amqp:resource-limit-exceeded"


# --- an external event loop over a real socket ------------------------------------------------------------


@pytest.mark.parametrize("module", [OURS, PROTON])
def test_selectors_loop_against_our_broker(module: str) -> None:
    """examples/proton_engine_selectors.py: the program owns the socket (``selectors``), the engine only turns bytes
    into events; with our transport and with proton's, against our embedded broker."""
    import importlib.util
    from pathlib import Path

    from amqp_async.broker import BrokerThread

    path = Path(__file__).resolve().parent.parent / "examples" / "proton_engine_selectors.py"
    spec = importlib.util.spec_from_file_location("proton_engine_selectors", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with BrokerThread() as broker:
        bodies = example.round_trip(module, broker.url, "engine-queue", 5)
    assert bodies == [f"message {n}" for n in range(5)]
