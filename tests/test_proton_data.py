"""The data layer of ``amqp_async.proton`` (``Data``, ``Url``, ``Condition``, the exceptions, ``PropertyDict``,
``AnnotationDict``, ``SymbolList``) against python-qpid-proton 0.40 as the oracle.

``Data`` is tested differentially: the same value or the same sequence of ``put_*``/navigation calls goes through
both implementations; each side decodes the other's bytes, and what each reads back (``get_object``, the types the
cursor reports) must agree, type for type. proton's classes are distinct from ours, so values cross over through
``to_proton`` / ``from_proton`` (from the codec's differential tests).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings

import amqp_async
from amqp_async import types as T
from amqp_async.codec.performatives import Error
from amqp_async.proton import _condition, _data, _exceptions, _url

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle (CI installs it)")

try:
    import strategies as S
    from test_codec_proton import from_proton, proton_safe, to_proton
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S
    from tests.test_codec_proton import from_proton, proton_safe, to_proton

Data = _data.Data

# The names a script uses, from each implementation.
OURS = SimpleNamespace(**{name: getattr(T, name) for name in T.__all__}, Data=Data)
THEIRS = SimpleNamespace(
    Data=proton.Data,
    UNDESCRIBED=proton.UNDESCRIBED,
    Described=proton.Described,
    Array=proton.Array,
    **{name: getattr(proton, name) for name in ("symbol", "ulong", "uint", "ubyte", "char", "timestamp", "float32")},
)


def proton_read_all(raw: bytes) -> list[Any]:
    """Every top-level value proton decodes from ``raw``, in our classes."""
    data = proton.Data()
    offset = 0
    while offset < len(raw):
        offset += data.decode(raw[offset:])
    data.rewind()
    values = []
    while data.next() is not None:
        values.append(from_proton(data.get_object()))
    return values


def ours_read_all(raw: bytes) -> list[Any]:
    data = Data()
    offset = 0
    while offset < len(raw):
        offset += data.decode(raw[offset:])
    data.rewind()
    values = []
    while data.next() is not None:
        values.append(data.get_object())
    return values


# --- Data: values --------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(S.amqp_values(described_keys=False, binary_keys=False))
def test_put_object_encodes_what_proton_reads(value: Any) -> None:
    if not proton_safe(value):
        return
    data = Data()
    data.put_object(value)
    raw = data.encode()
    # the bytes are proton's own (tests/test_proton_data_bytes.py): proton reads them back as the value
    S.assert_typed_equal(proton_read_all(raw), [value])


@settings(max_examples=300)
@given(S.amqp_values(described_keys=False, binary_keys=False))
def test_decode_reads_what_proton_encodes(value: Any) -> None:
    if not proton_safe(value):
        return
    theirs = proton.Data()
    theirs.put_object(to_proton(value))
    raw = bytes(theirs.encode())
    data = Data()
    assert data.decode(raw + b"\x40") == len(raw)  # the first value only; its size is returned
    assert data.type() is not None  # the decoded value is current
    data.rewind()
    theirs.rewind()
    assert data.next() == theirs.next()
    S.assert_typed_equal(data.get_object(), value)
    assert data.next() is None


@settings(max_examples=200)
@given(S.amqp_values())
def test_round_trip_and_copy(value: Any) -> None:
    data = Data()
    data.put_object(value)
    again = Data()
    again.decode(data.encode())
    again.rewind()
    again.next()
    S.assert_typed_equal(again.get_object(), value)
    copied = Data()
    copied.put_int(1)
    copied.copy(again)
    assert copied.type() is None
    copied.next()
    S.assert_typed_equal(copied.get_object(), value)


# --- Data: the put/navigate API, the same script on both sides ----------------------------------------------


def _ours(item: Any) -> Any:
    if isinstance(item, tuple):
        return tuple(_ours(x) for x in item)
    return int(item) if isinstance(item, T.TypeCode) else item


def _theirs(item: Any) -> Any:
    if isinstance(item, tuple):
        return tuple(_theirs(x) for x in item)
    return from_proton(item)


def script_scalars(m: Any) -> list[Any]:
    d = m.Data()
    d.put_null()
    d.put_bool(True)
    d.put_ubyte(255)
    d.put_byte(-128)
    d.put_ushort(65535)
    d.put_short(-32768)
    d.put_uint(4294967295)
    d.put_int(-2147483648)
    d.put_char("é")
    d.put_ulong(2**64 - 1)
    d.put_long(-(2**63))
    d.put_timestamp(1311704463521)
    d.put_float(1.5)
    d.put_double(-2.25)
    d.put_decimal32(7)
    d.put_decimal64(8)
    d.put_decimal128(b"0123456789abcdef")
    d.put_uuid(uuid.UUID(int=42))
    d.put_binary(b"\x00\xff")
    d.put_string("héllo")
    d.put_symbol("sym")
    d.put_memoryview(memoryview(b"mv"))
    return [d]


def script_compounds(m: Any) -> list[Any]:
    d = m.Data()
    d.put_list()
    d.enter()
    d.put_int(1)
    d.put_string("two")
    d.put_list()  # empty list
    d.put_map()
    d.enter()
    d.put_symbol("k")
    d.put_ulong(3)
    d.put_string("k2")
    d.put_list()
    d.enter()
    d.put_null()
    d.exit()
    d.exit()
    d.exit()
    d.put_described()
    d.enter()
    d.put_symbol("amqp:x")
    d.put_map()
    d.exit()
    d.put_array(False, m.Data.INT)
    d.enter()
    for i in (1, -2, 300):
        d.put_int(i)
    d.exit()
    d.put_array(True, m.Data.SYMBOL)
    d.enter()
    d.put_ulong(0x77)
    d.put_symbol("a")
    d.put_symbol("b")
    d.exit()
    d.put_array(False, m.Data.LIST)
    d.enter()
    d.put_list()
    d.put_list()
    d.enter()
    d.put_string("in")
    d.exit()
    d.exit()
    d.put_array(False, m.Data.STRING)  # empty array
    d.put_array(False, m.Data.BOOL)
    d.enter()
    d.put_bool(True)
    d.put_bool(False)
    d.exit()
    return [d]


def script_overwrite(m: Any) -> list[Any]:
    # put_* after a rewind or in the middle overwrites the next sibling, dropping its children
    d = m.Data()
    d.put_int(1)
    d.put_list()
    d.enter()
    d.put_int(7)
    d.exit()
    d.put_int(3)
    d.rewind()
    d.next()
    d.put_string("x")  # replaces the list
    d.rewind()
    d.put_long(9)  # replaces the first value
    return [d]


def script_navigation(m: Any) -> list[Any]:
    d = m.Data()
    seen: list[Any] = []
    seen += [d.type(), d.next(), d.prev(), d.enter(), d.exit()]
    d.put_int(1)
    d.put_list()
    d.enter()
    d.put_int(2)
    d.put_int(3)
    d.exit()
    d.put_map()
    d.enter()
    d.put_symbol("a")
    d.put_int(10)
    d.put_string("b")
    d.put_int(20)
    d.put_ulong(5)
    d.put_int(30)
    d.exit()
    d.put_int(4)
    seen += [d.type(), d.prev(), d.prev(), d.prev(), d.prev(), d.type()]
    d.rewind()
    seen += [d.type(), d.next(), d.next(), d.get_list(), d.get_map(), d.get_array()]
    seen += [d.enter(), d.type(), d.next(), d.get_int(), d.next(), d.next(), d.exit(), d.type()]
    # enter a scalar: no children
    d.rewind()
    d.next()
    seen += [d.enter(), d.next(), d.exit(), d.type()]
    # lookup in the map
    for key in ("b", "a", "zz"):
        d.rewind()
        d.next()
        d.next()
        d.next()
        seen += [d.get_map(), d.enter(), d.lookup(key), d.type(), d.get_int()]
    # narrow and widen
    d.rewind()
    d.next()
    d.next()
    d.narrow()
    d.rewind()
    seen += [d.type(), d.next(), d.get_object()]
    d.rewind()
    seen += [d.enter(), d.next(), d.get_int(), d.exit(), d.exit(), d.type()]
    d.widen()
    d.rewind()
    seen += [d.next(), d.get_object()]
    d.rewind()
    d.next()
    d.next()
    d.enter()
    d.narrow()
    d.rewind()
    seen += [d.type(), d.next(), d.next(), d.next(), d.exit(), d.type()]
    d.widen()
    return [*seen, d]


def script_getters(m: Any) -> list[Any]:
    # a getter of another type gives that type's empty value; a compound count is 0 for other nodes
    d = m.Data()
    d.put_long(5)
    d.put_described()
    d.enter()
    d.put_symbol("d")
    d.put_int(1)
    d.exit()
    d.put_null()
    seen: list[Any] = []
    d.rewind()
    while d.next() is not None:
        seen += [
            d.get_bool(),
            d.get_ubyte(),
            d.get_byte(),
            d.get_ushort(),
            d.get_short(),
            d.get_uint(),
            d.get_int(),
            d.get_ulong(),
            d.get_long(),
            d.get_timestamp(),
            d.get_float(),
            d.get_double(),
            d.get_decimal32(),
            d.get_decimal64(),
            d.get_uuid(),
            d.get_list(),
            d.get_map(),
            d.get_array(),
            d.is_described(),
            d.is_null(),
        ]
    d.clear()
    seen += [d.type(), d.get_object(), d.get_dict(), d.get_sequence(), d.get_py_array(), d.get_int(), d.encode()]
    return seen


def script_objects(m: Any) -> list[Any]:
    d = m.Data()
    d.put_object({"a": [1, m.symbol("s"), None, True, 1.5], m.symbol("b"): m.Described(m.symbol("d"), m.ulong(3))})
    d.put_object(m.Array(m.UNDESCRIBED, m.Data.INT, 1, 2))
    d.put_object(m.Array(m.symbol("x"), m.Data.STRING, "a"))
    d.put_object((m.uint(1), m.ubyte(2), m.char("c"), m.timestamp(4), m.float32(0.5)))
    d.put_dict({1: 2})
    d.put_sequence([1, "x"])
    d.put_py_described(m.Described(m.ulong(1), None))
    seen: list[Any] = []
    d.rewind()
    while d.next() is not None:
        seen.append(d.get_object())
    d.rewind()
    d.next()
    seen += [d.get_dict(), d.get_sequence()]
    d.next()
    d.next()
    seen += [d.get_array(), d.get_py_array()]
    d.next()
    seen += [d.get_py_described(), d.get_dict()]
    d.rewind()
    d.next()
    d.decode(d.encode())  # decode puts after the current node, replacing the next one
    return [*seen, d]


def script_decode_position(m: Any) -> list[Any]:
    d = m.Data()
    d.put_int(1)
    d.put_int(5)
    d.put_int(6)
    d.rewind()
    d.next()
    n = d.decode(b"\x54\x02\x54\x03")
    return [n, d.type(), d.get_int(), d.next(), d.get_int(), d]


SCRIPTS = [
    script_scalars,
    script_compounds,
    script_overwrite,
    script_navigation,
    script_getters,
    script_objects,
    script_decode_position,
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda f: f.__name__)
def test_same_script_same_results(script: Callable[[Any], list[Any]]) -> None:
    ours = script(OURS)
    theirs = script(THEIRS)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if isinstance(a, Data):
            raw_ours, raw_theirs = a.encode(), bytes(b.encode())
            # each side reads the other's bytes to the same values
            S.assert_typed_equal(proton_read_all(raw_ours), ours_read_all(raw_theirs))
            S.assert_typed_equal(ours_read_all(raw_ours), proton_read_all(raw_theirs))
            assert a.encoded_size() == len(raw_ours)
        elif isinstance(a, bytes) and not a:
            assert not b, i
        else:
            S.assert_typed_equal(_ours(a), _theirs(b))


def test_format_matches_proton_c() -> None:
    def fill(m: Any) -> Any:
        d = m.Data()
        d.put_int(1)
        d.put_string('q"uo\nte')
        d.put_list()
        d.enter()
        d.put_symbol("s")
        d.put_map()
        d.enter()
        d.put_string("k")
        d.put_binary(b"\x01a\x7f\xff")
        d.exit()
        d.exit()
        d.put_described()
        d.enter()
        d.put_ulong(1)
        d.put_null()
        d.exit()
        d.put_array(True, m.Data.INT)
        d.enter()
        d.put_symbol("d")
        d.put_int(5)
        d.exit()
        d.put_uuid(uuid.UUID(int=5))
        d.put_char("a")
        d.put_float(1.5)
        d.put_double(1e100)
        d.put_bool(False)
        d.put_decimal32(5)
        d.put_decimal128(b"0123456789abcdef")
        d.put_symbol("with space")
        d.put_described()
        d.enter()
        d.put_symbol("amqp:x")
        d.put_list()
        d.exit()
        return d

    # What proton-c's pn_data_format gives for this tree (proton 0.40's Data.format() truncates it).
    expected = (
        '1, "q\\x22uo\\x0ate", [:s, {"k"=b"\\x01a\\x7f\\xff"}], @1 null, @PN_INT[:d, 5], '
        "UUID(00000000-0000-0000-0000-000000000005), a, 1.5, 1e+100, false, D32(5), "
        'D128(30313233343536373839616263646566), :"with space", @:"amqp:x" []'
    )
    assert fill(OURS).format() == expected


def test_type_codes_and_names() -> None:
    for code, name in proton.Data.type_names.items():
        assert Data.type_name(code) == name
    for attr in ("NULL", "BOOL", "UBYTE", "INT", "ULONG", "TIMESTAMP", "UUID", "DESCRIBED", "ARRAY", "LIST", "MAP"):
        assert getattr(Data, attr) == getattr(proton.Data, attr) == getattr(T.TypeCode, attr)


# --- Data: errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "value", "builtin"),
    [
        ("put_ubyte", -1, OverflowError),
        ("put_ubyte", 256, OverflowError),
        ("put_byte", 128, OverflowError),
        ("put_ushort", 65536, OverflowError),
        ("put_short", -32769, OverflowError),
        ("put_uint", -1, OverflowError),
        ("put_int", 2**31, OverflowError),
        ("put_ulong", -1, OverflowError),
        ("put_ulong", 2**64, OverflowError),
        ("put_long", 2**63, OverflowError),
        ("put_symbol", "é", ValueError),
    ],
)
def test_out_of_range_raises_as_proton(method: str, value: Any, builtin: type[Exception]) -> None:
    with pytest.raises(builtin):
        getattr(proton.Data(), method)(value)
    with pytest.raises(builtin) as info:
        getattr(Data(), method)(value)
    assert isinstance(info.value, _exceptions.DataException)
    assert isinstance(info.value, amqp_async.AMQPError)


def test_put_object_of_unknown_type_raises_key_error_as_proton() -> None:
    with pytest.raises(KeyError):
        proton.Data().put_object({1, 2})
    with pytest.raises(KeyError) as info:
        Data().put_object({1, 2})
    assert isinstance(info.value, _exceptions.DataException)


@pytest.mark.parametrize(
    "raw",
    [b"", b"\xff", b"\xa1\x05ab", b"\xc0\x05\x03\x40", b"\xe0\x03\x01\x00", b"\xd1\x00\x00\x00\x04\x00\x00\x00\x01"],
)
def test_bad_bytes_raise_data_exception(raw: bytes) -> None:
    with pytest.raises(proton.DataException):
        proton.Data().decode(raw)
    with pytest.raises(_exceptions.DataException) as info:
        Data().decode(raw)
    assert info.value.condition == "amqp:decode-error"


def test_deep_nesting_is_refused() -> None:
    raw = b"\x00\x53\x01" * 1000 + b"\x40"
    with pytest.raises(_exceptions.DataException):
        Data().decode(raw)


def _odd_map(d: Data) -> None:
    d.put_map()
    d.enter()
    d.put_symbol("x")
    d.exit()


def _short_described(d: Data) -> None:
    d.put_described()
    d.enter()
    d.put_symbol("x")
    d.exit()


def _bad_array(d: Data) -> None:
    d.put_array(False, Data.INT)
    d.enter()
    d.put_string("x")
    d.exit()


def _descriptorless_array(d: Data) -> None:
    d.put_array(True, Data.INT)


@pytest.mark.parametrize("build", [_odd_map, _short_described, _bad_array, _descriptorless_array])
def test_malformed_trees_refuse_to_encode(build: Callable[[Data], None]) -> None:
    # proton writes malformed bytes for these; we refuse
    data = Data()
    build(data)
    with pytest.raises(_exceptions.DataException):
        data.encode()


def test_wrong_python_types() -> None:
    data = Data()
    for method, value in [("put_string", b"x"), ("put_uuid", "x"), ("put_int", "1"), ("put_binary", 1)]:
        with pytest.raises(TypeError):
            getattr(data, method)(value)
    with pytest.raises(ValueError):
        data.put_array(False, 99)
    data.put_binary("text")  # proton takes a str as its UTF-8 bytes
    assert data.get_binary() == b"text"


def test_composites_and_performative_bytes() -> None:
    # composite classes go in as the described values they encode to; decoding does not map them back
    error = Error(condition=T.symbol("amqp:not-found"), description="gone")
    data = Data()
    data.put_object(error)
    data.rewind()
    data.next()
    expected = T.Described(T.ulong(0x1D), [T.symbol("amqp:not-found"), "gone"])
    S.assert_typed_equal(data.get_object(), expected)
    theirs = proton.Data()
    theirs.put_object(to_proton(expected))
    assert data.encode() == bytes(theirs.encode())  # proton's bytes (test_proton_data_bytes.py)
    S.assert_typed_equal(proton_read_all(data.encode()), [expected])


def test_subclasses_map_as_their_base() -> None:
    import enum

    class Colour(enum.IntEnum):
        RED = 1

    data = Data()
    data.put_object(Colour.RED)
    data.put_object(_data.PropertyDict(a=1))
    data.put_object(_data.SymbolList(["x"]))
    data.rewind()
    assert [data.next(), data.next(), data.next()] == [Data.LONG, Data.MAP, Data.LIST]


# --- Url -----------------------------------------------------------------------------------------------------

URLS = [
    None,
    "",
    "host",
    "HOST.Example.COM",
    "host:1234",
    "host:amqps",
    "host:amqp",
    "amqp://host",
    "amqps://host",
    "amqps://host:5672/queue",
    "amqp://user@host",
    "amqp://user:pass@host:5673/q/sub",
    "user:pass@host",
    "us%40er:p%3Ass@host",
    "//host",
    "amqp://",
    "amqp://:5673",
    "[::1]",
    "[::1]:5673",
    "amqp://[fe80::1%25eth0]:99/x",
    "amqps://user@[::1]/path",
    "host/path",
    "/path",
    "http://x.y/a?b#c",
    "amqp://host/a;p?q=1#frag",
    "127.0.0.1:5672",
]


def _url_view(url: Any) -> tuple[Any, ...]:
    return (str(url), url.scheme, url.username, url.password, url.host, url.port, url.path, str(url.port))


@pytest.mark.parametrize("defaults", [True, False])
@pytest.mark.parametrize("text", URLS)
def test_url_matches_proton(text: str | None, defaults: bool) -> None:
    ours, theirs = _url.Url(text, defaults=defaults), proton.Url(text, defaults=defaults)
    assert _url_view(ours) == _url_view(theirs)
    if not ours.password:
        assert repr(ours) == repr(theirs)
    else:
        assert "***" in repr(ours) and ours.password not in repr(ours)
    assert ours == theirs and ours == str(theirs)
    # copying, then filling in defaults
    assert _url_view(_url.Url(ours).defaults()) == _url_view(proton.Url(theirs).defaults())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scheme": "amqps"},
        {"host": "::1"},
        {"host": "[::2]", "port": 99},
        {"port": "amqps"},
        {"path": "queue"},
        {"path": "/queue"},
        {"username": "u", "password": "p w"},
    ],
)
def test_url_overrides_match_proton(kwargs: dict[str, Any]) -> None:
    for defaults in (True, False):
        ours = _url.Url("amqp://host:1/x", defaults=defaults, **kwargs)
        theirs = proton.Url("amqp://host:1/x", defaults=defaults, **kwargs)
        assert _url_view(ours) == _url_view(theirs)


def test_url_setters_and_errors() -> None:
    ours, theirs = _url.Url(defaults=False), proton.Url(defaults=False)
    for url in (ours, theirs):
        url.host = "fe80::1"
        url.path = "p"
        url.port = 7
    assert _url_view(ours) == _url_view(theirs)
    with pytest.raises(AttributeError):
        _url.Url("host", user="x")
    with pytest.raises(ValueError):
        _ = _url.Url("host:nosuchservice").port
    with pytest.raises(ValueError):
        _ = proton.Url("host:nosuchservice").port
    with pytest.raises(ValueError):
        _url.Url("amqp://", scheme="nosuchscheme")  # defaults() finds no port for it
    with pytest.raises(ValueError):
        proton.Url("amqp://", scheme="nosuchscheme")
    port = _url.Url.Port("amqps")
    assert port == 5671 and port == "amqps" and str(port) == "amqps" and port != 5672
    assert {port: 1}[5671] == 1
    assert _url.Url.AMQP == proton.Url.AMQP and _url.Url.AMQPS == proton.Url.AMQPS


# --- Condition -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("amqp:not-found",),
        ("amqp:not-found", "no such queue"),
        ("amqp:not-found", None, {"a": 1}),
        ("amqp:x", "d", {T.symbol("k"): [1, 2]}),
        ("", ""),
    ],
)
def test_condition_matches_proton(args: tuple[Any, ...]) -> None:
    ours, theirs = _condition.Condition(*args), proton.Condition(*args)
    assert repr(ours) == repr(theirs).replace("proton", "amqp_async")
    assert (ours.name, ours.description, ours.info) == (theirs.name, theirs.description, theirs.info)
    assert ours == _condition.Condition(*args)
    assert ours != _condition.Condition("other", *args[1:])
    assert ours != args[0]  # never equal to a non-Condition, as in proton
    assert (ours == theirs) is False


def test_condition_error_conversion() -> None:
    error = Error(condition=T.symbol("amqp:not-found"), description="gone", info={T.symbol("a"): 1})
    condition = _condition.Condition.from_error(error)
    assert condition == _condition.Condition("amqp:not-found", "gone", {T.symbol("a"): 1})
    assert condition.to_error() == error
    with pytest.raises(TypeError):
        hash(condition)


# --- exceptions ----------------------------------------------------------------------------------------------

EXCEPTION_NAMES = [
    "ProtonException",
    "DataException",
    "MessageException",
    "Timeout",
    "Interrupt",
    "ConnectionException",
    "SessionException",
    "LinkException",
    "SSLException",
    "SSLUnavailable",
    "TransportException",
]


@pytest.mark.parametrize("name", EXCEPTION_NAMES)
def test_exception_hierarchy_matches_proton(name: str) -> None:
    ours = getattr(_exceptions, name)
    for other in EXCEPTION_NAMES:
        assert issubclass(ours, getattr(_exceptions, other)) == issubclass(
            getattr(proton, name), getattr(proton, other)
        ), other
    assert issubclass(ours, amqp_async.AMQPError)
    error = ours("boom")
    assert str(error) == str(getattr(proton, name)("boom")) == "boom"
    assert repr(error) == f"{name}('boom')"
    assert error.description == "boom"
    assert not isinstance(error, (OSError, TimeoutError))


def test_endpoint_exceptions_are_the_awaitable_api_errors() -> None:
    # amqp_async.ConnectionError is also the builtin ConnectionError (an OSError); proton's are not OSErrors.
    for name in ("ConnectionException", "TransportException", "SSLUnavailable"):
        assert issubclass(getattr(_exceptions, name), amqp_async.AMQPError)
        assert not issubclass(getattr(_exceptions, name), amqp_async.ConnectionError)
    assert issubclass(_exceptions.SessionException, amqp_async.SessionError)
    assert issubclass(_exceptions.LinkException, amqp_async.LinkError)
    error = _exceptions.LinkException("gone", condition="amqp:not-found")
    assert error.condition == "amqp:not-found" and str(error) == "gone"


# --- PropertyDict, AnnotationDict, SymbolList ----------------------------------------------------------------


def _same_dict(ours: dict[Any, Any], theirs: dict[Any, Any]) -> None:
    assert [(type(k).__name__, k, v) for k, v in ours.items()] == [(type(k).__name__, k, v) for k, v in theirs.items()]


@pytest.mark.parametrize("cls_name", ["PropertyDict", "AnnotationDict"])
def test_restricted_dicts_match_proton(cls_name: str) -> None:
    ours_cls, theirs_cls = getattr(_data, cls_name), getattr(proton, cls_name)
    inits: list[Callable[[Any, Any], tuple[Any, Any]]] = [
        lambda c, m: (c(one=1, two=2), None),
        lambda c, m: (c({"one": 1, m.symbol("two"): 2}), None),
        lambda c, m: (c(zip(["one", m.symbol("two")], [1, 2], strict=True)), None),
        lambda c, m: (c([(m.symbol("one"), 1), ("two", 2)]), None),
        lambda c, m: (c({"a": 1}, three=3), None),
    ]
    for init in inits:
        ours, _ = init(ours_cls, OURS)
        theirs, _ = init(theirs_cls, THEIRS)
        _same_dict(ours, theirs)
        assert repr(ours) == repr(theirs)
        ours["new"] = 1
        theirs["new"] = 1
        _same_dict(ours, theirs)
        assert all(type(k) is T.symbol for k in ours)
    # bad keys: KeyError, unless raise_on_error=False keeps them
    with pytest.raises(KeyError):
        theirs_cls({"one": 1, 2: "two"})
    with pytest.raises(KeyError):
        ours_cls({"one": 1, 2: "two"})
    _same_dict(ours_cls({"one": 1, 2: "two"}, raise_on_error=False), theirs_cls({"one": 1, 2: "two"}, False))
    ours = ours_cls()
    with pytest.raises(KeyError):
        ours[3.5] = 1


def test_annotation_dict_takes_ulong_keys() -> None:
    ours = _data.AnnotationDict({T.ulong(3): "three", "x": 1})
    theirs = proton.AnnotationDict({proton.ulong(3): "three", "x": 1})
    _same_dict(ours, theirs)
    with pytest.raises(KeyError):
        _data.PropertyDict({T.ulong(3): 1})
    with pytest.raises(KeyError):
        _data.AnnotationDict({3: 1})  # a plain int is not a ulong, as in proton


def test_symbol_list_matches_proton() -> None:
    def ops(m: Any, cls: Any) -> list[Any]:
        a = cls(["one", m.symbol("two"), "three"])
        b = cls([m.symbol("one"), "two", m.symbol("three")])
        c = cls(a)
        single = cls("x")
        a.append("four")
        a.insert(0, "zero")
        a.extend(["five"])
        a[1] = "uno"
        added = a + ["six"]  # noqa: RUF005 - SymbolList.__add__ is under test
        a += ["seven"]
        return [
            a == b,
            b == c,
            list(a),
            list(single),
            list(added),
            type(added).__name__,
            repr(c),
            c == ["one", "two", "three"],
        ]

    ours, theirs = ops(OURS, _data.SymbolList), ops(THEIRS, proton.SymbolList)
    assert [str(x) for x in ours] == [str(x) for x in theirs]
    assert all(type(x) is T.symbol for x in ours[2])
    for cls in (_data.SymbolList, proton.SymbolList):
        with pytest.raises(TypeError):
            cls(["one", 3])
        assert list(cls(["one", 3], raise_on_error=False))[1] == 3
    array = _data.SymbolList(["a", "b"]).to_array()
    assert array == T.Array(T.UNDESCRIBED, T.TypeCode.SYMBOL, T.symbol("a"), T.symbol("b"))
