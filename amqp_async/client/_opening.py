"""What ``open_sender``, ``open_receiver`` and ``open_session`` return: a coroutine that is also an async context
manager."""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import Any, Protocol, TypeVar

__all__ = ["Opening"]


class _Closable(Protocol):
    async def close(self) -> None: ...


_T = TypeVar("_T", bound=_Closable)


class Opening(Coroutine[Any, None, _T]):
    """An endpoint being opened (a link or a session): ``await`` it for the endpoint, or enter it with
    ``async with`` to have the endpoint closed at the end of the block, however the block ends, as
    :func:`~amqp_async.connect` does for a connection::

        sender = await conn.open_sender("orders")  # closed by you (or with its connection)
        async with conn.open_sender("orders") as sender:  # closed when the block ends
            ...

    It is a coroutine (a :class:`collections.abc.Coroutine`), so it goes wherever one does:
    ``asyncio.create_task(conn.open_sender("q"))``, ``anyio.from_thread.run(conn.open_receiver, "q")``,
    :meth:`Connection.run_threadsafe`. Like any coroutine it runs once: awaiting or entering it a second time raises
    RuntimeError. The arguments were checked when it was made (a wrong keyword or value raised there).
    """

    __slots__ = ("_coroutine", "_endpoint")

    def __init__(self, coroutine: Coroutine[Any, Any, _T]) -> None:
        self._coroutine = coroutine
        self._endpoint: _T | None = None

    # --- the coroutine: everything goes to the one that opens the endpoint -------------------------------

    def send(self, value: None, /) -> Any:
        # Typed None, as a coroutine is only ever sent None by its event loop: typed Any, it let a forgotten
        # ``await`` pass the type check (``conn.open_sender("q").send(message)`` matched this method).
        return self._coroutine.send(value)

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: TracebackType | None = None,
        /,
    ) -> Any:
        if val is None and tb is None:
            return self._coroutine.throw(typ)
        return self._coroutine.throw(typ, val, tb)  # type: ignore[arg-type]  # the legacy three-argument form

    def close(self) -> None:
        self._coroutine.close()

    def __await__(self) -> Generator[Any, None, _T]:
        return self._coroutine.__await__()

    # --- the context manager -----------------------------------------------------------------------------

    async def __aenter__(self) -> _T:
        self._endpoint = await self._coroutine
        return self._endpoint

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        endpoint = self._endpoint
        if endpoint is not None:
            self._endpoint = None
            await endpoint.close()

    def __repr__(self) -> str:
        return f"<amqp_async.Opening {getattr(self._coroutine, '__qualname__', self._coroutine)!s}>"
