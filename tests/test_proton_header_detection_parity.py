"""What amqp_async.proton reports about a peer's first bytes, beside python-qpid-proton 0.40, when they are not a
protocol header (§2.2) or end before a whole one.

* proton quotes all the bytes it has read (``pn_quote_data``), over all the reads: a peer that sends ``AM`` then
  ``QX`` sent ``AMQX``. Ours quoted only the first read, and so said "End of input stream before protocol
  detection: 'AM'" of a peer whose input had not ended.
* proton formats the description in a buffer of 1024 bytes: a long one (it quotes a large first read) is cut at 1023
  characters. Ours cut only the quoted bytes, and its descriptions ran past proton's.
* A container's connection whose peer sent a large first read that is no header: proton writes its close with the
  whole description; our engine refuses a frame above 512 bytes before the open exchange (§2.4.1) and the program
  read ``amqp:illegal-state`` "cannot send Close: frame of ... bytes exceeds the maximum frame size 512" in place of
  the framing error. The close is now cut to fit; the transport's condition keeps proton's description.
* A container's connection whose peer's input ended before a whole protocol header: proton names what came
  ("End of input stream before protocol detection: 'AM' (connection aborted)", "No protocol header found ...",
  "Expected AMQP protocol header got: Insufficient data to determine protocol ['AM'] ..."); ours said "connection
  aborted".

The engine API cases run in this process; the container scenarios in a subprocess each (``python this_file.py
SCENARIO IMPL OPTIONS``: a hang fails the test), once on proton and once on ours, against a raw socket peer.
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
#: how long a raw peer waits for the other end to close
PEER_WAIT = 20.0

# --- the engine API: a transport the program drives ------------------------------------------------------------

# ``role``, whether SASL is configured, the reads (None: the end of the input).
ENGINE_CASES = [
    ("server", False, [b"AM", b"QX"]),
    ("client", False, [b"AM", b"QX"]),
    ("client", True, [b"AM", b"QX"]),
    ("server", False, [b"A", b"M", b"Q", b"X"]),
    ("server", False, [b"AMQP", b"\x00\x01\x00", None]),
    ("client", False, [b"AMQP", b"\x00\x01\x00", None]),
    ("server", False, [b"AMQ", b"P\x01\x01\x00\x00xyz"]),
    ("server", False, [b"X" * 5000]),
    ("client", False, [b"X" * 5000]),
    ("server", False, [b"\x00" * 600]),
    ("client", True, [b"\x16" * 300]),
    ("server", False, [b"GET / HTTP/1.1\r\n" + b"Host: x\r\n" * 200]),
]


def _engine_outcome(name: str, role: str, sasl: bool, inputs: list[bytes | None]) -> Any:
    """The transport's condition after the reads, and (for a server, whose output has nothing made up per run)
    what it wrote."""
    module = importlib.import_module(name)
    connection = module.Connection()
    transport = module.Transport(module.Transport.SERVER if role == "server" else module.Transport.CLIENT)
    if sasl:
        transport.sasl()
    transport.bind(connection)
    if role == "client":
        connection.open()
    output = b""
    for data in inputs:
        if data is None:
            transport.close_tail()
        elif transport.capacity() > 0:
            transport.push(data)
        pending = transport.pending()
        if pending > 0:
            output += transport.peek(pending)
            transport.pop(pending)
    condition = transport.condition
    described = None if condition is None else (str(condition.name), condition.description)
    return described, (output if role == "server" else None)


@pytest.mark.parametrize(("role", "sasl", "inputs"), ENGINE_CASES)
def test_engine_api_first_bytes_are_quoted_as_protons(role: str, sasl: bool, inputs: list[bytes | None]) -> None:
    """All the bytes read so far are named, however they came, and the description is cut where proton's is."""
    reference = _engine_outcome("proton", role, sasl, inputs)
    assert reference[0] is not None and reference[0][0] == "amqp:connection:framing-error"  # the test's premise
    assert _engine_outcome("amqp_async.proton", role, sasl, inputs) == reference


# --- a container's connection, against a raw socket peer ---------------------------------------------------------


def _connect(port: int) -> socket.socket:
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def first_bytes_then_end(name: str, options: dict[str, Any]) -> Any:
    """A container's connection (``options["role"]``: an accepted one, or a client with ``options["sasl"]``) whose
    raw peer sends ``options["data"]`` (hex) and then ends its output (a client's peer first reads its header).
    Recorded: the transport error's name and description, and the close frame the peer received (its error's
    name and the frame's size), if any."""
    from broker_process import free_port
    from frames import frames_only

    from amqp_async.codec.performatives import Close

    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    role = options["role"]
    data = bytes.fromhex(options["data"])
    listener = socket.create_server(("127.0.0.1", 0)) if role == "client" else None
    port = free_port() if listener is None else listener.getsockname()[1]
    record: list[Any] = []

    class Handler(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            if role == "server":
                self.acceptor = event.container.listen(f"127.0.0.1:{port}")
            else:
                event.container.connect(f"amqp://127.0.0.1:{port}", reconnect=False, sasl_enabled=options["sasl"])

        def on_transport_error(self, event: Any) -> None:
            condition = event.transport.condition
            record.append(["transport_error", str(condition.name), condition.description])
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
        peer = _connect(port)
    with peer:
        received = b""
        if listener is not None:
            peer.settimeout(SUBPROCESS_TIMEOUT)
            while len(received) < 8:  # the client's protocol header
                chunk = peer.recv(4096)
                if not chunk:
                    break
                received += chunk
        peer.sendall(data)
        peer.shutdown(socket.SHUT_WR)
        received += read_until_closed(peer, PEER_WAIT)  # (read all: an unread byte would make our close a reset)
    thread.join(SUBPROCESS_TIMEOUT)
    assert not thread.is_alive(), "the container did not stop"
    if role == "server":
        closes = []
        for item in frames_only(received[8:]):
            if isinstance(item.body, Close):
                error = item.body.error
                closes.append([None if error is None else str(error.condition), _frame_size(item)])
        record.append(["closes", closes])
    return record


def _frame_size(item: Any) -> int:
    from frames import body_bytes

    return 8 + len(body_bytes(item.body)) + len(item.payload)


SCENARIOS = {"first_bytes_then_end": first_bytes_then_end}


def _run(impl: str, options: dict[str, Any]) -> Any:
    return run_scenario(__file__, "first_bytes_then_end", impl, options, timeout=SUBPROCESS_TIMEOUT)


pytestmark = [pytest.mark.interop]
pytest.importorskip("proton")


@pytest.mark.parametrize(
    "options",
    [
        {"role": "server", "data": b"AM".hex()},
        {"role": "server", "data": b"AMQP".hex()},
        {"role": "server", "data": ""},
        {"role": "client", "sasl": False, "data": b"AM".hex()},
        {"role": "client", "sasl": True, "data": b"AM".hex()},
        {"role": "client", "sasl": False, "data": ""},
    ],
    ids=["server-AM", "server-AMQP", "server-nothing", "client-AM", "sasl-client-AM", "client-nothing"],
)
def test_input_ended_before_a_header_is_protons_error(options: dict[str, Any]) -> None:
    """The peer's input ended before a whole protocol header: proton's framing error names what came of one (ours
    said "connection aborted")."""
    reference = _run("proton", options)
    assert reference[0][:2] == ["transport_error", "amqp:connection:framing-error"]  # the test's premise
    assert _run("amqp_async.proton", options)[0] == reference[0]


def test_a_large_first_read_that_is_no_header_is_a_framing_error() -> None:
    """A server's peer sends 600 bytes of no protocol (a TLS ClientHello is about as large): the program reads
    proton's framing error, whose description quotes them (ours read ``amqp:illegal-state``: the close that
    carries the description was above 512 bytes), and the peer gets a close with the framing error, in one frame
    of at most 512 bytes (§2.4.1; proton's is larger)."""
    options = {"role": "server", "data": (b"X" * 600).hex()}
    reference = _run("proton", options)
    assert reference[0][:2] == ["transport_error", "amqp:connection:framing-error"]  # the test's premise
    ours = _run("amqp_async.proton", options)
    assert ours[0][:2] == reference[0][:2]
    assert ours[0][2].startswith("Unknown protocol detected: '" + "X" * 400)
    assert [name for name, _ in ours[1][1]] == ["amqp:connection:framing-error"]
    assert all(size <= 512 for _, size in ours[1][1])


if __name__ == "__main__":
    scenario_main(SCENARIOS)
