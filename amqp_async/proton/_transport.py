"""proton's ``Transport``, ``SASL``, ``SSLDomain`` and ``SSL``: the byte stream under a connection, as the
callback API shows it.

There is no separate transport object in our engine: a connection's engine does framing, SASL and timeouts, and the
container's driver owns the socket. :class:`Transport` is the view proton programs expect (its ``condition`` after
an error, the negotiated frame size and idle timeouts, ``sasl()``...). :class:`SSLDomain` builds a standard
:class:`ssl.SSLContext` from proton's calls.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

from ._condition import Condition
from ._exceptions import SSLException

if TYPE_CHECKING:
    from ._endpoints import Connection

__all__ = ["SASL", "SSL", "SSLDomain", "SSLSessionDetails", "Transport"]


class Transport:
    """The transport of one connection: its settings before it connects, and what happened to it after.

    Attributes:
        condition: why the transport failed (``proton:io``, ``amqp:unauthorized-access``...), or None.
        idle_timeout: the idle timeout to ask the peer to keep (seconds; 0 for none).
        max_frame_size: the largest frame to accept (0: the library's default).
        channel_max: the highest channel number to accept.
    """

    TRACE_OFF = 0
    TRACE_DRV = 1
    TRACE_FRM = 2
    TRACE_RAW = 4
    CLIENT = 1
    SERVER = 2

    _is_transport = True

    def __init__(self, mode: int | None = None, _connection: Connection | None = None) -> None:
        self.mode = mode or self.CLIENT
        self._connection = _connection
        self.condition: Condition | None = None
        self.idle_timeout = 0.0
        self.max_frame_size = 0
        self.channel_max = 65535
        self._sasl: SASL | None = None
        self._ssl: SSL | None = None
        self._closed = False
        self.tracer: Any = None

    @property
    def connection(self) -> Connection | None:
        """The connection this transport carries."""
        return self._connection

    def _engine(self) -> Any:
        connection = self._connection
        return None if connection is None else connection._impl

    @property
    def remote_max_frame_size(self) -> int:
        """The largest frame the peer accepts (known once its open arrived)."""
        engine = self._engine()
        return 0 if engine is None else engine.remote_max_frame_size

    @property
    def remote_idle_timeout(self) -> float:
        """The idle timeout the peer asked for, in seconds (0: none)."""
        engine = self._engine()
        return 0.0 if engine is None else engine.remote_idle_timeout

    @property
    def remote_channel_max(self) -> int:
        """The highest channel the peer accepts."""
        engine = self._engine()
        if engine is None or engine.remote_open is None:
            return 0
        return int(engine.remote_open.channel_max)

    @property
    def authenticated(self) -> bool:
        """True once the SASL exchange succeeded."""
        engine = self._engine()
        return engine is not None and engine.sasl is not None and engine.sasl_outcome is not None

    @property
    def encrypted(self) -> bool:
        """True when the connection runs over TLS."""
        connection = self._connection
        return connection is not None and bool(connection._tls)

    @property
    def user(self) -> str | None:
        """The authenticated user: on a server, whom the client proved to be; on a client, the user it sent."""
        engine = self._engine()
        if engine is None or engine.sasl is None:
            return None
        return getattr(engine.sasl, "identity", None) or getattr(engine.sasl, "user", None)

    @property
    def closed(self) -> bool:
        """True once the transport ended."""
        return self._closed

    def sasl(self) -> SASL:
        """This transport's SASL settings (made on first call)."""
        if self._sasl is None:
            self._sasl = SASL(self)
        return self._sasl

    def ssl(self, domain: SSLDomain | None = None, session_details: Any = None) -> SSL:
        """This transport's TLS settings."""
        if self._ssl is None:
            self._ssl = SSL(self, domain)
        return self._ssl

    def require_auth(self, required: bool) -> None:
        """Whether a server requires SASL authentication from clients."""
        self._require_auth = required

    def require_encryption(self, required: bool) -> None:
        """Whether TLS is required (set the TLS settings on the container or the acceptor instead)."""
        self._require_encryption = required

    def trace(self, n: int) -> None:
        """Frame tracing is switched on with the ``PN_TRACE_FRM=1`` environment variable."""

    def log(self, message: str) -> None:
        """Write ``message`` to the ``proton`` logger."""
        import logging

        logging.getLogger("proton").info(message)

    def unbind(self) -> None:
        """Detach from the connection (the container does this when the transport ends)."""

    def close_head(self) -> None:
        """Stop writing: close the connection's socket (the container's driver does the work)."""
        connection = self._connection
        if connection is not None:
            connection._abort_transport()

    close_tail = close_head

    def __repr__(self) -> str:
        return f"Transport(condition={self.condition!r})"


class SASL:
    """SASL settings of one transport (proton's API over our own mechanisms).

    Outcome codes are §5.3.3.6's: :attr:`OK`, :attr:`AUTH`, :attr:`SYS`, :attr:`PERM`, :attr:`TEMP`.
    """

    NONE = -1
    OK = 0
    AUTH = 1
    SYS = 2
    PERM = 3
    TEMP = 4

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self.mechs: str | None = None
        self.allow_insecure_mechs = True
        self._outcome: int | None = None

    @staticmethod
    def extended() -> bool:
        """True: SCRAM, XOAUTH2 and EXTERNAL are available besides ANONYMOUS and PLAIN."""
        return True

    def allowed_mechs(self, mechs: str | list[str]) -> None:
        """The mechanisms to allow (a space-separated string or a list)."""
        self.mechs = mechs if isinstance(mechs, str) else " ".join(mechs)

    @property
    def user(self) -> str | None:
        """The authenticated user."""
        return self._transport.user

    @property
    def authorization(self) -> str | None:
        """The authorization identity (not used by our mechanisms)."""
        return None

    @property
    def mech(self) -> str | None:
        """The mechanism the exchange used."""
        engine = self._transport._engine()
        return None if engine is None or engine.sasl is None else getattr(engine.sasl, "mechanism", None)

    @property
    def outcome(self) -> int | None:
        """The outcome code, once the exchange ended (None before)."""
        engine = self._transport._engine()
        outcome = None if engine is None else engine.sasl_outcome
        return None if outcome is None else int(getattr(outcome, "code", 0))

    def done(self, outcome: int) -> None:
        """Servers decide outcomes through the acceptor's credential store; not used with this engine."""
        self._outcome = outcome

    def config_name(self, name: str) -> None:
        """Cyrus SASL configuration is not used by this engine (its mechanisms are built in)."""

    def config_path(self, path: str) -> None:
        """Cyrus SASL configuration is not used by this engine (its mechanisms are built in)."""


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

    def set_credentials(self, cert_file: str, key_file: str | None, password: str | None) -> int:
        """This end's certificate (PEM file), its private key, and the key's password."""
        self._cert = (cert_file, key_file, password)
        return 0

    def set_trusted_ca_db(self, certificate_db: str) -> int:
        """The CA certificates (a PEM file or a directory) used to verify the peer."""
        self._ca = certificate_db
        return 0

    def set_peer_authentication(self, verify_mode: int, trusted_CAs: str | None = None) -> int:
        """How to check the peer: :attr:`VERIFY_PEER_NAME`, :attr:`VERIFY_PEER` or :attr:`ANONYMOUS_PEER`."""
        if verify_mode not in (self.VERIFY_PEER, self.ANONYMOUS_PEER, self.VERIFY_PEER_NAME):
            raise SSLException(f"invalid verify mode {verify_mode!r}")
        self._verify = verify_mode
        if trusted_CAs:
            self._ca = trusted_CAs
        return 0

    def allow_unsecured_client(self) -> int:
        """A server also accepts clients that do not use TLS (not supported: each listener is TLS or not)."""
        self._allow_unsecured = True
        return 0

    def context(self) -> ssl.SSLContext:
        """The :class:`ssl.SSLContext` these settings make."""
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
                elif self._verify == self.VERIFY_PEER:
                    context.check_hostname = False
            else:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                if self._verify in (self.VERIFY_PEER, self.VERIFY_PEER_NAME):
                    context.verify_mode = ssl.CERT_REQUIRED
                    if self._ca:
                        context.load_verify_locations(cafile=None if _is_dir(self._ca) else self._ca)
            if self._cert is not None:
                cert, key, password = self._cert
                context.load_cert_chain(cert, key, password)
        except (OSError, ssl.SSLError) as exc:
            raise SSLException(f"invalid TLS settings: {exc}") from exc
        return context


def _is_dir(path: str) -> bool:
    import os

    return os.path.isdir(path)


class SSLSessionDetails:
    """A TLS session to resume (proton's session id); resumption is left to Python's ``ssl``."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id

    def get_session_id(self) -> str:
        """The session id given."""
        return self.session_id


class SSL:
    """The TLS layer of one transport: what was negotiated."""

    def __init__(self, transport: Transport, domain: SSLDomain | None = None) -> None:
        self._transport = transport
        self.domain = domain
        self.peer_hostname: str | None = None

    @staticmethod
    def present() -> bool:
        """True: TLS is available (Python's ``ssl``)."""
        return True

    def _object(self) -> Any:
        connection = self._transport.connection
        return None if connection is None else connection._tls

    def cipher_name(self) -> str | None:
        """The negotiated cipher, once connected."""
        tls = self._object()
        cipher = None if tls is None else tls.cipher()
        return None if cipher is None else str(cipher[0])

    def protocol_name(self) -> str | None:
        """The negotiated TLS version, once connected."""
        tls = self._object()
        return None if tls is None else tls.version()
