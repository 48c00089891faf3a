"""The fsync policy of a log: every N messages, every T ms, or ``always``.

Owns ``SyncPolicy`` and its text form (the ``--sync`` flag's value). Imports only the
standard library and ``nsqpy.errors``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nsqpy.errors import ConfigError

_DURATION = re.compile(r"^(\d+)(ms|s|m)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, None: 1}


@dataclass(frozen=True)
class SyncPolicy:
    """When a log's flushed data is fsynced.

    ``every_messages``: fsync due after this many unsynced messages (0 = off).
    ``every_ms``: fsync due when unsynced data is older than this (0 = off).
    ``always``: callers are acknowledged only after the fsync covering their batch.
    """

    every_messages: int = 2500
    every_ms: int = 2000
    always: bool = False

    def __post_init__(self) -> None:
        if self.every_messages < 0:
            raise ConfigError(f"sync every_messages {self.every_messages} must be >= 0")
        if self.every_ms < 0:
            raise ConfigError(f"sync every_ms {self.every_ms} must be >= 0")

    @classmethod
    def parse(cls, text: str) -> SyncPolicy:
        """Parse ``always``, ``every:2500``, ``interval:2000ms`` / ``interval:2s``, ``none``,
        or a comma-separated mix such as ``every:2500,interval:2s``.

        A part that is not named is off: ``every:100`` syncs by count only.
        """
        every = 0
        interval = 0
        always = False
        parts = [p.strip() for p in text.strip().lower().split(",")]
        if not text.strip():
            raise ConfigError("empty sync policy; expected always, every:N or interval:T")
        for part in parts:
            if part == "always":
                always = True
            elif part in ("none", "off"):
                continue
            elif part.startswith("every:"):
                value = part[6:]
                if not value.isdigit() or int(value) <= 0:
                    raise ConfigError(f"sync policy {part!r}: every:N needs N >= 1")
                every = int(value)
            elif part.startswith("interval:"):
                m = _DURATION.match(part[9:])
                if m is None or int(m.group(1)) <= 0:
                    raise ConfigError(f"sync policy {part!r}: interval:T needs T like 2000ms or 2s")
                interval = int(m.group(1)) * _UNIT_MS[m.group(2)]
            else:
                raise ConfigError(
                    f"unknown sync policy part {part!r}; expected always, every:N, interval:T"
                )
        if always:
            return cls(0, 0, True)
        return cls(every, interval, False)

    def __str__(self) -> str:
        if self.always:
            return "always"
        parts = []
        if self.every_messages:
            parts.append(f"every:{self.every_messages}")
        if self.every_ms:
            parts.append(f"interval:{self.every_ms}ms")
        return ",".join(parts) or "none"
