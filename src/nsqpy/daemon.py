"""What the daemons' programs share: the event loop they run on and the wait for a signal."""

from __future__ import annotations

import asyncio
import logging
import resource
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


def raise_open_files_limit(ceiling: int = 1 << 20) -> tuple[int, int]:
    """Raise the soft limit of open files to the hard limit (at most ``ceiling``), as a
    server that holds a descriptor per client and per open log file should; returns
    (soft limit before, soft limit now). Logged when it changes or cannot."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard if hard != resource.RLIM_INFINITY else ceiling, ceiling)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (OSError, ValueError) as exc:
        logging.getLogger("nsqpy").warning(
            "cannot raise the open files limit from %d to %d: %s", soft, want, exc
        )
        return soft, soft
    logging.getLogger("nsqpy").info("open files limit raised from %d to %d", soft, want)
    return soft, want
