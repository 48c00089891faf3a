"""Shared helpers for the storage tests: a fake clock and file-level corruption."""

from __future__ import annotations

from pathlib import Path


class FakeClock:
    """A clock in ns that only moves when told to."""

    def __init__(self, now: int = 1_700_000_000_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms * 1_000_000


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def cut(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)
