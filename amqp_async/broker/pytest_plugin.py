"""A pytest fixture for users' own tests: an embedded broker on a free port.

Use it with ``pytest_plugins = ["amqp_async.broker.pytest_plugin"]`` in a conftest.py; then::

    def test_something(amqp_broker):
        url = amqp_broker.url  # amqp://127.0.0.1:PORT, fresh for each test

The broker runs in a background thread, so the fixture serves synchronous and asynchronous tests alike. It takes
the options of :class:`~amqp_async.broker.Broker` from a marker on the test (or its class or module)::

    @pytest.mark.amqp_broker(dead_letter_queue="DLQ", delivery_limit=3)
    def test_poison_message(amqp_broker): ...

or, for every test under a conftest.py or in a module, from a fixture named ``amqp_broker_options`` defined there
(a dict; the marker's options win over it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ._thread import BrokerThread

__all__ = ["amqp_broker"]

#: The marker whose keyword arguments the broker of a test is made with.
MARKER = "amqp_broker"


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker (``pytest --markers`` lists it; ``--strict-markers`` takes it)."""
    config.addinivalue_line("markers", f"{MARKER}(**options): the options of the amqp_broker fixture's Broker")


@pytest.fixture
def amqp_broker(request: pytest.FixtureRequest) -> Iterator[BrokerThread]:
    """An embedded broker on a free port for one test, with the options of its ``amqp_broker`` marker and of an
    ``amqp_broker_options`` fixture, if any."""
    options: dict[str, Any] = {}
    try:  # looked up rather than required, so that a test module may import this fixture alone
        options.update(request.getfixturevalue("amqp_broker_options"))
    except pytest.FixtureLookupError:
        pass
    for marker in reversed(list(request.node.iter_markers(MARKER))):  # the closest (the test's own) last: it wins
        options.update(marker.kwargs)
    with BrokerThread(**options) as broker:
        yield broker
