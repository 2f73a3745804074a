"""proton's ``SSLDomain``, ``SSLSessionDetails`` and ``SSL``: TLS settings shared by connections, and the TLS layer of
one transport.

An :class:`SSLDomain` makes a standard :class:`ssl.SSLContext` from proton's calls (one per domain, so that its TLS
sessions can be resumed); an :class:`SSL` reports on the TLS of a container's connection, or runs it for a transport
the program drives (:class:`~amqp_async.proton._tls.TlsLayer`).
"""

from __future__ import annotations

import functools
import ssl
from typing import TYPE_CHECKING, Any, ClassVar

from ._exceptions import SSLException

if TYPE_CHECKING:
    from ._engine import EngineIO
    from ._tls import TlsLayer
    from ._transport import Transport

__all__ = ["SSL", "SSLDomain", "SSLSessionDetails"]


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
        """This end's certificate (PEM file), its private key, and the key's password.

        Raises:
            SSLException: as proton's, at the call: a file that is missing or not PEM, a key that does not match the
                certificate, or an encrypted key with a wrong password, or with none (proton's OpenSSL would ask on
                the terminal; ours never prompts). The domain keeps its previous credentials.
        """
        _check_credentials(self.mode, cert_file, key_file, password)
        self._cert = (cert_file, key_file, password)
        self._context = None
        return 0

    def set_trusted_ca_db(self, certificate_db: str) -> int:
        """The CA certificates (a PEM file or a directory) used to verify the peer.

        Raises:
            SSLException: as proton's, at the call: a path that is neither a directory nor a PEM file with at least
                one certificate. The domain keeps its previous CAs.
        """
        if not _is_dir(certificate_db):
            _load_ca_file(certificate_db)
        self._ca = certificate_db
        self._context = None
        return 0

    def set_peer_authentication(self, verify_mode: int, trusted_CAs: str | None = None) -> int:
        """How to check the peer: :attr:`VERIFY_PEER_NAME`, :attr:`VERIFY_PEER` or :attr:`ANONYMOUS_PEER`.

        Raises:
            SSLException: as proton's: an unknown mode; on a server, verifying the peer without a certificate set
                first (:meth:`set_credentials`), or without ``trusted_CAs`` (the PEM file of the CAs whose names
                are sent to the client), or with one that cannot be read.
        """
        if verify_mode not in (self.VERIFY_PEER, self.ANONYMOUS_PEER, self.VERIFY_PEER_NAME):
            raise SSLException(_FAILURE)
        if self.mode == self.MODE_SERVER and verify_mode != self.ANONYMOUS_PEER:
            # proton's server refuses these at the call (OpenSSL needs them to ask for a client certificate).
            if self._cert is None or not trusted_CAs or _is_dir(trusted_CAs):
                raise SSLException(_FAILURE)
            _load_ca_file(trusted_CAs)
        self._verify = verify_mode
        if trusted_CAs:
            self._ca = trusted_CAs
        self._context = None
        return 0

    def allow_unsecured_client(self) -> int:
        """A server also accepts clients that do not use TLS (not supported: each listener is TLS or not).

        Raises:
            SSLException: on a client domain, as proton's.
        """
        if self.mode != self.MODE_SERVER:
            raise SSLException(_FAILURE)
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


#: proton's message for every refused setting (its C library logs the reason; ours chains the error behind it).
_FAILURE = "SSL failure."


def _check_credentials(mode: int, cert_file: str, key_file: str | None, password: str | None) -> None:
    """Load the certificate and key as the domain will (a throwaway context): refuse them now, as proton does."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if mode == SSLDomain.MODE_SERVER else ssl.PROTOCOL_TLS_CLIENT)
    try:
        # Without a password, an encrypted key fails here rather than OpenSSL prompting on the terminal.
        context.load_cert_chain(cert_file, key_file, password if password is not None else _no_password)
    except (OSError, ssl.SSLError, TypeError, ValueError) as exc:
        raise SSLException(_FAILURE) from exc


def _no_password() -> bytes:
    raise ValueError("the private key is encrypted and no password was given")


def _load_ca_file(path: str) -> None:
    """Read ``path`` as a PEM file of CA certificates (at least one): refuse it now, as proton does."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError, TypeError, ValueError) as exc:
        raise SSLException(_FAILURE) from exc
    if not context.get_ca_certs():
        raise SSLException(_FAILURE)  # (CRLs only: OpenSSL read no certificate)


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
