"""``--sync-always``: nothing is delivered that a crash could take back (issue 16, point 2).

A message is acknowledged only after the fsync that covers it, and delivered to consumers
only after that fsync too. The nsqd process runs with every fsync held at a gate (a slow
disk) by ``hooks/sitecustomize.py``."""

from __future__ import annotations

import os
from pathlib import Path

from nsqpy.protocol.message import decode_message
from nsqpy.testing import StartNsqd, WireClient, pub

HOOKS = Path(__file__).with_name("hooks")


def with_hooks() -> str:
    """PYTHONPATH for an nsqd process that loads ``hooks/sitecustomize.py``."""
    return os.pathsep.join([str(HOOKS), *filter(None, [os.environ.get("PYTHONPATH")])])


def test_a_message_is_delivered_only_after_the_fsync_that_covers_it(
    start_nsqd: StartNsqd, tmp_path: Path
) -> None:
    gate = tmp_path / "fsync-gate"
    nsqd = start_nsqd(
        "--sync-always",
        env={"PYTHONPATH": with_hooks(), "NSQPY_FSYNC_GATE": str(gate)},
    )
    producer = WireClient(nsqd.tcp_port)
    producer.send(b"  V2" + pub("t", b"before"))
    assert producer.read_frame() == (0, b"OK")
    consumer = WireClient(nsqd.tcp_port)
    consumer.send(b"  V2SUB t c\nRDY 10\n")
    assert consumer.read_frame() == (0, b"OK")
    first = decode_message(consumer.read_frame()[1])
    assert first.body == b"before"
    consumer.send(b"FIN " + first.id + b"\n")

    gate.touch()  # the disk stalls: the next fsync does not return
    producer.send(pub("t", b"held"))
    assert producer.frame_within(1.0) is None, "acknowledged before its fsync"
    assert consumer.frame_within(0.5) is None, "delivered before its fsync"
    gate.unlink()  # the fsync completes
    assert producer.read_frame() == (0, b"OK")
    assert decode_message(consumer.read_frame()[1]).body == b"held"
