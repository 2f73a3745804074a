"""Endpoint states shared by connections, sessions and links.

Each endpoint has a local and a remote half, as in proton: UNINIT until that side opened it (sent open, begin or
attach), ACTIVE until it closed it (close, end, or detach), then CLOSED. Our half may also be closed by the engine
rather than by a command: for a breach of the protocol, to answer the peer's close, end or detach, or with its
parent; answering the peer's open, begin or attach then does nothing (``engine_ended``). The rules of which frame
may arrive in which state are enforced where the frames are handled, each quoting its section.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..codec.performatives import Error

__all__ = ["ACTIVE", "CLOSED", "UNINIT", "Endpoint", "EndpointState"]


class EndpointState(enum.Enum):
    """The state of one side of an endpoint."""

    UNINIT = "uninit"
    ACTIVE = "active"
    CLOSED = "closed"


#: The states as module constants, for the code that tests them on every frame or message: on Python 3.11 a member
#: looked up on its Enum class (``EndpointState.ACTIVE``) costs about 120 ns, as attribute loads through a metaclass
#: are not specialised there (36 ns on 3.12); a module global about 10.
UNINIT = EndpointState.UNINIT
ACTIVE = EndpointState.ACTIVE
CLOSED = EndpointState.CLOSED


class Endpoint:
    """The state both halves of an endpoint share.

    Attributes:
        local_state: our side: UNINIT, ACTIVE after we sent open/begin/attach, CLOSED after close/end/detach.
        remote_state: the peer's side, likewise from the frames it sent.
        local_error: the error we closed with, if any.
        remote_error: the error the peer closed with, if any.
        engine_ended: our half was closed by the engine itself, not by a command of the caller's (see above).
    """

    __slots__ = ("engine_ended", "local_error", "local_state", "remote_error", "remote_state")

    def __init__(self) -> None:
        self.local_state = EndpointState.UNINIT
        self.remote_state = EndpointState.UNINIT
        self.local_error: Error | None = None
        self.remote_error: Error | None = None
        self.engine_ended = False

    @property
    def is_open(self) -> bool:
        """True while both sides are active."""
        return self.local_state is EndpointState.ACTIVE and self.remote_state is EndpointState.ACTIVE
