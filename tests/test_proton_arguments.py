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
