"""proton's ``Transport`` and ``SASL``: the byte stream under a connection, as the callback API shows it (TLS:
``_ssl.py``).

For a container's connection there is no separate transport object in our engine: the connection's engine does
framing, SASL and timeouts, and the container's driver owns the socket; :class:`Transport` is the view proton
programs expect (its ``condition`` after an error, the negotiated frame size and idle timeouts, ``sasl()``...). For a
program that does its own I/O (proton's engine API), a :class:`Transport` runs an engine of its own
(:class:`~amqp_async.proton._engine.EngineIO`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._condition import Condition
from ._engine import CAPACITY, IMPL_CHANNEL_MAX, EngineIO
from ._exceptions import SessionException, TransportException
from ._ssl import SSL, SSLDomain, SSLSessionDetails

if TYPE_CHECKING:
    from ._endpoints import Connection

__all__ = ["SASL", "SSL", "SSLDomain", "SSLSessionDetails", "Transport"]

#: proton's default largest frame (its ``PN_DEFAULT_MAX_FRAME_SIZE``), announced unless the program asks otherwise.
DEFAULT_MAX_FRAME_SIZE = 32768


class Transport:
    """The byte stream under a connection.

    Made by the container for each of its connections (its settings before it connects, and what happened to it
    after), or by a program that does its own I/O (proton's engine API): ``Transport()`` (a client) or
    ``Transport(Transport.SERVER)``, :meth:`bind` to a :class:`Connection` (before or after the first bytes), then
    :meth:`push` what was read, write what :meth:`peek` gives and :meth:`pop` it, and :meth:`tick` the clock.

    Attributes:
        condition: why the transport failed (``proton:io``, ``amqp:connection:framing-error``...), or None.
        tracer: a function called with (transport, message) for each :meth:`log` message, or None.
    """

    TRACE_OFF = 0
    TRACE_DRV = 1
    TRACE_FRM = 2
    TRACE_RAW = 4
    CLIENT = 1
    SERVER = 2

    _is_transport = True

    def __init__(self, mode: int | None = None, _connection: Connection | None = None) -> None:
        if mode not in (None, self.CLIENT, self.SERVER):
            raise TransportException(f"Cannot initialise Transport from mode: {mode}")
        self.mode = mode or self.CLIENT
        self._connection = _connection
        #: made by the container for its connection (else: a transport the program drives, proton's engine API)
        self._container_view = _connection is not None
        self.condition: Condition | None = None
        self._idle_timeout_ms = 0
        # proton's defaults, for a container's transport too: they are what its open frame announces.
        self._max_frame_size = DEFAULT_MAX_FRAME_SIZE
        self._channel_max = IMPL_CHANNEL_MAX
        self._sasl: SASL | None = None
        self._ssl: SSL | None = None
        self._closed = False
        self._io: EngineIO | None = None
        self._open_sent = False
        self._trace = self.TRACE_OFF
        self.tracer: Any = None

    @property
    def connection(self) -> Connection | None:
        """The connection this transport carries."""
        return self._connection

    @property
    def idle_timeout(self) -> float:
        """The idle timeout to ask the peer to keep, in seconds (0: none). As proton's, it is kept in whole
        milliseconds, and half of it is what the open frame announces (§2.4.5)."""
        return self._idle_timeout_ms / 1000.0

    @idle_timeout.setter
    def idle_timeout(self, seconds: float) -> None:
        self._idle_timeout_ms = int(seconds * 1000)

    @property
    def max_frame_size(self) -> int:
        """The largest frame to accept (0: no limit; below 512, the 512 of §2.7.1)."""
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        if self._open_sent:
            return  # proton: too late once our open went (it logs a warning)
        self._max_frame_size = max(value, 512) if value else 0

    @property
    def channel_max(self) -> int:
        """The highest channel number to accept: what the program asked, at most proton's 32767, and at most the
        peer's once its open came.

        Raises:
            SessionException: on setting it once our open went.
            OverflowError: a value that is not a 16-bit unsigned int (proton's C binding refuses it).
        """
        value = self._channel_max
        engine = self._engine()
        if engine is not None and engine.remote_open is not None:
            value = min(value, int(engine.remote_open.channel_max))
        return value

    @channel_max.setter
    def channel_max(self, value: int) -> None:
        if not 0 <= value <= 65535:
            raise OverflowError(f"integer {value} does not fit '16-bit unsigned int'")
        if self._open_sent:
            raise SessionException("Too late to change channel max.")
        self._channel_max = min(value, IMPL_CHANNEL_MAX)

    def _engine(self) -> Any:
        io = self._io
        if io is not None:
            return io.engine
        connection = self._connection
        return None if connection is None else connection._impl

    @property
    def remote_max_frame_size(self) -> int:
        """The largest frame the peer accepts (known once its open arrived)."""
        engine = self._engine()
        if engine is None or engine.remote_open is None:
            return 4294967295  # proton's: no limit known yet (the default of the open frame's field, §2.7.1)
        return int(engine.remote_max_frame_size)

    @property
    def remote_idle_timeout(self) -> float:
        """The idle timeout the peer asked for, in seconds (0: none)."""
        engine = self._engine()
        return 0.0 if engine is None else float(engine.remote_idle_timeout)

    @property
    def remote_channel_max(self) -> int:
        """The highest channel the peer accepts."""
        engine = self._engine()
        if engine is None or engine.remote_open is None:
            return 65535  # proton's: the default of the open frame's field (§2.7.1), until the peer's open came
        return int(engine.remote_open.channel_max)

    @property
    def authenticated(self) -> bool:
        """True once the SASL exchange succeeded."""
        engine = self._engine()
        return engine is not None and engine.sasl is not None and bool(getattr(engine.sasl_outcome, "ok", False))

    @property
    def encrypted(self) -> bool:
        """True when the connection runs over TLS."""
        io = self._io
        if io is not None:
            return io.wire is not io
        connection = self._connection
        return connection is not None and bool(connection._tls)

    @property
    def user(self) -> str | None:
        """The authenticated user: on a server, whom the client proved to be (None when SASL failed or has not
        decided yet; without SASL, the TLS client certificate's subject, else ``anonymous``); on a client, the
        connection's user (``anonymous`` without SASL)."""
        engine = self._engine()
        io = self._io
        if io is not None:
            if self.mode == self.CLIENT:
                if engine is not None and engine.sasl is None and self._sasl is None:
                    return "anonymous"
                connection = io.connection
                return None if connection is None else connection.user
            if engine is None or engine.in_sasl or engine.awaiting_header:
                return None  # (proton: nobody is known before the client's AMQP header came)
            outcome = engine.sasl_outcome
            if outcome is not None:
                return getattr(outcome, "identity", None) if outcome.ok else None
            if io.sasl_used:
                return None  # SASL began and did not succeed (or has not finished)
            tls = self._ssl._tls if self._ssl is not None else None
            if tls is not None and tls.tls.server_side:
                return tls.peer_subject()
            return "anonymous"
        if engine is None or engine.sasl is None:
            return None
        outcome = engine.sasl_outcome
        if outcome is not None and not getattr(outcome, "ok", True):
            return None if self.mode == self.SERVER else _client_user(engine)
        identity = None if outcome is None else getattr(outcome, "identity", None)
        return identity or _client_user(engine)

    @property
    def closed(self) -> bool:
        """True once the transport ended (both halves of the byte stream, for a bound engine transport)."""
        io = self._io
        if io is not None:
            return io.head_closed and io.tail_closed
        return self._closed

    @property
    def frames_input(self) -> int:
        """How many frames were read from the peer."""
        engine = self._engine()
        return 0 if engine is None else int(engine.frames_received)

    @property
    def frames_output(self) -> int:
        """How many frames were written to the peer."""
        engine = self._engine()
        return 0 if engine is None else int(engine.frames_sent)

    def sasl(self) -> SASL:
        """This transport's SASL layer (made on first call; proton: before any I/O)."""
        if self._sasl is None:
            self._sasl = SASL(self)
        return self._sasl

    def ssl(self, domain: SSLDomain | None = None, session_details: Any = None) -> SSL:
        """This transport's TLS layer."""
        if self._ssl is None:
            self._ssl = SSL(self, domain, session_details)
        return self._ssl

    def require_auth(self, required: bool) -> None:
        """Whether a server requires SASL authentication from clients (proton's default: it does not)."""
        self._require_auth = required

    def _auth_required(self) -> bool:
        return bool(getattr(self, "_require_auth", False))

    def require_encryption(self, required: bool) -> None:
        """Whether TLS is required (set the TLS settings on the container or the acceptor instead)."""
        self._require_encryption = required

    def trace(self, n: int) -> None:
        """Frame tracing (``TRACE_FRM``): frames are logged to the ``proton`` logger (also switched on with the
        ``PN_TRACE_FRM=1`` environment variable)."""
        self._trace = n

    def log(self, message: str) -> None:
        """Log ``message``: to :attr:`tracer` when one is set (as ``TRACE: message``, proton's form), else to the
        ``proton`` logger."""
        tracer = self.tracer
        if tracer is not None:
            tracer(self, "TRACE: " + message)
            return
        import logging

        logging.getLogger("proton").info(message)

    # --- proton's engine API: a transport the program drives ---------------------------------------------

    def _engine_io(self) -> EngineIO:
        io = self._io
        if io is None:
            if self._container_view:
                raise TransportException("the transport of a container's connection is driven by the container")
            io = self._io = EngineIO(self)
        return io

    def bind(self, connection: Connection) -> None:
        """Carry ``connection`` on this transport (its open, sessions and links go out at the next output; what
        the peer already sent is found on it at once).

        Raises:
            TransportException: the transport or the connection is bound already, or the connection belongs to a
                container.
        """
        if connection._reactor is not None:
            raise TransportException("the connection belongs to a container")
        if self._connection is not None or connection._bound is not None:
            raise TransportException("[-5]: the transport or the connection is already bound")
        io = self._engine_io()
        self._connection = connection
        connection._transport = self
        io.bind(connection)

    def bind_nothrow(self, connection: Connection) -> None:
        """:meth:`bind`, as proton's ``bind_nothrow`` (errors are not raised)."""
        try:
            self.bind(connection)
        except TransportException:
            pass

    def unbind(self) -> None:
        """Let the connection go: its remote state is forgotten (it may be bound to another transport)."""
        io = self._io
        if io is None or self._connection is None:
            return
        io.unbind()
        self._connection = None

    def capacity(self) -> int:
        """How many bytes :meth:`push` takes now (-1: the input has ended)."""
        io = self._engine_io()
        if io.tail_closed:
            return -1
        io.start()
        return CAPACITY

    def push(self, binary: bytes) -> None:
        """Give the transport bytes read from the peer.

        Raises:
            TransportException: the input has ended.
        """
        io = self._engine_io()
        if io.tail_closed:
            raise TransportException("[-2]: the transport's input is closed")
        if not binary:
            return
        io.start()
        io.wire.push(binary)

    def close_tail(self) -> None:
        """The peer's side of the byte stream ended (no more :meth:`push`)."""
        io = self._engine_io()
        io.start()
        io.wire.close_tail()

    def pending(self) -> int:
        """How many bytes wait to be written (-1: the output has ended)."""
        io = self._engine_io()
        if io.engine is None:
            io.start()
        return io.wire.pending()

    def peek(self, size: int) -> bytes | None:
        """Up to ``size`` of the bytes waiting to be written (they stay until :meth:`pop`); None once the output
        has ended."""
        io = self._engine_io()
        wire = io.wire if io.engine is not None else (io.start(), io.wire)[1]
        if wire.pending() < 0:
            return None
        out = wire.out
        if size >= len(out):
            return bytes(out)
        with memoryview(out) as view:
            return bytes(view[:size])  # one copy (a bytearray slice would be a second)

    def pop(self, size: int) -> None:
        """Drop ``size`` written bytes from the output."""
        io = self._engine_io()
        wire = io.wire
        del wire.out[:size]
        io.popped(size)
        if wire is not io and not wire.out:
            wire.drained()  # type: ignore[union-attr]
        if not wire.out:
            wire.pending()  # proton looks for more output at once (and ends the output when there is none to come)

    def close_head(self) -> None:
        """Stop writing: the output is closed (for a container's transport: close the socket)."""
        if self._container_view and self._connection is not None:
            self._connection._abort_transport()
            return
        io = self._engine_io()
        if io.engine is None:
            io.start()
        io.wire.pending()  # what is ready is dropped with the output (proton pops it)
        io.out.clear()
        if io.wire is not io:
            io.wire.out.clear()
        io.close_head()

    def tick(self, now: float) -> float:
        """Tell the transport the time (seconds): it writes heartbeats and enforces the idle timeout. Returns
        when to call again (0: no deadline)."""
        return self._engine_io().tick(now)

    def __repr__(self) -> str:
        return f"Transport(condition={self.condition!r})"


def _client_user(engine: Any) -> str | None:
    sasl = engine.sasl
    return getattr(sasl, "identity", None) or getattr(sasl, "user", None)


class SASL:
    """The SASL layer of one transport (proton's API over our own mechanisms).

    Outcome codes are §5.3.3.6's: :attr:`OK`, :attr:`AUTH`, :attr:`SYS`, :attr:`PERM`, :attr:`TEMP`. Made with
    ``SASL(transport)`` or ``transport.sasl()`` (the same object either way), before the transport's first I/O.

    A client authenticates with the connection's ``user`` and ``password``. A server offers ANONYMOUS by default,
    or the :meth:`allowed_mechs`; PLAIN and SCRAM check passwords in :attr:`credentials` (a ``user -> password``
    mapping or a :class:`~amqp_async.protocol.sasl_mechanisms.CredentialStore`), where proton would ask Cyrus.
    """

    NONE = -1
    OK = 0
    AUTH = 1
    SYS = 2
    PERM = 3
    TEMP = 4

    def __new__(cls, transport: Transport) -> SASL:
        # proton: SASL(transport) is the transport's one SASL layer, however often it is asked for.
        existing = transport._sasl
        if existing is not None:
            return existing
        layer = super().__new__(cls)
        transport._sasl = layer
        return layer

    def __init__(self, transport: Transport) -> None:
        if getattr(self, "_transport", None) is transport:
            return
        self._transport = transport
        self.mechs: str | None = None
        self._allow_insecure: bool | None = None  # None: not set by the program
        self.credentials: Any = None
        self._outcome: int | None = None

    @property
    def allow_insecure_mechs(self) -> bool:
        """Whether a client may use a mechanism that sends its password in clear (PLAIN) without TLS: proton's
        default is False (unless set, a container's connections follow the container's ``allow_insecure_mechs``)."""
        return bool(self._allow_insecure)

    @allow_insecure_mechs.setter
    def allow_insecure_mechs(self, allowed: bool) -> None:
        self._allow_insecure = bool(allowed)

    @staticmethod
    def extended() -> bool:
        """False, as python-qpid-proton's wheel (built without Cyrus SASL) says: there is no Cyrus configuration
        to use (``config_path``, ``config_name``). Our built-in mechanisms (ANONYMOUS, PLAIN, EXTERNAL,
        SCRAM-SHA-1/256/512, XOAUTH2) are there all the same."""
        return False

    def allowed_mechs(self, mechs: str | list[str]) -> None:
        """The mechanisms to allow (a space-separated string or a list)."""
        self.mechs = mechs if isinstance(mechs, str) else " ".join(mechs)

    @property
    def user(self) -> str | None:
        """The authenticated user."""
        return self._transport.user

    @property
    def authorization(self) -> str | None:
        """The authorization identity: on a server, the one the client asked for, else the user it authenticated
        as; on a client, the connection's ``authorization``, else its user."""
        transport = self._transport
        if transport.mode == Transport.SERVER:
            engine = transport._engine()
            outcome = None if engine is None else engine.sasl_outcome
            requested = None if outcome is None else getattr(outcome, "authorization", None)
            return requested or self.user
        connection = transport.connection
        requested = None if connection is None else getattr(connection, "authorization", None)
        return requested or self.user

    @property
    def mech(self) -> str | None:
        """The mechanism the exchange used."""
        engine = self._transport._engine()
        if engine is None or engine.sasl is None:
            return None
        outcome = engine.sasl_outcome
        if outcome is not None:
            return str(outcome.mechanism)
        mechanism = getattr(engine.sasl, "mechanism", None)
        return None if mechanism is None else str(getattr(mechanism, "name", mechanism))

    @property
    def outcome(self) -> int | None:
        """The outcome code, once the exchange ended (None before)."""
        engine = self._transport._engine()
        outcome = None if engine is None else engine.sasl_outcome
        if outcome is None:
            io = self._transport._io
            return self._outcome if io is None or io.sasl_code is None else io.sasl_code
        return int(getattr(outcome, "code", 0))

    def done(self, outcome: int) -> None:
        """proton's server-side verdict for its own mechanisms; ours decide through :attr:`credentials`."""
        self._outcome = outcome

    def config_name(self, name: str) -> None:
        """Cyrus SASL configuration is not used by this engine (its mechanisms are built in)."""

    def config_path(self, path: str) -> None:
        """Cyrus SASL configuration is not used by this engine (its mechanisms are built in)."""

    # --- for the engine transport ------------------------------------------------------------------------

    def _required(self) -> bool:
        return bool(getattr(self._transport, "_require_auth", True))

    def _engine_sasl(
        self, server: bool, connection: Connection | None, external: Callable[[], str | None] | None
    ) -> Any:
        """The engine's SASL negotiator for this layer's settings (``external``: the TLS client certificate's
        subject, for a server's EXTERNAL)."""
        from ..protocol import SaslClient, SaslServer
        from ..protocol.sasl_scram import InMemoryCredentialStore

        if server:
            store = self.credentials
            if isinstance(store, dict):
                store = InMemoryCredentialStore(store)
            # proton's built-in server: EXTERNAL (when TLS established the client's identity) and ANONYMOUS.
            names = (self.mechs or "EXTERNAL ANONYMOUS").split()
            if store is None:
                names = [name for name in names if name in ("ANONYMOUS", "EXTERNAL")]
            # Without TLS, EXTERNAL is offered as proton does, and fails (no identity from the channel).
            # proton's server authenticates; whom the client acts as (its authzid) is the application's to judge,
            # from ``sasl.authorization``.
            return SaslServer(
                names or ["ANONYMOUS"], store, external=external or _no_identity, authorize=_any_authorization
            )
        mechs = self.mechs
        ssl_layer = self._transport._ssl
        if mechs is not None and (ssl_layer is None or ssl_layer.domain is None or ssl_layer.domain._cert is None):
            # proton's client offers EXTERNAL only when TLS gave it an identity (its certificate).
            mechs = " ".join(name for name in mechs.split() if name.upper() != "EXTERNAL")
        return SaslClient(
            user=None if connection is None else connection.user,
            password=None if connection is None else connection._password,
            authzid=None if connection is None else connection.authorization,
            allowed_mechs=mechs,
            allow_insecure_mechs=self.allow_insecure_mechs,
            encrypted=self._transport._ssl is not None,
            # No hostname in sasl-init (optional, §5.3.3.2), as proton's: its SASL without Cyrus (the wheels')
            # never sends one; the open carries it.
        )


def _no_identity() -> str | None:
    return None


def _any_authorization(user: str, authzid: str) -> bool:
    return True
