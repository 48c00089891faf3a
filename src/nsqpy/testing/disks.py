"""A daemon's data directory in tests: disk faults, ``SmallDisk`` (a tmpfs that can be
filled) and ``simulate_reboot`` (logs that look written before a power loss), and what nsqd
left there, ``cursor_path`` and ``saved_cursor``. The standard library and
``nsqpy.storage``'s cursor format only.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nsqpy.storage import CursorState


def cursor_path(data_path: str | Path, topic: str, channel: str, partition: int = 0) -> Path:
    """Where nsqd keeps the cursor of ``channel`` in ``partition`` of ``topic``."""
    topic_dir = Path(data_path) / "topics" / f"topic-{topic}"
    return topic_dir / f"p{partition}" / "cursors" / f"channel-{channel}.cursor"


def saved_cursor(
    data_path: str | Path, topic: str, channel: str, partition: int = 0
) -> CursorState | None:
    """The cursor nsqd last saved for the channel, or None (none yet, or unreadable)."""
    try:
        return CursorState.from_bytes(
            cursor_path(data_path, topic, channel, partition).read_bytes()
        )
    except (OSError, ValueError):
        return None


def simulate_reboot(data_path: str | Path) -> int:
    """Make every partition log under ``data_path`` look as if written before a reboot (the
    boot id in its ``reserved`` file), as after a power loss; returns how many were
    changed. Pair it with cutting the logs' unsynced tails to simulate what a power loss
    does to the files."""
    changed = 0
    for path in Path(data_path).rglob("reserved"):
        fields = path.read_text().split()
        if len(fields) == 6 and fields[4] == "boot":
            fields[5] = "an-earlier-boot"
            path.write_text(" ".join(fields) + "\n")
            changed += 1
    return changed


class SmallDisk:
    """A tmpfs of ``size_bytes`` mounted at ``path`` (root only): a disk that can be filled.

    ``fill()`` writes a filler file until the disk is full (another process taking the
    space, as far as a daemon on it can tell); ``free()`` removes it. ``unmount()`` (or
    leaving the ``with`` block) lazily unmounts, also when a daemon still holds files."""

    def __init__(self, path: str | Path, size_bytes: int) -> None:
        self.path = Path(path)
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", str(self.path)],
            check=True,
            capture_output=True,
        )
        self.mounted = True
        return self

    @property
    def filler(self) -> Path:
        return self.path / "filler"

    def fill(self, leave_bytes: int = 0) -> None:
        """Take every free byte but ``leave_bytes`` (rounded down to 4 KiB blocks).

        Unbuffered: a buffered file would try its last bytes again when closed and raise
        ENOSPC from the ``with`` (a full disk is what is wanted here)."""
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize - leave_bytes
        block = b"\0" * 65536
        with open(self.filler, "ab", buffering=0) as f:
            try:
                while free > 0:
                    written = f.write(block[: min(len(block), free)] or block[:4096])
                    if not written:
                        break
                    free -= written
            except OSError:
                pass  # full

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
            self.mounted = False

    def __enter__(self) -> SmallDisk:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()
