"""``Broker(...)`` refuses the limits the command line refuses, at the call: a ``max_queue_depth`` of 0 had every
send to a queue wait for ever with nothing logged, ``max_connections=0`` refused every client, and a port out of
range failed only as the broker started, with a bare ``OverflowError`` from ``bind``."""

from __future__ import annotations

from typing import Any

import pytest

from amqp_async.broker import Broker


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_queue_depth": 0}, "max_queue_depth must be a whole number of at least 1"),
        ({"max_queue_depth": -5}, "max_queue_depth must be a whole number of at least 1"),
        ({"max_queue_depth": 2.5}, "max_queue_depth must be a whole number of at least 1"),
        ({"max_queue_depth": True}, "max_queue_depth must be a whole number of at least 1"),
        ({"max_connections": 0}, "max_connections must be a whole number of at least 1"),
        ({"transaction_timeout": 0}, "transaction_timeout must be above 0 seconds"),
        ({"port": 70000}, "port must be from 0"),
        ({"ws_port": -1}, "ws_port must be from 0"),
    ],
)
def test_a_limit_the_command_line_refuses_is_refused_at_the_call(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Broker(**options)


def test_the_limits_a_broker_may_have_are_taken() -> None:
    broker = Broker(port=0, ws_port=0, max_queue_depth=1, max_connections=1, transaction_timeout=0.5)
    assert (broker.max_queue_depth, broker.max_connections) == (1, 1)
