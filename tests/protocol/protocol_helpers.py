"""Helpers for the protocol tests: feed a parser whole, byte by byte, or in random splits;
any JSON value as a hypothesis strategy."""

from __future__ import annotations

from hypothesis import strategies as st

from nsqpy.errors import ProtocolError
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.limits import Limits
from nsqpy.protocol.verbs import Command

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


def split_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    """``stream`` cut at each of ``cuts`` (clamped to its length): the pieces, in order."""
    points = sorted({min(c, len(stream)) for c in cuts})
    return [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]


def any_json(size: int, leaves: int) -> st.SearchStrategy[object]:
    """Any JSON value: scalars, and lists and objects of up to ``size`` items nested up to
    ``leaves`` scalars in all."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=size)
            | st.dictionaries(st.text(max_size=8), inner, max_size=size)
        ),
        max_leaves=leaves,
    )


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
