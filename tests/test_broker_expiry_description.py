"""The dead-letter description of an expired message says when it expired (amqp_async/broker/_nodes.py,
``expired_description``, used by ``Queue.expire``).

Before, every expired message was described "expired (ttl or absolute-expiry-time) before it was delivered": no
time to tell a ttl too short from a consumer too slow, and wrong for a message that a consumer held past its
expiry and then released (it had been delivered). python-qpid-proton as the producer and the consumer that holds
the message, `--dead-letter-queue` on the embedded broker.
"""

from __future__ import annotations

import calendar
import re
import time

import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Message
from proton.utils import BlockingConnection

from amqp_async.broker import BrokerThread

TIMEOUT = 30.0
TTL = 0.4
DESCRIPTION = re.compile(
    r"expired at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z \(its ttl, counted from its arrival here, or its "
    r"absolute-expiry-time\) before it was consumed"
)


def expired_at(description: str) -> float:
    """The expiry time a description names, in seconds since the epoch."""
    match = DESCRIPTION.fullmatch(description)
    assert match is not None, description
    return calendar.timegm(time.strptime(match[1], "%Y-%m-%dT%H:%M:%S")) + int(match[2]) / 1000


@pytest.mark.parametrize("expiry", ["ttl", "absolute-expiry-time"])
def test_a_message_held_past_its_expiry_then_released_is_dead_lettered_saying_when_it_expired(expiry: str) -> None:
    with BrokerThread(port=0, dead_letter_queue="DLQ", expiry_interval=0.1) as running:
        connection = BlockingConnection(running.url, timeout=TIMEOUT)
        try:
            before = time.time()
            if expiry == "ttl":
                message = Message(body="held", ttl=TTL)
            else:
                message = Message(body="held", expiry_time=before + TTL)
            connection.create_sender("orders").send(message)
            after = time.time()
            receiver = connection.create_receiver("orders", credit=1)
            assert receiver.receive(timeout=TIMEOUT).body == "held"
            time.sleep(TTL + 0.3)  # past its expiry, held by this consumer
            receiver.release()  # back to its queue, expired: dead-lettered
            dead = connection.create_receiver("DLQ", credit=1).receive(timeout=TIMEOUT)
        finally:
            connection.close()
    annotations = {str(key): value for key, value in dead.annotations.items()}
    assert annotations["x-opt-dead-letter-reason"] == "expired"
    when = expired_at(annotations["x-opt-dead-letter-description"])
    assert before + TTL - 0.002 <= when <= after + TTL + 0.002
