"""nsq_to_file's router in-process: a handler returns (so FINs) only after the fsync that covers
its message; a failed write is fatal and hands every waiting message back for redelivery."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nsqpy.testing import eventually
from nsqpy.tools.filelogger import FileConfig, FileLogger
from nsqpy.tools.to_file import TopicArchiver


class FakeMessage:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requeued: list[float | None] = []

    def requeue(self, delay: float | None = None, *, backoff: bool = True) -> None:
        self.requeued.append(delay)


class CountingLogger(FileLogger):
    def __init__(self, config: FileConfig) -> None:
        super().__init__(config)
        self.syncs = 0

    def sync(self) -> None:
        if self.pending:
            self.syncs += 1
        super().sync()


def make(tmp_path: Path, max_in_flight: int) -> tuple[TopicArchiver, CountingLogger, asyncio.Event]:
    config = FileConfig(template="t.log", output_dir=str(tmp_path), work_dir=str(tmp_path))
    flog = CountingLogger(config)
    fatal = asyncio.Event()
    archiver = TopicArchiver(
        "t", flog, sync_interval=60.0, max_in_flight=max_in_flight, fatal=fatal
    )
    archiver.start()
    return archiver, flog, fatal


async def test_handlers_return_only_after_the_covering_fsync(tmp_path: Path) -> None:
    archiver, flog, _ = make(tmp_path, max_in_flight=3)
    first = asyncio.ensure_future(archiver.handle(FakeMessage(b"one")))  # type: ignore[arg-type]
    await eventually(lambda: flog.out is not None, 5, interval=0.005)
    # the file was opened for "one" (and that opening synced it); "two" waits for the next sync
    await first
    second = asyncio.ensure_future(archiver.handle(FakeMessage(b"two")))  # type: ignore[arg-type]
    # the router's turn is over once "two" counts as written-but-unsynced
    await eventually(lambda: len(archiver._written) == 1, 5, interval=0.005)
    assert flog.pending == 1 and not second.done()  # not fsynced: not answered
    third = asyncio.ensure_future(archiver.handle(FakeMessage(b"three")))  # type: ignore[arg-type]
    fourth = asyncio.ensure_future(archiver.handle(FakeMessage(b"four")))  # type: ignore[arg-type]
    await asyncio.wait_for(asyncio.gather(second, third, fourth), 5)  # max-in-flight reached: sync
    assert flog.pending == 0 and flog.syncs >= 2
    await archiver.stop()
    assert (tmp_path / "t.log").read_bytes() == b"one\ntwo\nthree\nfour\n"


async def test_a_failed_write_is_fatal_and_requeues(tmp_path: Path) -> None:
    archiver, flog, fatal = make(tmp_path, max_in_flight=100)

    def broken(*args: object, **kwargs: object) -> bool:
        raise OSError(28, "No space left on device")

    flog.step = broken  # type: ignore[method-assign]
    messages = [FakeMessage(b"a"), FakeMessage(b"b")]
    await asyncio.wait_for(asyncio.gather(*(archiver.handle(m) for m in messages)), 5)  # type: ignore[arg-type]
    assert fatal.is_set() and isinstance(archiver.error, OSError)
    assert [m.requeued for m in messages] == [[0], [0]]
    late = FakeMessage(b"late")
    await archiver.handle(late)  # type: ignore[arg-type]
    assert late.requeued == [0]
    await archiver.stop()
