"""A large message kept on disk, sent to a consumer as it is read (a streamed delivery, §2.6.14).

The first transfer carries the message's leading sections as the broker has them now (rewritten ttl, annotations,
delivery-count); the body follows from the message's file, read a few frames at a time (in a worker thread) and
handed to the engine only while what waits for the consumer's session window and for the socket is small: the
broker holds a few frames of the message, whatever its size. While it goes, the consumer's link carries nothing
else (its credit reads as zero to the queue's dispatch); once its last frame is handed over, the queue dispatches
again. A link or connection that ends meanwhile stops it (the message goes back to its queue with the consumer's
other unsettled ones); a file that cannot be read aborts the delivery (the consumer discards it, §2.6.14) and the
message is given up, logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, BinaryIO

import anyio.to_thread

from ..protocol.endpoint import ACTIVE

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery
    from ..protocol.link import SenderLink
    from ._connection import ServerConnection

__all__ = ["BACKLOG_LIMIT", "READ_SIZE", "stream_body"]

log = logging.getLogger("amqp_async.broker")

#: Bytes read from the file at a time (rounded down to whole frames).
READ_SIZE = 256 << 10
#: Bytes of the message's frames that may wait for the consumer's session window before the next read waits.
BACKLOG_LIMIT = 1 << 20


def _usable(link: SenderLink) -> bool:
    return (
        link.local_state is ACTIVE
        and link.remote_state is ACTIVE
        and link.session.local_state is ACTIVE
        and not link.session.connection.closed
    )


async def stream_body(
    connection: ServerConnection, link: SenderLink, delivery: Delivery, file: BinaryIO, size: int, on_done: object
) -> None:
    """Send the ``size`` bytes of ``file`` (open at the message's body) as the rest of ``delivery``, then call
    ``on_done()`` (the queue dispatches again)."""
    engine = link.session.connection
    frame = max(engine._max_transfer_payload - len(delivery.transfer_state), 1)
    # whole frames (the last of each read is not cut short), but never more than READ_SIZE, whatever frames the
    # consumer takes (proton C takes frames of up to 4 GiB)
    read_size = READ_SIZE // frame * frame if frame <= READ_SIZE else READ_SIZE
    left = size
    try:
        while left and link.streaming is delivery:
            while _usable(link):
                if link.session.outgoing_backlog > BACKLOG_LIMIT:
                    await connection.wait_progress()  # the consumer's flow opens its window: an event
                elif engine.output_buffered > BACKLOG_LIMIT:
                    await connection.wait_output(BACKLOG_LIMIT // 2)
                else:
                    break
            if not _usable(link) or link.streaming is not delivery:
                return  # the link or connection went: the message returns to its queue (unsubscribe)
            data = await anyio.to_thread.run_sync(file.read, min(read_size, left))
            if not data:
                raise OSError(f"the file ended {left} bytes before the message's end")
            if link.streaming is not delivery or not _usable(link):
                return
            left -= len(data)
            link.send_more(delivery, data, more=left > 0)
            connection.kick()
    except OSError as exc:
        log.error("cannot read a large message from the data directory (%s): the delivery is aborted", exc)
        if link.streaming is delivery and _usable(link):
            link.abort(delivery)
            connection.kick()
    finally:
        file.close()
        if callable(on_done):
            on_done()
