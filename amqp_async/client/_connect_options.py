"""The keyword arguments of :func:`amqp_async.connect`, typed for type checkers (:class:`ConnectOptions`).

:func:`~amqp_async.client._config.resolve_options` checks them at run time (an unknown name is a TypeError naming
``connect()``); this TypedDict lets mypy and pyright check them where ``connect`` is called. The two lists are the
same (tests/test_client_conveniences.py holds them equal): an option added to one is added to the other.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

from ._backoff import Backoff

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["ConnectOptions"]


class ConnectOptions(TypedDict, total=False):
    """The options of :func:`amqp_async.connect` (every one optional), as ``**options: Unpack[ConnectOptions]``:
    see :func:`~amqp_async.client._config.resolve_options` and docs/client.md, "Connecting", for each."""

    urls: Sequence[str]
    user: str | None
    password: str | None
    sasl_enabled: bool
    allowed_mechs: str | Sequence[str] | None
    allow_insecure_mechs: bool
    heartbeat: float | None
    connect_timeout: float | None
    open_timeout: float | None
    drain_timeout: float | None
    reconnect: Backoff | bool | None
    max_frame_size: int | None
    virtual_host: str | None
    properties: Mapping[str, object] | None
    offered_capabilities: str | Sequence[str] | None
    desired_capabilities: str | Sequence[str] | None
    sni: str | None
    ssl_context: ssl.SSLContext | None
    container_id: str | None
    http_proxy: str | Literal[False] | None
    tracing: bool | TracerProvider | None
