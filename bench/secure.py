"""Benchmark the cost of TLS, snappy and deflate: prints figures, asserts nothing.

1. The stream codecs alone (nsqpy.protocol.compress): encode and decode MB/s on a stream of
   200-byte message frames, against zlib/cramjam baselines measured in the same run.
2. End to end: a real ``nsqd`` process (TLS certificate made on the fly) and nsqpy's
   Producer publishing MPUB batches of 200 x 200-byte messages over plain TCP, TLS, snappy,
   deflate and TLS+snappy: msgs/s for each.

Usage: .venv/bin/python bench/secure.py [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import cramjam

from nsqpy.client import IdentifyOptions, Producer
from nsqpy.client.secure import tls_context
from nsqpy.codecs import stream_codec
from nsqpy.testing import nsqd_process
from nsqpy.testing.certs import make_certs

BODY = b'{"user": 12345, "event": "click", "payload": "' + b"x" * 150 + b'"}'


def frames(n: int) -> bytes:
    frame = (len(BODY) + 30).to_bytes(4, "big") + b"\0\0\0\2" + b"\0" * 26 + BODY
    return frame * n


def codec_figures() -> None:
    data = frames(5000)  # ~1.2 MB, written in 64 KiB batches as nsqd flushes
    batches = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    mb = len(data) / 1e6
    for kind in ("snappy", "deflate"):
        start = time.perf_counter()
        for _ in range(5):
            enc, dec = stream_codec(kind, 6)  # a fresh stream each round
            encoded = [enc.encode(b) for b in batches]
        t_enc = (time.perf_counter() - start) / 5
        stream = b"".join(encoded)
        start = time.perf_counter()
        dec.feed(stream)
        out = bytearray()
        while piece := dec.read(65536):
            out += piece
        t_dec = time.perf_counter() - start
        assert bytes(out) == data
        print(
            f"{kind:8s} encode {mb / t_enc:8.1f} MB/s  decode {mb / t_dec:8.1f} MB/s  "
            f"ratio {len(stream) / len(data):.3f}"
        )
    start = time.perf_counter()
    for b in batches:
        cramjam.snappy.compress_raw(b)
    print(f"baseline cramjam raw snappy compress {mb / (time.perf_counter() - start):8.1f} MB/s")
    start = time.perf_counter()
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    for b in batches:
        z.compress(b) + z.flush(zlib.Z_SYNC_FLUSH)
    print(f"baseline zlib level 6 sync-flushed     {mb / (time.perf_counter() - start):8.1f} MB/s")


async def publish(port: int, identify: IdentifyOptions, topic: str, messages: int) -> float:
    batch = [BODY] * 200
    async with Producer(f"127.0.0.1:{port}", identify=identify) as producer:
        await producer.mpub(topic, batch)  # connect and warm up
        start = time.perf_counter()
        pending: list[asyncio.Future[None]] = []
        for _ in range(messages // 200):
            pending.append(asyncio.ensure_future(producer.mpub(topic, batch)))
            if len(pending) >= 8:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        return (messages // 200 * 200) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"python {platform.python_version()}")  # fmt: skip
    codec_figures()
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(Path(tmp) / "certs")
        flags = (f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}")
        with nsqd_process(Path(tmp) / "data", *flags) as nsqd:
            ctx = tls_context(root_ca_file=certs.ca)
            cases = {
                "plain": IdentifyOptions(),
                "tls": IdentifyOptions(tls_v1=True, tls_context=ctx),
                "snappy": IdentifyOptions(snappy=True),
                "deflate": IdentifyOptions(deflate=True),
                "tls+snappy": IdentifyOptions(tls_v1=True, tls_context=ctx, snappy=True),
            }
            for name, identify in cases.items():
                rate = asyncio.run(
                    publish(
                        nsqd.tcp_port, identify, f"bench_{name.replace('+', '_')}", args.messages
                    )
                )
                print(f"MPUB x200 over {name:10s} {rate:10.0f} msgs/s")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
