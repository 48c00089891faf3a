"""Topic and channel names (SPEC 1.9): ``^[.a-zA-Z0-9_-]+(#ephemeral)?$``, 1..64 bytes.

Owns name validation for every layer (nsqd TCP and HTTP, lookupd, clients). Imports only the
standard library.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 64
EPHEMERAL_SUFFIX = "#ephemeral"

# fullmatch, never ``$``: Python's ``$`` would also accept a trailing newline, RE2's does not.
_NAME_BYTES = re.compile(rb"[.a-zA-Z0-9_-]+(?:#ephemeral)?")


def valid_name_bytes(name: bytes | bytearray) -> bool:
    """The rule on raw bytes, as read from a command line."""
    return 0 < len(name) <= MAX_NAME_LENGTH and _NAME_BYTES.fullmatch(name) is not None


def _valid(name: str) -> bool:
    if not 0 < len(name) <= MAX_NAME_LENGTH or not name.isascii():
        return False
    return _NAME_BYTES.fullmatch(name.encode("ascii")) is not None


def valid_topic_name(name: str) -> bool:
    """True when ``name`` is a valid topic name."""
    return _valid(name)


def valid_channel_name(name: str) -> bool:
    """True when ``name`` is a valid channel name (same rule as topics)."""
    return _valid(name)


def is_ephemeral(name: str) -> bool:
    """True for ``#ephemeral`` topics and channels (memory only, never on disk)."""
    return name.endswith(EPHEMERAL_SUFFIX)
