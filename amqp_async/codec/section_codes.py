"""The descriptor codes of a message's sections (AMQP 1.0 §3.2: ``0x00000000:0x0000007X``), in one place."""

from __future__ import annotations

__all__ = [
    "AMQP_SEQUENCE",
    "AMQP_VALUE",
    "APPLICATION_PROPERTIES",
    "DATA",
    "DELIVERY_ANNOTATIONS",
    "FOOTER",
    "HEADER",
    "MESSAGE_ANNOTATIONS",
    "PROPERTIES",
]

HEADER = 0x70  # §3.2.1
DELIVERY_ANNOTATIONS = 0x71  # §3.2.2
MESSAGE_ANNOTATIONS = 0x72  # §3.2.3
PROPERTIES = 0x73  # §3.2.4
APPLICATION_PROPERTIES = 0x74  # §3.2.5
DATA = 0x75  # §3.2.6
AMQP_SEQUENCE = 0x76  # §3.2.7
AMQP_VALUE = 0x77  # §3.2.8
FOOTER = 0x78  # §3.2.9
