"""The disposition parser of the input path (amqp_async/protocol/disposition_frames.py) against the generic decoder.

``parse_disposition`` reads the common layouts of a disposition (§2.7.6) by hand; whatever it returns must be what
the generic decoder returns for the same bytes, and whatever it cannot read it must leave to that decoder (None, or
an IndexError / struct.error for bytes cut short, which the connection treats as None). The layouts come from our
encoder, from python-qpid-proton's (``proton.Data``, an independent one), from hand-made bytes in each encoding of
each field, and from mutations of all of these. That the parser is taken at all for the usual outcomes is checked
too, and so is the connection's use of it: a disposition read either way leaves the engine in the same state.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from amqp_async.codec import encode_value
from amqp_async.codec._decoder import decode_value
from amqp_async.codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from amqp_async.codec.performatives import Disposition, Error
from amqp_async.errors import DecodeError
from amqp_async.protocol.disposition_frames import parse_disposition
from amqp_async.types import symbol

try:
    from frames import uint
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import uint

_DESCRIPTOR = b"\x00\x53\x15"


def generic(body: bytes) -> Disposition | None:
    """What the generic decoder makes of ``body`` (None: it refuses it, or it is not a whole disposition)."""
    try:
        value, end = decode_value(body, 0)
    except DecodeError:
        return None
    if end != len(body) or not isinstance(value, Disposition):
        return None
    return value


def parsed(body: bytes, following: bytes = b"") -> Disposition | None:
    """What the parser makes of ``body`` (None also for bytes cut short, as the connection treats them), with the
    bytes of a ``following`` frame after it in the buffer (the parser must not read into them)."""
    if body[:3] != _DESCRIPTOR:
        return None
    try:
        return parse_disposition(body + following, 3, len(body))
    except (IndexError, struct.error):
        return None


def same(left: Disposition, right: Disposition) -> bool:
    fields = ("role", "first", "last", "settled", "state", "batchable")
    return all(getattr(left, name) == getattr(right, name) for name in fields) and type(left.state) is type(right.state)


def check(body: bytes, following: bytes = b"") -> Disposition | None:
    """The parser's answer for ``body``, checked against the generic decoder's."""
    fast = parsed(body, following)
    if fast is not None:
        slow = generic(body)
        assert slow is not None, f"the parser took what the decoder refuses: {body.hex()}"
        assert same(fast, slow), f"{fast!r} != {slow!r} for {body.hex()}"
    return fast


# --- hand-made layouts ---------------------------------------------------------------------------------------------


BOOLEANS = {True: b"\x41", False: b"\x42", None: b"\x40"}
STATES = {
    "null": (b"\x40", None),
    "accepted": (b"\x00\x53\x24\x45", Accepted()),
    "accepted-list8": (b"\x00\x53\x24\xc0\x01\x00", Accepted()),
    "released": (b"\x00\x53\x26\x45", Released()),
    "released-list8": (b"\x00\x53\x26\xc0\x01\x00", Released()),
}


def disposition_bytes(fields: list[bytes]) -> bytes:
    listed = b"".join(fields)
    return _DESCRIPTOR + bytes((0xC0, len(listed) + 1, len(fields))) + listed


@pytest.mark.parametrize("state", sorted(STATES))
@pytest.mark.parametrize("first_encoding", ["uint0", "smalluint", "uint"])
@pytest.mark.parametrize("count", [2, 3, 4, 5, 6])
def test_each_layout_is_read_and_equals_the_decoders(state: str, first_encoding: str, count: int) -> None:
    first = 0 if first_encoding == "uint0" else 200 if first_encoding == "smalluint" else 70_000
    state_bytes, state_value = STATES[state]
    fields = [b"\x41", uint(first, first_encoding), uint(first + 3, "uint"), b"\x41", state_bytes, b"\x42"][:count]
    result = check(disposition_bytes(fields))
    assert result is not None, "a common layout must take the fast path"
    assert result.first == first
    assert result.last == (first + 3 if count > 2 else None)
    assert result.settled is (count > 3)
    assert result.state == (state_value if count > 4 else None)
    assert result.batchable is False


@pytest.mark.parametrize(
    "state",
    [
        Rejected(error=Error(condition=symbol("amqp:internal-error"), description="no")),
        Modified(delivery_failed=True),
        Received(section_number=1, section_offset=2),
    ],
)
def test_outcomes_with_fields_go_to_the_decoder(state: object) -> None:
    body = bytearray()
    encode_value(body, Disposition(role=True, first=1, last=2, settled=True, state=state))
    assert parsed(bytes(body)) is None
    assert generic(bytes(body)) is not None


@pytest.mark.parametrize(
    "fields",
    [
        [b"\x40", b"\x43"],  # a null role (mandatory): the decoder says so
        [b"\x41", b"\x40"],  # a null first (mandatory)
        [b"\x41", b"\xa1\x01x"],  # first is a string
        [b"\x41", b"\x43", b"\x80" + bytes(8)],  # last is a ulong
        [b"\x41", b"\x43", b"\x40", b"\x52\x01"],  # settled is a uint
        [b"\x41", b"\x43", b"\x40", b"\x41", b"\x00\x53\x24\xc0\x02\x01\x40"],  # accepted with a field
        [b"\x41", b"\x43", b"\x40", b"\x41", b"\x00\xa3\x12amqp:accepted:list\x45"],  # a symbolic descriptor
        [b"\x41", b"\x43", b"\x40", b"\x41", b"\x00\x53\x23\x45"],  # a descriptor of no outcome (0x23 is received-1)
    ],
)
def test_unusual_or_wrong_fields_are_left_to_the_decoder(fields: list[bytes]) -> None:
    assert parsed(disposition_bytes(fields)) is None


def test_a_list_that_does_not_fill_the_body_is_left_to_the_decoder() -> None:
    body = disposition_bytes([b"\x41", b"\x43"])
    assert parsed(body + b"\x40") is None
    listed = b"\x41\x43"
    assert check(_DESCRIPTOR + b"\xd0" + struct.pack(">II", len(listed) + 4, 2) + listed) is not None
    assert parsed(_DESCRIPTOR + b"\xd0" + struct.pack(">II", len(listed) + 5, 2) + listed + b"\x40") is None


# --- any disposition, from our encoder and from proton's -------------------------------------------------------------

uint32 = st.integers(min_value=0, max_value=2**32 - 1)
states = st.sampled_from([None, Accepted(), Released(), Modified(), Rejected()])


@st.composite
def dispositions(draw: st.DrawFn) -> Disposition:
    return Disposition(
        role=draw(st.booleans()),
        first=draw(uint32),
        last=draw(st.none() | uint32),
        settled=draw(st.booleans()),
        state=draw(states),
        batchable=draw(st.booleans()),
    )


@given(dispositions())
def test_our_encoding_of_any_disposition(disposition: Disposition) -> None:
    body = bytearray()
    encode_value(body, disposition)
    result = check(bytes(body))
    if disposition.state is None or disposition.state.__class__ in (Accepted, Released):
        assert result is not None, "what our engine writes for the usual outcomes takes the fast path"
        assert same(result, disposition)


proton = pytest.importorskip("proton", reason="python-qpid-proton (a test dependency) is the independent encoder")


def proton_encoding(disposition: Disposition) -> bytes:
    """The disposition's performative as python-qpid-proton's codec writes it (its own choice of encodings)."""
    data = proton.Data()
    data.put_described()
    data.enter()
    data.put_ulong(0x15)
    data.put_list()
    data.enter()
    data.put_bool(disposition.role)
    data.put_uint(disposition.first)
    if disposition.last is None:
        data.put_null()
    else:
        data.put_uint(disposition.last)
    data.put_bool(disposition.settled)
    state = disposition.state
    if state is None:
        data.put_null()
    else:
        data.put_described()
        data.enter()
        data.put_ulong(state.descriptor_code)
        data.put_list()
        data.enter()
        data.exit()
        data.exit()
    data.put_bool(disposition.batchable)
    data.exit()
    data.exit()
    return bytes(data.encode())


@given(dispositions())
@example(Disposition(role=True, first=0, last=None, settled=True, state=Accepted(), batchable=False))
def test_protons_encoding_of_any_disposition(disposition: Disposition) -> None:
    if disposition.state is not None and disposition.state.__class__ not in (Accepted, Released):
        disposition.state = Released()  # proton's Data writes these with their fields: the decoder's case
    result = check(proton_encoding(disposition))
    assert result is not None, "what proton writes for the usual outcomes takes the fast path"
    assert same(result, disposition)


# --- hostile bytes ---------------------------------------------------------------------------------------------------


@given(
    dispositions(),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    st.binary(max_size=12),
    st.none() | st.integers(min_value=0),
)
@example(  # a count above the fields written: the parser would read on into the next frame's bytes
    Disposition(role=True, first=1, settled=True), [(2, 6)], b"\x41\x40\x42\x41\x41", None
)
def test_mutated_bytes_never_take_what_the_decoder_refuses(
    disposition: Disposition, changes: list[tuple[int, int]], following: bytes, cut: int | None
) -> None:
    body = bytearray()
    encode_value(body, disposition)
    for where, value in changes:
        body[3 + where % max(1, len(body) - 3)] = value
    end = len(body) if cut is None else 3 + cut % (len(body) - 2)  # the frame cut short anywhere after the descriptor
    # never raises anything but what parsed() absorbs; never disagrees with the decoder
    check(bytes(body[:end]), following)
