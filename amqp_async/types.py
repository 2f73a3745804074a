"""AMQP 1.0 primitive types that Python lacks, named as python-qpid-proton names them.

Each scalar is a subclass of the matching Python builtin, so it behaves as that builtin everywhere, and checks
its range on construction (spec §1.6, "Primitive Type Definitions"), so that an out-of-range value fails where it
is made rather than when it is sent. Python's own types map to AMQP as proton maps them: ``None`` -> null,
``bool`` -> boolean, ``int`` -> long, ``float`` -> double, ``str`` -> string, ``bytes`` -> binary,
``uuid.UUID`` -> uuid, ``list`` -> list, ``dict`` -> map.

Values made by the decoder skip the range check (they are in range by construction): the decoder builds them
with ``int.__new__(ulong, n)`` and friends, which is why the checks live in ``__new__`` and nowhere else.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import EncodeError

if TYPE_CHECKING:
    from .codec.values import AMQPValue

__all__ = [
    "UNDESCRIBED",
    "Array",
    "Described",
    "NegativeUnsignedError",
    "TypeCode",
    "byte",
    "char",
    "decimal32",
    "decimal64",
    "decimal128",
    "float32",
    "int32",
    "short",
    "symbol",
    "timestamp",
    "ubyte",
    "uint",
    "ulong",
    "ushort",
]


#: A ranged int's own class: ``ulong(7)`` is a ``ulong`` for type checkers, as it is at run time.
_RangedIntT = TypeVar("_RangedIntT", bound="_RangedInt")


def _out_of_range(type_name: str, value: object, low: int, high: int) -> EncodeError:
    return EncodeError(f"{type_name} must be in [{low}, {high}], got {value!r}")


class NegativeUnsignedError(EncodeError, AssertionError):
    """A negative value given to an unsigned type (``ubyte``, ``ushort``, ``uint``, ``ulong``): an
    :class:`~amqp_async.EncodeError`, and the ``AssertionError`` python-qpid-proton raises, with its message
    (``initializing ubyte with negative value``)."""

    def __str__(self) -> str:
        return self.description or ""


class _RangedInt(int):
    """An int subclass whose value must lie in ``[_low, _high]``."""

    _low = 0
    _high = 0
    _unsigned = False  # proton's unsigned types refuse a negative value with an AssertionError
    __slots__ = ()

    def __new__(cls: type[_RangedIntT], value: Any = 0) -> _RangedIntT:
        number = int.__new__(cls, value)
        if not cls._low <= number <= cls._high:
            if number < 0 and cls._unsigned:
                raise NegativeUnsignedError(f"initializing {cls.__name__} with negative value")
            raise _out_of_range(cls.__name__, value, cls._low, cls._high)
        return number

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int.__repr__(self)})"

    # str() and f-strings give the plain number (repr names the type); without this, int's str falls back to repr.
    __str__ = int.__repr__


class ubyte(_RangedInt):
    """AMQP ``ubyte``: an 8-bit unsigned integer, 0 to 2**8 - 1."""

    _low, _high = 0, 0xFF
    _unsigned = True
    __slots__ = ()


class ushort(_RangedInt):
    """AMQP ``ushort``: a 16-bit unsigned integer, 0 to 2**16 - 1."""

    _low, _high = 0, 0xFFFF
    _unsigned = True
    __slots__ = ()


class uint(_RangedInt):
    """AMQP ``uint``: a 32-bit unsigned integer, 0 to 2**32 - 1."""

    _low, _high = 0, 0xFFFFFFFF
    _unsigned = True
    __slots__ = ()


class ulong(_RangedInt):
    """AMQP ``ulong``: a 64-bit unsigned integer, 0 to 2**64 - 1."""

    _low, _high = 0, 0xFFFFFFFFFFFFFFFF
    _unsigned = True
    __slots__ = ()


class byte(_RangedInt):
    """AMQP ``byte``: an 8-bit signed integer, -2**7 to 2**7 - 1."""

    _low, _high = -0x80, 0x7F
    __slots__ = ()


class short(_RangedInt):
    """AMQP ``short``: a 16-bit signed integer, -2**15 to 2**15 - 1."""

    _low, _high = -0x8000, 0x7FFF
    __slots__ = ()


class int32(_RangedInt):
    """AMQP ``int``: a 32-bit signed integer, -2**31 to 2**31 - 1."""

    _low, _high = -0x80000000, 0x7FFFFFFF
    __slots__ = ()


class timestamp(_RangedInt):
    """AMQP ``timestamp``: milliseconds since the Unix epoch as a signed 64-bit integer."""

    _low, _high = -0x8000000000000000, 0x7FFFFFFFFFFFFFFF
    __slots__ = ()


class decimal32(_RangedInt):
    """AMQP ``decimal32``: the 32 bits of an IEEE 754-2008 decimal32, held as an unsigned integer."""

    _low, _high = 0, 0xFFFFFFFF
    __slots__ = ()


class decimal64(_RangedInt):
    """AMQP ``decimal64``: the 64 bits of an IEEE 754-2008 decimal64, held as an unsigned integer."""

    _low, _high = 0, 0xFFFFFFFFFFFFFFFF
    __slots__ = ()


class decimal128(bytes):
    """AMQP ``decimal128``: the 16 bytes of an IEEE 754-2008 decimal128. Fewer bytes are padded with zero bytes
    at the end, as proton pads them; more are refused."""

    __slots__ = ()

    def __new__(cls, value: Any = b"\x00" * 16) -> decimal128:
        data = bytes(value)
        if len(data) > 16:
            raise EncodeError(f"decimal128 must be at most 16 bytes, got {len(data)}")
        return bytes.__new__(cls, data.ljust(16, b"\x00"))

    def __repr__(self) -> str:
        return f"decimal128({bytes.__repr__(self)})"


_FLOAT32_MAX = 3.4028234663852886e38


class float32(float):
    """AMQP ``float``: an IEEE 754 binary32. Finite values beyond its range are refused."""

    __slots__ = ()

    def __new__(cls, value: Any = 0.0) -> float32:
        number = float.__new__(cls, value)
        if math.isfinite(number) and abs(number) > _FLOAT32_MAX:
            raise EncodeError(f"float32 must be within +/-{_FLOAT32_MAX}, got {value!r}")
        return number

    def __repr__(self) -> str:
        return f"float32({float.__repr__(self)})"

    __str__ = float.__repr__


class symbol(str):
    """AMQP ``symbol``: a name from a constrained domain, a string of ASCII characters."""

    __slots__ = ()

    def __new__(cls, value: Any = "") -> symbol:
        text = str.__new__(cls, value)
        if not text.isascii():
            raise EncodeError(f"symbol must be ASCII, got {value!r}")
        return text

    def __repr__(self) -> str:
        return f"symbol({str.__repr__(self)})"


class char(str):
    """AMQP ``char``: a single Unicode code point (encoded as UTF-32BE)."""

    __slots__ = ()

    def __new__(cls, value: Any = "\x00") -> char:
        text = str.__new__(cls, value)
        if len(text) != 1 or 0xD800 <= ord(text) <= 0xDFFF:
            raise EncodeError(f"char must be exactly one Unicode scalar value, got {value!r}")
        return text

    def __repr__(self) -> str:
        return f"char({str.__repr__(self)})"


class Described:
    """A described value (spec §1.3): ``value`` annotated by ``descriptor``.

    The descriptor is usually a ``ulong`` code or a ``symbol`` name. In a frame, values whose descriptor the codec
    knows (performatives, outcomes, termini, ...) decode to their own classes, all others to ``Described``; in a
    message's body, annotations, application properties and footer (the application's values) every described
    value decodes to ``Described``, whatever its descriptor, as python-qpid-proton reads it.
    """

    __slots__ = ("descriptor", "value")

    # Read as what the codec decodes (a received body's described value holds AMQP values, to be narrowed), where
    # Any let every use of them pass unchecked; written with anything, as a message's body is (the encoder refuses
    # what AMQP cannot carry).
    descriptor: AMQPValue
    value: AMQPValue

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Described):
            return bool(self.descriptor == other.descriptor and self.value == other.value)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.descriptor, self.value))


class _Undescribed:
    """Marker for an array without a descriptor."""

    _instance: _Undescribed | None = None

    def __new__(cls) -> _Undescribed:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDESCRIBED"

    def __reduce__(self) -> str:
        return "UNDESCRIBED"


#: The descriptor of an :class:`Array` whose elements are not described (proton's ``UNDESCRIBED``).
UNDESCRIBED = _Undescribed()


class TypeCode(enum.IntEnum):
    """AMQP type codes with proton's ``Data`` numbering, used as the element type of an :class:`Array`."""

    NULL = 1
    BOOL = 2
    UBYTE = 3
    BYTE = 4
    USHORT = 5
    SHORT = 6
    UINT = 7
    INT = 8
    CHAR = 9
    ULONG = 10
    LONG = 11
    TIMESTAMP = 12
    FLOAT = 13
    DOUBLE = 14
    DECIMAL32 = 15
    DECIMAL64 = 16
    DECIMAL128 = 17
    UUID = 18
    BINARY = 19
    STRING = 20
    SYMBOL = 21
    DESCRIBED = 22
    ARRAY = 23
    LIST = 24
    MAP = 25


class Array:
    """An AMQP array: a sequence of values of one type (spec §1.6.23), as proton models it.

    Args:
        descriptor: the descriptor shared by every element, or :data:`UNDESCRIBED`.
        type: the element type, a :class:`TypeCode` (an ``int`` with proton's ``Data`` numbering).
        *elements: the elements, each a value of that type.
    """

    __slots__ = ("descriptor", "elements", "type")

    # Read as AMQP values, as Described's (see there).
    descriptor: AMQPValue | _Undescribed
    elements: tuple[AMQPValue, ...]
    type: TypeCode

    def __init__(self, descriptor: Any, type: int, *elements: Any) -> None:  # noqa: A002 - proton's name
        self.descriptor = descriptor
        try:
            self.type = TypeCode(type)
        except ValueError:
            raise EncodeError(f"unknown array element type {type!r}") from None
        self.elements = elements

    def __iter__(self) -> Iterator[AMQPValue]:
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def __repr__(self) -> str:
        items = "".join(f", {element!r}" for element in self.elements)
        return f"Array({self.descriptor!r}, {self.type.name}{items})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Array):
            return bool(
                self.descriptor == other.descriptor and self.type == other.type and self.elements == other.elements
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
