"""proton's ``Condition``: the name, description and info of an AMQP error (spec §2.8.14), as a plain value.

Connections, sessions, links and deliveries carry a local and a remote condition; a condition is usually an error
(``amqp:not-found``...) but need not be one (``amqp:connection:redirect``). :meth:`Condition.from_error` and
:meth:`Condition.to_error` convert to and from the codec's ``error`` composite.
"""

from __future__ import annotations

from typing import Any

from ..codec.performatives import Error
from ..types import symbol

__all__ = ["Condition", "authentication_failure", "header_failure"]


class Condition:
    """An AMQP condition: a symbolic ``name``, a ``description`` and an ``info`` map, as in proton.

    Equality compares the three attributes (a non-Condition is never equal); the ``repr`` lists those that are
    set, as proton's does: ``Condition('amqp:not-found', 'no such queue')``. Conditions are mutable and, as in
    proton, unhashable.

    Args:
        name: the condition's symbolic name, such as ``"amqp:not-found"``.
        description: human-readable text, or None.
        info: additional information (usually a map with symbol keys), or None.
    """

    __slots__ = ("description", "info", "name")

    def __init__(self, name: str, description: str | None = None, info: Any = None) -> None:
        self.name = name
        self.description = description
        self.info = info

    def __repr__(self) -> str:
        return "Condition({})".format(", ".join(repr(x) for x in (self.name, self.description, self.info) if x))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Condition):
            return False
        return bool(self.name == other.name and self.description == other.description and self.info == other.info)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def from_error(cls, error: Error) -> Condition:
        """The condition an ``error`` composite (from a close, end, detach or rejected outcome) carries."""
        return cls(str(error.condition), error.description, error.info)

    def to_error(self) -> Error:
        """This condition as the codec's ``error`` composite (the name becomes a symbol).

        Raises:
            amqp_async.EncodeError: the name is not ASCII (a symbol cannot hold it).
        """
        return Error(condition=symbol(self.name), description=self.description, info=self.info)


def authentication_failure(sasl: Any, sasl_code: int | None, error: Error | None) -> Condition:
    """The transport's condition when SASL ends the connection, in proton's words: ``amqp:unauthorized-access``,
    "Authentication failed [mech=PLAIN]" for an outcome that refused us (a program may look for those words), else
    the engine's description (no mechanism fitted, say). ``sasl`` is the engine's SASL client (or server)."""
    mechanism = getattr(sasl, "mechanism", None)
    if sasl_code and mechanism is not None:
        return Condition("amqp:unauthorized-access", f"Authentication failed [mech={mechanism.name}]")
    description = None if error is None else error.description
    return Condition("amqp:unauthorized-access", description or "Authentication failed")


#: proton's names of what a peer's first bytes are (``pni_protocol_name``), by what ``_sniff_protocol`` finds.
_INSUFFICIENT = "Insufficient data to determine protocol"
_UNKNOWN = "Unknown protocol"
_TLS = "SSL/TLS connection"
_PRE_STANDARD_AMQP = "Pre standard AMQP connection"
#: the AMQP 1.0 headers (§2.2, §5.2.1, §5.3.1) by their protocol id
_AMQP_LAYERS = {0: "AMQP 1.0 layer", 2: "AMQP TLS layer", 3: "AMQP SASL layer"}
#: the size of proton's buffers for the quoted bytes (``pn_quote_data``) and for the whole description
#: (``pn_do_error``): each holds at most one character less (its NUL).
_PROTON_BUFFER = 1024
#: at most this many of the peer's first bytes are quoted (proton quotes each in one character or more).
QUOTED_BYTES_MAX = _PROTON_BUFFER


def _sniff_protocol(data: bytes) -> str:
    """What proton's ``pni_sniff_header`` makes of a peer's first bytes, in its words."""
    if len(data) < 3:
        return _INSUFFICIENT
    if data[0] == 22 and data[1] == 3 and data[2] <= 3:
        return _TLS  # an SSLv3/TLS handshake record
    amqp = data[:3] == b"AMQ"
    if not amqp and data[2] != 1:
        return _UNKNOWN
    if len(data) < 4:
        return _INSUFFICIENT
    amqp = amqp and data[3:4] == b"P"
    if not amqp and not (data[2] == 1 and data[3] in (2, 3)):
        return _UNKNOWN
    if len(data) < 5:
        return _INSUFFICIENT
    if data[2] == 1 and ((data[3] == 3 and data[4] <= 3) or (data[3] == 2 and data[4] == 0)):
        return _TLS  # an SSLv2 client hello
    if not amqp or data[4] not in (0, 1, 2, 3):
        return _UNKNOWN
    if len(data) < 6:
        return _INSUFFICIENT
    if data[5] != 1:
        return _UNKNOWN
    if len(data) < 8:
        return _INSUFFICIENT
    if data[6] == 0 and data[7] == 0 and data[4] in _AMQP_LAYERS:
        return _AMQP_LAYERS[data[4]]
    return _PRE_STANDARD_AMQP


def _quote(data: bytes) -> str:
    """``data`` as proton's ``pn_quote_data`` writes it: printable ASCII as it is, a backslash and every other
    byte as ``\\xNN``. Where its buffer is full (a character that does not fit, or an escape that does not fit
    whole), proton stops and also drops the last character written (which may cut an escape short)."""
    parts: list[str] = []
    size = 0
    for octet in data:
        printable = 0x20 <= octet < 0x7F and octet != 0x5C
        width = 1 if printable else 4
        if size + width > _PROTON_BUFFER - 1:
            return "".join(parts)[:-1]
        parts.append(chr(octet) if printable else f"\\x{octet:02x}")
        size += width
    return "".join(parts)


def header_failure(received: bytes, *, expected: str | None, ended: bool = False) -> Condition:
    """The transport's condition when the peer's first bytes (``received``: all those read with them, as proton
    quotes what it has) are not the protocol header awaited, in proton's words (a program may look for them).

    Args:
        received: the peer's first bytes.
        expected: ``"AMQP"`` or ``"SASL"``: the header a client awaited (proton's SASL or AMQP layer); None for a
            server, which (proton's autodetect) takes either.
        ended: the input ended there (the description says the connection was aborted).
    """
    found = _sniff_protocol(received)
    aborted = " (connection aborted)" if ended else ""
    if expected is not None:
        description = f"Expected {expected} protocol header got: {found} ['{_quote(received)}']{aborted}"
    else:
        if found == _INSUFFICIENT:
            what = "End of input stream before protocol detection"
        elif found == _PRE_STANDARD_AMQP:
            what = "Incompatible AMQP connection detected"
        else:
            what = "Unknown protocol detected"
        description = f"{what}: '{_quote(received)}'{aborted}"
    # proton formats the description in a buffer of its own size: a long one is cut there
    description = description[: _PROTON_BUFFER - 1]
    # §2.8.15 connection-error framing-error: the peer sent bytes that do not form the protocol
    return Condition("amqp:connection:framing-error", description)
