"""What ``open_sender``, ``open_receiver`` and ``open_session`` return: awaitable, and an async context manager."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Opening"]


class _Closable(Protocol):
    async def close(self) -> None: ...


_T = TypeVar("_T", bound=_Closable)


class Opening(Generic[_T]):
    """An endpoint being opened (a link or a session): ``await`` it for the endpoint, or enter it with
    ``async with`` to have the endpoint closed at the end of the block, as :func:`~amqp_async.connect` does for a
    connection::

        sender = await conn.open_sender("orders")  # closed by you (or with its connection)
        async with conn.open_sender("orders") as sender:  # closed when the block ends, however it ends
            ...

    Nothing happens until it is awaited or entered, and it opens its endpoint once: awaiting or entering it a
    second time raises RuntimeError. The arguments were checked when it was made (a wrong keyword or value raised
    there).
    """

    __slots__ = ("_endpoint", "_open", "_what")

    def __init__(self, open: Callable[[], Awaitable[_T]], what: str) -> None:  # noqa: A002 - the verb
        self._open: Callable[[], Awaitable[_T]] | None = open
        self._what = what
        self._endpoint: _T | None = None

    def _start(self) -> Awaitable[_T]:
        open_ = self._open
        if open_ is None:
            raise RuntimeError(f"{self._what} was already awaited or entered: it opens one endpoint, once")
        self._open = None
        return open_()

    def __await__(self) -> Generator[Any, None, _T]:
        return self._start().__await__()

    async def __aenter__(self) -> _T:
        self._endpoint = await self._start()
        return self._endpoint

    async def __aexit__(self, *exc_info: object) -> None:
        endpoint = self._endpoint
        if endpoint is not None:
            self._endpoint = None
            await endpoint.close()

    def __repr__(self) -> str:
        return f"<amqp_async.Opening {self._what}>"
