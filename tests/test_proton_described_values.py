"""Described values in a message's application sections, in amqp_async.proton beside python-qpid-proton 0.40.

A described value in the body, the annotations or the application properties is the application's own: proton reads
it back as ``Described(descriptor, value)`` whatever the descriptor, in the form it came (a symbolic descriptor stays
a symbol), and encodes it again to the same bytes. Descriptors AMQP defines for its own types (an outcome, a source,
an error, a message section) are no exception: they must not read as the codec's classes (``Accepted()``,
``Source(...)``, ``AmqpValue(...)``), which no proton program knows, nor be refused where such a class cannot hold the
value (``Described(ulong(0x1d), [1, 2])``: the whole message undecodable, ``MessagingHandler`` rejecting it with
``amqp:decode-error``).

Checked two ways: ``Message.decode()`` of the bytes real proton encoded, compared with proton's own decode; and a
container program (one written for proton, run on each) that sends such messages through the embedded broker and
records what its ``on_message`` reads, in a subprocess of its own (``python this_file.py IMPL``).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUBPROCESS_TIMEOUT = 30.0

pytestmark = [pytest.mark.interop]
proton = pytest.importorskip("proton")


def _comparable(value: Any) -> Any:
    """A value as text both libraries write alike: proton's binary is a memoryview, its maps AnnotationDict or
    PropertyDict (dict subclasses); ours are bytes and dict."""
    if isinstance(value, memoryview):
        return repr(bytes(value))
    if isinstance(value, dict):
        return {_comparable(key): _comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_comparable(item) for item in value]
    if type(value).__name__ == "Described":
        return ["Described", _comparable(value.descriptor), _comparable(value.value)]
    return repr(value)


def _values(lib: Any) -> dict[str, Any]:
    """Described values under descriptors AMQP defines (numeric and symbolic) and one it does not."""
    described, ulong, symbol = lib.Described, lib.ulong, lib.symbol
    return {
        "accepted": described(ulong(0x24), []),
        "accepted-symbolic": described(symbol("amqp:accepted:list"), []),
        "source": described(ulong(0x28), ["queue"]),
        "error": described(ulong(0x1D), [symbol("amqp:not-found"), "gone"]),
        "amqp-value-section": described(ulong(0x77), "x"),
        "data-section-symbolic": described(symbol("amqp:data:binary"), b"x"),
        "unknown": described(ulong(0x1234), 1),
        # Values the types AMQP defines for these descriptors cannot hold (an error's condition is a symbol, a
        # source's address a string): the codec refuses them.
        "error-of-ints": described(ulong(0x1D), [1, 2]),
        "source-of-an-int": described(symbol("amqp:source:list"), [5]),
    }


def _messages(lib: Any) -> list[Any]:
    """Messages holding each value: as the body, in a list body, in a map body, and as an annotation."""
    messages = []
    for value in _values(lib).values():
        messages.append(lib.Message(body=value))
        messages.append(lib.Message(body=[1, value], annotations={"x-opt-value": value}))
        messages.append(lib.Message(body={"key": value}, instructions={"x-opt-value": value}))
    return messages


def _read_back(lib: Any, message: Any) -> dict[str, Any]:
    return {
        "body": _comparable(message.body),
        "annotations": _comparable(message.annotations),
        "instructions": _comparable(message.instructions),
        "inferred": message.inferred,
    }


def test_decode_reads_described_values_as_proton_does() -> None:
    import amqp_async.proton as ours

    for sent in _messages(proton):
        encoded = sent.encode()
        reference, decoded = proton.Message(), ours.Message()
        reference.decode(encoded)
        decoded.decode(encoded)
        assert _read_back(ours, decoded) == _read_back(proton, reference), sent
        assert decoded.encode() == reference.encode() == encoded  # encoded again: the same bytes


@pytest.mark.parametrize(
    "tail",
    [b"\x00\x53\x74\xc1\x01\x00", b"\x00\x53\x77\x40"],
    ids=["application-properties-after-the-body", "a-second-amqp-value"],
)
def test_a_message_out_of_order_stays_refused(tail: bytes) -> None:
    """Read again around a described value the codec refused, the message's sections are still checked (§3.2):
    sections out of order or repeated are refused as before, with ``MessageException``."""
    import amqp_async.proton as ours

    encoded = proton.Message(body=proton.Described(proton.ulong(0x1D), [1, 2])).encode() + tail
    with pytest.raises(ours.MessageException, match=r"field's type|out of order"):
        ours.Message().decode(encoded)


def round_trip(name: str) -> Any:
    """A container program sends each message to a queue of the embedded broker and records what on_message reads
    (the delivery-annotations stay with the sending link: the broker drops them)."""
    from amqp_async.broker import BrokerThread

    lib = importlib.import_module(name)
    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    record: list[Any] = []
    messages = _messages(lib)

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url, reconnect=False)
            event.container.create_sender(connection, "q")
            event.container.create_receiver(connection, "q")
            self.sent = False

        def on_sendable(self, event: Any) -> None:
            if not self.sent:
                self.sent = True
                for message in messages:
                    event.sender.send(message)

        def on_message(self, event: Any) -> None:
            message = event.message
            record.append([_comparable(message.body), _comparable(message.annotations)])
            if len(record) == len(messages):
                event.connection.close()

    with BrokerThread() as broker:
        url = broker.url
        reactor.Container(Client()).run()
    return record


def _run(impl: str) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        done = subprocess.run(
            [sys.executable, __file__, impl],
            env=env,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"round_trip on {impl} timed out; stderr: {exc.stderr!r}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"round_trip on {impl}: no result (exit {done.returncode}); stderr:\n{done.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def test_on_message_reads_described_values_as_proton_does() -> None:
    reference = _run("proton")
    assert len(reference) == 3 * len(_values(proton))
    assert _run("amqp_async.proton") == reference


if __name__ == "__main__":
    print("RESULT " + json.dumps(round_trip(sys.argv[1])))
