"""proton's ``Transport``, ``SASL``, ``SSLDomain`` and ``SSL``: the byte stream under a connection, as the
callback API shows it.

There is no separate transport object in our engine: a connection's engine does framing, SASL and timeouts, and the
container's driver owns the socket. :class:`Transport` is the view proton programs expect (its ``condition`` after
an error, the negotiated frame size and idle timeouts, ``sasl()``...). :class:`SSLDomain` builds a standard
:class:`ssl.SSLContext` from proton's calls.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ._condition import Condition
from ._engine import CAPACITY, IMPL_CHANNEL_MAX, EngineIO
from ._events import Event
from ._exceptions import SessionException, SSLException, TransportException

if TYPE_CHECKING:
    from ._endpoints import Connection
    from ._tls import TlsLayer

__all__ = ["SASL", "SSL", "SSLDomain", "SSLSessionDetails", "Transport"]


class Transport:
    """The byte stream under a connection.

    Made by the container for each of its connections (its settings before it connects, and what happened to it
    after), or by a program that does its own I/O (proton's engine API): ``Transport()`` (a client) or
    ``Transport(Transport.SERVER)``, :meth:`bind` to a :class:`Connection` (before or after the first bytes), then
    :meth:`push` what was read, write what :meth:`peek` gives and :meth:`pop` it, and :meth:`tick` the clock.

    Attributes:
        condition: why the transport failed (``proton:io``, ``amqp:connection:framing-error``...), or None.
        idle_timeout: the idle timeout to ask the peer to keep (seconds; 0 for none).
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
        self.idle_timeout = 0.0
        # proton's defaults (the container's transports pick their own frame size when this is left at 0).
        self._max_frame_size = 0 if _connection is not None else 32768
        self._channel_max = 65535 if _connection is not None else IMPL_CHANNEL_MAX
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
        """The highest channel number to accept: what the program asked, at most proton's 32767 (a container's
        transport: as asked), and at most the peer's once its open came.

        Raises:
            SessionException: on setting it once our open went.
        """
        value = self._channel_max
        engine = self._engine()
        if engine is not None and engine.remote_open is not None and self._io is not None:
            value = min(value, int(engine.remote_open.channel_max))
        return value

    @channel_max.setter
    def channel_max(self, value: int) -> None:
        if self._open_sent:
            raise SessionException("Too late to change channel max.")
        self._channel_max = value if self._container_view else min(value, IMPL_CHANNEL_MAX)

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
            return 0 if self._container_view else 4294967295
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
            return 0 if self._container_view else 65535
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
            io.wire.out.clear()  # type: ignore[union-attr]
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
            hostname=None if connection is None else connection.hostname,
        )


def _no_identity() -> str | None:
    return None


def _any_authorization(user: str, authzid: str) -> bool:
    return True


class SSLDomain:
    """TLS settings shared by connections: proton's calls, made into a standard :class:`ssl.SSLContext`.

    Args:
        mode: :attr:`MODE_CLIENT` or :attr:`MODE_SERVER`.
    """

    MODE_CLIENT = 1
    MODE_SERVER = 2
    VERIFY_PEER = 1
    ANONYMOUS_PEER = 2
    VERIFY_PEER_NAME = 3

    def __init__(self, mode: int) -> None:
        if mode not in (self.MODE_CLIENT, self.MODE_SERVER):
            raise SSLException(f"invalid SSL mode {mode!r}")
        self.mode = mode
        self._cert: tuple[str, str | None, str | None] | None = None
        self._ca: str | None = None
        self._verify = self.VERIFY_PEER_NAME if mode == self.MODE_CLIENT else self.ANONYMOUS_PEER
        self._allow_unsecured = False
        # One SSLContext for every connection of the domain (made on first use, again after a setting changes):
        # a TLS session can only be resumed with the context that made it. Sessions to resume, by proton's id.
        self._context: ssl.SSLContext | None = None
        self._sessions: dict[str, ssl.SSLSession] = {}

    def set_credentials(self, cert_file: str, key_file: str | None, password: str | None) -> int:
        """This end's certificate (PEM file), its private key, and the key's password."""
        self._cert = (cert_file, key_file, password)
        self._context = None
        return 0

    def set_trusted_ca_db(self, certificate_db: str) -> int:
        """The CA certificates (a PEM file or a directory) used to verify the peer."""
        self._ca = certificate_db
        self._context = None
        return 0

    def set_peer_authentication(self, verify_mode: int, trusted_CAs: str | None = None) -> int:
        """How to check the peer: :attr:`VERIFY_PEER_NAME`, :attr:`VERIFY_PEER` or :attr:`ANONYMOUS_PEER`."""
        if verify_mode not in (self.VERIFY_PEER, self.ANONYMOUS_PEER, self.VERIFY_PEER_NAME):
            raise SSLException(f"invalid verify mode {verify_mode!r}")
        self._verify = verify_mode
        if trusted_CAs:
            self._ca = trusted_CAs
        self._context = None
        return 0

    def allow_unsecured_client(self) -> int:
        """A server also accepts clients that do not use TLS (not supported: each listener is TLS or not)."""
        self._allow_unsecured = True
        return 0

    def context(self) -> ssl.SSLContext:
        """The :class:`ssl.SSLContext` these settings make (the same one until a setting changes)."""
        context = self._context
        if context is None:
            context = self._context = self._make_context()
        return context

    def _make_context(self) -> ssl.SSLContext:
        try:
            if self.mode == self.MODE_CLIENT:
                context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
                if self._ca:
                    if _is_dir(self._ca):
                        context.load_verify_locations(capath=self._ca)
                    else:
                        context.load_verify_locations(cafile=self._ca)
                if self._verify == self.ANONYMOUS_PEER:
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                    # proton's anonymous peer also takes a server without a certificate (anonymous ciphers).
                    context.set_ciphers(_ANONYMOUS_CIPHERS)
                elif self._verify == self.VERIFY_PEER:
                    context.check_hostname = False
            else:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                if self._verify in (self.VERIFY_PEER, self.VERIFY_PEER_NAME):
                    context.verify_mode = ssl.CERT_REQUIRED
                    if self._ca:
                        context.load_verify_locations(cafile=None if _is_dir(self._ca) else self._ca)
            # A trusted intermediate CA is enough (proton sets OpenSSL's X509_V_FLAG_PARTIAL_CHAIN).
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
            if self._cert is not None:
                cert, key, password = self._cert
                context.load_cert_chain(cert, key, password)
            elif self.mode == self.MODE_SERVER:
                # A server without a certificate can only use anonymous ciphers (TLS 1.2 has them, 1.3 does not),
                # which a client that does not verify its peer accepts, as with proton.
                context.set_ciphers(_ANONYMOUS_CIPHERS)
                context.maximum_version = ssl.TLSVersion.TLSv1_2
        except (OSError, ssl.SSLError) as exc:
            raise SSLException(f"invalid TLS settings: {exc}") from exc
        return context


#: OpenSSL's cipher list with the anonymous (certificate-less) suites, which OpenSSL 3 allows at security level 0.
_ANONYMOUS_CIPHERS = "ALL:aNULL:!eNULL:@STRENGTH:@SECLEVEL=0"


def _is_dir(path: str) -> bool:
    import os

    return os.path.isdir(path)


class SSLSessionDetails:
    """A TLS session to resume: connections of one :class:`SSLDomain` given the same id resume the session the
    last of them established (Python's ``ssl`` resumes it, when the server agrees)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id

    def get_session_id(self) -> str:
        """The session id given."""
        return self.session_id


class SSL:
    """The TLS layer of one transport (one per transport: ``SSL(transport, domain)`` again gives the same object).

    On a transport the program drives (proton's engine API), the bytes it pushes and pops are TLS records: a
    :class:`~amqp_async.proton._tls.TlsLayer` runs Python's :class:`ssl.SSLObject` between them and the engine,
    SASL and AMQP inside. On a container's connection the socket itself is TLS; this object reports on it.
    """

    SHA1 = 0
    SHA256 = 1
    SHA512 = 2
    MD5 = 3
    CERT_COUNTRY_NAME = 0
    CERT_STATE_OR_PROVINCE = 1
    CERT_CITY_OR_LOCALITY = 2
    CERT_ORGANIZATION_NAME = 3
    CERT_ORGANIZATION_UNIT = 4
    CERT_COMMON_NAME = 5
    RESUME_UNKNOWN = 0
    RESUME_NEW = 1
    RESUME_REUSED = 2

    _DIGESTS: ClassVar[dict[int, str]] = {SHA1: "sha1", SHA256: "sha256", SHA512: "sha512", MD5: "md5"}
    # X.520 attribute OIDs (RFC 4519 §2) of the subfields proton names.
    _SUBFIELDS: ClassVar[dict[int, str]] = {
        CERT_COUNTRY_NAME: "2.5.4.6",
        CERT_STATE_OR_PROVINCE: "2.5.4.8",
        CERT_CITY_OR_LOCALITY: "2.5.4.7",
        CERT_ORGANIZATION_NAME: "2.5.4.10",
        CERT_ORGANIZATION_UNIT: "2.5.4.11",
        CERT_COMMON_NAME: "2.5.4.3",
    }

    def __new__(cls, transport: Transport, domain: SSLDomain | None = None, session_details: Any = None) -> SSL:
        existing = transport._ssl
        if existing is not None:
            # proton: allocation and configuration are one call; a different configuration is refused.
            if (domain is not None and existing.domain is not domain) or (
                session_details is not None and existing.session_details is not session_details
            ):
                raise SSLException("Cannot re-configure existing SSL object!")
            return existing
        layer = super().__new__(cls)
        layer._transport = transport
        layer.domain = domain
        layer.session_details = session_details
        layer._peer_hostname = None
        layer._tls = None
        transport._ssl = layer
        return layer

    def __init__(self, transport: Transport, domain: SSLDomain | None = None, session_details: Any = None) -> None:
        # Everything is set in __new__ (the one object per transport).
        self._transport: Transport
        self.domain: SSLDomain | None
        self.session_details: Any
        self._peer_hostname: str | None
        self._tls: TlsLayer | None

    @staticmethod
    def present() -> bool:
        """True: TLS is available (Python's ``ssl``)."""
        return True

    def _layer(self, io: EngineIO) -> TlsLayer:
        """The TLS layer of an engine transport (made at its first I/O)."""
        from ._tls import TlsLayer

        domain = self.domain
        assert domain is not None
        server = domain.mode == SSLDomain.MODE_SERVER
        check_name = domain._verify == SSLDomain.VERIFY_PEER_NAME
        details = self.session_details
        session_id = None if server or details is None else details.get_session_id()
        self._tls = TlsLayer(
            io,
            domain.context(),
            server,
            self.peer_hostname or None,
            check_name,
            session=None if session_id is None else domain._sessions.get(session_id),
            keep_session=None if session_id is None else functools.partial(domain._sessions.__setitem__, session_id),
        )
        return self._tls

    def _object(self) -> Any:
        """The :class:`ssl.SSLObject` once its handshake is done (None before)."""
        tls = self._tls
        if tls is not None:
            return tls.tls if tls.handshaken else None
        connection = self._transport.connection
        return None if connection is None else connection._tls

    def _peer_der(self) -> bytes | None:
        tls = self._object()
        try:
            return None if tls is None else tls.getpeercert(binary_form=True)
        except ValueError:  # the handshake failed after all (a TLS 1.3 client learns it late)
            return None

    @property
    def peer_hostname(self) -> str:
        """The name of the peer: sent to a server (SNI) and, with ``VERIFY_PEER_NAME``, checked against its
        certificate. A client's default is its connection's ``hostname``."""
        if self._peer_hostname is not None:
            return self._peer_hostname
        connection = self._transport.connection
        client = self.domain is None or self.domain.mode == SSLDomain.MODE_CLIENT
        if client and connection is not None and connection.hostname:
            return str(connection.hostname)
        return ""

    @peer_hostname.setter
    def peer_hostname(self, hostname: str | None) -> None:
        self._peer_hostname = hostname

    def cipher_name(self) -> str | None:
        """The negotiated cipher, once connected."""
        tls = self._object()
        cipher = None if tls is None else tls.cipher()
        return None if cipher is None else str(cipher[0])

    def protocol_name(self) -> str | None:
        """The negotiated TLS version, once connected."""
        tls = self._object()
        return None if tls is None else tls.version()

    def get_cert_subject(self) -> str | None:
        """The subject of the peer's certificate, as OpenSSL prints it (``C=FR,O=Acme,CN=host``), or None."""
        from ._tls import subject_string

        der = self._peer_der()
        return None if der is None else subject_string(der)

    @property
    def remote_subject(self) -> str | None:
        """The subject of the peer's certificate (:meth:`get_cert_subject`)."""
        return self.get_cert_subject()

    def get_cert_subject_subfield(self, subfield_name: int) -> str | None:
        """One field of the peer certificate's subject (:attr:`CERT_COMMON_NAME`...), or None."""
        from ._tls import subject_field

        der = self._peer_der()
        oid = self._SUBFIELDS.get(subfield_name)
        return None if der is None or oid is None else subject_field(der, oid)

    def get_cert_common_name(self) -> str | None:
        """The common name of the peer's certificate."""
        return self.get_cert_subject_subfield(self.CERT_COMMON_NAME)

    def get_cert_organization(self) -> str | None:
        """The organization of the peer's certificate."""
        return self.get_cert_subject_subfield(self.CERT_ORGANIZATION_NAME)

    def get_cert_organization_unit(self) -> str | None:
        """The organizational unit of the peer's certificate."""
        return self.get_cert_subject_subfield(self.CERT_ORGANIZATION_UNIT)

    def get_cert_locality_or_city(self) -> str | None:
        """The locality of the peer's certificate."""
        return self.get_cert_subject_subfield(self.CERT_CITY_OR_LOCALITY)

    def get_cert_country(self) -> str | None:
        """The country of the peer's certificate."""
        return self.get_cert_subject_subfield(self.CERT_COUNTRY_NAME)

    def get_cert_state_or_province(self) -> str | None:
        """The state or province of the peer's certificate."""
        return self.get_cert_subject_subfield(self.CERT_STATE_OR_PROVINCE)

    def get_cert_fingerprint(self, fingerprint_length: int, digest_name: int) -> str | None:
        """The hex digest of the peer's certificate (:attr:`SHA1`, :attr:`SHA256`, :attr:`SHA512`, :attr:`MD5`);
        None when unknown or when ``fingerprint_length`` cannot hold it (proton's rule)."""
        import hashlib

        der = self._peer_der()
        digest = self._DIGESTS.get(digest_name)
        if der is None or digest is None:
            return None
        text = hashlib.new(digest, der).hexdigest()
        return text if fingerprint_length > len(text) else None

    def get_cert_fingerprint_sha1(self) -> str | None:
        """The SHA-1 fingerprint of the peer's certificate."""
        return self.get_cert_fingerprint(41, self.SHA1)

    def get_cert_fingerprint_sha256(self) -> str | None:
        """The SHA-256 fingerprint of the peer's certificate."""
        return self.get_cert_fingerprint(65, self.SHA256)

    def get_cert_fingerprint_sha512(self) -> str | None:
        """The SHA-512 fingerprint of the peer's certificate."""
        return self.get_cert_fingerprint(129, self.SHA512)

    def get_cert_fingerprint_md5(self) -> str | None:
        """The MD5 fingerprint of the peer's certificate."""
        return self.get_cert_fingerprint(33, self.MD5)

    def _get_cert_subject_unknown_subfield(self) -> str | None:
        """proton's test helper: a subfield this API does not know reads None."""
        return self.get_cert_subject_subfield(-1)

    def _get_cert_fingerprint_unknown_hash_alg(self) -> str | None:
        """proton's test helper: a digest this API does not know gives None."""
        return self.get_cert_fingerprint(1024, -1)

    def resume_status(self) -> int:
        """:attr:`RESUME_REUSED` when the TLS session was resumed, else :attr:`RESUME_NEW`."""
        tls = self._object()
        return self.RESUME_REUSED if tls is not None and tls.session_reused else self.RESUME_NEW
