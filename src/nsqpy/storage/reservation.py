"""A partition log's offset reservation: no offset, and so no message ID, is handed out twice.

Owns the ``reserved`` file of a log directory, one line ``handed H reserved R boot B``
written atomically (temp file, fsync, rename, fsync of the directory; a brand-new log's first
file without the fsyncs, see ``write``):

- R: before a flush makes offsets readable, R is made durable at or above them, a block
  ahead (``RESERVE_MIN`` offsets at first, doubling while a block lasts under a second, up
  to ``RESERVE_MAX``): one small fsync per block.
- B: the boot it was written in. A killed process loses nothing the kernel holds (the
  page cache), so in the same boot a log's recovered end is everything ever readable; after
  a reboot (a power loss) the log must go on at R.
- H: offsets below it were handed out whatever the boot: where a deleted log ended (the
  file outlives the log), or where a clean close left it. R == H: the log was left settled
  (closed, truncated, jumped or deleted with nothing unsynced), everything in it fsynced;
  R > H: the process may have been killed with records in the page cache only
  (``settled``, ``left_unsynced``). Whoever writes R == H must have fsynced the log.

``floor`` is where a log opened now must go on from. ``PartitionLog`` owns the policy
(when to reserve, settle and jump); this module only the file and its arithmetic. Imports
only the standard library and ``nsqpy.errors``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from nsqpy.errors import StorageError
from nsqpy.storage.files import write_atomic

RESERVED_FILE = "reserved"
RESERVE_MIN = 1 << 16  # offsets reserved at a time, at first
RESERVE_MAX = 1 << 24  # and at most (the block doubles while one lasts under a second)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def boot_id() -> str:
    """This boot of the machine ("" where the kernel does not say): a reservation made in
    an earlier boot may cover offsets a power loss took from the page cache."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class Reservation:
    """The ``reserved`` file of one log directory (see the module doc)."""

    def __init__(self, directory: Path, clock: Callable[[], int], logger: logging.Logger) -> None:
        self.path = directory / RESERVED_FILE
        self._clock = clock
        self._logger = logger
        self.handed = 0  # offsets below this were handed out, whatever happens
        self.reserved = 0  # durable: no offset at or above it was ever handed out
        self._step = RESERVE_MIN
        self._extended_at = 0  # clock when the reservation was last extended
        self.existed = self.path.exists()  # (before ``_load``: a deleted log's is kept)
        self.found_handed, found_reserved, found_boot = self._load()
        # Whether the file says the log is settled (every writer of R == H fsyncs the log
        # first); kept up to date by ``write``
        self.settled = bool(found_boot) and found_reserved == self.found_handed
        # Whether the last run may have left records in the page cache only: it was not
        # settled, in this boot or one not known (after a reboot the disk is all there is)
        current = boot_id()
        self.left_unsynced = not self.settled and (
            found_boot in ("", "-") or not current or found_boot == current
        )
        # The offset a log opened now must go on from (at least; its own end may be more).
        self.floor = max(self.found_handed, found_reserved if found_boot != current else 0)
        self.file_handed = self.found_handed  # H as the file holds it

    def _load(self) -> tuple[int, int, str]:
        """(handed, reserved, boot id) of the file; zeros when it is missing or damaged
        (logged: channel cursors still bound new offsets). StorageError when it cannot be
        read at all (out of descriptors, say): never open a log without it."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return 0, 0, ""
        except UnicodeDecodeError:
            text = "(not text)"
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from exc
        fields = text.split()
        if (
            len(fields) == 6
            and fields[0::2] == ["handed", "reserved", "boot"]
            and fields[1].isdigit()
            and fields[3].isdigit()
        ):
            return int(fields[1]), int(fields[3]), fields[5]
        self._logger.error(
            "%s is damaged (%r); ignored (channel cursors still bound new offsets)",
            self.path, text[:80],
        )  # fmt: skip
        return 0, 0, ""

    def write(self, reserved: int, durable: bool = True) -> None:
        """Make ``reserved`` (with ``handed`` and this boot's id) the durable reservation.
        ``durable`` False skips the fsyncs: only for the first file of a log made where
        there was none (nothing handed out, nothing to keep): a power loss may then leave
        no file, or an empty or damaged one (read as zeros), and the first flush makes the
        reservation durable before any offset is read."""
        line = f"handed {self.handed} reserved {reserved} boot {boot_id() or '-'}\n"
        write_atomic(self.path, line.encode(), durable=durable)
        self.reserved = reserved
        self.settled = reserved == self.handed
        self.file_handed = self.handed

    def extend(self, end: int) -> None:
        """Reserve a block past ``end`` (everything pending), before any of it is read."""
        now = self._clock()
        if self._extended_at and now - self._extended_at < 1_000_000_000:
            self._step = min(RESERVE_MAX, self._step * 2)
        self._extended_at = now
        self.write(end + self._step)

    def settle(self, end: int) -> None:
        """Nothing more is handed out before the next open: the reservation comes down to
        ``end``, which is now surely handed out."""
        self.handed = max(self.handed, end)
        self.write(end)

    def lower(self, end: int) -> None:
        """Offsets from ``end`` on were never read (a replica's divergent tail, cut)."""
        self.handed = end
        self.write(end)


__all__ = ["RESERVED_FILE", "RESERVE_MAX", "RESERVE_MIN", "Reservation", "boot_id"]
