"""Micro-benchmark of nsqpy.protocol's hot paths; prints rates, asserts nothing.

    .venv/bin/python bench/protocol.py

Parse rates are for the server's CommandParser fed 64 KiB chunks (as asyncio delivers them);
the baseline is a bare ``bytes.split(b"\\n")`` over the same bytes, measured in the same run.
The client figures are nsqpy.client's hot paths: a message stream read one frame at a time
(``FrameDecoder.append``/``pop`` + ``decode_message``) and the FIN it sends per message.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable

from nsqpy.protocol.client_codec import encode_fin, encode_mpub, encode_pub
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.frames import FrameDecoder
from nsqpy.protocol.message import (
    decode_message,
    encode_message_frame,
    encode_message_frames,
    encode_message_id,
)

CHUNK = 65536


def _best(run: Callable[[], int], repeat: int = 5) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = run()
        best = min(best, time.perf_counter() - start)
    return best, count


def _parse(stream: bytes) -> Callable[[], int]:
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]

    def run() -> int:
        parser = CommandParser(expect_magic=False)
        n = 0
        for chunk in chunks:
            parser.feed(chunk)
            while parser.next() is not None:
                n += 1
        return n

    return run


def _baseline(stream: bytes) -> Callable[[], int]:
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]

    def run() -> int:
        return sum(len(chunk.split(b"\n")) for chunk in chunks)

    return run


def _report(name: str, run: Callable[[], int], per: int = 1, unit: str = "cmds") -> None:
    seconds, count = _best(run)
    rate = count / seconds
    extra = f"  ({rate * per:,.0f} msgs/s)" if per > 1 else ""
    print(f"{name:<34} {rate:>12,.0f} {unit}/s{extra}")


def main() -> None:
    print(f"python {sys.version.split()[0]} {platform.machine()} cpus={os.cpu_count()}")
    body = b"x" * 200
    ids = [encode_message_id(0, i) for i in range(50_000)]
    pubs = b"".join(encode_pub("bench", body) for _ in range(50_000))
    fins = b"".join(encode_fin(i) for i in ids)
    mpubs = b"".join(encode_mpub("bench", [body] * 200) for _ in range(500))
    _report("baseline split lines (FIN stream)", _baseline(fins), unit="lines")
    _report("parse PUB 200B", _parse(pubs))
    _report("parse FIN", _parse(fins))
    _report("parse MPUB 200x200B", _parse(mpubs), per=200)

    def frames_one() -> int:
        for msg_id in ids:
            encode_message_frame(1_700_000_000_000_000_000, 1, msg_id, body)
        return len(ids)

    batch = [(1_700_000_000_000_000_000, 1, msg_id, body) for msg_id in ids]

    def frames_batch() -> int:
        encode_message_frames(batch)
        return len(batch)

    _report("encode message frame (one by one)", frames_one, unit="frames")
    _report("encode message frames (batch)", frames_batch, unit="frames")

    stream = encode_message_frames(batch)
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]

    def client_read() -> int:
        decoder = FrameDecoder()
        n = 0
        for chunk in chunks:
            decoder.append(chunk)
            while (frame := decoder.pop()) is not None:
                decode_message(frame[1])
                n += 1
        return n

    def client_fin() -> int:
        for msg_id in ids:
            encode_fin(msg_id)
        return len(ids)

    _report("client: read message frames", client_read, unit="msgs")
    _report("client: encode FIN", client_fin)


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
