"""Power loss and re-creation never hide a message nor reuse an ID (issue 16, point 1).

A power loss takes what the topic log had written but not yet fsynced, while channel
cursors (fsynced on their own schedule) may already count those offsets as finished. After
the reboot nsqd must bring every cursor back inside the log it recovered and must never
give an offset, and so a message ID, that was handed out before to other data; nor may a
topic deleted and created again. Each test drives a real nsqd process; the power loss is
simulated on its files (the unsynced tail cut, the boot id of its reservations changed).
"""

from __future__ import annotations

import signal
from pathlib import Path

from nsqpy.testing import (
    DaemonProcess,
    StartNsqd,
    channel_stats,
    http_get,
    http_request,
    saved_cursor,
    simulate_reboot,
    wait_for,
)

from .wire import publish, receive, subscribe


def partition_dir(data: Path, topic: str, partition: int = 0) -> Path:
    return data / "topics" / f"topic-{topic}" / f"p{partition}"


def segment(data: Path, topic: str) -> Path:
    (path,) = sorted(partition_dir(data, topic).glob("*.log"))
    return path


def power_loss(nsqd: DaemonProcess, data: Path, topic: str, synced_size: int) -> None:
    """The machine loses power: the process dies, the log keeps only its fsynced bytes,
    and the machine boots again."""
    nsqd.signal(signal.SIGKILL)
    nsqd.wait()
    with open(segment(data, topic), "r+b") as f:
        f.truncate(synced_size)
    simulate_reboot(data)


def test_a_cursor_past_the_recovered_end_does_not_hide_new_messages(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd()
    publish(nsqd, "t", [b"kept-%d" % i for i in range(10)])
    synced_size = segment(data_path, "t").stat().st_size  # what the disk keeps
    publish(nsqd, "t", [b"lost-%d" % i for i in range(10)])
    consumer = subscribe(nsqd, "t", "c", 100)
    seen = receive(consumer, 20)
    # FIN all but one early message (a confirmed range above it), REQ one of the lost
    # tail with a delay (a deferred entry whose record the power loss takes)
    for msg_id, body in seen:
        if body == b"kept-3":
            continue
        verb = b"REQ %s 600000\n" % msg_id if body == b"lost-5" else b"FIN " + msg_id + b"\n"
        consumer.send(verb)
    wait_for(lambda: (c := saved_cursor(data_path, "t", "c")) and c.confirmed == 3, 15)
    wait_for(lambda: channel_stats(nsqd.http, "t", "c")["deferred_count"] == 1, 10)
    consumer.close()
    power_loss(nsqd, data_path, "t", synced_size)

    again = start_nsqd()
    stats = channel_stats(again.http, "t", "c")
    assert stats["depth"] == 1, stats  # kept-3, never finished; nothing else waits
    assert stats["deferred_count"] == 0, stats  # its record is gone with the tail
    publish(again, "t", [b"after-%d" % i for i in range(5)])
    consumer = subscribe(again, "t", "c", 100)
    got = receive(consumer, 6)
    assert sorted(body for _, body in got) == sorted(
        [b"kept-3", *(b"after-%d" % i for i in range(5))]
    )
    old_ids = {msg_id for msg_id, body in seen if body != b"kept-3"}
    assert not old_ids & {msg_id for msg_id, _ in got}, "an ID was given to other data"
    assert consumer.frame_within(0.5) is None
    assert any("new messages start at" in line for line in again.log_lines)


def test_a_deleted_topic_created_again_never_reuses_a_message_id(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd()
    publish(nsqd, "t", [b"first-%d" % i for i in range(5)])
    consumer = subscribe(nsqd, "t", "c", 10)
    first = receive(consumer, 5)
    consumer.close()
    assert http_request("POST", f"{nsqd.http}/topic/delete?topic=t")[0] == 200
    publish(nsqd, "t", [b"second-%d" % i for i in range(5)])
    consumer = subscribe(nsqd, "t", "c", 10)
    second = receive(consumer, 5)
    consumer.close()
    assert [body for _, body in second] == [b"second-%d" % i for i in range(5)]
    nsqd.stop()

    again = start_nsqd()  # and across a restart, deleted once more
    assert http_request("POST", f"{again.http}/topic/delete?topic=t")[0] == 200
    publish(again, "t", [b"third"])
    consumer = subscribe(again, "t", "c", 10)
    third = receive(consumer, 1)
    ids = [msg_id for msg_id, _ in first + second + third]
    assert len(set(ids)) == len(ids), ids


def test_an_ephemeral_topic_created_again_never_reuses_a_message_id(
    start_nsqd: StartNsqd,
) -> None:
    nsqd = start_nsqd()
    ids = []
    for round_ in range(3):  # the last consumer gone, the channel and topic go
        consumer = subscribe(nsqd, "e#ephemeral", "c#ephemeral", 10)
        publish(nsqd, "e#ephemeral", [b"r%d-%d" % (round_, i) for i in range(3)])
        ids += [msg_id for msg_id, _ in receive(consumer, 3)]
        consumer.close()
        wait_for(lambda: b"e#ephemeral" not in http_get(f"{nsqd.http}/stats?format=json")[1], 10)
    assert len(set(ids)) == len(ids), ids
