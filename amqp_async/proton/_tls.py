"""TLS on a proton engine transport: Python's :class:`ssl.SSLObject` over two :class:`ssl.MemoryBIO` s, between the
bytes a program pushes and pops and our engine.

proton's transport is a stack of layers (TLS, SASL, AMQP); here the engine does SASL and AMQP, and
:class:`TlsLayer` sits between it and the wire:

- input: ciphertext the program :meth:`push` es goes into the incoming BIO; once the handshake is done, the
  plaintext read back is fed to the engine;
- output: the engine's bytes wait until the handshake is done, then go through :meth:`ssl.SSLObject.write`; what
  the program peeks and pops is the outgoing BIO's ciphertext (handshake records included);
- failure (a certificate that does not verify, a peer's alert) is proton's: the transport's condition is
  ``amqp:connection:framing-error`` with ``SSL Failure: <OpenSSL's reason>``, the alert we owe the peer is still
  written, the input ends at once and the output once the alert is taken.

The peer certificate is read from its DER form (:func:`certificate_subject`), so its subject is known even when it
was not verified (``ANONYMOUS_PEER``), as in proton.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._condition import Condition

if TYPE_CHECKING:
    from ._engine import EngineIO

__all__ = ["TlsLayer", "certificate_subject", "failure_condition"]

_READ_CHUNK = 65536
_NO_NAME = "no-peer-name.invalid"

#: OpenSSL's short names for the attributes of a distinguished name (RFC 4514 §3 and OpenSSL's ``obj_dat.h``).
_SHORT_NAMES = {
    "2.5.4.3": "CN",
    "2.5.4.4": "SN",
    "2.5.4.5": "serialNumber",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "street",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.12": "title",
    "2.5.4.17": "postalCode",
    "2.5.4.42": "GN",
    "0.9.2342.19200300.100.1.1": "UID",
    "0.9.2342.19200300.100.1.25": "DC",
    "1.2.840.113549.1.9.1": "emailAddress",
}


def failure_condition(exc: ssl.SSLError) -> Condition:
    """proton's condition for a failed TLS exchange: ``SSL Failure:`` and OpenSSL's reason, in its words
    (``certificate verify failed``, ``tlsv1 alert unknown ca``...)."""
    reason = exc.reason
    text = reason.lower().replace("_", " ") if reason else str(exc)
    return Condition("amqp:connection:framing-error", f"SSL Failure: {text}")


class TlsLayer:
    """The TLS layer of one engine transport.

    Args:
        io: the engine's byte stream (its ``out`` holds the engine's plaintext).
        context: the :class:`ssl.SSLContext` of the transport's :class:`~amqp_async.proton.SSLDomain`.
        server: True on a server.
        hostname: the peer name to send (SNI) and, when the context checks host names, to check.
        check_client_name: on a server, check the client's certificate against ``hostname`` (proton's
            ``VERIFY_PEER_NAME`` on a server).
    """

    def __init__(
        self,
        io: EngineIO,
        context: ssl.SSLContext,
        server: bool,
        hostname: str | None,
        check_client_name: bool,
        session: ssl.SSLSession | None = None,
        keep_session: Callable[[ssl.SSLSession], None] | None = None,
    ) -> None:
        self.io = io
        self.hostname = hostname
        self.check_client_name = server and check_client_name
        if not server and context.check_hostname and not hostname:
            # A client told to check the server's name without a name to check against: proton's verification
            # fails, where Python's ssl would skip the check. A name that matches no certificate (RFC 6761's
            # ".invalid") makes OpenSSL fail it in the handshake, as proton's does.
            hostname = _NO_NAME
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(
            self.incoming,
            self.outgoing,
            server_side=server,
            server_hostname=None if server else hostname or None,
            session=session,
        )
        #: where a client keeps the session it established, to resume it on a later connection
        self.keep_session = keep_session
        #: ciphertext waiting to be written.
        self.out = bytearray()
        self.handshaken = False
        self.failed = False
        self._closing = False
        self._notify_sent = False
        self._notify_received = False

    # --- input -------------------------------------------------------------------------------------------

    def push(self, data: bytes | bytearray | memoryview) -> None:
        """Take ciphertext read from the peer; what it decrypts to goes to the engine."""
        if self.failed:
            return
        self.incoming.write(data)
        self._advance()

    def close_tail(self) -> None:
        """The peer's byte stream ended: cleanly after its close_notify, else it is proton's "SSL Failure"
        (``unexpected eof while reading``)."""
        io = self.io
        if not self.failed and not io.tail_closed:
            self.incoming.write_eof()
            self._advance()
            if self.failed:
                return
        io.close_tail()

    def _advance(self) -> None:
        tls = self.tls
        io = self.io
        try:
            if not self.handshaken:
                try:
                    tls.do_handshake()
                except ssl.SSLWantReadError:
                    self._collect()
                    return
                self.handshaken = True
                if self.check_client_name and not _names_match(tls.getpeercert(), self.hostname):
                    # What OpenSSL's verification reports (Python's server side checks no names itself).
                    self._fail(Condition("amqp:connection:framing-error", "SSL Failure: certificate verify failed"))
                    return
            plain = bytearray()
            notified = False
            while not self._notify_received:
                try:
                    chunk = tls.read(_READ_CHUNK)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:  # the peer's close_notify, after ours
                    notified = True
                    break
                if not chunk:  # the peer's close_notify, before ours (Python reads it as b"")
                    notified = True
                    break
                plain += chunk
            keep = self.keep_session
            if keep is not None and tls.session is not None:
                keep(tls.session)  # (with TLS 1.3 the ticket comes after the handshake: kept as it is read)
            if plain:
                io.push(plain)
            if notified:
                self._notify_received = True  # the peer's stream ended cleanly
                io.close_tail()
        except ssl.SSLError as exc:
            self._fail(failure_condition(exc))
            return
        self._collect()

    def _fail(self, condition: Condition) -> None:
        self.failed = True
        self._collect()  # the alert OpenSSL wrote for the peer still goes out
        self.io.fail(condition)

    def _collect(self) -> None:
        data = self.outgoing.read()
        if data:
            self.out += data

    # --- output ------------------------------------------------------------------------------------------

    def pending(self) -> int:
        """The ciphertext ready to write; -1 once the output has ended."""
        io = self.io
        if io.head_closed:
            return -1
        if not self.failed:
            io.process()
            if not self.handshaken and not self.tls.server_side and not self.out:
                self._advance()  # the client speaks first: its hello
            plain = io.out
            if self.handshaken and plain:
                try:
                    self.tls.write(plain)
                except ssl.SSLError as exc:
                    self._fail(failure_condition(exc))
                plain.clear()
            if self.handshaken and not self._closing and not self.failed and io.output_done():
                if not io.closed_cleanly():
                    self._closing = True  # the engine failed: the output just stops (no close_notify)
                elif io.remote_closed() or self._notify_received:
                    # Both closes went (proton sends its close_notify only then): end the TLS session.
                    self._closing = self._notify_sent = True
                    try:
                        self.tls.unwrap()
                    except ssl.SSLError:
                        pass  # unwrap wants the peer's close_notify too: it comes, or not, as it may
            self._collect()
        if self.out:
            return len(self.out)
        if self.failed or self._closing:
            io.close_head()
            return -1
        return 0

    def drained(self) -> None:
        """The program took all our ciphertext: after our close_notify, the output ends (proton ends it as the
        last bytes are taken)."""
        if self._notify_sent and not self.out:
            self.io.close_head()

    # --- what was negotiated -----------------------------------------------------------------------------

    def peer_subject(self) -> str | None:
        """The subject of the peer's certificate once the handshake is done (proton's EXTERNAL identity)."""
        if not self.handshaken:
            return None
        der = self.tls.getpeercert(binary_form=True)
        return None if der is None else subject_string(der)


def _names_match(certificate: Any, hostname: str | None) -> bool:
    """Whether a verified certificate names ``hostname``: a DNS subjectAltName, else the common name (RFC 6125
    §6.4: exact, case-insensitive; a wildcard stands for the leftmost label only)."""
    if not hostname or not certificate:
        return False
    wanted = hostname.lower()
    names = [value for kind, value in certificate.get("subjectAltName", ()) if kind == "DNS"]
    if not names:
        names = [value for rdn in certificate.get("subject", ()) for key, value in rdn if key == "commonName"]
    for name in names:
        name = name.lower()
        if name == wanted:
            return True
        if name.startswith("*.") and "." in wanted and wanted.split(".", 1)[1] == name[2:]:
            return True
    return False


# --- the subject of a DER certificate -------------------------------------------------------------------------


def _read_tlv(data: bytes, offset: int) -> tuple[int, int, int]:
    """One DER element at ``offset``: its tag, where its content starts, and where it ends."""
    tag = data[offset]
    length = data[offset + 1]
    offset += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[offset : offset + count], "big")
        offset += count
    return tag, offset, offset + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    items = []
    while start < end:
        item = _read_tlv(data, start)
        items.append(item)
        start = item[2]
    return items


def _oid(raw: bytes) -> str:
    parts = [raw[0] // 40, raw[0] % 40] if raw[0] < 80 else [2, raw[0] - 80]
    value = 0
    for byte in raw[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(str(part) for part in parts)


def _text(tag: int, raw: bytes) -> str:
    if tag == 0x1E:  # BMPString
        return raw.decode("utf-16-be", "replace")
    if tag == 0x1C:  # UniversalString
        return raw.decode("utf-32-be", "replace")
    return raw.decode("utf-8", "replace")


def _escape(value: str) -> str:
    """RFC 4514 §2.4's escaping of an attribute value."""
    out = []
    for index, char in enumerate(value):
        if char in ',+"\\<>;' or (char == "#" and index == 0) or (char == " " and index in (0, len(value) - 1)):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def certificate_subject(der: bytes) -> list[list[tuple[str, str]]]:
    """The subject of a DER certificate: its relative distinguished names in certificate order, each a list of
    ``(OID, value)`` (RFC 5280 §4.1.2.6)."""
    _, start, end = _read_tlv(der, 0)  # Certificate
    _, start, end = _children(der, start, end)[0]  # tbsCertificate
    fields = _children(der, start, end)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    _, start, end = fields[4]  # serialNumber, signature, issuer, validity, subject
    names = []
    for _, set_start, set_end in _children(der, start, end):
        rdn = []
        for _, seq_start, seq_end in _children(der, set_start, set_end):
            (_, oid_start, oid_end), (value_tag, value_start, value_end) = _children(der, seq_start, seq_end)[:2]
            rdn.append((_oid(der[oid_start:oid_end]), _text(value_tag, der[value_start:value_end])))
        names.append(rdn)
    return names


def subject_string(der: bytes) -> str:
    """The subject as OpenSSL's RFC 2253 form prints it (proton's ``get_cert_subject``): most significant last,
    ``C=FR,O=Acme,CN=host``."""
    rdns = certificate_subject(der)
    return ",".join(
        "+".join(f"{_SHORT_NAMES.get(oid, oid)}={_escape(value)}" for oid, value in rdn) for rdn in reversed(rdns)
    )


def subject_field(der: bytes, oid: str) -> str | None:
    """The first value of one attribute of the subject (``2.5.4.3``: the common name), or None."""
    for rdn in certificate_subject(der):
        for field, value in rdn:
            if field == oid:
                return value
    return None
