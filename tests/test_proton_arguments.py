"""Arguments python-qpid-proton's C binding refuses at the call are refused alike by amqp_async.proton.

``receiver.flow(n)`` with an ``n`` proton refuses: refused at the call, on both, and the link goes on.

python-qpid-proton's ``Link.flow`` takes a C int: a float raises ``TypeError: an integer is required`` and a value
past 32 bits ``OverflowError``, with the credit untouched. amqp_async.proton took a float into the engine's credit
(1.5), and the flow frame then failed to encode: every later flow failed too, and no message came. One program,
run on each API (only its imports differ), against the embedded broker.

A terminus address that is not a string (``link.target.address = 123``) is proton's ``TypeError: Unrecognized string
type``; amqp_async.proton took it, and sent it to the peer as an int.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amqp_async.broker import BrokerThread

pytest.importorskip("proton", reason="python-qpid-proton is the reference the program is run on")

REPO = Path(__file__).resolve().parent.parent
PROGRAM = r"""
import importlib, sys
api, url, bad = sys.argv[1], sys.argv[2], eval(sys.argv[3])
handlers = importlib.import_module(api + ".handlers")
reactor = importlib.import_module(api + ".reactor")

class Receive(handlers.MessagingHandler):
    def __init__(self):
        super().__init__(prefetch=0)
        self.bodies = []

    def on_start(self, event):
        self.connection = event.container.connect(url)
        event.container.create_receiver(self.connection, "flow")

    def on_link_opened(self, event):
        if not event.link.is_receiver:
            return
        try:
            event.link.flow(bad)
            print("flow: taken")
        except Exception as exc:
            print(f"flow: {type(exc).__name__}: {exc}")
        print("credit:", event.link.credit)
        event.link.flow(2)

    def on_message(self, event):
        self.bodies.append(event.message.body)
        if len(self.bodies) == 2:
            print("received:", self.bodies)
            self.connection.close()

reactor.Container(Receive()).run()
"""


def run(api: str, url: str, bad: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, api, url, bad],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize(
    ("bad", "refusal"),
    [("1.5", "TypeError: an integer is required"), ("2**40", "OverflowError: integer 1099511627776 does not fit")],
)
def test_a_flow_proton_refuses_is_refused_alike_and_the_link_still_receives(bad: str, refusal: str) -> None:
    proton = importlib.import_module("proton")
    blocking = importlib.import_module("proton.utils")
    outputs = {}
    with BrokerThread(port=0) as broker:
        for api in ("proton", "amqp_async.proton"):
            sender = blocking.BlockingConnection(broker.url)
            try:
                link = sender.create_sender("flow")
                for body in ("one", "two"):
                    link.send(proton.Message(body=body))
            finally:
                sender.close()
            outputs[api] = run(api, broker.url, bad)
    for api, lines in outputs.items():
        assert lines[0].startswith(f"flow: {refusal}"), (api, lines)
        # before, on amqp_async.proton: "flow: LocalProtocolError: ... cannot send Flow: 1.5 cannot be encoded",
        # credit 1.5, and nothing received
        assert lines[1:] == ["credit: 0", "received: ['one', 'two']"], (api, lines)


@pytest.mark.parametrize("api", ["proton", "amqp_async.proton"])
@pytest.mark.parametrize("address", [123, b"q", [1]])
def test_a_terminus_address_that_is_not_a_string_is_refused_alike(api: str, address: object) -> None:
    # before, on amqp_async.proton: taken, and sent to the peer as an int, bytes or a list
    link = importlib.import_module(api).Connection().session().sender("link")
    with pytest.raises(TypeError, match=r"^Unrecognized string type: "):
        link.target.address = address
    link.target.address = "q"
    assert link.target.address == "q"


SURVIVOR = r"""
import importlib, sys
api, url, case = sys.argv[1], sys.argv[2], sys.argv[3]
proton = importlib.import_module(api)
handlers = importlib.import_module(api + ".handlers")
reactor = importlib.import_module(api + ".reactor")

class Bad(reactor.LinkOption):
    def apply(self, link):
        if case == "properties":
            link.properties = {proton.symbol("a"): object()}
        elif case == "max_message_size":
            link.max_message_size = -5
        else:
            link.target.timeout = "x"

class Program(handlers.MessagingHandler):
    def on_start(self, event):
        container = event.container
        self.bad = container.connect(url)
        try:
            container.create_sender(self.bad, "bad", options=Bad())
        except Exception as exc:  # proton's C binding refuses at the call
            print("refused at the call:", type(exc).__name__)
        self.good = container.connect(url)
        container.create_sender(self.good, "good")

    def on_sendable(self, event):
        if event.link.target.address == "good" and event.link.credit:
            event.sender.send(proton.Message(body="through"))
            event.link.close()

    def on_accepted(self, event):
        print("the other connection's message: accepted")
        self.good.close()
        if self.bad.state & proton.Endpoint.LOCAL_ACTIVE:
            self.bad.close()

    def on_transport_error(self, event):
        print("transport error:", event.transport.condition.name)

reactor.Container(Program()).run()
print("run returned")
"""


@pytest.mark.parametrize("api", ["proton", "amqp_async.proton"])
@pytest.mark.parametrize("case", ["properties", "max_message_size", "timeout"])
def test_a_value_no_frame_can_carry_ends_its_connection_not_the_container(api: str, case: str) -> None:
    with BrokerThread(port=0) as broker:
        result = subprocess.run(
            [sys.executable, "-c", SURVIVOR, api, broker.url, case],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    lines = result.stdout.splitlines()
    # before, on amqp_async.proton: run() raised an ExceptionGroup (LocalProtocolError, NegativeUnsignedError), and
    # the healthy connection's message never went
    assert result.returncode == 0, result.stderr
    assert "the other connection's message: accepted" in lines and lines[-1] == "run returned", lines
    if api == "amqp_async.proton" and not any(line.startswith("refused at the call") for line in lines):
        assert any(line.startswith("transport error: amqp:") for line in lines), lines


@pytest.mark.parametrize("api", ["proton", "amqp_async.proton"])
def test_update_and_drain_refuse_what_proton_refuses(api: str) -> None:
    module = importlib.import_module(api)
    session = module.Connection().session()
    delivery = session.sender("out").delivery(b"tag")
    for state, error in (("x", TypeError), (object(), TypeError), (1.5, TypeError), (-1, OverflowError)):
        with pytest.raises(error):  # before, on amqp_async.proton: taken, and failed where the disposition was written
            delivery.update(state)  # type: ignore[arg-type]
    delivery.update(module.Delivery.ACCEPTED)
    receiver = session.receiver("in")
    with pytest.raises(TypeError, match="an integer is required"):
        receiver.drain(1.5)
    receiver.drain(2)


@pytest.mark.parametrize("api", ["proton", "amqp_async.proton"])
def test_a_blocking_receiver_of_credit_0_asks_for_a_message_at_each_receive(api: str) -> None:
    module = importlib.import_module(api)
    blocking = importlib.import_module(api + ".utils")
    with BrokerThread(port=0) as broker:
        connection = blocking.BlockingConnection(broker.url, timeout=10)
        try:
            sender = connection.create_sender("pull")
            for body in ("one", "two"):
                sender.send(module.Message(body=body))
            receiver = connection.create_receiver("pull", credit=0)
            got = []
            for _ in range(2):
                got.append(receiver.receive(timeout=5).body)  # before, on amqp_async.proton: Timeout, no credit given
                receiver.accept()
            assert got == ["one", "two"]
        finally:
            connection.close()
