"""Crash-test child: append under ``always``, print each acknowledged offset, forever.

Run as ``python crash_writer.py DIR SEED``. After every batch is flushed and fsynced it
prints ``ACK <durable_offset>``: every offset below that number was acknowledged.
Bodies are derived from their offsets so the parent can check content after recovery.
"""

from __future__ import annotations

import random
import sys

from nsqpy.storage import Entry, PartitionLog, SyncPolicy


def body_for(offset: int) -> bytes:
    return (b"%d;" % offset) * (1 + offset % 23)


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = PartitionLog(directory, sync=SyncPolicy.parse("always"), segment_bytes=32 * 1024)
    out = sys.stdout
    while True:
        for _ in range(rng.randint(1, 3)):  # several appends in one "loop turn"
            base = log.high_watermark
            n = rng.randint(1, 40)
            if rng.random() < 0.2:
                log.append([Entry(body_for(base + i), trace_id=base + i) for i in range(n)])
            else:
                log.append_bodies([body_for(base + i) for i in range(n)])
        log.flush()
        durable = log.sync()
        out.write(f"ACK {durable}\n")
        out.flush()


if __name__ == "__main__":
    main()
