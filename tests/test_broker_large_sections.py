"""A message whose sections other than its body are large is taken with a data directory too (broker/_assembly.py).

With ``--data-dir``, a message past ``large_message_size`` goes to a file as it arrives, and only its leading
sections (header, annotations, properties, application-properties) stay in memory, read by a ``SectionReader``
that keeps at most 1 MiB of them. A valid message with a 1.1 MB application property and a 10-byte body was
accepted without ``--data-dir`` and rejected with it, as ``amqp:decode-error`` ("a message kept on disk must be an
AMQP message: the message's sections other than its body take more than 1048576 bytes"). Now it is kept whole in
memory, within the memory limit, as it would be without a data directory; one the memory limit has no room for is
refused with ``amqp:resource-limit-exceeded``, the limit named, never as a message that does not decode.

Here a 1.5 MB application property, through our client and python-qpid-proton: delivered intact, durable ones
after a restart too, with a small body and with a body of 2 MB; no file left behind; and a message larger than
what the memory limit leaves refused for that limit.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker, BrokerThread

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage  # noqa: E402 - after the importorskip that explains its absence
from proton import utils as proton_utils  # noqa: E402

TIMEOUT = 10.0
#: An application property of 1.5 MB: the leading sections pass the 1 MiB a SectionReader keeps.
PAD = "p" * 1_500_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def body_files(data: Path) -> list[Path]:
    bodies = data / "bodies"
    return sorted(bodies.iterdir()) if bodies.is_dir() else []


@pytest.mark.anyio
@pytest.mark.parametrize("body", [b"0123456789", bytes(range(256)) * 8192], ids=["10 bytes", "2 MiB"])
async def test_our_client_s_message_with_large_application_properties_is_taken_with_a_data_directory(
    tmp_path: Path, body: bytes
) -> None:
    data = tmp_path / "data"
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0, data_dir=data) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            sender = await conn.open_sender("props")
            # before: MessageRejected amqp:decode-error, "... sections other than its body take more than 1048576"
            await sender.send(Message(body=body, properties={"pad": PAD, "n": 1}))
            await sender.send(Message(body=body, durable=True, properties={"pad": PAD, "n": 2}))
            receiver = await conn.open_receiver("props", credit=1)
            delivery = await receiver.receive()
            assert delivery.message.properties == {"pad": PAD, "n": 1}
            assert delivery.message.body == body
            await delivery.accept()
        assert body_files(data) == []  # the file it was written to as it came is gone
        async with Broker(port=0, data_dir=data) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            receiver = await conn.open_receiver("props", credit=1)
            delivery = await receiver.receive()  # the durable one, after a restart
            assert delivery.message.properties == {"pad": PAD, "n": 2}
            assert delivery.message.body == body
            assert delivery.message.durable
            await delivery.accept()


def test_python_qpid_proton_s_message_with_large_application_properties_is_taken_with_a_data_directory(
    tmp_path: Path,
) -> None:
    with BrokerThread(data_dir=tmp_path / "data") as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            sender = connection.create_sender("props")
            # before: SendException(REJECTED), amqp:decode-error
            sender.send(ProtonMessage(body=b"0123456789", durable=True, properties={"pad": PAD}))
            receiver = connection.create_receiver("props", credit=1)
            message = receiver.receive(timeout=TIMEOUT)
            receiver.accept()
        finally:
            connection.close()
    assert message.properties == {"pad": PAD}
    assert bytes(message.body) == b"0123456789"


@pytest.mark.anyio
async def test_one_the_memory_limit_has_no_room_for_is_refused_for_that_limit_not_as_undecodable(
    tmp_path: Path,
) -> None:
    limit = 1 << 20
    with anyio.fail_after(TIMEOUT):
        async with (
            Broker(port=0, data_dir=tmp_path / "data", max_memory=limit) as broker,
            amqp_async.connect(broker.url, reconnect=False) as conn,
        ):
            sender = await conn.open_sender("props")
            with pytest.raises(amqp_async.MessageRejected) as refused:
                await sender.send(Message(body=b"0123456789", properties={"pad": PAD}))
            # before: amqp:decode-error, "a message kept on disk must be an AMQP message"
            assert refused.value.condition == "amqp:resource-limit-exceeded"
            assert f"memory limit of {limit} bytes" in str(refused.value)
            assert "kept in memory even with --data-dir" in str(refused.value)
            assert broker.flow.assembling == 0 and broker.flow.arriving == 0
            # a large message with small leading sections still goes to disk, whatever the memory limit
            await sender.send(Message(body=b"b" * (2 << 20), properties={"n": 1}))
            assert len(body_files(tmp_path / "data")) == 1
