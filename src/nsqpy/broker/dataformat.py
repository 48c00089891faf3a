"""The data path's format version: ``format.json``, ``{"format": N, "written_by": V}``.

nsqd checks it at start, right after taking the data path's lock (``check``): a data
path of a newer format than this nsqd knows (``FORMAT``) is refused with one clear line
(nothing is read or written: the newer release that wrote it is the one to run, or a
backup of the data path before an upgrade); an older one is upgraded in place, step by
step, then marked with the current format; a new one (or one written before the data path
had a format, format 0) is marked as the current format. Bump ``FORMAT`` and add a step to
``UPGRADES`` whenever a file's layout changes in a way the previous release cannot read.
Imports only the standard library, nsqpy.errors and nsqpy.storage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from nsqpy import __version__
from nsqpy.errors import StorageError
from nsqpy.storage.files import write_atomic

log = logging.getLogger("nsqpy.broker")

FORMAT_FILE = "format.json"
FORMAT = 1  # what this release writes and reads
# format N -> N + 1, in place (format 0: the layout before the data path had a format,
# the same files as format 1)
UPGRADES: dict[int, Callable[[Path], None]] = {0: lambda _path: None}


class DataFormatError(StorageError):
    """The data path's format is newer than this nsqd's, or its format file is damaged."""


def read_format(data_path: Path) -> tuple[int, str]:
    """(format, the release that wrote it); (0, "") when the data path has no format file.
    DataFormatError when the file is not one."""
    path = data_path / FORMAT_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return 0, ""
    try:
        doc = json.loads(raw)
        number, by = doc["format"], doc.get("written_by", "")
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ValueError(f"format {number!r} is not a number")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataFormatError(f"--data-path={data_path}: {path} is damaged ({exc})") from None
    return number, str(by)


def check(data_path: Path) -> int:
    """Refuse a newer format, upgrade an older one; returns the format the data path had."""
    found, by = read_format(data_path)
    if found > FORMAT:
        raise DataFormatError(
            f"--data-path={data_path} holds data format {found} (written by nsqpy {by or '?'}); "
            f"this nsqd ({__version__}) reads format {FORMAT} and older: run that release "
            f"or a newer one"
        )
    if found < FORMAT:
        for step in range(found, FORMAT):
            UPGRADES[step](data_path)
        if found:
            log.info("data path %s upgraded from format %d to %d", data_path, found, FORMAT)
    if found < FORMAT or by != __version__:
        doc = {"format": FORMAT, "written_by": __version__}
        write_atomic(data_path / FORMAT_FILE, json.dumps(doc).encode() + b"\n", mode=0o644)
    return found
