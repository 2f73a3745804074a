"""proton's ``Message``: our message, whose :meth:`Message.encode` writes the bytes proton's does.

proton-c writes a message in two ways at once: the header and properties sections with its compact performative
encoder (list8 and the smallest forms), and every value the application gave (annotations, application
properties, the body, the footer) with its ``Data`` encoder (32-bit lists and maps, array32: see
``_data_tree.py``). It always writes a header and a properties section, as empty lists when nothing is set in them;
programs that handle proton's encoded messages rely on that (they skip the header to get at the bare message, or
compare and hash the bytes). Sending is unchanged: a sender writes the compact form and leaves empty sections out,
as the awaitable API does (the peer reads the same message).
"""

from __future__ import annotations

import uuid
from typing import Any

from ..errors import DecodeError
from ..message import _GROUP_ID, _GROUP_SEQUENCE, _SECTION_NAMES
from ..message import Message as _Message
from ..types import (
    Array,
    TypeCode,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from ._data_tree import _Node, _read, _to_object, _write
from ._exceptions import DataException, _MessageDecodeError

__all__ = ["Message"]


def _plain(value: Any) -> Any:
    """An AMQP integer (a ``ulong`` id) as a plain int, as proton's Data reads it; anything else as it is."""
    return int(value) if isinstance(value, int) and type(value) is not int else value


_decode = _Message.decode

# Sections proton writes with its compact performative encoder: header (§3.2.1) and properties (§3.2.4).
_COMPACT_SECTIONS = (0x70, 0x73)


# --- described values in the application's sections, as proton's Data reads them --------------------------------

# Classes of decoded values that hold no described value.
_LEAVES = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        str,
        bytes,
        symbol,
        ubyte,
        byte,
        ushort,
        short,
        uint,
        int32,
        ulong,
        timestamp,
        char,
        float32,
        decimal32,
        decimal64,
        decimal128,
        uuid.UUID,
    }
)

# Sections whose values are the application's (§3.2): annotations, application properties, body, footer (header,
# properties and data sections hold no described value of the application's).
_DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS, _APPLICATION_PROPERTIES = 0x71, 0x72, 0x74
_AMQP_SEQUENCE, _AMQP_VALUE, _FOOTER = 0x76, 0x77, 0x78
_APPLICATION_SECTIONS = frozenset(
    (_DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS, _APPLICATION_PROPERTIES, _AMQP_SEQUENCE, _AMQP_VALUE, _FOOTER)
)
_MAP_SECTIONS = frozenset((_DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS, _APPLICATION_PROPERTIES, _FOOTER))
# An empty value of each application section's kind: an empty map (map8), list (list0), null.
_EMPTY_VALUES = {code: b"\xc1\x01\x00" for code in _MAP_SECTIONS} | {_AMQP_SEQUENCE: b"\x45", _AMQP_VALUE: b"\x40"}


def _holds_described(value: Any) -> bool:
    """Whether a decoded value is or holds something other than scalars, lists, maps and arrays of them: a
    described value, which the codec reads as its own class when AMQP defines the descriptor (``Accepted()``,
    ``Source(...)``, ``AmqpValue(...)``)."""
    cls = value.__class__
    if cls in _LEAVES:
        return False
    # A list or map of scalars, the common case, is checked without a call per item.
    if cls is list:
        return not _LEAVES.issuperset(map(type, value)) and any(_holds_described(item) for item in value)
    if cls is dict:
        if _LEAVES.issuperset(map(type, value)) and _LEAVES.issuperset(map(type, value.values())):
            return False
        return any(_holds_described(key) or _holds_described(item) for key, item in value.items())
    if cls is Array:
        return any(_holds_described(item) for item in value.elements)
    return True


def _has_composite_value(annotations: dict[Any, Any] | None) -> bool:
    """Whether an annotations or application-properties map holds a described value (its keys are symbols, ulongs
    or strings: only its values are looked at first)."""
    if annotations is None or _LEAVES.issuperset(map(type, annotations.values())):
        return False
    return _holds_described(annotations)


def _keep_described_values(message: _Message, data: bytes | bytearray | memoryview) -> None:
    """After the codec decoded ``data`` into ``message``: read the application's values again as proton's ``Data``
    reads them when they hold a described value.

    A described value in the body, the annotations, the application properties or the footer is the application's
    own: proton gives ``Described(descriptor, value)`` whatever the descriptor, as it came (a symbolic descriptor
    stays a symbol). The codec reads a descriptor AMQP defines as that type's class (``Described(ulong(0x24), [])``
    as ``Accepted()``, a list under ``amqp:source:list`` as a ``Source``), which a proton program does not know and
    which encodes again otherwise. Messages with none (nearly all) cost a check of each value's class.
    """
    body = message.body
    if (body.__class__ in _LEAVES or not _holds_described(body)) and not (
        _has_composite_value(message._annotations)
        or _has_composite_value(message.properties)
        or _has_composite_value(message._instructions)
        or _has_composite_value(message.footer)
    ):
        return
    try:
        _set_application_values(message, _sections(bytes(data)))
    except (DecodeError, DataException):
        pass  # a value proton's Data cannot hold (a described map key that is not hashable): the codec's stands


def _sections(data: bytes) -> list[tuple[int, int, int, int, _Node]]:
    """Each section of an encoded message: its code (§3.2); where its bytes start, where its value starts and where
    it ends; and its value's node.

    Raises:
        DecodeError, DataException: ``data`` is not a sequence of described values.
    """
    sections = []
    offset = 0
    while offset < len(data):
        section, end = _read(data, offset, 0)
        if section.type != TypeCode.DESCRIBED:
            raise DecodeError("expected a message section (a described value)", offset=offset)
        descriptor = section.children[0].value
        code = _SECTION_NAMES.get(descriptor) if type(descriptor) is symbol else descriptor
        if type(code) is not ulong and type(code) is not int:
            raise DecodeError(f"unknown message section descriptor {descriptor!r}", offset=offset)
        _, value_start = _read(data, offset + 1, 1)
        sections.append((int(code), offset, value_start, end, section.children[1]))
        offset = end
    return sections


def _set_application_values(message: _Message, sections: list[tuple[int, int, int, int, _Node]]) -> None:
    """Give ``message`` the values of its application sections as proton's ``Data`` reads them (a section that
    repeats, as several amqp-sequence sections, keeps what the codec made of it)."""
    counts: dict[int, int] = {}
    for code, *_ in sections:
        counts[code] = counts.get(code, 0) + 1
    for code, _, _, _, node in sections:
        if counts[code] != 1 or code not in _APPLICATION_SECTIONS:
            continue
        value = _to_object(node)
        if code in (_AMQP_VALUE, _AMQP_SEQUENCE):
            message.body = value
            message._inferred = code == _AMQP_SEQUENCE
        elif code == _MESSAGE_ANNOTATIONS:
            message._annotations = value
        elif code == _DELIVERY_ANNOTATIONS:
            message._instructions = value
        elif code == _APPLICATION_PROPERTIES:
            message.properties = value
        else:
            message.footer = value


def _decode_around_composites(message: _Message, data: bytes | bytearray | memoryview) -> bool:
    """Decode a message the codec refused, when what it refused is a value of the application's: a described value
    whose descriptor AMQP defines for one of its types, holding what that type does not (``Described(ulong(0x1d),
    [1, 2])``: no error has an int condition). proton reads such a value as any other; so does this.

    The codec decodes the message with each application section's value replaced by an empty one of its kind (so
    it still checks the sections: their order, the header and properties, the body's kind); the application's
    values are then read as proton's ``Data`` reads them.

    Returns:
        False when the bytes are not a valid message after all (the codec's error stands).
    """
    try:
        raw = bytes(data)
        sections = _sections(raw)
        neutral = bytearray()
        for code, start, value_start, end, node in sections:
            placeholder = _EMPTY_VALUES.get(code)
            if placeholder is None:
                neutral += raw[start:end]
                continue
            if code in _MAP_SECTIONS and node.type != TypeCode.MAP:
                return False
            if code == _AMQP_SEQUENCE and node.type != TypeCode.LIST:
                return False
            neutral += raw[start:value_start] + placeholder
        _decode(message, bytes(neutral))
        _set_application_values(message, sections)
    except (DecodeError, DataException):
        return False
    return True


def _decode_as_proton(message: _Message, data: bytes | bytearray | memoryview) -> None:
    """``Message.decode``'s work, the codec's :class:`DecodeError` raised as it is (``MessagingHandler``'s receive
    path calls this for every message): the codec's decode, with the application's described values read as
    proton reads them.

    Raises:
        DecodeError: ``data`` is not a valid AMQP message.
    """
    try:
        _decode(message, data)
    except DecodeError:
        if not _decode_around_composites(message, data):
            raise
        return
    _keep_described_values(message, data)


class Message(_Message):
    """A mutable AMQP message, as ``proton.Message`` (see :class:`amqp_async.message.Message` for its fields)."""

    __slots__ = ()

    def decode(self, data: bytes | bytearray | memoryview) -> None:
        """Replace this message's content with the message encoded in ``data``.

        Raises:
            MessageException: the bytes are not a valid AMQP message (condition ``amqp:decode-error``; proton's
                exception for a message, where proton itself decodes what it can). ``MessagingHandler`` rejects a
                received message that does not decode (see ``reject_undecodable``).
        """
        try:
            _decode_as_proton(self, data)
        except DecodeError as exc:
            raise _MessageDecodeError(exc.description) from exc

    @property
    def user_id(self) -> bytes:
        """The identity of the user who produced the message, as bytes (``b""`` when unset, as proton reads it)."""
        value = _Message.user_id.fget(self)  # type: ignore[attr-defined]
        return b"" if value is None else value

    @user_id.setter
    def user_id(self, value: bytes | str | None) -> None:
        _Message.user_id.fset(self, value)  # type: ignore[attr-defined]

    # proton reads these numbers as plain ints (its Data turns AMQP's ulong, ubyte, uint into int): a program's
    # ``type(x) is int``, ``repr()`` and the keys it builds from them see what proton gives. Set, they keep their
    # AMQP types (an int id goes as a ulong, as in proton).
    @property
    def id(self) -> Any:
        """The message-id: an int (a ulong on the wire), uuid.UUID, bytes or str."""
        return _plain(_Message.id.fget(self))  # type: ignore[attr-defined]

    @id.setter
    def id(self, value: Any) -> None:
        _Message.id.fset(self, value)  # type: ignore[attr-defined]

    @property
    def correlation_id(self) -> Any:
        """The correlation-id: an int (a ulong on the wire), uuid.UUID, bytes or str."""
        return _plain(_Message.correlation_id.fget(self))  # type: ignore[attr-defined]

    @correlation_id.setter
    def correlation_id(self, value: Any) -> None:
        _Message.correlation_id.fset(self, value)  # type: ignore[attr-defined]

    @property
    def priority(self) -> int:
        """Relative message priority, 0-255 (default 4)."""
        return int(_Message.priority.fget(self))  # type: ignore[attr-defined]

    @priority.setter
    def priority(self, value: int) -> None:
        _Message.priority.fset(self, value)  # type: ignore[attr-defined]

    @property
    def delivery_count(self) -> int:
        """The number of unsuccessful previous attempts to deliver the message (§3.2.1)."""
        return int(_Message.delivery_count.fget(self))  # type: ignore[attr-defined]

    @delivery_count.setter
    def delivery_count(self, value: int) -> None:
        _Message.delivery_count.fset(self, value)  # type: ignore[attr-defined]

    def encode(self) -> bytes:
        """The message's encoding, byte for byte as proton's: a header and a properties section always (empty
        lists when nothing is set in them), then the sections that are set, their values as proton's ``Data``
        writes them.

        Raises:
            MessageException: an application property key is not a string.
            EncodeError: another field holds a value AMQP cannot carry.
        """
        props = self._props
        if props[_GROUP_ID] is not None and props[_GROUP_SEQUENCE] is None:
            # proton writes a group's sequence number, 0 included, whenever the message names a group.
            props[_GROUP_SEQUENCE] = uint(0)
            try:
                compact = bytes(self._encode(False, True))
            finally:
                props[_GROUP_SEQUENCE] = None
        else:
            compact = bytes(self._encode(False, True))
        out = bytearray()
        offset = 0
        while offset < len(compact):
            node, end = _read(compact, offset, 0)
            # every section is described by a small ulong: 0x00 0x53 <code>
            if compact[offset + 2] in _COMPACT_SECTIONS:
                out += compact[offset:end]
            else:
                _write(out, node)
            offset = end
        return bytes(out)
