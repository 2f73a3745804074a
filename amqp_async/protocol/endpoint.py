"""Endpoint states shared by connections, sessions and links.

Each endpoint has a local and a remote half, as in proton: UNINIT until that side opened it (sent open, begin or
attach), ACTIVE until it closed it (close, end, or detach), then CLOSED. The rules of which frame may arrive in
which state are enforced where the frames are handled, each quoting its section.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..codec.performatives import Error

__all__ = ["Endpoint", "EndpointState"]


class EndpointState(enum.Enum):
    """The state of one side of an endpoint."""

    UNINIT = "uninit"
    ACTIVE = "active"
    CLOSED = "closed"


class Endpoint:
    """The state both halves of an endpoint share.

    Attributes:
        local_state: our side: UNINIT, ACTIVE after we sent open/begin/attach, CLOSED after close/end/detach.
        remote_state: the peer's side, likewise from the frames it sent.
        local_error: the error we closed with, if any.
        remote_error: the error the peer closed with, if any.
    """

    __slots__ = ("local_error", "local_state", "remote_error", "remote_state")

    def __init__(self) -> None:
        self.local_state = EndpointState.UNINIT
        self.remote_state = EndpointState.UNINIT
        self.local_error: Error | None = None
        self.remote_error: Error | None = None

    @property
    def is_open(self) -> bool:
        """True while both sides are active."""
        return self.local_state is EndpointState.ACTIVE and self.remote_state is EndpointState.ACTIVE
