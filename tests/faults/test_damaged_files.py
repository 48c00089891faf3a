"""Damaged files cost only what is damaged (issue 16, point 11).

A damaged record in a segment loses that record, not its batch nor its segment; a damaged
``nsqd.dat``, cursor file or delayed store is moved aside with one clear log line and nsqd
starts with everything else intact. Each test damages the files of a stopped nsqd process
and starts it again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from nsqpy.testing import DaemonProcess, StartNsqd, cursor_path, dpub, http_get, http_request, mpub

from .wire import consume_all, send_all


def publish(nsqd: DaemonProcess, topic: str, batches: list[list[bytes]]) -> None:
    send_all(nsqd, *(mpub(topic, bodies) for bodies in batches))


def flip(path: Path, needle: bytes) -> None:
    """Flip one byte in the middle of ``needle`` where it occurs in ``path``."""
    data = bytearray(path.read_bytes())
    at = data.find(needle)
    assert at >= 0, needle
    data[at + len(needle) // 2] ^= 0x20
    path.write_bytes(bytes(data))


def topic_dir(data: Path, topic: str) -> Path:
    return data / "topics" / f"topic-{topic}"


def test_a_damaged_record_loses_only_itself_in_any_segment(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd("--max-bytes-per-file=4096")
    bodies = [[b"msg-%03d-%s" % (b * 20 + i, b"x" * 60) for i in range(20)] for b in range(6)]
    publish(nsqd, "t", bodies)  # six MPUBs: six batches of 20 records, two per segment
    assert http_request("POST", f"{nsqd.http}/channel/create?topic=t&channel=c")[0] == 200
    nsqd.stop()
    segments = sorted((topic_dir(data_path, "t") / "p0").glob("*.log"))
    assert len(segments) >= 3
    names = [re.findall(rb"msg-\d{3}", seg.read_bytes()) for seg in segments]
    damaged = [
        names[0][len(names[0]) // 2],  # mid-segment, in a sealed segment
        names[1][-1],  # the last batch of a sealed segment (it was quarantined whole)
        names[-1][-1],  # the last batch of the active segment (it was cut as a torn tail)
    ]
    for seg, name in zip([segments[0], segments[1], segments[-1]], damaged, strict=True):
        flip(seg, name + b"-xxx")

    again = start_nsqd("--max-bytes-per-file=4096")
    got = consume_all(again, "t", "c")
    expected = [b for batch in bodies for b in batch]
    assert sorted(got) == [b for b in expected if b[:7] not in damaged]
    damage_lines = [line for line in again.log_lines if "are damaged" in line]
    assert len(damage_lines) == 3, again.log_lines
    assert len(list((topic_dir(data_path, "t") / "p0").glob("*.corrupt"))) == 3


def test_a_damaged_metadata_file_is_moved_aside_and_topics_found_on_disk(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd()
    publish(nsqd, "kept", [[b"a", b"b", b"c"]])
    assert consume_all(nsqd, "kept", "c", idle=0.3) == [b"a", b"b", b"c"]
    publish(nsqd, "kept", [[b"d", b"e"]])
    nsqd.stop()
    (data_path / "nsqd.dat").write_bytes(b'{"topics": [{"name": "kept", "chan')

    again = start_nsqd()
    assert list(data_path.glob("nsqd.dat.corrupt*"))
    assert any("nsqd.dat" in line and "damaged" in line for line in again.log_lines)
    stats = json.loads(http_get(f"{again.http}/stats?format=json")[1])
    (topic,) = stats["topics"]
    assert topic["topic_name"] == "kept" and [c["channel_name"] for c in topic["channels"]] == ["c"]
    assert consume_all(again, "kept", "c") == [b"d", b"e"]  # its cursor kept its place


def test_a_damaged_cursor_file_is_moved_aside_and_its_channel_redelivers(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd()
    publish(nsqd, "t", [[b"a", b"b"]])
    assert consume_all(nsqd, "t", "c", idle=0.3) == [b"a", b"b"]
    nsqd.stop()
    cursor = cursor_path(data_path, "t", "c")
    cursor.write_bytes(b"\x00" * 7)

    again = start_nsqd()
    assert list(cursor.parent.glob("channel-c.cursor.corrupt*"))
    assert any("cursor" in line and "corrupt" in line for line in again.log_lines)
    assert consume_all(again, "t", "c") == [b"a", b"b"]  # duplicates, never losses


def test_a_damaged_delayed_store_is_moved_aside_and_the_rest_is_intact(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd()
    publish(nsqd, "t", [[b"now-1", b"now-2"]])
    send_all(nsqd, dpub("t", 3600000, b"later"))
    assert http_request("POST", f"{nsqd.http}/channel/create?topic=t&channel=c")[0] == 200
    nsqd.stop()
    store = topic_dir(data_path, "t") / "p0" / "delayed.sqlite"
    assert store.exists()
    for path in store.parent.glob("delayed.sqlite*"):
        path.write_bytes(b"this is not a database" * 100)

    again = start_nsqd()
    assert list(store.parent.glob("delayed.sqlite.corrupt*"))
    assert any("delayed" in line and "damaged" in line for line in again.log_lines)
    assert sorted(consume_all(again, "t", "c")) == [b"now-1", b"now-2"]
    assert http_get(f"{again.http}/ping")[1] == b"OK"


def test_the_damage_is_made_good_once(start_nsqd: StartNsqd, data_path: Path) -> None:
    """After the channels have read the log again and saved their cursors, the store's
    loss is settled: the next restart does not read everything once more."""
    nsqd = start_nsqd()
    publish(nsqd, "t", [[b"a"]])
    assert consume_all(nsqd, "t", "c", idle=0.3) == [b"a"]
    send_all(nsqd, dpub("t", 3600000, b"later"))
    nsqd.stop()
    store = topic_dir(data_path, "t") / "p0" / "delayed.sqlite"
    store.write_bytes(b"garbage" * 1000)
    again = start_nsqd()
    assert consume_all(again, "t", "c") == [b"a"]  # read again, the DPUB deferred again
    again.stop()
    assert not store.with_name("delayed.sqlite.lost").exists()
    third = start_nsqd()
    assert consume_all(third, "t", "c", idle=0.5) == []
    stats = json.loads(http_get(f"{third.http}/stats?format=json&topic=t")[1])
    assert stats["topics"][0]["channels"][0]["deferred_count"] == 1


def test_a_delayed_store_out_of_space_is_not_taken_for_damaged(
    start_nsqd: StartNsqd, small_disk: object
) -> None:
    disk = small_disk(16 << 20)  # type: ignore[operator]
    nsqd = start_nsqd(data=disk.path)
    publish(nsqd, "t", [[b"now"]])
    assert consume_all(nsqd, "t", "c", idle=0.3) == [b"now"]
    send_all(nsqd, dpub("t", 2500, b"soon"))
    nsqd.stop()
    disk.fill()
    again = start_nsqd(data=disk.path)  # starts on a full disk, the store left as it is
    assert not list(disk.path.rglob("delayed.sqlite.corrupt*"))
    assert not any("is damaged" in line for line in again.log_lines)
    again.stop()
    disk.free()
    third = start_nsqd(data=disk.path)
    assert consume_all(third, "t", "c", idle=4.0) == [b"soon"]
