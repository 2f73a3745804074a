"""What ``connect``, ``open_sender``, ``open_receiver`` and ``open_session`` return: a coroutine that is also an
async context manager."""

from __future__ import annotations

import inspect
from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import Any, Protocol, TypeVar

__all__ = ["Opening"]


class _Closable(Protocol):
    async def close(self) -> None: ...


_T = TypeVar("_T", bound=_Closable)


class Opening(Coroutine[Any, None, _T]):
    """An endpoint being opened (a connection, a session or a link): ``await`` it for the endpoint, or enter it
    with ``async with`` to have the endpoint closed at the end of the block, however the block ends::

        conn = await amqp_async.connect(url)  # an Opening[Connection]: closed by you
        sender = await conn.open_sender("orders")  # closed by you (or with its connection)
        async with conn.open_sender("orders") as sender:  # closed when the block ends
            ...

    :func:`~amqp_async.connect` returns an ``Opening[Connection]``, ``open_sender()`` an ``Opening[Sender[...]]``,
    ``open_receiver()`` an ``Opening[Receiver]``, ``open_session()`` an ``Opening[Session]``: the name to annotate
    a variable that holds one with.

    It is a coroutine (a :class:`collections.abc.Coroutine`), so it goes wherever one does:
    ``asyncio.create_task(conn.open_sender("q"))``, ``anyio.from_thread.run(conn.open_receiver, "q")``,
    :meth:`Connection.run_threadsafe`. Like any coroutine it runs once, so it opens one endpoint: awaiting or
    entering it a second time (the same ``connect(url)`` in two ``async with`` statements...) raises RuntimeError
    saying so, rather than opening a second one that nothing would close. The arguments were checked when it was
    made (a wrong keyword or value raised there).
    """

    __slots__ = ("_call", "_coroutine", "_endpoint")

    def __init__(self, coroutine: Coroutine[Any, Any, _T], *, call: str = "the call") -> None:
        """Wrap ``coroutine``, which opens the endpoint; ``call`` names what made it (``"connect()"``...), for
        the error that a second use raises."""
        self._coroutine = coroutine
        self._call = call
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
        self._refuse_reuse()
        return self._coroutine.__await__()

    def _refuse_reuse(self) -> None:
        """Raise RuntimeError if the coroutine already started: Python's own "cannot reuse already awaited
        coroutine" names neither what was opened nor what to do instead."""
        coroutine = self._coroutine
        if inspect.iscoroutine(coroutine) and inspect.getcoroutinestate(coroutine) != inspect.CORO_CREATED:
            raise RuntimeError(
                f"what {self._call} returned was already awaited or entered, and it opens one endpoint, once: "
                f"call {self._call} again for another"
            )

    # --- the context manager -----------------------------------------------------------------------------

    async def __aenter__(self) -> _T:
        self._refuse_reuse()
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
