"""What the daemons' programs share: the program shell, the event loop they run on and the
wait for a signal.

``DaemonProgram`` is each daemon's program (``nsqd.app``, ``lookupd.app``, ``nsqadmin.app``),
a thin shell as NSQ's ``apps/*/main.go`` are: flags declared on its options dataclass (Go
style, ``--config`` TOML; ``nsqpy.flags``) -> the checks across options -> its service, run
on uvloop (when installed) until SIGINT or SIGTERM, then stopped cleanly with status 0. Bad
flags exit 2 with one line; a listener that cannot bind is one ``FATAL:`` log line and
status 1, never a traceback. Also here: ``cancel_and_wait`` for a service's background
task, and ``BackgroundTasks`` for the tasks a service starts without awaiting them. Imports only the standard library, ``nsqpy.flags`` and ``nsqpy.logs``; never a
daemon (each hands its service in).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from nsqpy import version_line
from nsqpy.errors import ConfigError
from nsqpy.flags import Option, declared, parse_flags
from nsqpy.logs import setup_daemon_logging


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


class DaemonOptions(Protocol):
    """What the shell reads of a daemon's options (the rest is the service's)."""

    log_level: str
    log_prefix: str


OptionsT = TypeVar("OptionsT", bound=DaemonOptions)


def _fatal_text(opts: object, exc: OSError) -> str:
    return str(exc)


@dataclass(frozen=True)
class DaemonProgram(Generic[OptionsT]):
    """A daemon's program: its name and one-line description, the options dataclass its
    flags are declared on, ``validate`` (the checks across options, after the declared
    ones), the ``service`` built from the options, and ``fatal``, the text of the ``FATAL:``
    line when it cannot listen."""

    name: str
    description: str
    options: type[OptionsT]
    validate: Callable[[OptionsT], None]
    service: Callable[[OptionsT], Service]
    fatal: Callable[[OptionsT, OSError], str] = _fatal_text

    @property
    def flags(self) -> tuple[Option, ...]:
        """Every flag, as declared on ``options``."""
        return declared(self.options)

    def parse_args(self, argv: Sequence[str]) -> OptionsT:
        """Flags (and ``--config``) into options; exits 2 with a message when one is bad."""
        return parse_flags(
            self.options,
            argv,
            prog=self.name,
            description=self.description,
            version=version_line(self.name),
            validate=self.validate,
        )

    async def serve(self, opts: OptionsT) -> None:
        """Run the service until SIGINT or SIGTERM, then stop it cleanly."""
        await serve_until_signal(self.service(opts))

    def main(self, argv: Sequence[str] | None = None) -> int:
        """The program: parse, set up logging (``nsqpy.logs``), serve; the exit status."""
        opts = self.parse_args(sys.argv[1:] if argv is None else argv)
        setup_daemon_logging(opts.log_level, opts.log_prefix)
        try:
            run(self.serve(opts))
        except OSError as exc:
            logging.getLogger("nsqpy").error("FATAL: %s", self.fatal(opts, exc))
            return 1
        except ConfigError as exc:  # (etcd unreachable or refusing us, a flag's file)
            print(f"{self.name}: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # a second Ctrl-C during shutdown
            return 0
        return 0


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel a background task and wait for it to end; its cancellation is not an error
    (anything else it raised is)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


class BackgroundTasks:
    """The tasks a service starts and does not await where it starts them (a publish
    forwarded to its leader, a stream upgrade waiting for acknowledgements, a lookupd peer
    stopping): each is held until it ends (the event loop keeps only weak references: a
    task nobody holds may be collected before it ends), a failure is logged once (else it
    goes unobserved), and ``close`` cancels those still running and waits for them (a
    service's stop)."""

    def __init__(self, log: logging.Logger, owner: str) -> None:
        self._log = log
        self._owner = owner  # names the service in a failure's log line
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task held here until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            name = getattr(task.get_coro(), "__qualname__", task.get_name())
            self._log.error("%s: %s failed: %r", self._owner, name, exc, exc_info=exc)

    async def close(self) -> None:
        """Cancel every task still running and wait until each has ended (what one raised
        is logged, not raised here)."""
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


# The collector's first-generation threshold in a running daemon (Python's default: 700).
# nsqd allocates a tracked object or two per message it delivers (the in-flight entry, the
# frames' parts), so at the default it ran a collection every few hundred messages, each
# walking what the previous ones left young: about a fifth of its CPU per message under
# NSQ's bench_reader (bench/vs_go.py --phase sub: 1.8 -> 1.4 us/msg). Almost nothing a
# daemon allocates is in a cycle (reference counting frees it), so collecting rarely costs
# no memory.
GC_THRESHOLDS = (20_000, 50, 100)


def settle_gc() -> None:
    """After start-up: collect once, move every object that exists now (modules, options,
    the service) out of the collector's sight for good (``gc.freeze``), and collect the
    young generation far less often (``GC_THRESHOLDS``)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def serve_until_signal(service: Service) -> None:
    """Start ``service`` (then ``settle_gc``), wait for SIGINT or SIGTERM, then stop it
    cleanly."""
    await service.start()
    settle_gc()
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
