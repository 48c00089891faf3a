"""Shared helpers for the storage tests: file-level corruption (the fake clock is
``nsqpy.testing.FakeClock``)."""

from __future__ import annotations

from pathlib import Path


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def cut(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)
