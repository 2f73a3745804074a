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

from typing import Any

from ..errors import DecodeError
from ..message import _GROUP_ID, _GROUP_SEQUENCE
from ..message import Message as _Message
from ..types import uint
from ._data_tree import _read, _write
from ._exceptions import _MessageDecodeError

__all__ = ["Message"]


def _plain(value: Any) -> Any:
    """An AMQP integer (a ``ulong`` id) as a plain int, as proton's Data reads it; anything else as it is."""
    return int(value) if isinstance(value, int) and type(value) is not int else value


# Sections proton writes with its compact performative encoder: header (§3.2.1) and properties (§3.2.4).
_COMPACT_SECTIONS = (0x70, 0x73)


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
        # A described value in the application's sections comes back as ``Described(descriptor, value)`` whatever
        # its descriptor, as proton's ``Data`` reads it: the codec reads those sections so.
        try:
            _Message.decode(self, data)
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
