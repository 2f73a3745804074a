"""When proton's endpoints come and go, for connections a program drives: ``*_INIT`` and ``*_FINAL`` events.

proton counts the references to each endpoint: the application's own (until it calls ``free()``), a parent's for
each child (a session holds its connection, a link its session), and the transport's while it maps the endpoint to a
channel or handle (ours from the begin or attach we write until the end or detach we write, the peer's from its begin
or attach until its end or detach) or is bound to the connection. An endpoint's ``*_FINAL`` event is queued when the
last reference goes: ``free()`` on a link nobody else holds reports it at once; one the transport still maps, once
the frames that unmap it pass, or when the transport is unbound.

``connection.collect(collector)`` reports ``*_INIT`` for every endpoint the connection already has, in the order
they were made, as proton does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._events import Event

if TYPE_CHECKING:
    from ._endpoints import Connection, Link, Session
    from ._engine import EngineIO

__all__ = [
    "collect_init",
    "decref",
    "free_connection",
    "free_link",
    "free_session",
    "incref",
    "map_local",
    "map_remote",
    "unbound",
    "unmap_local",
    "unmap_remote",
]

_FINAL = {"connection": Event.CONNECTION_FINAL, "session": Event.SESSION_FINAL, "link": Event.LINK_FINAL}
_INIT = {"connection": Event.CONNECTION_INIT, "session": Event.SESSION_INIT, "link": Event.LINK_INIT}


def _kind(endpoint: Any) -> str:
    if getattr(endpoint, "_is_connection", False):
        return "connection"
    if getattr(endpoint, "_is_session", False):
        return "session"
    return "link"


def _connection_of(endpoint: Any) -> Connection:
    return endpoint if getattr(endpoint, "_is_connection", False) else endpoint.connection  # type: ignore[no-any-return]


def incref(endpoint: Any) -> None:
    endpoint._refs += 1


def decref(endpoint: Any) -> None:
    """Drop one reference; the last one gone reports the endpoint's FINAL event."""
    endpoint._refs -= 1
    if endpoint._refs == 0:
        kind = _kind(endpoint)
        connection = _connection_of(endpoint)
        if kind == "session":
            connection._sessions_ever.pop(endpoint, None)
        elif kind == "link":
            endpoint.session._links_ever.pop(endpoint, None)
        collector = connection._collector
        if collector is not None:
            collector.put(endpoint, _FINAL[kind])


def collect_init(connection: Connection) -> None:
    """``CONNECTION_INIT``, ``SESSION_INIT``, ``LINK_INIT`` for the endpoints made so far, in order."""
    collector = connection._collector
    for endpoint in connection._endpoint_order:
        collector.put(endpoint, _INIT[_kind(endpoint)])


# --- the transport's references ---------------------------------------------------------------------------------


def map_local(endpoint: Session | Link) -> None:
    """Our begin or attach went out: the transport holds the endpoint until our end or detach."""
    if not endpoint._local_mapped:
        endpoint._local_mapped = True
        incref(endpoint)


def map_remote(endpoint: Session | Link) -> None:
    """The peer's begin or attach came: the transport holds the endpoint until its end or detach."""
    if not endpoint._remote_mapped:
        endpoint._remote_mapped = True
        incref(endpoint)


def unmap_local(endpoint: Session | Link) -> None:
    """Our end or detach went out (a session's end unmaps its links' handles too)."""
    if getattr(endpoint, "_is_session", False):
        for link in list(endpoint._links_ever):  # type: ignore[union-attr]
            unmap_local(link)
    if endpoint._local_mapped:
        endpoint._local_mapped = False
        decref(endpoint)


def unmap_remote(endpoint: Session | Link) -> None:
    """The peer's end or detach came (a session's end unmaps the peer's handles of its links too)."""
    if getattr(endpoint, "_is_session", False):
        for link in list(endpoint._links_ever):  # type: ignore[union-attr]
            unmap_remote(link)
    if endpoint._remote_mapped:
        endpoint._remote_mapped = False
        decref(endpoint)


def unbound(connection: Connection, io: EngineIO) -> None:
    """The transport lets the connection go (after ``CONNECTION_UNBOUND``), as proton's unbind does: the handles of
    the live sessions' links go; every endpoint has work again for a transport bound later (a TRANSPORT event);
    then each mapped channel goes (ours, then the peer's, in channel order), with the handles of its links."""
    for session in connection._sessions:
        _unbind_links(session)
    if not connection._freed:
        for endpoint in connection._endpoint_order:
            connection._modified_endpoints[endpoint] = None
        connection._modified()
    sessions = list(connection._sessions_ever)
    for session in sorted((s for s in sessions if s._local_mapped), key=_channel):
        _unbind_links(session)
        unmap_local(session)
    for session in sorted((s for s in sessions if s._remote_mapped), key=_remote_channel):
        _unbind_links(session)
        unmap_remote(session)
    connection._unbind_engine()
    decref(connection)


def _unbind_links(session: Session) -> None:
    for link in list(session._links_ever):
        if link._local_mapped:
            unmap_local(link)
        if link._remote_mapped:
            unmap_remote(link)


def _channel(session: Session) -> int:
    impl = session._impl
    return 0 if impl is None or impl.channel is None else int(impl.channel)


def _remote_channel(session: Session) -> int:
    impl = session._impl
    return 0 if impl is None or impl.remote_channel is None else int(impl.remote_channel)


# --- free --------------------------------------------------------------------------------------------------------


def free_link(link: Link) -> None:
    """The application is done with the link: its deliveries are settled, it leaves its session."""
    if link._freed:
        return
    session = link.session
    if link in session._links:
        session._links.remove(link)
        decref(session)
    order = session.connection._endpoint_order
    if link in order:
        order.remove(link)
    for delivery in list(link._deliveries):
        delivery.settle()
    link._freed = True
    decref(link)


def free_session(session: Session) -> None:
    """The application is done with the session: its links are freed, it leaves its connection."""
    if session._freed:
        return
    for link in list(session._links):
        free_link(link)
    connection = session.connection
    if session in connection._sessions:
        connection._sessions.remove(session)
        decref(connection)
    if session in connection._endpoint_order:
        connection._endpoint_order.remove(session)
    session._freed = True
    decref(session)


def free_connection(connection: Connection) -> None:
    """The application is done with the connection: the endpoints it did not free are freed (in the order they
    were made), and the connection goes once its transport lets it go."""
    if connection._freed:
        return
    order = connection._endpoint_order
    if order and order[0] is connection:
        order.pop(0)
    while order:
        endpoint = order[0]
        if getattr(endpoint, "_is_session", False):
            free_session(endpoint)
        else:
            free_link(endpoint)
        if order and order[0] is endpoint:
            order.pop(0)
    connection._freed = True
    decref(connection)
