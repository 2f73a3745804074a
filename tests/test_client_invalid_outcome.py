"""A peer that settles a message with a delivery state that is not an outcome (§3.4) fails that send with a
``DeliveryError`` naming ``amqp:invalid-field``, rather than ``send()`` returning the state as if it were one.

The outcomes of a transfer are accepted, rejected, released and modified (§3.4), and the extensions a sender lists
in its source's ``outcomes``, which ours never does. A ``declared`` state belongs to a transaction coordinator's
link (§4.5.3) and a ``received`` state is not terminal (§3.4.1). ``send()`` returned them, where the typed API
promises ``Accepted()`` or an error. The peer is python-qpid-proton, settling with a state of a described type it
writes from its number and fields (proton's ``Disposition.data``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import amqp_async

proton_handlers = pytest.importorskip("proton.handlers", reason="python-qpid-proton is the reference peer")
try:  # after the importorskip that explains proton's absence
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = pytest.mark.anyio

#: §4.5.3 declared, §3.4.1 received: their descriptor codes, and fields proton writes as the list of the state.
DECLARED = (0x33, [b"txn-1"])
RECEIVED = (0x23, [0, 0])


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _SettlingServer(proton_handlers.MessagingHandler):  # type: ignore[misc]
    """Settles every message with the state of the number and fields named by its body (``"0x33"``...)."""

    def __init__(self) -> None:
        super().__init__(auto_accept=False)

    def on_message(self, event: Any) -> None:
        delivery = event.delivery
        body = event.message.body
        if body == "accept":
            self.accept(delivery)
            return
        number, fields = {"declared": DECLARED, "received": RECEIVED}[body]
        delivery.local.data = fields
        delivery.update(number)
        delivery.settle()


@pytest.fixture
def server() -> Iterator[str]:
    with proton_server(_SettlingServer()) as url:
        yield url


@pytest.mark.parametrize("state", ["declared", "received"])
async def test_a_state_that_is_not_an_outcome_fails_the_send(server: str, state: str) -> None:
    with anyio.fail_after(10):
        async with amqp_async.connect(server) as conn:
            sender = await conn.open_sender("q")
            with pytest.raises(amqp_async.DeliveryError) as caught:
                await sender.send(amqp_async.Message(body=state))
            assert caught.value.condition == "amqp:invalid-field"
            assert "not an outcome" in str(caught.value)
            assert type(caught.value.outcome).__name__ == state.capitalize()
            # the link and the connection go on
            assert await sender.send(amqp_async.Message(body="accept")) == amqp_async.Accepted()
