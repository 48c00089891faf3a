"""An ordered consumer (youzan's SUB_ORDERED) for the process tests.

Usage: ordered_consumer.py TCP_PORT TOPIC CHANNEL REQUEUE_EVERY WORK_MS STALL_AFTER
Prints one line per delivery, flushed before answering it:
``<partition> <offset> <attempts> <body> FIN|REQ|HELD``. The first delivery of every
message whose sequence number (``key:seq`` bodies) is a multiple of REQUEUE_EVERY is
requeued (REQ 0), every other delivery finished after WORK_MS of (simulated) processing.
From its STALL_AFTER-th delivery on (0: never) it answers nothing more (HELD), as a
consumer that hangs before it dies. Runs until killed.
"""

from __future__ import annotations

import struct
import sys
import time

from nsqpy.testing import WireClient


def main() -> int:
    port, topic, channel, every = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    work, stall_after = float(sys.argv[5]) / 1000, int(sys.argv[6])
    count = 0
    wire = WireClient(port, timeout=120)
    wire.send(b"  V2")
    wire.send(f"SUB_ORDERED {topic} {channel}\n".encode())
    if wire.read_frame() != (0, b"OK"):
        return 1
    wire.send(b"RDY 20\n")
    out = sys.stdout
    while True:
        ftype, data = wire.read_frame()
        if ftype != 2:
            print(f"frame {ftype} {data!r}", file=sys.stderr)
            return 1
        attempts = struct.unpack_from(">H", data, 8)[0]
        msg_id, body = data[10:26], data[38:]  # (youzan's detail: offset, size, 12 bytes)
        value = int(msg_id, 16)
        seq = int(body.split(b":")[1])
        requeue = attempts == 1 and seq % every == 0
        count += 1
        held = 0 < stall_after <= count
        action = "HELD" if held else "REQ" if requeue else "FIN"
        out.write(f"{value >> 54} {value & ((1 << 54) - 1)} {attempts} {body.decode()} {action}\n")
        out.flush()
        if held:
            continue
        if not requeue:
            time.sleep(work)  # the message's processing
        wire.send((b"REQ " + msg_id + b" 0\n") if requeue else (b"FIN " + msg_id + b"\n"))


if __name__ == "__main__":
    sys.exit(main())
