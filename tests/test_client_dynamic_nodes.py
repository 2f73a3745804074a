"""Dynamic nodes (§3.5.3, §3.5.4) answered without their address: ``open_receiver(None, dynamic=True)`` (the
reply queue of a request/reply) and ``open_sender(None, dynamic=True)`` against a python-qpid-proton server that
attaches the dynamic terminus back without the address of the node it made.

The spec: "The address of the source MUST be set when sent on a attach frame sent by the sending link endpoint
where the dynamic flag is set to true" (§3.5.3; likewise the target, §3.5.4). Before, the open returned a link
whose ``address`` was None: a request sent with ``reply_to=receiver.address`` went out with no reply-to, and the
caller waited for a reply that could not come. Now the open raises ``LinkError`` (``amqp:invalid-field``) naming
the link, the link is detached with that error (the peer is told why), and the connection goes on.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the peer; the test dependency group has it")
from proton.handlers import MessagingHandler

import amqp_async
from amqp_async import LinkError, Message

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

TIMEOUT = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _DynamicWithoutAddress(MessagingHandler):
    """Opens every link, its termini copied, except that a dynamic terminus comes back dynamic with no address
    (when ``named`` is false); records the conditions of the detaches it receives."""

    def __init__(self, *, named: bool) -> None:
        super().__init__()
        self.named = named
        self.detach_conditions: list[tuple[str, str | None]] = []
        self.detached = threading.Event()

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        for local, remote in ((link.source, link.remote_source), (link.target, link.remote_target)):
            if remote.dynamic:
                local.dynamic = True
                if self.named:
                    local.address = f"made-for-{link.name}"
            else:
                local.copy(remote)

    def on_link_error(self, event: Any) -> None:
        # A detach with an error (proton's default closes the whole connection): recorded and answered.
        self._record(event.link)
        event.link.close()

    def on_link_closing(self, event: Any) -> None:
        self._record(event.link)

    def _record(self, link: Any) -> None:
        condition = link.remote_condition
        self.detach_conditions.append((link.name, None if condition is None else condition.name))
        self.detached.set()


async def _wait(event: threading.Event) -> None:
    while not event.is_set():
        await anyio.sleep(0.01)


@pytest.mark.parametrize("role", ["receiver", "sender"])
async def test_a_dynamic_node_answered_without_its_address_fails_the_open(role: str) -> None:
    handler = _DynamicWithoutAddress(named=False)
    with proton_server(handler) as url:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url) as conn:
                opening = (
                    conn.open_receiver(None, dynamic=True)
                    if role == "receiver"
                    else conn.open_sender(None, dynamic=True)
                )
                with pytest.raises(LinkError) as raised:
                    await opening
                assert raised.value.condition == "amqp:invalid-field"
                assert f"dynamic {role}" in str(raised.value)
                assert "without the address" in str(raised.value)
                await _wait(handler.detached)
                assert [condition for _, condition in handler.detach_conditions] == ["amqp:invalid-field"]
                # only that link failed: the connection goes on
                async with conn.open_sender("requests") as sender:
                    assert await sender.send(Message(body="still here")) is not None


async def test_a_dynamic_receiver_answered_with_its_address_opens_on_it() -> None:
    handler = _DynamicWithoutAddress(named=True)
    with proton_server(handler) as url:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url) as conn:
                async with conn.open_receiver(None, dynamic=True) as replies:
                    assert replies.address == f"made-for-{replies.name}"
                async with conn.open_sender(None, dynamic=True) as sender:
                    assert sender.address == f"made-for-{sender.name}"
