"""Sessions of the awaitable API; each owns its senders and receivers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import anyio

from ..codec.performatives import Error
from ..errors import SESSION_ENDED, AMQPError, ClosedByApplication, ConnectionError, SessionError, SessionTimeout
from ..protocol import events as ev
from ..protocol.endpoint import ACTIVE, UNINIT
from ..protocol.errors import LocalProtocolError
from ..types import symbol
from . import _links
from ._answer_due import AnswerDue
from ._arguments import check_thread
from ._link_options import (
    ReceiverOptions,
    SenderOptions,
)
from ._links import Receiver, Sender
from ._open_endpoints import PRUNE_FROM, forget, with_added
from ._opener import LinkOpener
from ._stream_receiver import StreamReceiver
from ._stream_sender import StreamSender

if TYPE_CHECKING:
    from ..protocol.session import Session as EngineSession
    from ._connection import Connection

__all__ = ["Session"]

#: The links a session holds (the engine's events reach them; a reconnect attaches them again).
_AnyLink: TypeAlias = "Sender[Any] | Receiver | StreamSender[Any] | StreamReceiver"


class Session(LinkOpener):
    """A session (§2.5) of a :class:`Connection`; get one with :meth:`Connection.open_session`.

    An async context manager: leaving it ends the session (and its links).
    """

    def __init__(self, connection: Connection, options: dict[str, Any]) -> None:
        #: The connection the session belongs to.
        self.connection = connection
        self._options = options
        self._engine_session: EngineSession | None = None
        self._links: list[_AnyLink] = []
        self._prune_links_at = PRUNE_FROM
        self._error: AMQPError | None = None
        self._ended = False
        self._closing = False  # close() was called: our own end is no error
        self._end_on_answer = False  # abandoned before the peer answered its begin: ended when it does

    @property
    def is_closed(self) -> bool:
        """True once the session has ended (or its connection is gone)."""
        return self._ended or self._error is not None

    def _check(self) -> None:
        self.connection._check()
        if self._error is not None:
            raise self._error
        if self._ended:
            if self._closing:
                raise ClosedByApplication("the session was closed by the application")
            raise SessionError("the peer ended the session without an error", condition=SESSION_ENDED)

    async def _begin(self) -> None:
        connection = self.connection
        try:
            engine_session = connection.engine.begin_session(**self._options)
        except LocalProtocolError as error:  # no free channel: the peer's channel-max is reached (§2.7.1)
            raise SessionError(error.description or "", condition=str(error.condition)) from None
        engine_session.user_data = self
        self._engine_session = engine_session
        connection._kick()
        limit = connection._options.open_timeout
        due = AnswerDue(connection, limit)
        # Read again on each wake-up: a reconnect meanwhile begins a new engine session (_restore).
        while self._engine_session.remote_state is UNINIT:
            self._check()
            if due.passed(self._engine_session):
                self._give_up_begin(limit)
                break
            await due.wait()
        self._check()

    def _give_up_begin(self, limit: float | None) -> None:
        """The peer did not answer our begin within ``open_timeout``: end the session, telling the peer why (a
        late begin then meets our end, and nothing is attached on it), and fail with :class:`SessionTimeout`."""
        error = SessionTimeout(f"the peer did not answer the session's begin within open_timeout ({limit} s)")
        engine_session = self._engine_session
        connection = self.connection
        if engine_session is not None and not connection.is_closed and not connection._reconnecting:
            engine_session.end(Error(condition=symbol(error.condition), description=error.description))
            connection._kick()
        self._ended = True
        self._error = error

    def _abandon(self) -> None:
        """Its begin failed or was cancelled: end the session without waiting for the peer's answer."""
        self._closing = True
        self._ended = True
        engine_session = self._engine_session
        connection = self.connection
        if engine_session is None or connection.is_closed or connection._reconnecting:
            return
        if engine_session.local_state is ACTIVE:
            if engine_session.remote_state is UNINIT:
                # Ended once the peer's begin answers ours (_on_event), not before: python-qpid-proton, given a
                # begin and an end in one read, answers with a begin that names no remote-channel, which reads as a
                # session it starts; our answer to that then names a channel it has ended, and it closes the
                # connection ("begin reply to unknown channel").
                self._end_on_answer = True
                return
            engine_session.end()
            connection._kick()

    def _restore(self) -> None:
        """After a reconnect: begin again on the new connection and re-attach every link."""
        engine_session = self.connection.engine.begin_session(**self._options)
        engine_session.user_data = self
        self._engine_session = engine_session
        # Closed links stay closed, and so do those the application was closing when the transport went.
        for link in self._links:
            if link._detaching:
                link._closed = True
        self._links = [link for link in self._links if not link.is_closed]
        for link in self._links:
            link._restore(engine_session)

    def _on_transport_lost(self) -> None:
        for link in self._links:
            link._on_transport_lost()

    def _ending(self, cause: AMQPError, what: str) -> None:
        """Before our end of the session (or our close of its connection: ``what`` ends, in words) drops them: its
        senders' messages none of whose bytes was written fail as never sent, and the at-most-once ones dropped
        are counted in a warning (``_Link._ending``)."""
        for link in self._links:
            link._ending(cause, what)

    def _on_connection_failed(self, error: AMQPError | None) -> None:
        self._error = error or ConnectionError("the connection closed")
        for link in self._links:
            link._on_connection_failed(self._error)

    def _on_event(self, event: Any) -> None:
        if isinstance(event, ev.SessionBegun):
            if self._end_on_answer and event.session is self._engine_session:
                self._end_on_answer = False
                event.session.end()  # the begin it was abandoned before is answered: now its end (_abandon)
                self.connection._kick()
            return
        if isinstance(event, ev.SessionEnded):
            self._ended = True
            _links.hand_dropped(event.dropped, "session")  # (before the links fail what they held)
            # The peer's end with an error, or ours because the peer broke the protocol on this session (§2.5.5,
            # e.g. amqp:session:handle-in-use): the error names the condition. Not an end we asked for.
            if event.error is not None and (event.remote or not self._closing):
                self._error = SessionError(
                    event.error.description or "", condition=str(event.error.condition), info=event.error.info
                )
            for link in self._links:
                link._on_session_ended(self._error)

    async def _attach_sender(self, options: SenderOptions) -> Sender[Any]:
        self._check()
        sender: Sender[Any] = Sender(self, options)
        await self._attach(sender)
        return sender

    async def _attach_receiver(self, options: ReceiverOptions) -> Receiver:
        self._check()
        receiver = Receiver(self, options)
        await self._attach(receiver)
        return receiver

    async def _attach_stream_sender(self, options: SenderOptions, buffer_size: int) -> StreamSender[Any]:
        self._check()
        sender: StreamSender[Any] = StreamSender(self, options, buffer_size)
        await self._attach(sender)
        return sender

    async def _attach_stream_receiver(
        self, options: ReceiverOptions, buffer_size: int, *, owns_session: bool = False
    ) -> StreamReceiver:
        self._check()
        receiver = StreamReceiver(self, options, owns_session=owns_session)
        await self._attach(receiver)
        return receiver

    async def _attach(self, link: _AnyLink) -> None:
        """Attach ``link`` and wait for the peer's answer; a link whose attach fails or is cancelled is detached and
        forgotten (``_Link._abandon``): the application never got it, so a reconnect must not bring it back."""
        self._links, self._prune_links_at = with_added(self._links, link, self._prune_links_at)
        try:
            await link._attach()
        except BaseException:
            link._abandon()
            forget(self._links, link)
            raise

    async def close(self, error: Error | None = None) -> None:
        """End the session (§2.5.1) and wait for the peer's end (idempotent).

        Without ``error``, the messages its senders handed over that still wait for the peer's session window
        (§2.5.6) are written first, as the peer opens it: the end would drop them (at-most-once ones without a
        word), as :meth:`Sender.close` and :meth:`Connection.close` write theirs first. One bound covers the whole
        close, the backlog written and then the peer's end: ``CLOSE_TIMEOUT`` seconds (10). What is still unwritten
        then goes with the end: a message none of whose bytes was written fails as never sent
        (:class:`~amqp_async.ClosedByApplication`, "never sent"; at-most-once ones are counted in a warning), the
        others still without an outcome are in doubt (:class:`~amqp_async.DeliveryInDoubt`). With ``error``, the
        session ends at once. A cancelled close ends it at once too.
        """
        check_thread(self.connection)
        engine_session = self._engine_session
        if self._ended or engine_session is None or self.connection.is_closed:
            self._ended = True
            return
        self._closing = True
        connection = self.connection
        if connection._reconnecting:  # the transport went with the session: the reconnect leaves it out
            self._ended = True
            return
        # read at each close (not bound at import), as the sender's close reads it
        deadline = anyio.current_time() + _links.CLOSE_TIMEOUT
        if error is None:
            try:
                await self._write_backlog(engine_session, deadline)
            except BaseException:  # cancelled: end it now, rather than leave it begun with nobody to end it
                self._end(engine_session, error)
                raise
            if self._ended or connection.is_closed or connection._reconnecting:
                self._ended = True  # ended by the peer, or gone with its connection, meanwhile
                return
        self._end(engine_session, error)
        with anyio.CancelScope(deadline=deadline):
            while engine_session.remote_state is ACTIVE and not connection.is_closed and not connection._reconnecting:
                await connection._wait_state()
        if engine_session.remote_state is ACTIVE and not connection.is_closed and not connection._reconnecting:
            # The peer did not answer the end, and keeps the connection alive: nothing more comes on this session
            # for us. Its links end here, as at the peer's end (the trackers still without an outcome are in doubt:
            # they waited for ever after close() returned), and what waits on them wakes.
            for link in self._links:
                link._on_session_ended(None)
            connection._notify()
        self._ended = True

    async def _write_backlog(self, engine_session: EngineSession, deadline: float) -> None:
        """Before a clean end: wait until the transfers of the session's senders still waiting for the peer's
        session window are written, as the peer opens it (until ``deadline``, an :func:`anyio.current_time`)."""
        connection = self.connection
        with anyio.CancelScope(deadline=deadline):
            while (
                engine_session.has_backlog
                and engine_session.local_state is ACTIVE
                and engine_session.remote_state is ACTIVE
                and not connection.is_closed
                and not connection._reconnecting
            ):
                await connection._wait_state()

    def _end(self, engine_session: EngineSession, error: Error | None) -> None:
        """Send our end (what still waits for the peer's window goes with it, reported first: :meth:`_ending`)."""
        connection = self.connection
        if engine_session.local_state is not ACTIVE or connection.is_closed or connection._reconnecting:
            return
        self._ending(ClosedByApplication("the application closed the session"), "session")
        engine_session.end(error)  # (drops the transfers still waiting for the peer's window, §2.5.6)
        connection._kick()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
