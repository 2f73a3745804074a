"""Browsing (``peek``, ``receive --browse``): a check that the peer browses indeed, before a message comes.

A browsing receiver asks for a source with distribution-mode copy (AMQP 1.0 §3.5.7: "once successfully transferred,
the state of the message remains unchanged"). A peer that does not browse either answers with another mode, or with
none (§3.5.3: the source of the attach that answers is the one in force), or, as RabbitMQ 3.x's AMQP 1.0 plugin
does, answers with copy and moves the messages anyway: ``peek`` then took and accepted every message it showed
(checked against RabbitMQ 3.10.8: the queue was empty after a peek). The receiver is opened without credit, so
nothing has come when the check refuses (exit 7).
"""

from __future__ import annotations

from ..client import Connection, Receiver, StreamReceiver
from ._exit import CommandFailed, ExitCode

__all__ = ["check_browsing"]


def _major(version: str | None) -> int | None:
    head = (version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _why_not_browsing(connection: Connection, receiver: Receiver | StreamReceiver) -> str | None:
    """Why the peer will not leave the messages in place, or None when its answer says it will."""
    peer = connection.peer_capabilities
    major = _major(peer.version)
    if peer.product == "RabbitMQ" and major is not None and major < 4:
        return f"RabbitMQ {peer.version} takes the messages even when its attach answers distribution-mode copy"
    # The engine's link: the client has no public attribute for the source the peer answered with.
    mode = getattr(receiver._engine_link.remote_source, "distribution_mode", None)
    if mode == "copy":
        return None
    answered = "no distribution-mode" if mode is None else f"distribution-mode {mode}"
    return f"its attach answered with {answered}, not copy (AMQP 1.0 §3.5.3, §3.5.7)"


def check_browsing(connection: Connection, receiver: Receiver | StreamReceiver, address: str) -> None:
    """Raise :class:`CommandFailed` (exit 7, link refused) when the peer would take the messages of ``address``
    rather than show them; ``receiver`` has had no credit yet."""
    why = _why_not_browsing(connection, receiver)
    if why is not None:
        raise CommandFailed(
            ExitCode.LINK, f"the peer does not browse {address!r}: {why}; no message was taken (receive takes them)"
        )
