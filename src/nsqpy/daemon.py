"""What the daemons' programs share: the event loop they run on and the wait for a signal."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, Protocol


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def run(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine to completion on uvloop when it is installed."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(coro)


async def serve_until_signal(service: Service) -> None:
    """Start ``service``, wait for SIGINT or SIGTERM, then stop it cleanly."""
    await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await service.stop()
