"""``AMQPError.info``: the ``info`` map of the peer's error (§2.8.14), typed ``dict[str, AMQPValue] | None``: its keys
are symbols (``fields``, §2.8.19), read with plain ``str`` keys.

The peer: python-qpid-proton's Container over TCP, refusing the connection with an ``amqp:connection:redirect`` whose
info names where to go (§2.8.15), as a broker behind a load balancer does.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from proton import Condition, symbol
from proton.handlers import MessagingHandler

import amqp_async
from amqp_async import AMQPError, ConnectionClosed

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = pytest.mark.anyio

TIMEOUT = 15.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


class Redirecting(MessagingHandler):  # type: ignore[misc]  # proton's classes are untyped
    """Closes each connection it opens with ``amqp:connection:redirect`` and ``info``."""

    def __init__(self, info: dict[Any, Any]) -> None:
        super().__init__()
        self.info = info

    def on_connection_opened(self, event: Any) -> None:
        event.connection.condition = Condition("amqp:connection:redirect", "go elsewhere", self.info)
        event.connection.close()


async def test_the_info_of_a_peers_error_is_read_with_str_keys() -> None:
    info = {symbol("network-host"): "b.example", symbol("port"): 5673}
    with anyio.fail_after(TIMEOUT), proton_server(Redirecting(info)) as url, pytest.raises(ConnectionClosed) as caught:
        await amqp_async.connect(url, reconnect=False)
    error = caught.value
    assert error.condition == "amqp:connection:redirect"
    assert error.info == {"network-host": "b.example", "port": 5673}
    assert error.info is not None and error.info.get("network-host") == "b.example"


async def test_a_non_symbol_key_of_a_peer_is_kept_as_a_str() -> None:
    # §2.8.19: the keys of fields are symbols. A peer that breaks that (proton encodes the int as given) still
    # gets its words through, under the key's str(), so that the attribute holds what its type says.
    info = {symbol("network-host"): "b.example", 7: "not a symbol"}
    with anyio.fail_after(TIMEOUT), proton_server(Redirecting(info)) as url, pytest.raises(ConnectionClosed) as caught:
        await amqp_async.connect(url, reconnect=False)
    assert caught.value.info == {"network-host": "b.example", "7": "not a symbol"}
    assert all(isinstance(key, str) for key in caught.value.info)


def test_an_application_error_takes_any_str_keyed_mapping_and_keeps_a_copy() -> None:
    counts = {"limit": 10}
    error = AMQPError("too many", condition="amqp:resource-limit-exceeded", info=counts)
    counts["limit"] = 11
    assert error.info == {"limit": 10}
    assert AMQPError("none").info is None
