"""SASL frame bodies (spec §5.3.3) and the sasl-code values (§5.3.3.6).

These are the bodies of frames of type 0x01 (SASL), exchanged after the SASL protocol header and before the
AMQP one.
"""

from __future__ import annotations

from ..types import symbol
from .composite import Composite, F

__all__ = [
    "SASL_AUTH",
    "SASL_OK",
    "SASL_SYS",
    "SASL_SYS_PERM",
    "SASL_SYS_TEMP",
    "SaslChallenge",
    "SaslInit",
    "SaslMechanisms",
    "SaslOutcome",
    "SaslResponse",
]

# §5.3.3.6 sasl-code (ubyte).
#: Connection authentication succeeded.
SASL_OK = 0
#: Connection authentication failed due to an unspecified problem with the supplied credentials.
SASL_AUTH = 1
#: Connection authentication failed due to a system error.
SASL_SYS = 2
#: Connection authentication failed due to a system error that is unlikely to be corrected without intervention.
SASL_SYS_PERM = 3
#: Connection authentication failed due to a transient system error.
SASL_SYS_TEMP = 4


class SaslMechanisms(Composite, code=0x40, name="amqp:sasl-mechanisms:list"):
    """§5.3.3.1 sasl-mechanisms: the mechanisms the server supports, in decreasing order of preference."""

    sasl_server_mechanisms: tuple[symbol, ...] = F("symbol", mandatory=True, multiple=True)


class SaslInit(Composite, code=0x41, name="amqp:sasl-init:list"):
    """§5.3.3.2 sasl-init: the mechanism the client selected, with its initial response."""

    mechanism: symbol = F("symbol", mandatory=True)
    initial_response: bytes | None = F("binary")
    hostname: str | None = F("string")

    def __repr__(self) -> str:
        # The initial response may carry a password in the clear (PLAIN): keep it out of logs.
        shown = "None" if self.initial_response is None else "<redacted>"
        return f"SaslInit(mechanism={self.mechanism!r}, initial_response={shown}, hostname={self.hostname!r})"


class SaslChallenge(Composite, code=0x42, name="amqp:sasl-challenge:list"):
    """§5.3.3.3 sasl-challenge: security challenge data from the server."""

    challenge: bytes = F("binary", mandatory=True)


class SaslResponse(Composite, code=0x43, name="amqp:sasl-response:list"):
    """§5.3.3.4 sasl-response: security response data from the client."""

    response: bytes = F("binary", mandatory=True)

    def __repr__(self) -> str:
        return "SaslResponse(response=<redacted>)"


class SaslOutcome(Composite, code=0x44, name="amqp:sasl-outcome:list"):
    """§5.3.3.5 sasl-outcome: the result of the SASL exchange (``code`` is one of the ``SASL_*`` values)."""

    code: int = F("sasl-code", mandatory=True)
    additional_data: bytes | None = F("binary")
