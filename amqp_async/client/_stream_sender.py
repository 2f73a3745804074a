"""Messages sent as their body is read: :class:`StreamSender` and the :class:`MessageStream` of one message.

A streamed message is one AMQP message (one delivery, one credit, one outcome) whose body is written in parts of
any number and size, its total length unknown beforehand: each part becomes a data section (§3.2.6 allows several),
after the sections of the message given at the start (header, annotations, properties, application properties);
the footer, if any, follows the last. The bytes go out in transfer frames of the peer's max-frame-size, ``more``
set on all but the last (§2.6.14), as the peer's session window and the connection's output allow: what waits to
be written is bounded (the sender's ``buffer_size`` of queued frames, plus the connection's output high-water
mark, plus less than a frame), never the whole message. An exception or a cancellation while the body is written
aborts the delivery (§2.6.14 ``aborted``): the receiver discards what it got. Anchored on ProtonJ2's
``StreamSender`` / ``StreamSenderMessage``.
"""

from __future__ import annotations

import copy
import warnings
import weakref
from collections.abc import Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic

import anyio

from ..codec.delivery_states import Accepted
from ..errors import AMQPError, DeliveryAborted, MessageTooLarge
from ..message import Message
from ..protocol import events as ev
from ..protocol.endpoint import ACTIVE
from ..protocol.errors import LocalProtocolError
from ..protocol.payload import Gathered
from ._arguments import check_thread, check_transaction, get_ident, refusal
from ._body_source import DEFAULT_CHUNK_SIZE, BodySource, body_chunks, known_size
from ._links import _attach_refusal, _Link
from ._tracker import Tracker, session_ended_cause, session_ended_reason
from ._unwritten import ending_named, stream_cut_error, stream_ended_error

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from ..protocol.delivery import Delivery as EngineDelivery
    from ..protocol.link import SenderLink
    from ..protocol.session import Session as EngineSession
    from ._link_options import SenderOptions
    from ._session import Session
    from ._transaction import Transaction

    _R = TypeVar("_R", default=Accepted)
else:
    from typing import TypeVar

    _R = TypeVar("_R")

__all__ = ["DEFAULT_BUFFER_SIZE", "MessageStream", "StreamSender"]

#: The bytes of transfer frames a stream lets wait for the peer's session window before a write waits.
DEFAULT_BUFFER_SIZE = 1 << 20
#: Queued output (bytes the socket has not taken) above which a write waits (the connection's HIGH_WATER).
_OUTPUT_LIMIT = 1 << 20
#: The most bytes handed to the engine as one unit (and so the most a stream holds back between two writes).
_MAX_UNIT = 256 << 10

_EMPTY_DATA = b"\x00\x53\x75\xa0\x00"
#: The most bytes one data section holds: its binary's size is a uint (vbin32, §1.6.19). A body of known size
#: larger than that goes in as few sections as fit it (a 5 GiB file: two); raising OverflowError, it was refused.
_MAX_SECTION = 0xFFFF_FFFF


def _data_section_head(size: int) -> bytes:
    """The descriptor and binary constructor of a data section of ``size`` bytes (§3.2.6)."""
    if size <= 0xFF:
        return b"\x00\x53\x75\xa0" + bytes((size,))
    return b"\x00\x53\x75\xb0" + size.to_bytes(4, "big")


def _section_sizes(body_size: int) -> list[int]:
    """The sizes of the data sections a body of ``body_size`` bytes known beforehand goes in: one, unless it is
    larger than a section holds (:data:`_MAX_SECTION`); an empty body has one empty section."""
    full, rest = divmod(body_size, _MAX_SECTION)
    return [_MAX_SECTION] * full + ([rest] if rest or not full else [])


def _split(message: Message | None) -> tuple[bytes, bytes]:
    """The sections of ``message`` before its body, and its footer section (either may be empty).

    Raises:
        ValueError: the message has a body (a stream writes the body).
    """
    if message is None:
        return b"", b""
    if message.body is not None:
        raise ValueError("a streamed message's body is what the stream writes: leave message.body None")
    footer = message.footer
    if footer is None:
        return message.encode(), b""
    head = copy.copy(message)
    head.footer = None
    tail = Message()
    tail.footer = footer
    return head.encode(), tail.encode()


class StreamSender(_Link, Generic[_R]):
    """Sends messages whose body is streamed: read from an async iterable, an iterable or a file object while it is
    sent, never held whole. Get one with :meth:`Connection.open_stream_sender` or :meth:`Session.open_stream_sender`.

    ``StreamSender[Accepted]`` (plain ``StreamSender``) is confirmed: :meth:`send_stream` returns ``Accepted()`` once
    the peer accepted the message, and raises otherwise; ``StreamSender[None]`` (``delivery="at-most-once"``) sends
    settled messages, and returns None once the last frame is written.

    Messages go one at a time (the frames of a delivery are not interleaved with another's on a link, §2.6.14):
    a second stream opened meanwhile waits until the first has written its last part (not for its outcome), so tasks
    may share the sender.

    Attributes:
        name: the link's name.
        target: the target address it was opened with (:attr:`address` for the one in use).
        buffer_size: the bytes of transfer frames a stream lets wait for the peer's window before its writes wait.
        session: its session; connection: its connection.
    """

    #: as :attr:`Sender._more_outcomes`: none besides the four outcomes (§3.4).
    _more_outcomes: tuple[type, ...] = ()

    _engine_link: SenderLink

    def __init__(self, session: Session, options: SenderOptions, buffer_size: int) -> None:
        super().__init__(session, options.link_name(session.connection.container_id, "stream-sender"))
        self._options = options
        self.target: str | None = options.address
        self.buffer_size = buffer_size
        self._pending: set[Tracker[_R]] = set()  # trackers of messages sent whose outcome is to come
        # At-most-once streams begun and not yet written whole: no tracker to fail, so an ending tells them itself
        # (MessageStream._ended), and their write or complete() raises it. Weak: a stream left open and forgotten
        # is still collected, and aborted then (MessageStream.__del__).
        self._settled_streams: weakref.WeakSet[MessageStream[_R]] = weakref.WeakSet()
        # One message at a time on the link: a semaphore, not a lock, as a stream may be completed by another task
        # than the one that opened it.
        self._turn = anyio.Semaphore(1)

    @property
    def address(self) -> str | None:
        """The target address (for a dynamic target: the one the peer created)."""
        address = getattr(self._engine_link.remote_target, "address", None)
        return str(address) if address else self.target

    @property
    def credit(self) -> int:
        """How many messages the peer accepts now."""
        return self._engine_link.credit

    @property
    def unsettled(self) -> list[Tracker[_R]]:
        """The trackers of messages sent whole whose outcome is still to come."""
        return list(self._pending)

    def _describe(self) -> str:
        return f"stream sender to {self.target!r}" if self.target else "stream sender with no target"

    async def _attach(self) -> None:
        engine_session = self.session._engine_session
        assert engine_session is not None
        try:
            self._restore(engine_session)
        except LocalProtocolError as error:
            raise _attach_refusal(error) from None
        await self._wait_attached()

    def _restore(self, engine_session: EngineSession) -> None:
        self._engine_link = engine_session.attach_sender(self.name, **self._options.attach_arguments())
        self._engine_link.user_data = self

    def _on_event(self, event: Any) -> None:
        if isinstance(event, ev.LinkDetached):
            self._on_detached(event)
            cause = self._detach_cause()
            self._fail_unwritten(cause, "sender")  # the detach dropped what waited for the session window
            self._doubt_pending(f"the link was detached before the outcome was known: {cause.description}", cause)
        elif isinstance(event, ev.FlowReceived):
            self._answer_drain()

    def _answer_drain(self) -> None:
        """§2.6.7: a drain asks us to use our credit or give it back: back, unless a message is being sent."""
        link = self._engine_link
        if link.drain and link.credit > 0 and self._turn.value:
            link.drained()
            self.connection._kick()

    def _on_transport_lost(self) -> None:
        loss = self.connection._loss
        if loss is not None:
            self._fail_unwritten(loss, "connection")
        self._doubt_pending(f"the connection to {self.connection.address} was lost before the outcome was known", loss)

    def _on_connection_failed(self, error: AMQPError | None) -> None:
        super()._on_connection_failed(error)
        if error is not None:
            self._fail_unwritten(error, "connection")
        self._doubt_pending(f"the connection to {self.connection.address} ended before the outcome was known", error)

    def _on_session_ended(self, error: AMQPError | None) -> None:
        super()._on_session_ended(error)
        cause = session_ended_cause(error, self.session._closing)  # the peer's condition, or our close
        self._fail_unwritten(cause, "session")  # the end dropped what waited for the session window (§2.5.6)
        self._doubt_pending(session_ended_reason(cause), cause)

    def _fail_unwritten(self, cause: AMQPError, what: str) -> None:
        """``cause`` ends ``what`` (the sender, its session or connection: our close, the peer's detach, end or
        close, the transport's loss): the streamed messages not written whole fail with a definite error
        (:func:`~._unwritten.stream_ended_error`), not in doubt: one none of whose frames was written (it waited
        for the peer's session window behind another, §2.5.6) as never sent; one cut mid-body (some frames
        written, not its last: still being written, or its last frames waiting for the window) with
        :class:`~amqp_async.DeliveryAborted`, the ending its ``__cause__``. Called before the ending drops them
        (ours: :meth:`_ending`) or once it did (the peer's, the transport's): either way, what is not written
        whole now never will be."""
        for tracker in list(self._pending):  # (each finished one leaves the set)
            delivery = tracker.delivery
            if delivery is not None and not tracker.done:
                error = stream_ended_error(delivery, cause, what)
                if error is not None:
                    tracker._finish(None, error)
        if self._settled_streams:
            streams = list(self._settled_streams)
            self._settled_streams.clear()
            for stream in streams:
                stream._end(cause, what)
            self.connection._notify()  # a complete() waiting for the last frame: wake it to raise

    def _doubt_pending(self, reason: str, cause: BaseException | None = None) -> None:
        pending = self._pending
        self._pending = set()
        for tracker in pending:
            tracker._in_doubt(reason, cause)

    def open_stream(
        self, message: Message | None = None, *, body_size: int | None = None, transaction: Transaction | None = None
    ) -> MessageStream[_R]:
        """Start a message whose body is written in parts: ``async with sender.open_stream(Message(subject=...)) as
        stream: await stream.write(data)...`` completes it when the block ends (aborts it when the block raises or
        is cancelled); ``stream = await sender.open_stream(...)`` leaves :meth:`MessageStream.complete` or
        :meth:`MessageStream.abort` to the caller.

        Args:
            message: the message's sections other than its body (header, annotations, properties, application
                properties, footer); its body must be None. None: a message of body only.
            body_size: the body's size in bytes, when it is known beforehand: the body then goes in one data
                section (whose size comes first; above 4 GiB less a byte, the most a binary holds (§1.6.19), in as
                few as hold it), and the writes must add up to it; None: one data section per write (§3.2.6).
                Receivers that keep only one data section of a message (python-qpid-proton's and proton C's
                ``pn_message``) need the first.
            transaction: send it within this transaction (§4.4.1).

        Raises:
            ValueError: the message has a body, or ``body_size`` is below 0.
        """
        return MessageStream(self, message, transaction, body_size)

    async def send_stream(
        self,
        body: BodySource,
        message: Message | None = None,
        *,
        transaction: Transaction | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        body_size: int | None = None,
    ) -> _R:
        """Send one message whose body is read from ``body`` as it is sent, and wait for its outcome.

        Args:
            body: an async iterable or an iterable of bytes-like chunks (each becomes a data section), a binary file
                object (read ``chunk_size`` bytes at a time: in a worker thread, but on the loop for a regular file;
                one whose ``read`` is a coroutine function, such as ``anyio.open_file``'s, is awaited), or bytes.
            message: the message's other sections (see :meth:`open_stream`).
            transaction: send it within this transaction (§4.4.1).
            chunk_size: the bytes of each read from a file object (or slice of bytes).
            body_size: the body's size, when known (see :meth:`open_stream`): the body goes in one data section.
                Known without it for bytes and for a regular file (its size from where it is read on, when the
                send starts: a file that grows meanwhile is sent as it was; a file that says size 0, as those of
                /proc do, is read to its end); other sources go as one data section per chunk.

        Returns:
            The outcome (``Accepted()``); None on an at-most-once sender.

        Raises:
            TypeError, ValueError: ``body`` is not a body source, ``message`` has a body.
            MessageRejected, MessageReleased, MessageModified: the receiver did not accept it (an outcome given
                before the end stops the stream, and is raised as well).
            DeliveryAborted: the message was cut mid-body: the sender, its session or its connection ended (closed
                by the application, detached, ended or closed by the peer, the connection lost, with or without
                reconnect) after its first frames were written and before its last; it was never delivered whole
                (its receiver drops it, §2.6.14), and may be sent again. What ended it is its ``__cause__``.
            DeliveryInDoubt: the connection or link ended after it was sent whole, before its outcome.
            LinkDetached, SessionError, ConnectionClosed, ConnectionLost, ClosedByApplication: the link, session or
                connection ended before any frame of the message was written (it waited for the peer's session
                window behind an earlier message, §2.5.6): it was never sent, and may be sent again; the description
                says "never sent" (see :class:`~amqp_async.Tracker`).
            LinkError, ConnectionError: the link or connection failed (e.g. ``amqp:link:message-size-exceeded``:
                the message is larger than the peer takes).
            Whatever ``body`` raises: the delivery is aborted first (the receiver discards it).

        Cancellation (a cancel scope around it: ``with anyio.fail_after(...)``) aborts the delivery (§2.6.14: the
        receiver discards what came of it) and leaves the sender usable, even while a read of a file object waits
        in its worker thread (a pipe with nothing to read): that read is abandoned to the thread, and what it reads
        later is lost.
        """
        if body_size is None:
            # A file's size when the send starts: declared, and read no further (a file that grows meanwhile goes
            # as it was then)
            body_size = known_size(body)
            chunks = body_chunks(body, chunk_size, limit=body_size)
        else:
            chunks = body_chunks(body, chunk_size)
        async with self.open_stream(message, body_size=body_size, transaction=transaction) as stream:
            async for chunk in chunks:
                await stream.write(chunk)
        return stream.outcome  # type: ignore[return-value]  # complete() set it

    async def __aenter__(self) -> StreamSender[_R]:
        return self

    def __repr__(self) -> str:
        return f"<amqp_async.StreamSender {self.name!r} to {self.address!r}>"


_NEW, _OPEN, _DONE, _ABORTED = "new", "open", "done", "aborted"


class MessageStream(Generic[_R]):
    """One message being sent as its body is written: get it from :meth:`StreamSender.open_stream`.

    Each :meth:`write` adds a data section; :meth:`complete` sends the rest and waits for the outcome; :meth:`abort`
    gives the message up (the receiver discards what came of it). A write waits while the bytes queued for the peer
    pass the sender's ``buffer_size`` (plus the connection's output bound): memory stays bounded however large the
    message. ``async with`` completes the message when the block ends normally, and aborts it when the block raises
    or is cancelled (the exception goes on).

    Attributes:
        body_size: the body bytes written so far.
        outcome: the outcome once :meth:`complete` returned (``Accepted()``; None at most once).
        tracker: the message's :class:`~amqp_async.Tracker` once its first frame went out (None before).
    """

    def __init__(
        self,
        sender: StreamSender[_R],
        message: Message | None,
        transaction: Transaction | None,
        body_size: int | None = None,
    ) -> None:
        # First: __del__ reads them, also when a check below raised
        self._state = _NEW
        self._holding = False  # this stream has the sender's turn
        if body_size is not None and body_size < 0:
            raise ValueError(f"body_size must be at least 0, got {body_size!r}")
        self._sender = sender
        self._head, self._footer = _split(message)
        self._declared = body_size  # the body's size, when given: one data section (or a few, when above 4 GiB)
        self._section_left = 0  # with a declared size: the bytes of the current data section still to write
        self._transaction = transaction
        self._parts: list[bytes | memoryview] = []
        self._size = 0  # bytes in _parts
        self._sections = 0
        self._link: SenderLink | None = None
        self._delivery: EngineDelivery | None = None
        self.tracker: Tracker[_R] | None = None
        self._ended: AMQPError | None = None  # (at most once) what an ending left it with: StreamSender._fail_unwritten
        self.body_size = 0
        self.outcome: _R | None = None

    # --- starting ------------------------------------------------------------------------------------------

    def __await__(self) -> Generator[Any, None, MessageStream[_R]]:
        return self._start().__await__()

    async def __aenter__(self) -> MessageStream[_R]:
        return await self._start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._state is not _OPEN:
            return
        if exc is None:
            await self.complete()
        else:
            self.abort()

    async def _start(self) -> MessageStream[_R]:
        """Wait for the link (one message at a time) and for credit."""
        if self._state is not _NEW:
            raise RuntimeError("a message stream starts once")
        sender = self._sender
        sender._check()
        transaction = self._transaction
        if transaction is not None:
            check_transaction(transaction, sender.connection)
            transaction._require_active()
        await sender._turn.acquire()
        self._holding = True
        try:
            await self._wait_credit()
            self._check_declared_size()
        except BaseException:
            self._release()
            raise
        self._state = _OPEN
        if self._head:
            self._append(self._head)
        if self._declared == 0:
            self._append(_data_section_head(0))  # an empty body: one empty data section (§3.2)
            self._sections = 1
        return self

    def _check_declared_size(self) -> None:
        """A message whose declared size already passes the peer's max-message-size (§2.7.3) is refused before
        any of it is sent, rather than aborted at the part that passes it."""
        declared = self._declared
        attach = self._sender._engine_link.remote_attach
        limit = attach.max_message_size if attach is not None else None
        if declared is None or not limit:
            return
        heads = sum(len(_data_section_head(size)) for size in _section_sizes(declared))
        size = len(self._head or b"") + heads + declared
        if size > limit:
            raise MessageTooLarge(
                f"message of {size} bytes exceeds the peer's max-message-size {limit}: nothing of it was sent"
            )

    async def _wait_credit(self) -> None:
        sender = self._sender
        connection = sender.connection
        while True:
            sender._check()
            link = sender._engine_link
            if link.link_credit > 0 and link.remote_state is ACTIVE and not connection._reconnecting:
                return
            await connection._wait_state()

    # --- writing -------------------------------------------------------------------------------------------

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Add ``data`` to the body, as one data section (an empty one adds nothing); it goes out as the peer's
        window and the connection's output allow, and the call waits while too much is queued.

        ``bytes`` (and views of bytes) are sent uncopied: do not change a bytearray you wrote before the call
        returns (it is copied, then).

        Raises:
            RuntimeError: the stream is not open (completed, aborted, or not started).
            ValueError: the writes pass the ``body_size`` declared (the stream is aborted).
            MessageRejected, MessageReleased, MessageModified: the receiver settled the message early with that
                outcome (the stream is aborted).
            DeliveryAborted, LinkError, ConnectionError: see :meth:`StreamSender.send_stream` (the stream is
                aborted).
        """
        self._require_open()
        view = memoryview(data)
        size = view.nbytes
        if not size:
            return
        declared = self._declared
        if declared is not None and self.body_size + size > declared:
            self._abandon()
            raise ValueError(
                f"the body is longer than the body_size declared ({declared} bytes): the message is aborted"
            )
        if data.__class__ is bytes:
            chunk: bytes | memoryview = data  # immutable: sent uncopied
        elif isinstance(data, memoryview) and data.readonly and isinstance(data.obj, bytes):
            chunk = view.cast("B")  # a view of bytes: nobody can change it
        else:
            chunk = bytes(view)  # a bytearray may change once we return: copied
        if declared is None:
            self._append(_data_section_head(size))
            self._sections += 1
            self._append(chunk)
        else:
            self._append_declared(chunk)
        self.body_size += size
        try:
            await self._flush(final=False)
        except BaseException:
            self._abandon()
            raise

    async def complete(self) -> _R:
        """Send the rest of the message (its footer last) and wait for its outcome.

        Returns:
            The outcome (``Accepted()``), or None on an at-most-once sender (once the last frame is written: not
            while it waits for the peer's session window, §2.5.6).

        Raises:
            RuntimeError: the stream is not open.
            ValueError: the body is shorter than the ``body_size`` declared (the stream is aborted).
            MessageRejected, MessageReleased, MessageModified: as :meth:`StreamSender.send_stream`.
            DeliveryInDoubt, DeliveryAborted, LinkError, ConnectionError: as :meth:`StreamSender.send_stream`.
        """
        self._require_open()
        declared = self._declared
        if declared is not None and self.body_size != declared:
            self._abandon()
            raise ValueError(
                f"the body was {self.body_size} bytes, not the body_size declared ({declared}): the message is aborted"
            )
        try:
            if not self._sections:
                self._append(_EMPTY_DATA)  # §3.2: a message has a body: here, one empty data section
                self._sections = 1
            if self._footer:
                self._append(self._footer)
            await self._flush(final=True)
        except BaseException:
            self._abandon()
            raise
        self._state = _DONE
        self._release()
        tracker = self.tracker
        assert tracker is not None
        if tracker._sender is None:  # sent settled (at-most-once): done once written whole
            await self._wait_written_whole()
            await self._sender.connection._wait_flushed()
            return None  # type: ignore[return-value]  # _R is None on an at-most-once sender
        self.outcome = await tracker
        return self.outcome

    def abort(self) -> None:
        """Give the message up (§2.6.14 aborted: the receiver discards what it got; it counts as settled). Nothing
        is sent if no part went out yet. Idempotent once the stream is over."""
        if self._state is _OPEN:
            self._abandon()

    # --- internals -------------------------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._state is not _OPEN:
            what = {_NEW: "not started", _DONE: "complete", _ABORTED: "aborted"}[self._state]
            raise RuntimeError(f"the message stream is {what}")

    def _append(self, part: bytes | memoryview) -> None:
        self._parts.append(part)
        self._size += len(part)

    def _append_declared(self, chunk: bytes | memoryview) -> None:
        """Add ``chunk`` to the body of declared size: to the current data section, each section's size first
        (§3.2.6), the next one begun where one is full (a body larger than :data:`_MAX_SECTION`)."""
        declared = self._declared
        assert declared is not None
        offset = 0
        while offset < len(chunk):
            if not self._section_left:
                self._section_left = min(_MAX_SECTION, declared - self.body_size - offset)
                self._append(_data_section_head(self._section_left))
                self._sections += 1
            taken = min(self._section_left, len(chunk) - offset)
            self._append(chunk if taken == len(chunk) else memoryview(chunk)[offset : offset + taken])
            self._section_left -= taken
            offset += taken

    def _take(self, size: int) -> Gathered:
        """The first ``size`` pending bytes, as views of the parts (no copy)."""
        taken: list[bytes | memoryview] = []
        parts = self._parts
        left = size
        while left:
            part = parts[0]
            length = len(part)
            if length <= left:
                taken.append(part)
                parts.pop(0)
                left -= length
            else:
                view = memoryview(part)
                taken.append(view[:left])
                parts[0] = view[left:]
                left = 0
        self._size -= size
        return Gathered(taken)

    def _frame_payload(self) -> int:
        """The bytes handed to the engine as one unit: a transfer frame's payload (what the peer's max-frame-size
        leaves), at most :data:`_MAX_UNIT` (proton C takes frames of up to 4 GiB): what a stream holds back between
        two writes never depends on the peer."""
        link = self._sender._engine_link
        state = self._delivery.transfer_state if self._delivery is not None else b""
        return min(max(link.session.connection._max_transfer_payload - len(state), 1), _MAX_UNIT)

    async def _flush(self, *, final: bool) -> None:
        """Hand the pending bytes to the engine in whole frames (all of them when ``final``, the last frame with
        ``more`` false), each batch once the queued ones are below the buffer."""
        while True:
            await self._wait_room()
            payload = self._frame_payload()
            batch = max(payload, self._sender.buffer_size // payload * payload)
            size = self._size
            if final and size <= batch:
                self._hand(self._take(size), more=False)
                return
            if not final:
                if size <= payload:
                    return  # less than a frame (or just one): kept for the next write, or the last frame
                # whole frames, keeping at least one byte back so that the last frame is never empty
                size = min(batch, (size - 1) // payload * payload)
            else:
                size = batch
            self._hand(self._take(size), more=True)

    def _hand(self, payload: Gathered, *, more: bool) -> None:
        sender = self._sender
        connection = sender.connection
        if get_ident() != connection._thread:
            check_thread(connection)  # another thread than the connection's loop: refused
        link = sender._engine_link
        try:
            delivery = self._delivery
            if delivery is None:
                transaction = self._transaction
                if transaction is None:
                    delivery = link.send(payload, more=more)
                else:
                    delivery = link.send(payload, more=more, state=transaction._transfer_state())
                self._link = link
                self._delivery = delivery
                self._track(delivery)
            else:
                link.send_more(delivery, payload, more=more)
        except LocalProtocolError as error:
            sender._check()  # the link, session or connection ended: raise what ended it
            raise refusal(error) from None
        connection._kick()

    def _track(self, delivery: EngineDelivery) -> None:
        sender = self._sender
        tracker: Tracker[_R]
        if delivery.settled:
            tracker = Tracker(None, delivery)
            tracker._finish(None, None)
            sender._settled_streams.add(self)  # (until written whole: an ending fails it, _end)
        else:
            # A Tracker reads ``_pending`` and ``connection`` of its sender: a StreamSender has both.
            tracker = Tracker(sender, delivery)  # type: ignore[arg-type]
            delivery.user_data = tracker
            sender._pending.add(tracker)
        self.tracker = tracker

    async def _wait_room(self) -> None:
        """Wait until the queued frames and output are below their bounds (and, before the first frame, for
        credit), raising what ended the message meanwhile."""
        sender = self._sender
        connection = sender.connection
        while True:
            self._check_alive()
            link = sender._engine_link
            if self._delivery is None and (
                link.link_credit <= 0 or link.remote_state is not ACTIVE or connection._reconnecting
            ):
                await connection._wait_state()
                continue
            if link.session.outgoing_backlog > sender.buffer_size:
                await connection._wait_state()  # the peer's flow opens its window: an event
                continue
            engine = connection._engine
            if engine is not None and engine.output_buffered > _OUTPUT_LIMIT:
                await connection._wait_writable()
                continue
            return

    def _check_alive(self) -> None:
        """Raise what stops the message: the peer settled it early with an outcome other than accepted; the link,
        session or connection ended (the transport lost or replaced), which fails a message begun and not written
        whole with :func:`~._unwritten.stream_ended_error` (mid-body: :class:`DeliveryAborted`, the ending as its
        cause), one not begun with the ending's error."""
        tracker = self.tracker
        error = self._ended
        if error is None and tracker is not None and tracker.done:
            error = tracker._error  # rejected before the end (MessageRejected), or failed by the ending
        if error is not None:
            raise error.with_traceback(None)
        sender = self._sender
        connection = sender.connection
        delivery = self._delivery
        if delivery is None:
            sender._check()
            return
        if self._link is not sender._engine_link or connection._reconnecting:
            # The transport went (its loss failed it already, as it failed the tracker: _on_transport_lost)
            loss = connection._loss
            ended = stream_ended_error(delivery, loss, "connection") if loss is not None else None
            raise ended or stream_cut_error(loss, "connection")
        try:
            sender._check()
        except AMQPError as cause:
            ended = stream_ended_error(delivery, cause, ending_named(cause))
            if ended is None:  # written whole: what ended the link, as before
                raise
            raise ended from cause  # (its __cause__ already)

    def _end(self, cause: AMQPError, what: str) -> None:
        """(At most once) ``cause`` ended ``what`` before the message was written whole: its writer raises the
        error (:func:`~._unwritten.stream_ended_error`) at its next write, or its complete() waiting for the last
        frame does."""
        delivery = self._delivery
        if delivery is not None and self._ended is None and not delivery.aborted:
            self._ended = stream_ended_error(delivery, cause, what)

    async def _wait_written_whole(self) -> None:
        """(At most once) wait until the last frame is written: complete() returns then, not while the last frames
        wait for the peer's session window (§2.5.6), which an ending would drop without a word; raise what ended
        the message first (:meth:`_check_alive`). Woken by each change of state; reads one flag the engine sets
        (:attr:`Delivery.written_whole <amqp_async.protocol.delivery.Delivery.written_whole>`)."""
        delivery = self._delivery
        assert delivery is not None
        connection = self._sender.connection
        try:
            while not delivery.written_whole:
                self._check_alive()
                await connection._wait_state()
        finally:
            self._sender._settled_streams.discard(self)

    def _abandon(self) -> None:
        """The message cannot be completed: abort its delivery if a part went out, and free the link."""
        self._state = _ABORTED
        self._parts.clear()
        self._size = 0
        delivery = self._delivery
        link = self._link
        sender = self._sender
        if delivery is not None and link is not None and not delivery.aborted:
            if link is sender._engine_link and link.streaming is delivery:
                link.abort(delivery)
                sender.connection._kick()
            tracker = self.tracker
            if tracker is not None and not tracker.done:
                sender._pending.discard(tracker)
                tracker._finish(None, DeliveryAborted("the message was aborted before its end"))
        sender._settled_streams.discard(self)
        self._release()

    def _release(self) -> None:
        """Give the link to the next message (or, when none waits, answer a drain the peer asked meanwhile)."""
        if not self._holding:
            return
        self._holding = False
        sender = self._sender
        sender._turn.release()
        if sender._turn.statistics().tasks_waiting == 0 and not sender.is_closed:
            sender._answer_drain()

    def __del__(self) -> None:
        # Left open and forgotten (a task that failed between two writes of ``stream = await open_stream()``):
        # the sender's turn was never given back, and every later message on the sender waited for ever. Aborted
        # now (the receiver discards what it got), on the connection's thread (the engine is not thread-safe);
        # collected on another, the link stays taken, and the warning says why.
        if not self._holding or self._state is not _OPEN:
            return
        on_thread = get_ident() == self._sender.connection._thread
        warnings.warn(
            f"a MessageStream of the {self._sender._describe()} was left open"
            + (": its message is aborted" if on_thread else ", outside the connection's thread: the sender stays taken")
            + " (end it with complete() or abort(), or use async with)",
            ResourceWarning,
            stacklevel=2,
        )
        if on_thread:
            try:
                self._abandon()
            except Exception:  # the connection is gone: nothing to abort
                pass

    def __repr__(self) -> str:
        return f"<amqp_async.MessageStream {self._state} {self.body_size} bytes written>"
