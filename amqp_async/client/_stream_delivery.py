"""A message received as it arrives: :class:`StreamDelivery`, handed over at its first transfer frame, its body
read as an async iterator of chunks while its frames still come (§2.6.14)."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ..codec.section_reader import SectionReader
from ..errors import ClosedByApplication, DeliveryAborted, LinkDetached
from ..message import Message, MessageBodyError
from ..protocol.streaming import StreamingDelivery
from ._delivery import _UNSETTLED, _Settlement

if TYPE_CHECKING:
    from ..codec.values import AMQPValue
    from ..protocol.delivery import Delivery as EngineDelivery
    from ._stream_receiver import StreamReceiver
    from ._transaction import Transaction

__all__ = ["StreamDelivery"]

_SECTION_NAMES = {0x76: "amqp-sequence", 0x77: "amqp-value"}


class StreamDelivery(_Settlement):
    """One message read as it arrives (from a :class:`~amqp_async.StreamReceiver`): its sections before the body
    with :meth:`message`, its body with :meth:`body_chunks` (or :meth:`read`) while its frames still come, settled
    like a :class:`~amqp_async.Delivery` (``accept()``, ``reject()``, ``release()``, ``modify()``, ``async with``).

    Only what the reader has not taken yet is held: the receiver's session window bounds it (the peer cannot send
    more frames than the window while they are unread).

    Settling ends the reading: an outcome given before the body is read (a rejection after a look at the
    properties, or ``async with`` left by an exception) drops the rest of the body, as it comes. Taking the next
    delivery from the receiver drops what was not read of this one (it is still to be settled).

    Bodies: the chunks are the bytes of each data section (§3.2.6), or of an amqp-value holding a binary or a
    string (a string's UTF-8 bytes). A body of amqp-sequence sections or of an amqp-value of another type is no
    stream of bytes: :meth:`body_chunks` refuses it (:class:`~amqp_async.MessageBodyError`), and
    :meth:`read_message` reads it whole.

    Attributes:
        receiver: the receiver it came on.
    """

    __slots__ = (
        "_chunks",
        "_dropped",
        "_ended",
        "_failure",
        "_head",
        "_iterating",
        "_iterator_made",
        "_reader",
        "_whole_size",
    )

    receiver: StreamReceiver

    def __init__(self, receiver: StreamReceiver, delivery: EngineDelivery) -> None:
        self.receiver = receiver
        self._delivery = delivery
        self._outcome = _UNSETTLED
        self._reader = SectionReader()
        # A message that came in one frame: its size, kept, as reading its body empties the engine's payload
        # (received_size said 0 once it was read)
        self._whole_size = 0 if isinstance(delivery, StreamingDelivery) else len(delivery.payload)
        # body pieces read and not handed out (a view: the rest of a piece that read() handed out a part of)
        self._chunks: deque[bytes | memoryview] = deque()
        self._head: Message | None = None
        self._ended = False  # the reader saw the end of the message
        self._dropped = False  # the rest was given up (settled or discarded before the end)
        # What ended the message early (aborted, cut off, undecodable): every later read raises it again, where a
        # read that found the message ended would otherwise wait for frames that cannot come.
        self._failure: Exception | None = None
        self._iterating = False  # the body is being read (read_message() would miss what was handed out)
        self._iterator_made = False  # body_chunks() gave its iterator

    # --- state -----------------------------------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """True once settled: by us, or by the sender (at-most-once; an aborted delivery counts as settled)."""
        return super().settled or self._delivery.aborted

    @property
    def complete(self) -> bool:
        """True once every frame of the message arrived (or it was aborted, or its link ended before its end)."""
        delivery = self._delivery
        return not isinstance(delivery, StreamingDelivery) or delivery.complete

    @property
    def received_size(self) -> int:
        """The bytes of the message (encoded, all sections) received so far."""
        delivery = self._delivery
        return delivery.received if isinstance(delivery, StreamingDelivery) else self._whole_size

    @property
    def footer(self) -> dict[AMQPValue, AMQPValue] | None:
        """The message's footer, once the body was read to its end (None before, or without one)."""
        footer = self._reader.footer
        if footer is None:
            return None
        message = Message()
        message.decode(footer)
        return message.footer

    # --- reading ---------------------------------------------------------------------------------------------

    async def message(self) -> Message:
        """The message's sections other than its body (header, annotations, properties, application properties),
        as a :class:`~amqp_async.Message` whose body is None; it waits until the body starts.

        Raises:
            DecodeError: the bytes are not a message.
            DeliveryAborted: the sender aborted the delivery first.
            LinkError, SessionError, ConnectionError: the link, session or connection ended first.
        """
        if self._head is None:
            while self._reader.head is None:
                await self._pull()
            head = Message()
            head.decode(self._reader.head)
            self._head = head
        return self._head

    def body_chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, in chunks (an async iterator; it can be iterated once).

        ``async for chunk in delivery.body_chunks(): file.write(chunk)``. Each chunk is ``bytes``, at most a
        transfer frame's payload (or one data section's bytes, when sections are smaller); the sizes say nothing
        of the sections.

        The iterator raises :class:`~amqp_async.DeliveryAborted` when the sender aborts the delivery,
        :class:`~amqp_async.MessageBodyError` for a body that is no stream of bytes (amqp-sequence, or an
        amqp-value of another type than binary or string: use :meth:`read_message`, even after that error), a
        :class:`~amqp_async.DecodeError` for bytes that are not a message, and the link's, session's or
        connection's error when it ends before the message does: with reconnect on, a connection lost mid-body
        raises :class:`~amqp_async.LinkDetached` at once (the rest cannot come; the message, unsettled, comes again
        once reconnected).
        """
        if self._iterator_made and self._failure is None:  # after a failure, a new iterator raises it again
            raise RuntimeError("the body of a delivery is iterated once")
        self._iterator_made = self._iterating = True
        return _BodyChunks(self)

    async def read(self, max_bytes: int = 65536) -> bytes:
        """Up to ``max_bytes`` bytes of the body, as soon as some are there; ``b""`` once it was read to its end.

        For a body parsed as it arrives (records with a length first, a header of a fixed size), where the chunks of
        :meth:`body_chunks` come in sizes that say nothing of its structure: ``header = await delivery.read(16)``.
        As asyncio's ``StreamReader.read`` and anyio's ``receive(max_bytes)``, it may return less than
        ``max_bytes`` before the end (what has arrived). It mixes with :meth:`body_chunks` (called before or
        after it: each byte is handed out once); :meth:`read_message` is refused once it was called.

        Raises:
            ValueError: ``max_bytes`` is below 1.
            MessageBodyError, DecodeError, DeliveryAborted, LinkError, SessionError, ConnectionError: as the
                iterator of :meth:`body_chunks`.
        """
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes!r}")
        self._iterating = True
        piece = await self._next_piece()
        if piece is None:
            return b""
        if len(piece) > max_bytes:
            view = memoryview(piece)
            self._chunks.appendleft(view[max_bytes:])  # the rest, uncopied: small reads of a large frame stay linear
            piece = view[:max_bytes]
        return piece if piece.__class__ is bytes else bytes(piece)

    async def read_exactly(self, size: int) -> bytes:
        """Exactly ``size`` bytes of the body (asyncio's ``StreamReader.readexactly``): waits until they arrived.

        Raises:
            ValueError: ``size`` is below 0.
            MessageBodyError: the body ends before ``size`` more bytes (what was read of it is lost).
            DecodeError, DeliveryAborted, LinkError, SessionError, ConnectionError: as :meth:`read`.
        """
        if size < 0:
            raise ValueError(f"size must be at least 0, got {size!r}")
        parts: list[bytes] = []
        left = size
        while left:
            part = await self.read(left)
            if not part:
                raise MessageBodyError(
                    f"the body of delivery {self.tag!r} ended {size - left} bytes into a read of {size}"
                )
            parts.append(part)
            left -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _next_piece(self) -> bytes | memoryview | None:
        """The next piece of the body (waiting for it to arrive), or None at its end."""
        chunks = self._chunks
        reader = self._reader
        while not chunks:
            if reader.stopped:
                kind = _SECTION_NAMES.get(reader.body_code or 0, "amqp-value")
                raise MessageBodyError(
                    f"the body is an {kind} section of another type than binary or string: no stream of bytes; "
                    "read it whole with read_message()"
                )
            if self._ended and not self._dropped and self._failure is None:
                return None
            await self._pull()
        return chunks.popleft()

    async def read_message(self) -> Message:
        """The whole message, body included, read into memory (for a small message, or a body that is no stream of
        bytes). Call it instead of :meth:`body_chunks`, before reading any of the body.

        Raises:
            RuntimeError: the body is being read with :meth:`body_chunks` or :meth:`read`.
            DecodeError, DeliveryAborted, LinkError, SessionError, ConnectionError: as :meth:`body_chunks`.
        """
        # After a failure it raises that again; after body_chunks() refused a body that is no stream of bytes
        # (none of it was handed out) it reads it whole, as that error advises.
        if self._iterating and self._failure is None and not self._reader.stopped:
            raise RuntimeError(
                "the body is being read with body_chunks() or read(): read_message() reads it whole instead"
            )
        self._iterator_made = self._iterating = True
        head = await self.message()
        parts: list[bytes | memoryview] = []
        reader = self._reader
        if self._failure is not None:
            raise self._failure.with_traceback(None)
        while not self._ended:
            await self._pull()
            if reader.stopped:
                break
            parts.extend(self._chunks)
            self._chunks.clear()
        parts.extend(self._chunks)
        self._chunks.clear()
        if reader.stopped:
            leftover = [reader.leftover()]
            while True:
                leftover.extend(self._take())
                if self._arrived():
                    self._end()
                    break
                await self._wait()
            whole = Message()
            whole.decode(reader.head + b"".join(leftover))  # type: ignore[operator]  # the head is known
            return whole
        message = Message()
        message.decode(reader.head + (reader.footer or b""))  # type: ignore[operator]  # the head is known
        body = b"".join(parts)
        if reader.body_code is not None:
            message.body = body.decode() if reader.body_is_text else body
            if reader.body_code == 0x77 and not reader.body_is_text:
                message.inferred = False  # it came as an amqp-value: it goes on as one
        del head
        return message

    async def discard(self) -> None:
        """Drop the rest of the body, unread (what is still to come is dropped as it arrives); the delivery is
        still to be settled."""
        self._drop()

    # --- settling (as Delivery's) -----------------------------------------------------------------------------

    async def __aenter__(self) -> StreamDelivery:
        return self

    async def _settle(self, state: Any, transaction: Transaction | None = None) -> None:
        # Settling ends the reading: the unread rest of the body is dropped (its frames freed as they come).
        self._drop_unless_read()
        await super()._settle(state, transaction)

    # --- internals -----------------------------------------------------------------------------------------

    def _take(self) -> list[bytes]:
        """The payload pieces the engine has for us (none when nothing new came)."""
        delivery = self._delivery
        if isinstance(delivery, StreamingDelivery):
            chunks = delivery.take()
            if chunks:
                self._window_moved()
            return chunks
        payload = delivery.payload
        delivery.payload = b""  # handed over once (the engine keeps no copy for us)
        return [payload] if payload else []

    def _arrived(self) -> bool:
        delivery = self._delivery
        return not isinstance(delivery, StreamingDelivery) or (delivery.complete and not delivery.chunks)

    async def _pull(self) -> None:
        """Read what came; wait for more when nothing did. Raises what ended the message early, and
        :class:`~amqp_async.ClosedByApplication` once the rest was dropped: it returns without reading only when
        the message ended whole."""
        if self._failure is not None:
            raise self._failure.with_traceback(None)
        if self._dropped:
            raise ClosedByApplication(
                f"delivery {self.tag!r} was settled (or discarded) before its body was read: the rest was dropped"
            )
        if self._ended:
            return
        pieces = self._take()
        reader = self._reader
        for piece in pieces:
            self._chunks.extend(reader.feed(piece))
        if self._arrived():
            self._end()
            return
        if not pieces:
            await self._wait()

    def _end(self) -> None:
        """Every frame was read: the message ends here (or it was aborted, or cut off)."""
        delivery = self._delivery
        self._ended = True
        try:
            if delivery.aborted:
                raise DeliveryAborted(f"the sender aborted delivery {delivery.tag!r} before its end (§2.6.14)")
            if isinstance(delivery, StreamingDelivery) and delivery.interrupted:
                self.receiver._check()  # the link's, session's or connection's error
                raise LinkDetached(f"the link ended before the last frame of delivery {delivery.tag!r}")
            self._reader.finish()
        except Exception as failure:
            self._failure = failure
            raise

    async def _wait(self) -> None:
        receiver = self.receiver
        delivery = self._delivery
        connection = receiver.connection
        if delivery.link is not receiver._engine_link or connection._reconnecting:
            # The frames still to come went with the lost connection, and none comes on the next one (deliveries
            # are not resumed, §2.6.13: the peer sends the message again from its start). Said at once, not once
            # reconnecting ends (up to its ``max_time``), as a stream sender's message is aborted at the loss.
            receiver._check()
            failure = LinkDetached(
                f"the connection to {connection.address} was lost before the last frame of delivery "
                f"{delivery.tag!r}: its message is incomplete (unsettled: the peer keeps it, to deliver it again)"
            )
            failure.__cause__ = connection._loss
            self._failure = failure  # every later read raises it again
            self._ended = True
            raise failure
        if receiver.is_closed:
            receiver._check()
        await receiver.connection._wait_state()

    def _drop(self) -> None:
        """Stop reading: the chunks not taken and those still to come are dropped (their window freed)."""
        delivery = self._delivery
        if isinstance(delivery, StreamingDelivery) and not delivery.discarding:
            delivery.discard()
            self._window_moved()
        self._chunks.clear()
        self._dropped = True

    def _window_moved(self) -> None:
        """Frames were taken: a flow that reopens the session's window may be queued: have it written."""
        connection = self.receiver.connection
        engine = connection._engine
        if engine is not None and engine.has_output:
            connection._kick()

    def _drop_unless_read(self) -> None:
        if not (self._ended and not self._chunks):
            self._drop()

    def __repr__(self) -> str:
        return f"<amqp_async.StreamDelivery tag={self.tag!r} {self.received_size} bytes>"


class _BodyChunks:
    """The async iterator of :meth:`StreamDelivery.body_chunks`."""

    __slots__ = ("_delivery",)

    def __init__(self, delivery: StreamDelivery) -> None:
        self._delivery = delivery

    def __aiter__(self) -> _BodyChunks:
        return self

    async def __anext__(self) -> bytes:
        piece = await self._delivery._next_piece()
        if piece is None:
            raise StopAsyncIteration
        return piece if piece.__class__ is bytes else bytes(piece)  # the rest of one that read() took a part of
