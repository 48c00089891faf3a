"""Waiting for a condition with a deadline: ``wait_for`` (blocking) and ``eventually`` (async).

Tests never sleep a fixed time to wait for something: they poll a condition until it
holds, or fail once the deadline passes with an ``AssertionError`` that names the condition
(``what=``, else the predicate's name or the source of its lambda). Both return the
predicate's first truthy value. Imports only the standard library.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT = 15.0  # seconds: generous, since only a failing test ever waits this long


def wait_for(
    predicate: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    what: str = "",
    interval: float = 0.02,
) -> T:
    """Call ``predicate()`` every ``interval`` seconds until it returns a truthy value, and
    return that; ``AssertionError`` naming the condition after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_not_met(predicate, timeout, what))
        time.sleep(interval)


@overload
async def eventually(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = ...,
    *,
    what: str = ...,
    interval: float = ...,
) -> T: ...
@overload
async def eventually(
    predicate: Callable[[], T],
    timeout: float = ...,
    *,
    what: str = ...,
    interval: float = ...,
) -> T: ...
async def eventually(
    predicate: Callable[[], object],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    what: str = "",
    interval: float = 0.01,
) -> object:
    """``wait_for`` on the running event loop: ``predicate`` may be a plain function or a
    coroutine function (each result awaited), and the loop runs between tries."""
    import asyncio  # here: the blocking ``wait_for`` does without it

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(_not_met(predicate, timeout, what))
        await asyncio.sleep(interval)


def _not_met(predicate: Callable[[], object], timeout: float, what: str) -> str:
    return f"not met within {timeout}s: {what or describe(predicate)}"


def describe(predicate: Callable[[], object]) -> str:
    """A name for a condition: a function's qualified name, or a lambda's source line."""
    name = getattr(predicate, "__qualname__", None) or repr(predicate)
    if "<lambda>" not in name:
        return name
    try:
        source = inspect.getsource(predicate)
    except (OSError, TypeError):
        return name
    text = " ".join(source.split())
    return text if len(text) <= 300 else text[:297] + "..."
