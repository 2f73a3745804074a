"""The start of a connection in amqp_async.proton beside python-qpid-proton 0.40: what the client's sasl-init carries,
and the transport error a program reads when the peer's first bytes are not the protocol header awaited.

* sasl-init (§5.3.3.2): proton's SASL without Cyrus (the wheels') sends no ``hostname`` field, whatever the URL's
  host or the ``virtual_host``; ours sent the open's hostname there too.
* A protocol header that is not the one awaited (§2.2, §5.3.1): a client with ``sasl_enabled=False`` whose server
  requires SASL (it answers with SASL's header), one with SASL whose server skips it, a server that speaks HTTP.
  proton reports ``amqp:connection:framing-error`` "Expected AMQP protocol header got: AMQP SASL layer ['...']"
  (the bytes it read, quoted); ours reported ``amqp:not-allowed`` in the engine's words on a container, and other
  words than proton's through the engine API.

The container scenarios run in a subprocess of their own (``python this_file.py SCENARIO IMPL OPTIONS``: a hang
fails the test), once on real proton and once on ours, against the same kind of peer: a raw socket that plays the
server's first bytes, or the embedded broker with SASL required. The engine API cases run in this process.
"""

from __future__ import annotations

import importlib
import socket
import threading
import time
from typing import Any

import pytest
from frames import read_until_closed
from scenario_subprocess import run_scenario, scenario_main

SUBPROCESS_TIMEOUT = 60.0
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


def _sasl_mechanisms() -> bytes:
    from frames import frame

    from amqp_async.codec.sasl_frames import SaslMechanisms
    from amqp_async.types import symbol

    return frame(SaslMechanisms(sasl_server_mechanisms=[symbol("ANONYMOUS")]), frame_type=1)


class _RawServer:
    """A TCP listener in a thread that takes one connection: reads the client's protocol header, answers with
    ``answer`` and records what the client sends next (up to ``wait`` seconds), then closes."""

    def __init__(self, answer: bytes, wait: float = 5.0) -> None:
        self.received = b""
        self._answer = answer
        self._wait = wait
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"amqp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        client, _ = self._listener.accept()
        with client:
            client.settimeout(0.2)
            deadline = time.monotonic() + self._wait
            answered = False
            while time.monotonic() < deadline:
                try:
                    chunk = client.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                self.received += chunk
                if not answered and len(self.received) >= 8:
                    answered = True
                    client.sendall(self._answer)
                if self._complete():
                    break
        self._listener.close()

    def _complete(self) -> bool:
        """The client's sasl-init came (after its SASL header)."""
        from frames import parse_stream

        try:
            return len(parse_stream(self.received)) >= 2
        except ValueError:
            return False  # a frame cut short: more to come

    def join(self) -> None:
        self._thread.join(self._wait + 5)


def sasl_init(name: str, options: dict[str, Any]) -> Any:
    """A client with SASL connects to a server that offers ANONYMOUS (as ``options["host"]``, with
    ``options["virtual_host"]`` if given): the fields of the sasl-init it sends."""
    from frames import parse_stream

    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    server = _RawServer(SASL_HEADER + _sasl_mechanisms())
    url = server.url.replace("127.0.0.1", options["host"])

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            extra = {"virtual_host": options["virtual_host"]} if options.get("virtual_host") else {}
            event.container.connect(url, reconnect=False, **extra)

    reactor.Container(Client()).run()
    server.join()
    init = parse_stream(server.received)[1].body
    return {"mechanism": str(init.mechanism), "hostname": init.hostname}


def header_mismatch(name: str, options: dict[str, Any]) -> Any:
    """A client (``options["sasl"]``: SASL enabled or not) whose server answers with other first bytes: the raw
    bytes ``options["answer"]`` (hex), or the embedded broker with SASL required (``options["broker"]``). Recorded:
    the transport error's name and description, and the callbacks up to the disconnect."""
    from amqp_async.broker import BrokerThread

    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            event.container.connect(url, reconnect=False, sasl_enabled=options["sasl"])

        def on_transport_error(self, event: Any) -> None:
            condition = event.transport.condition
            record.append(["transport_error", str(condition.name), condition.description])
            super().on_transport_error(event)

        def on_connection_opened(self, event: Any) -> None:
            record.append(["opened"])
            event.connection.close()

    if options.get("broker"):
        with BrokerThread(users={"user": "secret"}, allow_anonymous=False) as broker:
            url = broker.url
            reactor.Container(Client()).run()
    else:
        server = _RawServer(bytes.fromhex(options["answer"]), wait=2.0)
        url = server.url
        reactor.Container(Client()).run()
        server.join()
    return record


def _written(data: bytes, role: str) -> list[Any]:
    """The headers and performatives in ``data``: a close with its error, a client's open without its fields (its
    container-id is made up per run), a server's in full."""
    from frames import Header, parse_stream

    from amqp_async.codec.performatives import Close, Open

    items: list[Any] = []
    for item in parse_stream(data):
        if isinstance(item, Header):
            items.append(["header", item.raw.hex()])
        elif isinstance(item.body, Close):
            error = item.body.error
            items.append(["close", None if error is None else str(error.condition), error and error.description])
        elif isinstance(item.body, Open):
            items.append(["open", repr(item.body) if role == "server" else "..."])
        else:
            items.append([type(item.body).__name__])
    return items


def header_refused_frames(name: str, options: dict[str, Any]) -> Any:
    """What the container writes once the peer's first bytes (``options["answer"]``, hex) are not the header it
    awaits: as a client (``options["sasl"]``) of a raw server that answers them, or as a server whose raw client
    sends them (``options["role"]``). Recorded: the headers and frames, and for a server its bytes."""
    from broker_process import free_port

    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    answer = bytes.fromhex(options["answer"])
    role = options["role"]
    listener = socket.create_server(("127.0.0.1", 0)) if role == "client" else None
    port = free_port() if listener is None else listener.getsockname()[1]

    class Handler(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            if role == "server":
                self.acceptor = event.container.listen(f"127.0.0.1:{port}")
            else:
                event.container.connect(f"amqp://127.0.0.1:{port}", reconnect=False, sasl_enabled=options["sasl"])

        def on_transport_error(self, event: Any) -> None:
            if role == "server":
                self.acceptor.close()

    container = reactor.Container(Handler())
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    if listener is not None:
        with listener:
            listener.settimeout(SUBPROCESS_TIMEOUT)
            peer, _ = listener.accept()
    else:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        while True:
            try:
                peer = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    with peer:
        if listener is not None:
            received = peer.recv(8)  # the client's header (its open may follow at once)
        else:
            received = b""
        peer.sendall(answer)
        received += read_until_closed(peer, 10.0)
    thread.join(SUBPROCESS_TIMEOUT)
    return {"frames": _written(received, role), "bytes": received.hex() if role == "server" else None}


SCENARIOS = {"sasl_init": sasl_init, "header_mismatch": header_mismatch, "header_refused_frames": header_refused_frames}


def _run(scenario: str, impl: str, options: dict[str, Any]) -> Any:
    return run_scenario(__file__, scenario, impl, options, timeout=SUBPROCESS_TIMEOUT)


pytestmark = [pytest.mark.interop]
pytest.importorskip("proton")


@pytest.mark.parametrize(
    "options",
    [{"host": "127.0.0.1"}, {"host": "localhost"}, {"host": "localhost", "virtual_host": "vhost.example"}],
    ids=["ip", "name", "virtual-host"],
)
def test_sasl_init_carries_no_hostname_as_protons(options: dict[str, Any]) -> None:
    """proton's sasl-init has no hostname (the open carries it); ours sent it there as well."""
    reference = _run("sasl_init", "proton", options)
    assert reference == {"mechanism": "ANONYMOUS", "hostname": None}  # the test's premise
    assert _run("sasl_init", "amqp_async.proton", options) == reference


def test_sasl_init_of_the_engine_api_carries_no_hostname_as_protons() -> None:
    """The same through the engine API: a client transport with SASL, its connection's hostname set."""
    from frames import parse_stream

    def sasl_init_sent(name: str) -> Any:
        module = importlib.import_module(name)
        connection = module.Connection()
        connection.hostname = "vhost.example"
        transport = module.Transport()
        transport.sasl().allowed_mechs("ANONYMOUS")
        transport.bind(connection)
        connection.open()
        output = b""
        for data in (b"", SASL_HEADER + _sasl_mechanisms()):
            if data:
                transport.push(data)
            pending = transport.pending()
            if pending > 0:
                output += transport.peek(pending)
                transport.pop(pending)
        return parse_stream(output)[1].body

    reference = sasl_init_sent("proton")
    assert reference.hostname is None  # the test's premise
    ours = sasl_init_sent("amqp_async.proton")
    assert (ours.mechanism, ours.hostname) == (reference.mechanism, reference.hostname)


@pytest.mark.parametrize(
    "options",
    [
        {"sasl": False, "broker": True},
        {"sasl": False, "answer": SASL_HEADER.hex()},
        {"sasl": True, "answer": AMQP_HEADER.hex()},
        {"sasl": False, "answer": b"HTTP/1.1 400 Bad Request\r\n\r\n".hex()},
        {"sasl": True, "answer": b"HTTP/1.1 400 Bad Request\r\n\r\n".hex()},
    ],
    ids=["no-sasl-to-broker", "no-sasl", "sasl-to-amqp", "http", "sasl-to-http"],
)
def test_a_header_not_awaited_is_protons_framing_error(options: dict[str, Any]) -> None:
    """The peer's first bytes are not the header the client awaits: proton's condition and words (ours reported
    ``amqp:not-allowed``, in the engine's words)."""
    reference = _run("header_mismatch", "proton", options)
    assert reference and reference[0][:2] == ["transport_error", "amqp:connection:framing-error"]  # the premise
    assert _run("header_mismatch", "amqp_async.proton", options) == reference


@pytest.mark.parametrize(
    "options",
    [
        {"role": "client", "sasl": False, "answer": SASL_HEADER.hex()},
        {"role": "client", "sasl": False, "answer": b"HTTP/1.1 400 Bad Request\r\n\r\n".hex()},
        {"role": "client", "sasl": False, "answer": b"AMQP\x01\x01\x00\x0a".hex()},
        {"role": "client", "sasl": True, "answer": AMQP_HEADER.hex()},
        {"role": "server", "answer": b"GET / HTTP/1.1\r\n\r\n".hex()},
        {"role": "server", "answer": b"AMQP\x01\x01\x00\x0a".hex()},
    ],
    ids=["client-sasl-header", "client-http", "client-old-amqp", "sasl-client-amqp", "server-http", "server-old-amqp"],
)
def test_a_header_not_awaited_is_answered_with_protons_frames(options: dict[str, Any]) -> None:
    """After a header it does not await in the AMQP layer, a container writes what proton's writes: its open (a
    server's with an empty container-id) and a close with the framing error, so the peer learns why (ours wrote
    only the header); awaiting SASL's, nothing after its SASL header. A server's bytes are proton's exactly."""
    reference = _run("header_refused_frames", "proton", options)
    if options["role"] == "server" or not options["sasl"]:
        assert reference["frames"][-1][:2] == ["close", "amqp:connection:framing-error"]  # the test's premise
    assert _run("header_refused_frames", "amqp_async.proton", options) == reference


# The engine API: a transport the program drives, given the peer's first bytes (and, with None after them, the end
# of its input). ``role``, whether SASL is configured, the bytes.
ENGINE_CASES = [
    ("client", False, [SASL_HEADER]),
    ("client", True, [AMQP_HEADER]),
    ("client", False, [b"HTTP/1.1 400 Bad Request\r\n\r\n"]),
    ("client", False, [SASL_HEADER + b"\x00\x00\x00\x1c\x02\x01\x00\x00"]),
    ("client", False, [b"AMQP\x01\x01\x00\x0a"]),
    ("client", False, [b"AMQP\x02\x01\x00\x00"]),
    ("client", False, [b"\x16\x03\x01\x00\x10"]),
    ("client", False, [b"AMQP\x00\x02\x00\x00"]),
    ("client", False, [b"AMQP\x00\x01\x00\x01"]),
    ("client", False, [b"AM", None]),
    ("client", True, [b"AMQP\x03\x01", None]),
    ("client", True, [None]),
    ("server", False, [b"HTTP/1.1 400 Bad Request\r\n\r\n"]),
    ("server", True, [b"GET / HTTP/1.1\r\n"]),
    ("server", False, [b"AMQP\x01\x01\x00\x0a"]),
    ("server", False, [b"AMQP\x00\x02\x00\x00"]),
    ("server", False, [b"AMQP\x00\x01\x00", None]),
    ("server", False, [None]),
]


def _engine_condition(name: str, role: str, sasl: bool, inputs: list[bytes | None]) -> Any:
    module = importlib.import_module(name)
    connection = module.Connection()
    transport = module.Transport(module.Transport.SERVER if role == "server" else module.Transport.CLIENT)
    if sasl:
        transport.sasl()
    transport.bind(connection)
    if role == "client":
        connection.open()
    for data in inputs:
        if data is None:
            transport.close_tail()
        else:
            transport.push(data)
    condition = transport.condition
    return None if condition is None else (str(condition.name), condition.description)


@pytest.mark.parametrize(("role", "sasl", "inputs"), ENGINE_CASES)
def test_engine_api_header_errors_are_protons(role: str, sasl: bool, inputs: list[bytes | None]) -> None:
    """The transport's condition when the first bytes are not the header awaited, or end before one: proton's
    words, which name what came (ours named the header differently, quoted it as Python does, or dropped it)."""
    reference = _engine_condition("proton", role, sasl, inputs)
    assert reference is not None and reference[0] == "amqp:connection:framing-error"  # the test's premise
    assert _engine_condition("amqp_async.proton", role, sasl, inputs) == reference


if __name__ == "__main__":
    scenario_main(SCENARIOS)
