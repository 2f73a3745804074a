"""An encoded message cut into its sections (§3.2), to compare messages section by section, byte for byte.

Independent of the broker's own section reader (amqp_async/broker/_sections.py): each section is read whole with the
codec's ``decode_value``, which returns where the value ends.
"""

from __future__ import annotations

from amqp_async.codec import decode_value

NAMES = {
    0x70: "header",
    0x71: "delivery-annotations",
    0x72: "message-annotations",
    0x73: "properties",
    0x74: "application-properties",
    0x75: "data",
    0x76: "amqp-sequence",
    0x77: "amqp-value",
    0x78: "footer",
}


def sections(payload: bytes) -> dict[str, bytes]:
    """Each section's name and bytes (descriptor included); repeated body sections are joined under one name."""
    found: dict[str, bytes] = {}
    position = 0
    while position < len(payload):
        assert payload[position : position + 2] == b"\x00\x53", f"not a section at {position}: {payload[position:]!r}"
        name = NAMES[payload[position + 2]]
        _, end = decode_value(payload, position)
        found[name] = found.get(name, b"") + payload[position:end]
        position = end
    return found


def without(payload: bytes, *names: str) -> dict[str, bytes]:
    """The sections of ``payload`` but ``names``."""
    return {name: data for name, data in sections(payload).items() if name not in names}
