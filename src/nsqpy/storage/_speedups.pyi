"""Types of the C module nsqpy.storage._speedups (see _speedups.c)."""

from collections.abc import Sequence

from typing_extensions import Buffer

crc_impl: str

def encode_plain(
    bodies: Sequence[Buffer], base: int, epoch: int, timestamp: int, deliver_at: int, /
) -> bytes: ...
def crc32c(data: Buffer, /) -> int: ...
