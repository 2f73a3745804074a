"""The exceptions inside exception groups: a task group raises what its tasks raised wrapped in one."""

from __future__ import annotations

__all__ = ["leaves"]


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order; ``[error]`` when it is not a group."""
    # Duck-typed: BaseExceptionGroup is a builtin from Python 3.11 only (anyio brings a backport on 3.10).
    inner = getattr(error, "exceptions", None)
    if isinstance(inner, tuple) and type(error).__name__.endswith("ExceptionGroup"):
        return [leaf for child in inner for leaf in leaves(child)]
    return [error]
