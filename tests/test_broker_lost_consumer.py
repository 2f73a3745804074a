"""A consumer's lost connection counts as a failed delivery attempt: a poison message that crashes every consumer
that takes it ends in the dead-letter queue at ``--delivery-limit``, instead of going round for ever.

Before, a connection lost (its transport ended without a close frame, or its peer went silent past the idle
timeout) released what its consumers held without counting: the header's delivery-count stayed 0, and
``--delivery-limit`` never gave such a message up. Now each such delivery counts as modified with delivery-failed
(§3.4.5; §3.2.1 delivery-count, "the number of unsuccessful previous attempts to deliver this message"), as
RabbitMQ's quorum queues and ActiveMQ Artemis count it; the dead-letter annotations say the last attempt was a
lost connection. A close the consumer sends is the application's decision: released, not counted, as before.

Peers: the embedded broker as a process (``python -m amqp_async.broker``), python-qpid-proton's BlockingConnection
as the consumer in a process of its own killed with SIGKILL, raw sockets that take a message and close (or go
silent), and the broker killed and restarted on its ``--data-dir``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from broker_process import REPO, BrokerProcess
from frames import AMQP_HEADER, frame, frames_only

from amqp_async.codec.delivery_states import Modified
from amqp_async.codec.performatives import RECEIVER, Attach, Begin, Close, Flow, Open, Transfer
from amqp_async.codec.terminus import Source, Target

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import reactor as proton_reactor  # noqa: E402 - after the importorskip that explains its absence
from proton import utils as proton_utils  # noqa: E402

TIMEOUT = 30.0
LIMITED = ("--delivery-limit", "2", "--dead-letter-queue", "DLQ")
REASON = "x-opt-dead-letter-reason"
DESCRIPTION = "x-opt-dead-letter-description"
CONDITION = "x-opt-dead-letter-condition"

#: A consumer that takes one message, says what it got on stdout, and hangs until it is killed (a crash).
CONSUMER = """
import sys, time
from proton.utils import BlockingConnection
connection = BlockingConnection(sys.argv[1], timeout=30)
receiver = connection.create_receiver(sys.argv[2], credit=1)
message = receiver.receive(timeout=30)
print(f"{message.body}|{message.delivery_count}", flush=True)
if sys.argv[3] == "close":
    connection.close()  # the application's decision: unsettled, released
    print("closed", flush=True)
time.sleep(3600)
"""


def send(url: str, address: str, body: str, *, durable: bool = False) -> None:
    connection = proton_utils.BlockingConnection(url, timeout=TIMEOUT)
    try:
        connection.create_sender(address).send(proton.Message(body=body, durable=durable))
    finally:
        connection.close()


def take(url: str, address: str, *, timeout: float = TIMEOUT) -> Any:
    """Receive and accept one message (None when none comes within ``timeout``)."""
    connection = proton_utils.BlockingConnection(url, timeout=TIMEOUT)
    try:
        receiver = connection.create_receiver(address, credit=1)
        try:
            message = receiver.receive(timeout=timeout)
        except proton.Timeout:
            return None
        receiver.accept()
        return message
    finally:
        connection.close()


def crash_a_consumer(url: str, address: str, *, close: bool = False) -> tuple[str, int]:
    """Run a python-qpid-proton consumer in a process of its own until it has a message, then SIGKILL it (with
    ``close``: once it has closed its connection itself). Returns the body and delivery-count it saw."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    process = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, url, address, "close" if close else "crash"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()  # its receive times out after 30 s: this never waits for ever
        if close:
            assert process.stdout.readline().strip() == "closed"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(TIMEOUT)
        if process.stdout is not None:
            process.stdout.close()
    body, count = line.split("|")
    return body, int(count)


def raw_consumer(port: int, address: str, *, silent: bool = False, close: bool = False, source: Any = None) -> None:
    """A consumer on a raw socket: open, begin, attach (``source``: its source, by default one of ``address``),
    credit; once a transfer arrives, the socket is closed without a close frame (with ``silent``: kept open and
    silent until the broker closes it, its idle timeout passed; with ``close``: after a close frame, and its
    answer)."""
    source = Source(address=address) if source is None else source
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(
            AMQP_HEADER
            + frame(Open(container_id="raw"))
            + frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))
            + frame(Attach(name="r", handle=0, role=RECEIVER, source=source, target=Target()))
            + frame(
                Flow(
                    next_incoming_id=0,
                    incoming_window=100,
                    next_outgoing_id=0,
                    outgoing_window=100,
                    handle=0,
                    delivery_count=0,
                    link_credit=1,
                )
            )
        )
        received = bytearray()
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break  # the broker closed it (silent: its idle timeout)
            received += chunk
            if not silent and _has_transfer(received):
                if close:
                    sock.sendall(frame(Close()))
                    while chunk:  # until the broker's close, and the end of the socket
                        chunk = sock.recv(65536)
                return  # (without close: closed without a close frame, a crash)
        assert _has_transfer(received), "no transfer came"
        assert silent, "the broker closed the socket"


def _credit(handle: int, credit: int) -> bytes:
    return frame(
        Flow(
            next_incoming_id=0,
            incoming_window=100,
            next_outgoing_id=0,
            outgoing_window=100,
            handle=handle,
            delivery_count=0,
            link_credit=credit,
        )
    )


def _bodies(received: bytes) -> list[Any]:
    """The performatives the broker sent so far (none while a frame is cut in two: more to come)."""
    try:
        return [item.body for item in frames_only(received[len(AMQP_HEADER) :])]
    except Exception:
        return []


def _has_transfer(received: bytes) -> bool:
    return any(isinstance(body, Transfer) for body in _bodies(received))


def browse(url: str, address: str) -> Any:
    """The first message at ``address``, browsed (distribution-mode copy: left in the queue, nothing counted)."""
    connection = proton_utils.BlockingConnection(url, timeout=TIMEOUT)
    try:
        receiver = connection.create_receiver(address, credit=1, options=proton_reactor.Copy())
        return receiver.receive(timeout=TIMEOUT)
    finally:
        connection.close()


def dead_letter(url: str) -> Any:
    message = take(url, "DLQ")
    assert message is not None, "nothing in the dead-letter queue"
    return message


def test_a_message_that_crashes_each_consumer_goes_to_the_dead_letter_queue_at_the_limit() -> None:
    with BrokerProcess(*LIMITED) as broker:
        send(broker.url, "work", "poison")
        assert crash_a_consumer(broker.url, "work") == ("poison", 0)
        # Before: ("poison", 0) again, and for ever: the crash was not counted.
        assert crash_a_consumer(broker.url, "work") == ("poison", 1)
        message = dead_letter(broker.url)
        assert (message.body, message.delivery_count) == ("poison", 2)
        annotations = message.annotations
        assert annotations[REASON] == "delivery-limit"
        assert annotations[CONDITION] == "amqp:connection:forced"
        description = annotations[DESCRIPTION]
        assert description.startswith("2 failed deliveries (the limit is 2), the last: its consumer's connection")
        assert "was lost" in description, description
        assert take(broker.url, "work", timeout=0.5) is None


def test_a_raw_consumer_that_closes_its_socket_counts_as_a_failed_delivery() -> None:
    with BrokerProcess(*LIMITED) as broker:
        send(broker.url, "work", "poison")
        raw_consumer(broker.port, "work")
        raw_consumer(broker.port, "work")
        message = dead_letter(broker.url)
        assert (message.body, message.delivery_count) == ("poison", 2)
        assert message.annotations[CONDITION] == "amqp:connection:forced"
        assert take(broker.url, "work", timeout=0.5) is None


def test_a_lost_connection_counts_each_delivery_once_with_another_consumer_of_the_queue_on_it() -> None:
    # Its second consumer, with credit left, took the message the first one returned (its link still open on our
    # side), and returned it too: counted twice for one crash.
    with BrokerProcess(*LIMITED) as broker:
        send(broker.url, "work", "poison")
        with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
            sock.sendall(
                AMQP_HEADER
                + frame(Open(container_id="raw"))
                + frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))
                + frame(Attach(name="a", handle=0, role=RECEIVER, source=Source(address="work"), target=Target()))
                + _credit(0, 1)
            )
            received = bytearray()
            while not _has_transfer(received):
                chunk = sock.recv(65536)
                assert chunk, "the broker closed the socket"
                received += chunk
            sock.sendall(
                frame(Attach(name="b", handle=1, role=RECEIVER, source=Source(address="work"), target=Target()))
                + _credit(1, 5)
            )
            # its attach answered: the broker has the second consumer before the socket ends
            while sum(isinstance(body, Attach) for body in _bodies(received)) < 2:
                chunk = sock.recv(65536)
                assert chunk, "the broker closed the socket"
                received += chunk
        assert browse(broker.url, "work").delivery_count == 1  # before the fix: 2, and in the dead-letter queue


def test_the_dead_letter_queue_keeps_a_message_whose_consumers_crash() -> None:
    # The dead-letter queue keeps what it holds for someone to look at: an inspecting consumer that crashed twice
    # would have had it dropped at the delivery limit (a message given up there has nowhere to go).
    with BrokerProcess(*LIMITED) as broker:
        send(broker.url, "DLQ", "inspected")
        for _ in range(3):
            raw_consumer(broker.port, "DLQ")
        message = dead_letter(broker.url)
        assert (message.body, message.delivery_count) == ("inspected", 3)


def test_a_consumer_that_goes_silent_past_the_idle_timeout_counts_as_a_failed_delivery() -> None:
    with BrokerProcess(*LIMITED, "--idle-timeout", "1") as broker:
        send(broker.url, "work", "poison")
        raw_consumer(broker.port, "work", silent=True)
        raw_consumer(broker.port, "work", silent=True)
        message = dead_letter(broker.url)
        assert (message.body, message.delivery_count) == ("poison", 2)
        assert message.annotations[CONDITION] == "amqp:resource-limit-exceeded"
        assert "local-idle-timeout expired" in message.annotations[DESCRIPTION]


def test_a_consumer_that_closes_its_connection_releases_without_counting() -> None:
    with BrokerProcess(*LIMITED) as broker:
        send(broker.url, "work", "kept")
        for _ in range(3):  # past the limit: a close is no failed attempt
            assert crash_a_consumer(broker.url, "work", close=True) == ("kept", 0)
        message = take(broker.url, "work")
        assert (message.body, message.delivery_count) == ("kept", 0)
        assert take(broker.url, "DLQ", timeout=0.5) is None


def test_a_consumer_that_closes_its_connection_gives_its_unsettled_messages_its_default_outcome() -> None:
    # §3.5.3 default-outcome, as at a detach: here modified with delivery-failed, so counted (before: released)
    counting = Source(address="work", default_outcome=Modified(delivery_failed=True))
    with BrokerProcess(*LIMITED) as broker:
        send(broker.url, "work", "refused twice")
        raw_consumer(broker.port, "work", close=True, source=counting)
        raw_consumer(broker.port, "work", close=True, source=counting)
        message = dead_letter(broker.url)
        assert (message.body, message.delivery_count) == ("refused twice", 2)
        assert message.annotations[DESCRIPTION] == "2 failed deliveries (the limit is 2)"  # no connection was lost
        assert CONDITION not in message.annotations


def test_the_count_of_a_lost_connection_is_kept_across_a_restart_with_a_data_dir(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with BrokerProcess(*LIMITED, "--data-dir", data) as broker:
        send(broker.url, "work", "poison", durable=True)
        assert crash_a_consumer(broker.url, "work") == ("poison", 0)
        # the broker counts it once it sees the consumer gone: seen by a browser (which counts nothing)
        assert browse(broker.url, "work").delivery_count == 1
        # a durable message is accepted once stored: its commit covers the change counted before it
        send(broker.url, "sync", "stored", durable=True)
        broker.kill()
        broker.start()
        assert crash_a_consumer(broker.url, "work") == ("poison", 1)  # before: 0 again after the restart
        assert browse(broker.url, "DLQ").delivery_count == 2
        send(broker.url, "sync", "stored", durable=True)
        broker.kill()
        broker.start()
        message = dead_letter(broker.url)  # the dead-letter queue keeps a durable message too
        assert (message.body, message.delivery_count) == ("poison", 2)
        assert message.annotations[REASON] == "delivery-limit"
        assert take(broker.url, "work", timeout=0.5) is None
