"""A message arriving in parts on a producer's link (a streamed delivery, §2.6.14), put together as it comes.

The broker's producer links are streaming links (:mod:`amqp_async.protocol.streaming`): a message of several
frames is handed over at its first one, and each frame's payload is taken at once (so the client's window never
waits on the broker). An :class:`Assembly` keeps the parts:

- in memory, counted against the broker's memory limit as they come (``Flow.assembling``); a message that would
  take the held messages past the limit is refused there (rejected with ``amqp:resource-limit-exceeded``, the limit
  named, the rest of it dropped as it comes): without a data directory a message larger than what the limit leaves
  cannot be taken, and waiting would not make room for it;
- with a data directory, once larger than ``large_message_size``, in a file of its own (:mod:`._bodies`): only the
  message's leading sections stay in memory, whatever its size. Those are bounded too (a
  :class:`~amqp_async.codec.section_reader.SectionReader` keeps at most ``DEFAULT_MAX_KEPT`` bytes of them): a
  message whose leading sections pass that (a large application property, say) is as valid as any, and is taken
  back into memory, whole, within the memory limit, as it would be without a data directory (it was rejected as
  ``amqp:decode-error``, the same message accepted without ``--data-dir``).

What the broker does with the message once complete (route it, refuse it) is the connection's; an assembly only
says what came, or why it cannot be taken.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, BinaryIO

from ..codec import conditions
from ..codec.performatives import Error
from ..codec.section_reader import DEFAULT_MAX_KEPT, SectionReader, SectionsTooLarge
from ..errors import DecodeError
from ..protocol.streaming import StreamingDelivery
from ..types import symbol
from ._bodies import BodyFile, BodySpool, remove_file

if TYPE_CHECKING:
    from ._flow import Flow

__all__ = ["Assembly"]

log = logging.getLogger("amqp_async.broker")


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


#: What a refusal for the memory limit advises by default.
_ADVICE = "run the broker with --data-dir to keep large messages on disk, or with a larger --max-memory"
#: What it advises for a message kept whole in memory though the broker has a data directory (see Assembly._unspill).
_WHOLE_ADVICE = (
    f"its sections other than its body take more than {DEFAULT_MAX_KEPT} bytes, so it is kept in memory even with "
    "--data-dir: run the broker with a larger --max-memory"
)


def memory_refusal(flow: Flow, size: int, what: str, advice: str = _ADVICE) -> Error | None:
    """The error refusing ``what`` (``size`` more bytes, beside those held and those arriving in parts) when it
    does not fit the broker's memory limit; None when it fits, or there is no limit. ``advice`` ends its
    description.

    The credit the broker grants keeps the bytes held within the limit only as far as its estimate of the size of
    the coming messages holds: producers given credit for small messages that then send large ones in one frame
    each went far past it (RSS 1 GB under 256 MiB with 8 of them). So each message is checked in bytes as it
    comes, in one frame or in many."""
    limit = flow.max_memory
    if limit is None or flow.held_bytes + flow.assembling + size <= limit:
        return None
    return Error(
        condition=symbol(conditions.RESOURCE_LIMIT_EXCEEDED),
        description=(
            f"{what} does not fit the broker's memory limit of {limit} bytes ({_mib(limit)}, "
            f"{_mib(flow.held_bytes)} held now): {advice}"
        ),
    )


class Assembly:
    """One incoming message in parts.

    Args:
        delivery: the streamed delivery.
        flow: the broker's memory accounting.
        spool: where large messages go (None: no data directory, they stay in memory).
        large_message_size: past this many bytes a message goes to the spool.

    Attributes:
        refusal: why the message is refused (set once; the rest of it is then dropped as it comes).
        size: the bytes received so far.
    """

    def __init__(
        self, delivery: StreamingDelivery, flow: Flow, spool: BodySpool | None, large_message_size: int
    ) -> None:
        self.delivery = delivery
        self._flow = flow
        self._spool = spool
        self._large = large_message_size
        # One buffer, not the frames' own bytes objects: a message in tiny frames (one byte each, say) would
        # otherwise hold some forty bytes per frame beyond what the memory limit counts.
        self._buffer = bytearray()
        self._counted = 0  # bytes counted in flow.assembling
        self._reader: SectionReader | None = None  # finds where the body starts (spooled messages)
        self._whole = False  # kept whole in memory though past large_message_size (see _unspill)
        self._head: bytes | None = None  # the leading sections of a spooled message, once its body started
        self._file: BinaryIO | None = None
        self._path: str | None = None
        self.refusal: Error | None = None
        self.size = 0
        # In memory, it counts whole in the room for messages (Flow.arriving) until it is complete or on disk.
        self._arriving = True
        flow.arriving += 1

    def take(self) -> bool:
        """Take the parts that came; True once the message is complete (or aborted, or cut off)."""
        delivery = self.delivery
        chunks = delivery.take()
        if self.refusal is None and chunks:
            try:
                self._add(chunks)
            except (OSError, DecodeError) as exc:
                self._refuse(self._failure(exc))
        return delivery.complete

    def _add(self, chunks: list[bytes]) -> None:
        size = sum(len(chunk) for chunk in chunks)
        self.size += size
        if self._file is not None:
            self._write(chunks)
            return
        buffer = self._buffer
        for chunk in chunks:
            buffer += chunk  # into the buffer: no joined copy of them first
        if self._spool is not None and self.size > self._large and not self._whole:
            self._spill()
            return
        self._count(size)

    def _count(self, size: int) -> None:
        """``size`` more bytes are in the buffer: count them, and refuse the message once it passes the limit."""
        flow = self._flow
        flow.assembling += size
        self._counted += size
        advice = _WHOLE_ADVICE if self._whole else _ADVICE
        refusal = memory_refusal(flow, 0, f"message of more than {self.size} bytes", advice)
        if refusal is not None:
            self._refuse(refusal)

    def _spill(self) -> None:
        """Past ``large_message_size`` with a data directory: the parts so far go to a file, and the rest after."""
        assert self._spool is not None
        self._path, self._file = self._spool.create()
        self._reader = SectionReader()
        parts = bytes(self._buffer)
        self._buffer = bytearray()
        self._uncount()
        self._arrived()
        self._write([parts])

    def _write(self, chunks: list[bytes]) -> None:
        file = self._file
        assert file is not None
        reader = self._reader
        for index, chunk in enumerate(chunks):
            if reader is not None:
                try:
                    reader.feed(chunk)  # until the body starts: where it does is all the broker needs
                except SectionsTooLarge:
                    self._unspill(chunks[index:])
                    return
                if reader.head is not None:
                    self._head = reader.head
                    self._reader = reader = None
            file.write(chunk)

    def _unspill(self, rest: list[bytes]) -> None:
        """The leading sections pass what the reader keeps (``max_kept``): back into memory with the parts written
        (before the body, so a little more than that), and the message stays there whole, counted against the
        memory limit as the message of a broker without a data directory is. Valid (the same bytes are taken
        without ``--data-dir``), it was refused as ``amqp:decode-error``."""
        file, path = self._file, self._path
        assert file is not None and path is not None
        self._file = self._path = None
        self._reader = None
        self._whole = True
        try:
            file.close()
            with open(path, "rb") as written:
                self._buffer = bytearray(written.read())
        finally:
            remove_file(path)
        for chunk in rest:
            self._buffer += chunk
        self._arriving = True
        self._flow.arriving += 1
        self._count(len(self._buffer))

    def finish(self) -> tuple[bytes, BodyFile | None]:
        """The complete message: its bytes (in memory), or its leading sections and its file (spooled).

        Raises:
            DecodeError: a spooled message whose leading sections could not be told apart from its body.
        """
        self._uncount()
        self._arrived()
        if self._file is None:
            payload = bytes(self._buffer)
            self._buffer = bytearray()
            return payload, None
        file = self._file
        self._file = None
        file.close()
        head = self._head
        if head is None:  # no body section came: the message is its leading sections
            assert self._reader is not None
            self._reader.finish()
            head = self._reader.head or b""
        assert self._path is not None
        return head, BodyFile(self._path, self.size, len(head))

    def drop(self) -> None:
        """The message will not be taken (refused, aborted, cut off): free what it holds."""
        self._uncount()
        self._arrived()
        self._buffer = bytearray()
        file = self._file
        if file is not None:
            self._file = None
            file.close()
            if self._path is not None:
                remove_file(self._path)

    def _refuse(self, error: Error) -> None:
        self.refusal = error
        self.delivery.discard()
        self.drop()

    def _uncount(self) -> None:
        if self._counted:
            self._flow.assembling -= self._counted
            self._counted = 0

    def _arrived(self) -> None:
        """It no longer arrives in memory: complete, dropped, or on disk."""
        if self._arriving:
            self._arriving = False
            self._flow.arriving -= 1

    def _failure(self, exc: OSError | DecodeError) -> Error:
        if isinstance(exc, DecodeError):
            return Error(
                condition=symbol(conditions.DECODE_ERROR),
                description=f"a message kept on disk must be an AMQP message: {exc.description}",
            )
        log.error("cannot write a large message to the data directory: %s", exc)
        return Error(
            condition=symbol(conditions.RESOURCE_LIMIT_EXCEEDED),
            description=f"the broker cannot keep the message on disk: {exc.strerror or exc}",
        )
