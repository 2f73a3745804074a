"""Receivers of messages read as they arrive: :class:`StreamReceiver` (its deliveries: ``_stream_delivery``).

Its link is a streaming one (:mod:`amqp_async.protocol.streaming`): each delivery is handed over at its first
transfer frame, and the frames its reader has not taken keep their place in the session's incoming window, so the
peer cannot send more than the window while the reader is slow (§2.5.6). On a :class:`~amqp_async.Connection` the
receiver gets a session of its own, whose window is ``buffer_size`` bytes of frames: the memory a message takes
while it is read is bounded by it, whatever the message's size. Anchored on ProtonJ2's ``StreamReceiver``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..codec.performatives import Error
from ..errors import ClosedByApplication, LinkDetached
from ..protocol.errors import LocalProtocolError
from ._arguments import check_thread
from ._link_options import ReceiverOptions
from ._links import _attach_refusal, _ReceivingLink
from ._stream_delivery import StreamDelivery

if TYPE_CHECKING:
    from ..protocol.session import Session as EngineSession
    from ._session import Session

__all__ = ["DEFAULT_STREAM_BUFFER", "StreamReceiver", "window_frames"]

#: The bytes of frames a stream receiver's own session lets the peer send ahead of the reader.
DEFAULT_STREAM_BUFFER = 1 << 20


def window_frames(buffer_size: int, max_frame_size: int) -> int:
    """The incoming window (in frames of at most ``max_frame_size`` bytes) that holds ``buffer_size`` bytes: at
    least 2, so that it reopens at half of it."""
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be at least 1 byte, got {buffer_size!r}")
    return max(2, -(-buffer_size // max_frame_size))


class StreamReceiver(_ReceivingLink):
    """Receives messages read as they arrive. Get one with :meth:`Connection.open_stream_receiver` (with a session
    of its own, its window ``buffer_size`` bytes) or :meth:`Session.open_stream_receiver` (on that session: its
    ``incoming_window`` times the max-frame-size bounds what is held).

    ``async for delivery in receiver`` yields :class:`~amqp_async.StreamDelivery` objects, each at its message's
    first frame; read its body with ``delivery.body_chunks()`` while the rest arrives. Taking the next delivery
    drops what was not read of the one before (its frames must pass for the next message's to come). Iteration
    ends as for a :class:`~amqp_async.Receiver`. With ``credit=N`` (default 1) N messages' credit is kept granted.

    A delivery the sender aborted before it was handed over is passed over (nothing of it is left to read); one
    aborted while it is read makes its body's iterator raise :class:`~amqp_async.DeliveryAborted`.

    Attributes:
        name: the link's name.
        source: the source address it was opened with (:attr:`address` for the one in use).
        session: its session; connection: its connection.
    """

    def __init__(self, session: Session, options: ReceiverOptions, *, owns_session: bool) -> None:
        super().__init__(session, options, "stream-receiver")
        self._owns_session = owns_session
        self._current: StreamDelivery | None = None

    def _describe(self) -> str:
        return f"stream receiver from {self.source!r}"

    async def _attach(self) -> None:
        engine_session = self.session._engine_session
        assert engine_session is not None
        try:
            self._restore(engine_session)
        except LocalProtocolError as error:
            raise _attach_refusal(error) from None
        await self._wait_attached()

    def _restore(self, engine_session: EngineSession) -> None:
        link = engine_session.attach_receiver(self.name, **self._options.attach_arguments())
        link.streaming = True  # before any transfer: deliveries are handed over at their first frame
        link.user_data = self
        link.overshoot_tolerance = max(self._prefetch, 1)  # as Receiver: brokers that overshoot a top-up
        self._engine_link = link
        if self._prefetch:
            link.grant_credit(self._prefetch)
        self.connection._kick()

    def _abandon_current(self) -> None:
        """The reader moved on: what was not read of the delivery it had is dropped (its frames freed)."""
        current = self._current
        if current is not None:
            self._current = None
            current._drop_unless_read()

    async def receive(self) -> StreamDelivery:
        """Wait for the next message's first frame (what was not read of the previous one is dropped).

        Raises:
            LinkDetached: the link was detached (without error) and no delivery is left.
            LinkError, SessionError, ConnectionError: the link, session or connection failed.
        """
        self._abandon_current()
        while True:
            incoming = self._engine_link.incoming
            while incoming:
                if self._closed_by_application:
                    self._check()
                engine_delivery = incoming.popleft()
                self._top_up()
                if engine_delivery.aborted:
                    continue  # aborted before anyone saw it: nothing to read, and settled (§2.6.14)
                delivery = self._current = StreamDelivery(self, engine_delivery)
                return delivery
            self._check()
            await self.connection._wait_deliveries()

    def __aiter__(self) -> StreamReceiver:
        return self

    async def __anext__(self) -> StreamDelivery:
        try:
            return await self.receive()
        except (LinkDetached, ClosedByApplication):
            raise StopAsyncIteration from None

    async def close(self, error: Error | None = None) -> None:
        """Detach and close the link (and end the session it was given of its own), waiting for the peer's
        answers (idempotent). As a :class:`~amqp_async.Receiver`'s, it unsubscribes a durable subscription on
        the brokers that follow §2.6.6: :meth:`detach` leaves it for a later attach."""
        await self._leave(error, closed=True)

    async def _leave(self, error: Error | None, *, closed: bool) -> None:
        check_thread(self.connection)
        self._abandon_current()
        if not self._owns_session:
            await super()._leave(error, closed=closed)
            return
        # One wait for the peer, not two: the detach goes out with the session's end right behind it, and the
        # peer's end comes after its answer to the detach (a session's frames are in order, §2.5). Waiting for
        # each in turn took twice the close timeout on a silent peer (20 s, where a link's close takes 10). Both
        # frames are handed to the engine before the first wait, so a cancelled close still sends them.
        await self._send_detach(error, closed=closed)
        self._closed = True
        await self.session.close()

    async def __aenter__(self) -> StreamReceiver:
        return self

    def __repr__(self) -> str:
        return f"<amqp_async.StreamReceiver {self.name!r} from {self.address!r}>"
