"""Helpers for the protocol tests: feed a parser whole, byte by byte, or in random splits."""

from __future__ import annotations

from nsqpy.errors import ProtocolError
from nsqpy.protocol.commands import Command, CommandParser
from nsqpy.protocol.limits import Limits

MAGIC = b"  V2"


def parse_chunks(chunks: list[bytes], limits: Limits | None = None) -> list[Command]:
    """Every command a fresh parser (magic expected) returns for these chunks, in order."""
    parser = CommandParser(limits or Limits())
    out: list[Command] = []
    for chunk in chunks:
        parser.feed(chunk)
        out.extend(parser.commands())
    return out


def split_ways(stream: bytes) -> dict[str, list[bytes]]:
    """The same stream whole, one byte at a time, and cut in two at every third point."""
    ways = {"whole": [stream], "bytewise": [stream[i : i + 1] for i in range(len(stream))]}
    for cut in range(1, len(stream), max(1, len(stream) // 3)):
        ways[f"cut@{cut}"] = [stream[:cut], stream[cut:]]
    return ways


def parse_error(chunks: list[bytes], limits: Limits | None = None) -> ProtocolError:
    """The error a fresh parser raises on these chunks (fails the test if none is raised)."""
    parser = CommandParser(limits or Limits())
    try:
        for chunk in chunks:
            parser.feed(chunk)
            list(parser.commands())
    except ProtocolError as err:
        return err
    raise AssertionError(f"no error for {chunks!r}")
