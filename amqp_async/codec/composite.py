"""Declarative AMQP composite types (spec §1.4 "Composite Type Representation").

A composite type is written once, as a class whose body is the spec's field table::

    class Begin(Composite, code=0x11, name="amqp:begin:list"):
        remote_channel: int | None = F("ushort")
        next_outgoing_id: int = F("transfer-number", mandatory=True)
        ...

From that table the class gets ``__slots__``, a constructor taking the fields in spec order (every argument
optional, defaulting to the spec's default or ``None``), ``__eq__``, ``__repr__``, and two functions compiled for
that class alone (generated source, run once at import), so no per-call interpretation of the table:

- an encoder, registered with ``register_encoder``: the descriptor as ``smallulong``, then the fields as a list
  in its smallest form (``list0``/``list8``/``list32``), each field through the ``TYPE_ENCODERS`` entry of its
  primitive type. A field equal to its spec default is sent as null, and trailing nulls are omitted (§1.4: "a
  list whose trailing elements are null may be encoded with those elements omitted");
- a decoder factory, registered with ``register_described`` under the numeric and the symbolic descriptor: it
  takes the decoded list, fills missing or null fields with their defaults, checks each field's Python type, and
  raises :class:`DecodeError` naming the type and field for a mandatory field that is null or missing. Fields
  beyond the spec's list are ignored (forward compatibility).

Fields with ``multiple=True`` hold a tuple (or ``None``) in Python and are sent as an array of their type; on
decode either a single value or an array is accepted (§1.4: "a single value ... or an array") and a tuple comes
back. Fields whose type is another composite (``error``) or ``*`` go through the generic ``encode_value`` and
decode through the described-type registry.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar

from ..errors import DecodeError, EncodeError
from ..types import (
    Array,
    byte,
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
from ._decoder import register_described
from ._encoder import TYPE_ENCODERS, encode_array, encode_value, register_encoder
from ._uuid import uuid_class

__all__ = [
    "RESTRICTED_TYPES",
    "Composite",
    "F",
    "Field",
    "composite_types",
    "encode_annotations",
    "encode_fields",
]

#: Restricted types of the spec mapped to the primitive (or special) type they are sent as (§2.8, §3.2, §3.5).
RESTRICTED_TYPES: dict[str, str] = {
    "handle": "uint",
    "delivery-number": "uint",
    "transfer-number": "uint",
    "sequence-no": "uint",
    "milliseconds": "uint",
    "seconds": "uint",
    "message-format": "uint",
    "terminus-durability": "uint",
    "role": "boolean",
    "sender-settle-mode": "ubyte",
    "receiver-settle-mode": "ubyte",
    "sasl-code": "ubyte",
    "ietf-language-tag": "symbol",
    "terminus-expiry-policy": "symbol",
    "delivery-tag": "binary",
    "address-string": "string",
    "filter-set": "map",
    "node-properties": "fields",
    "message-id": "*",
}

_INT_TYPES = frozenset({int, ubyte, ushort, uint, ulong, byte, short, int32, timestamp, decimal32, decimal64})
_STR_TYPES = frozenset({str, symbol})

# Python classes a decoded field of each primitive type may have (the decoder builds these exact classes).
_ACCEPTED: dict[str, frozenset[type]] = {
    "boolean": frozenset({bool}),
    "ubyte": _INT_TYPES,
    "ushort": _INT_TYPES,
    "uint": _INT_TYPES,
    "ulong": _INT_TYPES,
    "byte": _INT_TYPES,
    "short": _INT_TYPES,
    "int": _INT_TYPES,
    "long": _INT_TYPES,
    "timestamp": _INT_TYPES,
    "float": frozenset({float, float32}),
    "double": frozenset({float, float32}),
    "decimal32": _INT_TYPES,
    "decimal64": _INT_TYPES,
    "decimal128": frozenset({decimal128}),
    "char": _STR_TYPES,
    "binary": frozenset({bytes}),
    "string": _STR_TYPES,
    "symbol": _STR_TYPES,
    "list": frozenset({list}),
    "map": frozenset({dict}),
    "fields": frozenset({dict}),
    "annotations": frozenset({dict}),
}

# How a spec default (written as in the spec's XML) becomes the value a decoded field holds.
_DEFAULT_MAKERS: dict[str, Callable[[Any], Any]] = {
    "boolean": bool,
    "ubyte": ubyte,
    "ushort": ushort,
    "uint": uint,
    "ulong": ulong,
    "symbol": symbol,
    "string": str,
}

_NULL = 0x40


def encode_fields(buf: bytearray, value: Any) -> None:
    """Append a ``fields`` map (§2.8.19: a map with symbol keys); ``str`` keys are sent as symbols."""
    if value is None:
        buf.append(_NULL)
        return
    if not isinstance(value, dict):
        raise EncodeError(f"fields must be a dict with symbol keys, got {value!r}")
    for key in value:
        if key.__class__ is not symbol:
            value = {(symbol(k) if isinstance(k, str) else k): v for k, v in value.items()}
            break
    _encode_map(buf, value)


def encode_annotations(buf: bytearray, value: Any) -> None:
    """Append an ``annotations`` map (§3.2.10: symbol or ulong keys); ``str`` keys are sent as symbols."""
    encode_fields(buf, value)


_encode_map = TYPE_ENCODERS["map"]

_SPECIAL_ENCODERS: dict[str, Callable[[bytearray, Any], None]] = {
    "fields": encode_fields,
    "annotations": encode_annotations,
}


class Field:
    """One field of a composite type, as the spec's ``<field>`` element gives it.

    Attributes:
        name: the Python attribute name (the spec's name with ``-`` replaced by ``_``); set by the class.
        type: the spec's type name (``"uint"``, ``"handle"``, ``"error"``, ``"*"``, ...).
        mandatory: a null or missing value is a decode error (and refused on encode).
        default: the value a null or missing field stands for, or ``None``.
        multiple: the field holds several values (a tuple in Python, an array on the wire).
        requires: the archetype a ``*`` field requires (documentation only).
    """

    __slots__ = ("default", "mandatory", "multiple", "name", "requires", "type")

    def __init__(
        self,
        type: str,  # noqa: A002 - the spec's attribute name
        *,
        mandatory: bool = False,
        default: Any = None,
        multiple: bool = False,
        requires: str | None = None,
    ) -> None:
        self.name = ""
        self.type = type
        self.mandatory = mandatory
        self.default = default
        self.multiple = multiple
        self.requires = requires

    @property
    def primitive(self) -> str:
        """The primitive type the field is sent as (``"*"`` for any, or a composite type's name)."""
        return RESTRICTED_TYPES.get(self.type, self.type)

    def __repr__(self) -> str:
        flags = "".join(
            [
                ", mandatory=True" if self.mandatory else "",
                f", default={self.default!r}" if self.default is not None else "",
                ", multiple=True" if self.multiple else "",
                f", requires={self.requires!r}" if self.requires else "",
            ]
        )
        return f"Field({self.name!r}, {self.type!r}{flags})"


def F(
    type: str,  # noqa: A002 - the spec's attribute name
    *,
    mandatory: bool = False,
    default: Any = None,
    multiple: bool = False,
    requires: str | None = None,
) -> Any:
    """Declare a composite field in a class body (see the module docstring).

    Args:
        type: the spec's type name of the field.
        mandatory: the spec's ``mandatory="true"``.
        default: the spec's default, as a Python value.
        multiple: the spec's ``multiple="true"``.
        requires: the spec's ``requires=`` archetype, for ``*`` fields.
    """
    return Field(type, mandatory=mandatory, default=default, multiple=multiple, requires=requires)


# Composite classes by spec type name ("error", "source", ...), so fields can name another composite's type.
_BY_TYPE_NAME: dict[str, type[Composite]] = {}


def composite_types() -> dict[str, type[Composite]]:
    """Return every composite class defined so far, keyed by its spec type name (``"open"``, ``"error"``, ...)."""
    return dict(_BY_TYPE_NAME)


def _as_tuple(value: Any) -> tuple[Any, ...]:
    """Normalise the value of a ``multiple`` field to a tuple."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, (list, Array)):
        return tuple(value)
    return (value,)


def _multiple_encoder(primitive: str) -> Callable[[bytearray, Any], None]:
    """An encoder for a ``multiple`` field: a sequence becomes an array, a single value is sent alone."""
    single = TYPE_ENCODERS[primitive]

    def encode_multiple(buf: bytearray, value: Any) -> None:
        if value is None:
            buf.append(_NULL)
        elif isinstance(value, (tuple, list)):
            encode_array(buf, primitive, value)
        elif isinstance(value, Array):
            encode_value(buf, value)
        else:
            single(buf, value)

    return encode_multiple


def _multiple_decoder(accepted: frozenset[type] | None, where: str) -> Callable[[Any], tuple[Any, ...]]:
    """A converter for a decoded ``multiple`` field: an array, a list or one value, to a tuple."""

    def decode_multiple(value: Any) -> tuple[Any, ...]:
        if isinstance(value, Array):
            items = value.elements
        elif value.__class__ is list:
            items = tuple(value)
        else:
            items = (value,)
        if accepted is not None:
            for item in items:
                if item.__class__ not in accepted:
                    raise DecodeError(f"{where}: {type(item).__name__} value {item!r} is not of the field's type")
        return items

    return decode_multiple


def _wrong_type(where: str, value: Any) -> DecodeError:
    return DecodeError(f"{where}: {type(value).__name__} value {value!r} is not of the field's type")


class _CompositeMeta(type):
    """Turns the ``F(...)`` entries of a class body into ``__slots__`` (see :class:`Composite`)."""

    def __new__(mcs, cls_name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> Any:
        fields: list[Field] = []
        for attr, value in list(namespace.items()):
            if isinstance(value, Field):
                value.name = attr
                fields.append(value)
                del namespace[attr]
        if "__slots__" not in namespace:
            namespace["__slots__"] = tuple(field.name for field in fields)
        namespace["_declared_fields"] = tuple(fields)
        return super().__new__(mcs, cls_name, bases, namespace, **kwargs)


class Composite(metaclass=_CompositeMeta):
    """Base of every AMQP composite type defined from a field table (see the module docstring).

    Class keywords:
        code: the descriptor code (domain 0x00000000), e.g. ``0x10`` for open.
        name: the symbolic descriptor, e.g. ``"amqp:open:list"``.

    Class attributes:
        fields: the :class:`Field` table, in spec order.
        descriptor_code / descriptor_name: the two descriptors.
        amqp_type: the spec's type name (``"open"``).
    """

    __slots__ = ()

    fields: ClassVar[tuple[Field, ...]] = ()
    descriptor_code: ClassVar[int] = -1
    descriptor_name: ClassVar[str] = ""
    amqp_type: ClassVar[str] = ""
    _declared_fields: ClassVar[tuple[Field, ...]] = ()
    _encode: ClassVar[Callable[[bytearray, Any], None]]
    _decode: ClassVar[Callable[[Any], Any]]

    def __init_subclass__(cls, *, code: int = -1, name: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code < 0 or not name:
            raise TypeError(f"composite {cls.__name__} needs code= and name= class keywords")
        cls.fields = cls._declared_fields
        cls.descriptor_code = code
        cls.descriptor_name = name
        cls.amqp_type = name.split(":")[1] if name.count(":") >= 2 else name
        _build(cls)
        _BY_TYPE_NAME[cls.amqp_type] = cls

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover - replaced in every subclass
        raise TypeError("Composite is abstract; instantiate one of its subclasses")

    def encode_into(self, buf: bytearray) -> None:
        """Append this value's AMQP encoding (described list) to ``buf``."""
        type(self)._encode(buf, self)

    def encode(self) -> bytes:
        """Return this value's AMQP encoding (described list)."""
        buf = bytearray()
        type(self)._encode(buf, self)
        return bytes(buf)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in self.fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = []
        for field in self.fields:
            value = getattr(self, field.name)
            if field.mandatory or (value is not None and value != field.default):
                parts.append(f"{field.name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


def _descriptor_bytes(code: int) -> bytes:
    buf = bytearray(b"\x00")
    TYPE_ENCODERS["ulong"](buf, code)
    return bytes(buf)


# smalluint encodings (§1.6.6: 0x52 and one byte) of 0..255, for the inlined uint fields.
_SMALLUINT = [bytes((0x52, n)) for n in range(256)]


def _field_encoding(i: int, field: Field) -> list[str]:
    """Source lines appending field ``i`` (value ``v{i}``) to ``buf``.

    uint-typed and boolean fields (handles, delivery ids, flags: most of transfer, disposition and flow) are
    encoded inline for ``int``/``uint``/``bool`` values, in the smallest form (§1.6.3 true/false, §1.6.6 uint0 /
    smalluint / uint), which saves two calls per field on the hottest frames; every other value goes through the
    field's ``TYPE_ENCODERS`` entry, which coerces or refuses it.
    """
    v = f"v{i}"
    if not field.multiple and field.primitive == "uint":
        return [
            f"if {v} is None: buf.append(0x40)",
            f"elif ({v}.__class__ is _int or {v}.__class__ is _uint) and 0 <= {v} <= 0xFFFFFFFF:",
            f"    if {v} == 0: buf.append(0x43)",
            f"    elif {v} < 256: buf += _SMALLUINT[{v}]",
            f"    else: buf += _pack_BI(0x70, {v})",
            f"else: _e{i}(buf, {v})",
        ]
    if not field.multiple and field.primitive == "boolean":
        return [
            f"if {v} is True: buf.append(0x41)",
            f"elif {v} is False: buf.append(0x42)",
            f"else: _e{i}(buf, {v})",
        ]
    return [f"_e{i}(buf, {v})"]


def _build(cls: type[Composite]) -> None:
    """Generate and attach ``__init__``, the encoder and the decoder factory of ``cls``, and register them."""
    fields = cls.fields
    type_name = cls.amqp_type
    count = len(fields)
    env: dict[str, Any] = {
        "_cls": cls,
        "_new": object.__new__,
        "_DecodeError": DecodeError,
        "_EncodeError": EncodeError,
        "_wrong_type": _wrong_type,
        "_as_tuple": _as_tuple,
        "_tuple": tuple,
        "_list": list,
        "_HEAD": _descriptor_bytes(cls.descriptor_code) + b"\xc0\x00\x00",
        "_EMPTY": _descriptor_bytes(cls.descriptor_code) + b"\x45",
        "_PADS": [[None] * (count - n) for n in range(count + 1)],
        "_pack_BII": struct.Struct(">BII").pack,
        "_pack_BI": struct.Struct(">BI").pack,
        "_SMALLUINT": _SMALLUINT,
        "_int": int,
        "_uint": uint,
    }
    list_at = len(env["_HEAD"]) - 3  # offset of the list constructor from the start of the encoding
    init_params: list[str] = []
    init_body: list[str] = []
    enc_read: list[str] = []
    dec_body: list[str] = []
    for i, field in enumerate(fields):
        name = field.name
        where = f"{type_name}.{name}"
        primitive = field.primitive
        composite = _BY_TYPE_NAME.get(primitive)
        default = field.default
        if default is not None and primitive in _DEFAULT_MAKERS:
            default = _DEFAULT_MAKERS[primitive](default)
        env[f"_d{i}"] = default

        # __init__: positional order is the spec's field order; every argument is optional.
        init_params.append(f"{name}=_d{i}")
        if field.multiple:
            init_body.append(
                f"    self.{name} = {name} if {name} is None or {name}.__class__ is _tuple else _as_tuple({name})"
            )
        else:
            init_body.append(f"    self.{name} = {name}")

        # Encoder: pick the value; a default-valued field is sent as null, a mandatory null is refused.
        if composite is not None or primitive == "*":
            encoder: Callable[[bytearray, Any], None] = encode_value
        elif field.multiple:
            encoder = _multiple_encoder(primitive)
        elif primitive in _SPECIAL_ENCODERS:
            encoder = _SPECIAL_ENCODERS[primitive]
        else:
            try:
                encoder = TYPE_ENCODERS[primitive]
            except KeyError:
                raise TypeError(f"{where}: unknown AMQP type {field.type!r}") from None
        env[f"_e{i}"] = encoder
        enc_read.append(f"    v{i} = obj.{name}")
        if field.mandatory:
            enc_read.append(f"    if v{i} is None: raise _EncodeError('{where} is mandatory but is None')")
        if default is not None:
            enc_read.append(f"    if v{i} == _d{i}: v{i} = None")

        # Decoder: defaults for null/missing, mandatory check, type check of the Python class.
        if composite is not None:
            accepted: frozenset[type] | None = frozenset({composite})
        elif primitive == "*":
            accepted = None
        elif primitive == "uuid":  # no spec composite has one; imported lazily all the same (see _uuid.py)
            accepted = frozenset({uuid_class()})
        else:
            accepted = _ACCEPTED[primitive]
        if field.multiple:
            env[f"_m{i}"] = _multiple_decoder(accepted, where)
        elif accepted is not None:
            env[f"_k{i}"] = accepted
        wrong = f"raise _wrong_type('{where}', v{i})"
        if field.mandatory:
            dec_body.append(f"    if v{i} is None: raise _DecodeError('{where} is mandatory but is null or missing')")
            if field.multiple:
                dec_body.append(f"    v{i} = _m{i}(v{i})")
            elif accepted is not None:
                dec_body.append(f"    if v{i}.__class__ not in _k{i}: {wrong}")
        elif default is not None:
            dec_body.append(f"    if v{i} is None: v{i} = _d{i}")
            if field.multiple:
                dec_body.append(f"    else: v{i} = _m{i}(v{i})")
            elif accepted is not None:
                dec_body.append(f"    elif v{i}.__class__ not in _k{i}: {wrong}")
        elif field.multiple:
            dec_body.append(f"    if v{i} is not None: v{i} = _m{i}(v{i})")
        elif accepted is not None:
            dec_body.append(f"    if v{i} is not None and v{i}.__class__ not in _k{i}: {wrong}")

    names = ", ".join(f"v{i}" for i in range(count))
    src: list[str] = []
    # __init__
    src.append(f"def __init__(self, {', '.join(init_params)}):" if count else "def __init__(self):")
    src.extend(init_body or ["    pass"])
    # encoder
    src.append("def encode(buf, obj):")
    src.extend(enc_read)
    if count:
        # number of fields to send: up to the last non-null one
        for i in reversed(range(count)):
            keyword = "if" if i == count - 1 else "elif"
            src.append(f"    {keyword} v{i} is not None: n = {i + 1}")
        src.append("    else: n = 0")
        src.append("    if n == 0:")
        src.append("        buf += _EMPTY")
        src.append("        return")
        src.append("    start = len(buf)")
        src.append("    buf += _HEAD")
        indent = "    "
        for i in range(count):
            if i:
                src.append(f"{indent}if n > {i}:")
                indent += "    "
            src.extend(indent + line for line in _field_encoding(i, fields[i]))
        # §1.6.22: size counts the bytes after the size field (the count included); list8 when it fits.
        src.append(f"    size = len(buf) - start - {list_at + 2}")
        src.append("    if size <= 255:")
        src.append(f"        buf[start + {list_at + 1}] = size")
        src.append(f"        buf[start + {list_at + 2}] = n")
        src.append("    else:")
        src.append(f"        buf[start + {list_at}:start + {list_at + 3}] = _pack_BII(0xD0, size + 3, n)")
    else:
        src.append("    buf += _EMPTY")
    # decoder factory
    src.append("def decode(value):")
    src.append("    if value.__class__ is not _list:")
    src.append(f"        raise _DecodeError('{type_name}: described value is not a list but ' + type(value).__name__)")
    if count:
        src.append("    n = len(value)")
        src.append(f"    if n != {count}:")
        src.append(f"        value = value + _PADS[n] if n < {count} else value[:{count}]")
        src.append(f"    {names}, = value")
        src.extend(dec_body)
    src.append("    obj = _new(_cls)")
    for i, field in enumerate(fields):
        src.append(f"    obj.{field.name} = v{i}")
    src.append("    return obj")

    code = compile("\n".join(src) + "\n", f"<composite {type_name}>", "exec")
    exec(code, env)  # the source was generated above from the class's own field table
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = f"Make a {type_name} (fields in spec order, all optional)."
    cls.__init__ = init  # type: ignore[method-assign]
    cls._encode = staticmethod(env["encode"])
    cls._decode = staticmethod(env["decode"])
    register_encoder(cls, env["encode"])
    register_described(cls.descriptor_code, cls.descriptor_name, env["decode"])
