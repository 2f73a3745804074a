"""A receiver's credit read in ``on_message`` with a prefetch, in amqp_async.proton beside python-qpid-proton 0.40:
the same program on each reads the same values, and ours writes no more flows than before.

proton's FlowController sets a receiver's credit to the prefetch at every delivery (its credit: what was granted,
less the deliveries advanced past), just before ``on_message``: the program reads the prefetch less one, however the
messages arrive. Ours tops up once a quarter of the prefetch is used (fewer, larger flows), and counts the deliveries
of a read that wait for their events as used; the credit it shows is proton's all the same. Each scenario runs in a
subprocess of its own (``python this_file.py SCENARIO IMPL OPTIONS``: a hang fails the test), against the embedded
broker, once on real proton and once on ours; ours counts the flow frames it writes (the frame trace's logger).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest
from scenario_subprocess import run_scenario, scenario_main

SUBPROCESS_TIMEOUT = 60.0


class _FlowsWritten(logging.Handler):
    """Counts the flow frames the frame trace (``AMQP_ASYNC_TRACE_FRM``) shows going out (ours only)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("-> ") and " Flow(" in message:
            self.count += 1


def receive_with_prefetch(name: str, options: dict[str, Any]) -> Any:
    """``options["messages"]`` messages through the broker to a receiver with ``options["prefetch"]``: all queued
    before the receiver is made (``options["queued_first"]``: they arrive in reads of many), or sent one at a time,
    the next once the previous is received. Recorded: the receiver's credit when it opens and in each
    ``on_message`` (and after a drain asked for in the last, with ``options["drain"]``), and (ours) the flow frames
    written."""
    from amqp_async.broker import BrokerThread

    flows = _FlowsWritten()
    frames = logging.getLogger("amqp_async.frames")
    frames.addHandler(flows)
    frames.propagate = False
    base = importlib.import_module(name)
    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    count = options["messages"]
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=options["prefetch"])
            self.sent = self.accepted = self.received = 0

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, reconnect=False)
            if options["queued_first"]:
                self.sender = event.container.create_sender(self.connection, "q")
            else:
                event.container.create_receiver(self.connection, "q")

        def on_link_opened(self, event: Any) -> None:
            if event.link.is_receiver:
                record.append(["opened", event.link.credit])
                if not options["queued_first"]:
                    self.sender = event.container.create_sender(self.connection, "q")

        def on_sendable(self, event: Any) -> None:
            wanted = count if options["queued_first"] else 1
            while event.sender.credit and self.sent < wanted:
                self._send()

        def on_accepted(self, event: Any) -> None:
            self.accepted += 1
            if options["queued_first"] and self.accepted == count:
                event.container.create_receiver(self.connection, "q")

        def on_message(self, event: Any) -> None:
            record.append(event.receiver.credit)
            self.received += 1
            if self.received == count:
                if options.get("drain"):
                    event.receiver.drain(0)
                    record.append(["drain", event.receiver.credit])
                event.connection.close()
            elif not options["queued_first"]:
                self._send()

        def _send(self) -> None:
            self.sender.send(base.Message(body=self.sent))
            self.sent += 1

    with BrokerThread() as broker:
        url = broker.url
        reactor.Container(Client()).run()
    return {"credits": record, "flows": flows.count}


def drain_in_on_message(name: str, options: dict[str, Any]) -> Any:
    """``options["messages"]`` messages queued on the broker, then a receiver with ``options["prefetch"]`` (with
    none, ``flow(messages)`` as it is made) that asks for a drain in the ``on_message`` of the last: with
    ``options["how"]`` ``"drain"`` ``receiver.drain(0)``, with ``"flow_drain"`` ``receiver.flow(5)`` then
    ``link.drain(0)``. Recorded: the credit in each ``on_message`` and after the drain, each ``on_link_flow`` of the
    receiver (its credit, its drain mode) until the connection closes a while after the drain's answer, and (ours)
    the flow frames written."""
    from amqp_async.broker import BrokerThread

    flows = _FlowsWritten()
    frames = logging.getLogger("amqp_async.frames")
    frames.addHandler(flows)
    frames.propagate = False
    base = importlib.import_module(name)
    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    count, prefetch = options["messages"], options["prefetch"]
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=prefetch)
            self.sent = self.accepted = self.received = 0
            self.closing = False

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, reconnect=False)
            event.container.create_sender(self.connection, "q")

        def on_sendable(self, event: Any) -> None:
            while event.sender.credit and self.sent < count:
                event.sender.send(base.Message(body=self.sent))
                self.sent += 1

        def on_accepted(self, event: Any) -> None:
            self.accepted += 1
            if self.accepted == count:
                receiver = event.container.create_receiver(self.connection, "q")
                if not prefetch:
                    receiver.flow(count)

        def on_message(self, event: Any) -> None:
            record.append(event.receiver.credit)
            self.received += 1
            if self.received == count:
                if options["how"] == "drain":
                    event.receiver.drain(0)
                else:
                    event.receiver.flow(5)
                    event.link.drain(0)
                record.append(["drain", event.receiver.credit])

        def on_link_flow(self, event: Any) -> None:
            if event.link.is_receiver:
                record.append(["flow", event.link.credit, bool(event.link.drain_mode)])
                if not self.closing:
                    # A while for a second answer to show (the broker answers each flow that asks for a drain)
                    self.closing = True
                    event.container.schedule(0.5, self)

        def on_timer_task(self, event: Any) -> None:
            self.connection.close()

    with BrokerThread() as broker:
        url = broker.url
        reactor.Container(Client()).run()
    return {"record": record, "flows": flows.count}


SCENARIOS = {"receive_with_prefetch": receive_with_prefetch, "drain_in_on_message": drain_in_on_message}


def _run(scenario: str, impl: str, options: dict[str, Any]) -> Any:
    # ours: the frame trace, to count the flows (proton ignores it)
    return run_scenario(
        __file__, scenario, impl, options, extra_env={"AMQP_ASYNC_TRACE_FRM": "1"}, timeout=SUBPROCESS_TIMEOUT
    )


pytestmark = [pytest.mark.interop]
pytest.importorskip("proton")


@pytest.mark.parametrize("prefetch", [10, 100])
def test_credit_in_on_message_of_a_batch_is_protons(prefetch: int) -> None:
    """Messages queued before the receiver arrive in reads of many: proton reads the prefetch less one in every
    ``on_message`` (ours read up to twice the prefetch less one while a read was dispatched)."""
    messages = 40
    options = {"messages": messages, "prefetch": prefetch, "queued_first": True}
    reference = _run("receive_with_prefetch", "proton", options)
    assert reference["credits"] == [["opened", prefetch]] + [prefetch - 1] * messages  # the test's premise
    ours = _run("receive_with_prefetch", "amqp_async.proton", options)
    assert ours["credits"] == reference["credits"]
    # The flows stay ours: each top-up gives at least a quarter of the prefetch, and the credit given never goes
    # beyond the prefetch, so at most this many (proton writes one per message).
    assert 1 <= ours["flows"] <= 1 + (messages + prefetch) // -(-prefetch // 4)


def test_credit_after_a_drain_in_on_message_is_protons() -> None:
    """A drain asked for in ``on_message`` gives the credit proton's would have given: the prefetch less one."""
    messages, prefetch = 3, 10
    options = {"messages": messages, "prefetch": prefetch, "queued_first": True, "drain": True}
    reference = _run("receive_with_prefetch", "proton", options)
    assert reference["credits"] == [["opened", prefetch]] + [prefetch - 1] * messages + [["drain", prefetch - 1]]
    ours = _run("receive_with_prefetch", "amqp_async.proton", options)
    assert ours["credits"] == reference["credits"]


def test_credit_in_on_message_one_at_a_time_is_protons() -> None:
    """One message at a time (the next sent once the previous is received): proton reads 9 each time (ours read 9,
    8, then 10 after its top-up), and ours writes the same flows as before: the attach's credit, then a top-up
    every third message (a quarter of the prefetch, rounded up)."""
    messages, prefetch = 20, 10
    options = {"messages": messages, "prefetch": prefetch, "queued_first": False}
    reference = _run("receive_with_prefetch", "proton", options)
    assert reference["credits"] == [["opened", prefetch]] + [prefetch - 1] * messages  # the test's premise
    ours = _run("receive_with_prefetch", "amqp_async.proton", options)
    assert ours["credits"] == reference["credits"]
    assert ours["flows"] == 1 + messages // 3


@pytest.mark.parametrize(
    ("messages", "prefetch", "how"),
    [(3, 10, "drain"), (3, 10, "flow_drain"), (3, 0, "flow_drain"), (10, 10, "drain"), (10, 10, "flow_drain")],
    ids=["prefetch", "prefetch+flow", "flow", "prefetch-used-up", "prefetch-used-up+flow"],
)
def test_drain_in_on_message_is_one_flow_as_protons(messages: int, prefetch: int, how: str) -> None:
    """A drain asked for in ``on_message``, after a flow given in the same read (the prefetch's top-up, or the
    program's ``flow(5)``): proton writes the two in one flow frame, and the program sees one ``on_link_flow`` (the
    drain's answer). Ours wrote the flow at once and the drain in a frame of its own; the broker, reading both
    together, answered each (its link asks for a drain by then) and the program saw two ``on_link_flow``.

    With the whole prefetch in one read (10 of 10), the sender is out of credit at the first message: ours writes
    that top-up early (before the round of callbacks ends: Container._write_soon), and wrote it once the first
    message's callbacks returned, the drain at the tenth going in a second flow frame (the credit 10, then the
    drain with 9; proton's one frame has the drain with 9). An early write now waits for a few events' callbacks
    unless the round ends first."""
    options = {"messages": messages, "prefetch": prefetch, "how": how}
    reference = _run("drain_in_on_message", "proton", options)
    assert [entry for entry in reference["record"] if isinstance(entry, list) and entry[0] == "flow"] == [
        ["flow", 0, True]
    ]  # the premise
    ours = _run("drain_in_on_message", "amqp_async.proton", options)
    assert ours["record"] == reference["record"]
    # The attach's credit (or the program's first flow), then one flow: the top-up and the drain together.
    assert ours["flows"] == 2


if __name__ == "__main__":
    scenario_main(SCENARIOS)
