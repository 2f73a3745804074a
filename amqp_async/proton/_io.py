"""The container's I/O: one channel task per connection, one listener task per acceptor.

A :class:`Channel` connects (trying the URLs with the reconnect delays), gives the connection a fresh engine
(:meth:`Connection._bind`), and runs the shared :class:`~amqp_async.io.driver.EngineDriver` over the stream. The
driver hands each batch of engine events to :meth:`Channel.on_events`, which turns them into proton's events and has
the container dispatch them at once, on the same task: a callback runs with no task switch after its frame arrived,
and whatever it queued on the engine is written by the driver's writer in one go.

When the transport ends the channel reports it as proton does (``on_transport_error`` when it failed, then the
transport-closed events), and reconnects while the connection is open locally and the reconnect policy allows.
"""

from __future__ import annotations

import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from anyio.streams.tls import TLSAttribute

from .. import protocol
from ..client._config import ResolvedOptions
from ..client._trace import FrameTracer
from ..client._transport import open_stream
from ..client._url import Address
from ..codec.framing import FRAME_AMQP, MAX_FRAME_SIZE, MIN_MAX_FRAME_SIZE, encode_frame
from ..codec.performatives import Close, Error
from ..errors import EncodeError
from ..io.driver import EngineDriver, describe_transport_error
from ..io.exception_groups import leaves
from ..protocol import events as ev
from ..protocol.endpoint import CLOSED, UNINIT
from ..protocol.errors import LocalProtocolError
from ..protocol.sasl import SaslClient, SaslServer
from ._condition import Condition, authentication_failure, header_failure
from ._delivery import Delivery
from ._endpoints import Connection, Receiver, Sender, link_attached_by_peer, session_begun_by_peer
from ._engine import first_bytes, no_header
from ._events import Event
from ._reconnect import ConnectSequence
from ._tls import failure_condition
from ._url import Url

if TYPE_CHECKING:
    from ._reactor import Reactor

__all__ = ["Channel", "Listener"]

log = logging.getLogger("proton")  # proton's own logger name, so its logging configuration applies


class Channel:
    """Drives one connection: connect (and reconnect), run the engine, translate its events.

    Args:
        container: the container that dispatches the events.
        connection: the connection to drive.
        options: where and how to connect (None for a connection an acceptor let in: ``stream`` is given).
        stream: the accepted stream of an incoming connection.
    """

    def __init__(
        self,
        container: Reactor,
        connection: Connection,
        options: ResolvedOptions | None,
        stream: anyio.abc.ByteStream | None = None,
        server_mechanisms: str | None = None,
    ) -> None:
        self.container = container
        self.connection = connection
        self.options = options
        self._stream = stream
        self._server_mechanisms = server_mechanisms
        self._driver: EngineDriver | None = None
        self._cancel: anyio.CancelScope | None = None
        # What of the transport's end was reported (proton's head: our output; tail: the peer's input).
        self._head_reported = False
        self._tail_reported = False
        self._end_reported = False
        self._ended = False  # between the end of a transport and the next attempt
        self._binding = options is not None  # a client: until its first connection_bound is queued
        self._misused = False  # the engine refused a value of the program's (see _run_transport): no reconnect
        self._awaiting_header = True  # the peer's protocol header has not come whole yet (this transport's)
        self.done = False
        connection._channel = self

    @property
    def live(self) -> bool:
        """Whether the container waits for this channel: its transport runs or is being connected, or it ended and
        the connection is to reconnect (proton: a socket, or the reconnect timer)."""
        if self.done:
            return False
        if not self._ended:
            # Both halves reported closed: proton's transport is closed then (the socket's end is only to come).
            return not (self._head_reported and self._tail_reported)
        options = self.options
        return options is not None and self._should_retry(options)

    @property
    def binding(self) -> bool:
        """Connecting for the first time and not bound yet: proton binds a connection's transport as it is opened,
        in the same round of events, so the container is not idle yet."""
        return self._binding

    # --- control from the application -------------------------------------------------------------------

    def abort(self) -> None:
        """Drop the transport now (proton's ``close_head``/``close_tail``)."""
        if self._cancel is not None:
            self._cancel.cancel()

    def kick(self) -> None:
        """The engine has output: wake the writer."""
        driver = self._driver
        if driver is not None:
            driver.kick()

    def write_now(self) -> None:
        """A callback is queueing much output: let the socket have it now (see ``EngineDriver.write_now``)."""
        driver = self._driver
        if driver is not None:
            driver.write_now()

    # --- the task ----------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect and drive until the connection is over (closed, or the transport lost for good)."""
        try:
            if self.options is None:
                assert self._stream is not None
                await self._serve(self._stream)
            else:
                await self._run_client(self.options)
        finally:
            self._binding = False
            self.done = True
            self.connection._channel = None
            self.container._channel_done(self)

    async def _run_client(self, options: ResolvedOptions) -> None:
        connection = self.connection
        sequence: ConnectSequence = connection._sequence  # type: ignore[attr-defined]
        try:
            address = sequence.first()
        except Exception as exc:  # a custom reconnect policy raised: proton's run() raises it
            self.container._fail(exc)
            return
        delay = 0.0
        while True:
            if connection._local == 4 and connection._impl is None:
                return  # closed before it ever connected
            if delay:
                await anyio.sleep(delay)
            if connection._local == 4:
                return
            # As proton's connector: the URL being tried is the connection's address from now on (a handler of a
            # failed attempt reads it), and without a virtual host its host is the hostname sent in open.
            connection.url = Url(address.to_url(show_password=False))
            if options.virtual_host is None:
                connection.hostname = address.host
            # As proton's connector, on the transport of each attempt: the program's handlers read them back (and
            # may change them) in on_connection_bound, and the open frame announces them.
            transport = connection._transport
            if options.heartbeat:
                transport.idle_timeout = options.heartbeat
            if options.max_frame_size:
                transport.max_frame_size = options.max_frame_size
            self.container._push(Event.CONNECTION_BOUND, connection)
            self._binding = False
            self.container._process()  # proton's handlers see the transport before it connects (idle_timeout...)
            self._head_reported = self._tail_reported = self._end_reported = False
            self._ended = False
            try:
                stream = await self._open_stream(options, address)
            except socket.gaierror as exc:
                # proton resolves the name as it connects, outside its error handling: run() raises the error
                # (retried, a misspelt host name failed silently for ever)
                log.info("connecting to %s failed: %r", address, exc)
                self.container._fail(exc)
                return
            except (OSError, ssl.SSLError, anyio.BrokenResourceError) as exc:
                log.info("connecting to %s failed: %r", address, exc)
                self._ended = True
                tls_failure = _tls_failure(exc)
                if tls_failure is not None:
                    # The TLS handshake failed (a certificate not trusted, a host name it does not name): proton's
                    # SSL layer reports it as its protocol layers do, the error first, in its words.
                    self._report_failure(failure_condition(tls_failure), error_first=True)
                else:
                    # proton's Python I/O layer names this condition "proton.pythonio".
                    self._report_failure(Condition("proton.pythonio", f"{describe_transport_error(exc) or exc}"))
                self.container._process()
            else:
                engine = self._client_engine(options, address)
                await self._drive(engine, stream)
                if engine.remote_open is not None:
                    sequence.connected()  # a connection was made: the next outage starts the delays again
            if not self._should_retry(options):
                return
            try:
                delay, address = sequence.next_attempt()
            except StopIteration:
                return
            except Exception as exc:  # a custom reconnect policy gave up by raising: proton's run() raises it
                self.container._fail(exc)
                return

    def _should_retry(self, options: ResolvedOptions) -> bool:
        return options.reconnect is not False and self.connection._local == 2 and not self._misused

    async def _open_stream(self, options: ResolvedOptions, address: Address) -> anyio.abc.ByteStream:
        return await open_stream(address, options)  # TCP, TLS or WebSocket, as the client's

    def _client_engine(self, options: ResolvedOptions, address: Address) -> protocol.Connection:
        connection = self.connection
        transport = connection._transport
        # As proton's connector: the URL's user, else the container's option, else what the program set on the
        # connection; and the connection reads the one taken (a handler reads connection.user in on_connection_opened)
        user, password = options.credentials_for(address)
        user = connection.user = user or connection.user
        password = connection._password = password or connection._password
        hostname = connection.hostname or options.virtual_host_for(address)
        sasl = None
        sasl_settings = transport._sasl
        if options.sasl_enabled:
            sasl = SaslClient(
                user=user,
                password=password,
                allowed_mechs=(sasl_settings.mechs if sasl_settings and sasl_settings.mechs else options.allowed_mechs),
                allow_insecure_mechs=(
                    options.allow_insecure_mechs
                    if sasl_settings is None or sasl_settings._allow_insecure is None
                    else sasl_settings._allow_insecure
                ),
                encrypted=address.tls,
                # No hostname in sasl-init (optional, §5.3.3.2), as proton's: its SASL without Cyrus (the wheels')
                # never sends one; the open carries it.
            )
        heartbeat = transport.idle_timeout
        return protocol.Connection(
            role=protocol.CLIENT,
            container_id=connection.container or options.container_id,
            hostname=hostname,
            # The transport's settings (proton's defaults: 32768 and 32767, or what connect() and the handlers
            # asked), as proton's open frame announces them; a max_frame_size of 0 is proton's "no limit".
            max_frame_size=transport.max_frame_size or MAX_FRAME_SIZE,
            channel_max=transport.channel_max,
            idle_timeout=heartbeat or None,
            # §2.4.5 advises a peer to send within half the idle timeout it announces: as proton's transport, we
            # announce half of ours and enforce the whole.
            advertised_idle_timeout=heartbeat / 2 if heartbeat else None,
            properties=connection.properties if connection.properties is not None else options.properties,
            offered_capabilities=connection.offered_capabilities or options.offered_capabilities,
            desired_capabilities=connection.desired_capabilities or options.desired_capabilities,
            sasl=sasl,
            answer_detach=False,
            idle_from_start=True,  # as proton's transport: a peer silent before its open is given up too
        )

    async def _serve(self, stream: anyio.abc.ByteStream) -> None:
        container = self.container
        mechanisms = self._server_mechanisms or "ANONYMOUS"
        transport = self.connection._transport
        engine = protocol.Connection(
            role=protocol.SERVER,
            container_id=container.container_id,
            max_frame_size=transport.max_frame_size or MAX_FRAME_SIZE,
            channel_max=transport.channel_max,
            sasl=SaslServer(mechanisms),
            require_sasl=False,
            answer_detach=False,
        )
        await self._drive(engine, stream)

    async def _drive(self, engine: protocol.Connection, stream: anyio.abc.ByteStream) -> None:
        """Bind the engine, run it over ``stream`` until the transport ends, and report the end."""
        connection = self.connection
        container = self.container
        connection._tls = stream.extra(TLSAttribute.ssl_object, None)
        connection._transport.condition = None
        connection._transport._closed = False
        self._head_reported = self._tail_reported = self._end_reported = False
        self._awaiting_header = True  # until the peer's protocol header is whole (see on_events)
        driver = self._driver = EngineDriver(engine, stream, self.on_events, tracer=FrameTracer.from_environment())
        try:
            try:
                connection._bind(engine)
                if self.options is None:
                    container._push(Event.CONNECTION_BOUND, connection)
                container._transport_bound(connection)
                with anyio.CancelScope() as scope:
                    self._cancel = scope
                    container._process()
                    if self.options is None and engine.local_state is UNINIT:
                        # An accepted connection's handlers may have changed its transport when it was bound
                        # (proton's on_connection_bound): its open announces what they set.
                        _apply_transport_settings(engine, connection._transport)
                    await driver.run()
            except Exception as exc:
                misuse = _misuse_in(exc)
                if misuse is None:
                    raise
                # A value the program gave (a link's properties, a terminus field, a settle mode...) that the engine
                # refuses, found as it was given the frame or wrote it: this connection ends with a transport error
                # naming it, where proton's C binding refused the value at the call. The container, and its other
                # connections, go on.
                log.warning("connection %s: %s", self.connection, misuse)
                self._misused = True  # no reconnect: every attempt would meet it again (two links of one name...)
                self._report_failure(Condition(str(misuse.condition), misuse.description))
        finally:
            self._cancel = None
            self._driver = None
            with anyio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
        self._ended = True
        if connection._tracing is not None:
            connection._tracing.transport_ended(connection)
        if not self._end_reported:
            transport = connection._transport
            failed = (not engine.closed or driver.transport_failed) and transport.condition is None
            condition = Condition("amqp:connection:framing-error", driver.transport_error or "connection aborted")
            if failed and driver.transport_exception is None and self._awaiting_header:
                # The stream ended before the peer's protocol header was whole: proton names what came of it.
                condition = no_header(engine, self._expected_header(engine))
            if failed and driver.transport_exception is not None:
                # The socket failed (reset, broken pipe), not a plain end of stream: proton's I/O closes only the
                # tail on a failed recv, so the error comes before the head closes (tail, error, head, closed).
                self._report_failure(condition)
            else:
                push = container._push
                self._end_reported = True
                transport._closed = True
                # The stream ended: proton closes head and tail at once (its EOF handling), and reports what of
                # each was not reported yet, head first, then the error of a stream that ended without a close.
                if not self._head_reported:
                    push(Event.TRANSPORT_HEAD_CLOSED, transport)
                if not self._tail_reported:
                    push(Event.TRANSPORT_TAIL_CLOSED, transport)
                push(Event.TRANSPORT_CLOSED, transport)
                if failed:
                    transport.condition = condition
                    push(Event.TRANSPORT_ERROR, transport)
        container._process()

    # --- reporting the end of a transport -----------------------------------------------------------------

    def head_closed(self) -> None:
        """Our close went to the engine: proton reports the output side closed at once."""
        if self._driver is not None and not self._head_reported:
            self._head_reported = True
            self.container._push(Event.TRANSPORT_HEAD_CLOSED, self.connection._transport)

    def _report_failure(self, condition: Condition, error_first: bool = False) -> None:
        """The transport failed before or without a close: proton's order is tail closed, the error, head closed,
        closed for a failure the driver saw (refused, reset); for one the protocol layer saw (authentication, a
        bad header, the peer's protocol error, an idle timeout: ``error_first``) the error comes first, as checked
        against python-qpid-proton 0.40."""
        if self._end_reported:
            return
        self._end_reported = True
        transport = self.connection._transport
        transport.condition = condition
        transport._closed = True
        push = self.container._push
        if error_first:
            push(Event.TRANSPORT_ERROR, transport)
        if not self._tail_reported:
            push(Event.TRANSPORT_TAIL_CLOSED, transport)
        if not error_first:
            push(Event.TRANSPORT_ERROR, transport)
        if not self._head_reported:
            push(Event.TRANSPORT_HEAD_CLOSED, transport)
        push(Event.TRANSPORT_CLOSED, transport)

    def _header_failure(self, engine: protocol.Connection, header: bytes) -> Condition:
        """The peer's first bytes are not the protocol header awaited (``header``: the one it sent, ``b""`` for bytes
        that began none): proton's framing error, which names what came (an AMQP header without SASL where SASL is
        awaited, or the reverse, when ``sasl_enabled`` is not the server's choice)."""
        return header_failure(first_bytes(engine, header), expected=self._expected_header(engine))

    def _expected_header(self, engine: protocol.Connection) -> str | None:
        """The protocol header awaited, as proton's errors name it: ``"SASL"`` or ``"AMQP"`` for a client, None for
        a server (proton's autodetect, which takes either)."""
        if self.options is None:
            return None
        if engine.sasl is not None and engine.sasl_outcome is None:
            return "SASL"
        return "AMQP"

    def _fail_for_peer_error(self, error: Any) -> None:
        """The engine ended a session because the peer broke a session rule (a frame on an unattached handle,
        ...). Proton has no such local end: it closes the whole connection with a transport error. Do the same, so
        ``on_transport_error``/``on_disconnected`` run and ``run()`` returns instead of waiting on a peer that
        keeps the socket open. (A link the engine detaches, e.g. for a message above max-message-size, stays a
        link error, as in proton.)"""
        engine = self.connection._impl
        if error is None or engine is None:
            return
        engine.fail(str(error.condition), error.description or "")

    # --- engine events → proton events ------------------------------------------------------------------

    def on_events(self, events: list[ev.Event]) -> None:
        """Translate a batch of engine events and have the container dispatch them."""
        container = self.container
        push = container._push
        session_ended = False
        if self._awaiting_header:
            engine = self.connection._impl
            if engine is not None and not engine.closed:
                # (an engine the end of the stream closed keeps the state the stream left it in: see _drive)
                self._awaiting_header = engine.awaiting_header
        for event in events:
            kind = type(event)
            if kind is ev.DeliveriesReceived:
                link = event.link  # type: ignore[attr-defined]
                receiver: Receiver = link.user_data
                incoming = link.incoming
                collector = container._collector
                tracing = self.connection._tracing
                if tracing is None:
                    # Queued as they are: each one's proton Delivery and DELIVERY event are made as it is dispatched
                    # (Reactor._dispatch_all; see Receiver._take_arrived).
                    receiver._arrived += len(incoming)
                    collector.extend(incoming)
                    incoming.clear()
                    continue
                queue = receiver._incoming
                while incoming:
                    # Traced: its receive span starts as it arrives.
                    engine_delivery = incoming.popleft()
                    delivery = Delivery(receiver, engine_delivery.tag, engine_delivery)
                    delivery._payload = engine_delivery.payload
                    engine_delivery.user_data = delivery
                    queue.append(delivery)
                    tracing.received(receiver, delivery, engine_delivery.payload)
                    collector.append(delivery)  # its DELIVERY event, made as it is dispatched (see there)
            elif kind is ev.DeliveriesUpdated:
                collector = container._collector
                for engine_delivery in event.deliveries:  # type: ignore[attr-defined]
                    delivery = engine_delivery.user_data
                    if delivery is not None:  # (None: settled and forgotten, or its DELIVERY event is queued)
                        delivery._updated = True
                        if delivery._span is not None:
                            self.connection._tracing.updated(delivery)
                        collector.append(delivery)
            elif kind is ev.FlowReceived:
                link = event.link  # type: ignore[attr-defined]
                if link is not None and link.user_data is not None:
                    wrapper = link.user_data
                    if wrapper.is_sender:
                        wrapper._pump()
                    push(Event.LINK_FLOW, wrapper)
            else:
                self._on_endpoint_event(event)
                session_ended = session_ended or kind is ev.SessionEnded
        if session_ended and self._events_after_peer_error():
            return
        container._process()

    def _events_after_peer_error(self) -> bool:
        """A session ended in this batch: when the peer broke a session rule, :meth:`_fail_for_peer_error` closed
        the connection while the batch was translated, and the engine's ConnectionClosed, which carries the
        condition, came after the driver took the batch. Translate it now (True: done, the container has
        dispatched). Left for later, it was lost when the transport then ended: the program saw the transport
        closed without an error (``on_transport_error`` never ran, and a ``BlockingConnection`` raised
        "disconnected: unknown" where proton's names ``amqp:invalid-field``)."""
        engine = self.connection._impl
        later = None if engine is None else engine.next_events()
        if not later:
            return False
        self.on_events(later)
        return True

    def _on_endpoint_event(self, event: ev.Event) -> None:
        container = self.container
        push = container._push
        connection = self.connection
        if isinstance(event, ev.ConnectionOpened):
            push(Event.CONNECTION_REMOTE_OPEN, connection)
        elif isinstance(event, ev.SessionBegun):
            session, made = session_begun_by_peer(connection, event.session)
            if made:
                push(Event.SESSION_INIT, session)
            push(Event.SESSION_REMOTE_OPEN, session)
        elif isinstance(event, ev.LinkAttached):
            link, made = link_attached_by_peer(event.link)
            if made:
                push(Event.LINK_INIT, link)
            push(Event.LINK_REMOTE_OPEN, link)
            if isinstance(link, Sender):
                link._pump()
        elif isinstance(event, ev.LinkDetached):
            link = event.link.user_data
            if link is None:
                return
            if link.session._name_waiters:
                link.session._name_freed(event.link.name)
            if event.remote or link._local == 4 or _answers_our_end(event.link):
                push(Event.LINK_REMOTE_CLOSE if event.closed else Event.LINK_REMOTE_DETACH, link)
            else:
                # The engine detached the link because the peer broke a link rule: our side is closed.
                link._local = 4
                link.condition = None if event.error is None else Condition.from_error(event.error)
                push(Event.LINK_LOCAL_CLOSE, link)
        elif isinstance(event, ev.SessionEnded):
            session = event.session.user_data
            if session is None:
                return
            if event.remote or session._local == 4 or _answers_our_end(event.session):
                push(Event.SESSION_REMOTE_CLOSE, session)
            else:
                session._local = 4
                session.condition = None if event.error is None else Condition.from_error(event.error)
                push(Event.SESSION_LOCAL_CLOSE, session)
                self._fail_for_peer_error(event.error)
        elif isinstance(event, ev.ConnectionClosed):
            engine = connection._impl
            transport = connection._transport
            if engine is not None and engine.remote_state is CLOSED:
                push(Event.CONNECTION_REMOTE_CLOSE, connection)
                if not self._tail_reported:
                    self._tail_reported = True
                    push(Event.TRANSPORT_TAIL_CLOSED, transport)
            elif event.sasl_code is not None:
                sasl = None if engine is None else engine.sasl
                self._report_failure(authentication_failure(sasl, event.sasl_code, event.error), error_first=True)
            elif event.transport_ended:
                pass  # reported with the driver's reason once the transport is closed
            elif event.protocol_header is not None and engine is not None:
                condition = self._header_failure(engine, event.protocol_header)
                engine.close_after_refused_header(_first_close_error(condition))  # proton's open and close
                self._report_failure(condition, error_first=True)
            elif event.error is not None:
                # The engine closed the connection: the peer broke the protocol, or went silent.
                # Proton reports these (protocol error, idle timeout) error first, then tail/head closed.
                self._report_failure(Condition.from_error(event.error), error_first=True)


class Listener:
    """An acceptor's task: accept connections on a TCP listener and give each one a :class:`Channel`.

    Args:
        container: the container that runs the connections.
        listener: the bound TCP (or TLS) listener.
        handler: the handler for the accepted connections (None: the container's).
    """

    def __init__(self, container: Reactor, listener: anyio.abc.Listener[Any], handler: Any) -> None:
        self.container = container
        self.listener = listener
        self.handler = handler
        self.ssl_context: ssl.SSLContext | None = None
        self.sasl_mechanisms: str | None = None
        self._scope: anyio.CancelScope | None = None
        self.closed = False

    def close(self) -> None:
        """Stop accepting connections."""
        self.closed = True
        scope = self._scope
        if scope is None:
            return
        stepper = self.container._stepper
        if stepper is not None and not stepper.stepping:
            # Between a stepping container's process() calls no loop runs: the next call stops the listener.
            self.container.call_threadsafe(scope.cancel)
            return
        scope.cancel()

    async def run(self) -> None:
        """Accept until closed."""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.closed:
                    return
                await self.listener.serve(self._accepted)
        finally:
            self.closed = True
            with anyio.CancelScope(shield=True):
                await self.listener.aclose()
            self.container._wake()

    async def _accepted(self, stream: anyio.abc.ByteStream) -> None:
        container = self.container
        if self.ssl_context is not None:
            from anyio.streams.tls import TLSStream

            try:
                stream = await TLSStream.wrap(stream, server_side=True, ssl_context=self.ssl_context)
            except (OSError, ssl.SSLError, anyio.BrokenResourceError) as exc:
                log.info("TLS handshake with a client failed: %r", exc)
                return
        connection = container._new_connection(self.handler)
        remote = stream.extra(anyio.abc.SocketAttribute.remote_address, None)
        if isinstance(remote, tuple):
            connection.url = Url(host=str(remote[0]), port=int(remote[1]))
        channel = Channel(container, connection, None, stream, self.sasl_mechanisms)
        container._channels.add(channel)
        # The connection outlives the acceptor (closing it only stops accepting): run it in the container's tasks.
        container._start(channel.run)


def _answers_our_end(endpoint: Any) -> bool:
    """The engine's detach (or end) event of ``endpoint`` is the peer's, arriving after we closed its connection (or
    ended its session) while the program had not closed it: the engine closed it locally with its parent. (A link
    error the engine found is reported when found, before the peer's detach: the peer's side is still open.)

    proton closes only what the program closed: the peer's detach of such a link is a remote close of a link still
    open on our side (``on_link_closing``, then ``on_link_closed`` once the handler closes it), as in proton.
    """
    return endpoint.remote_state is CLOSED


def _apply_transport_settings(engine: protocol.Connection, transport: Any) -> None:
    """Give an engine not yet opened what its transport says (an accepted connection's, set by its handlers)."""
    engine.max_frame_size = engine._decoder.max_frame_size = transport.max_frame_size or MAX_FRAME_SIZE
    engine.channel_max = transport.channel_max
    idle_timeout = transport.idle_timeout
    if idle_timeout:
        # proton's: the whole enforced, half announced (§2.4.5), as a client's
        engine.idle_timeout = idle_timeout
        engine.advertised_idle_timeout = idle_timeout / 2


def _first_close_error(condition: Condition) -> Error:
    """``condition`` as the error of a close written before the peer's open, its description cut (when long: it
    quotes what the peer sent) so that the frame stays within 512 bytes. §2.4.1: until the open frames are
    exchanged, a frame is at most MIN-MAX-FRAME-SIZE (512 bytes), and the engine refuses to write a larger one; proton
    writes it whole. The transport's condition keeps the whole description."""
    error = condition.to_error()
    while True:
        out = bytearray()
        encode_frame(out, FRAME_AMQP, 0, Close(error=error))
        excess = len(out) - MIN_MAX_FRAME_SIZE
        if excess <= 0:
            return error
        # (a shorter description may also shrink the encoding around it: one more round then)
        encoded = (error.description or "").encode()
        if not encoded:
            return error  # nothing left to cut (a condition's name does not come near 512 bytes)
        cut = encoded[: max(len(encoded) - excess, 0)].decode(errors="ignore")  # a character cut short is dropped
        error = Error(condition=error.condition, description=cut, info=error.info)


def _tls_failure(error: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a failed connect (anyio may wrap it in a BrokenResourceError), or None."""
    while error is not None:
        if isinstance(error, ssl.SSLError):
            return error
        error = error.__cause__  # type: ignore[assignment]
    return None


def _misuse_in(error: BaseException) -> LocalProtocolError | EncodeError | None:
    """The engine's refusal to write a frame of the program's values, inside ``error`` (task groups wrap what their
    tasks raise); None when ``error`` holds none."""
    return next((leaf for leaf in leaves(error) if isinstance(leaf, (LocalProtocolError, EncodeError))), None)
