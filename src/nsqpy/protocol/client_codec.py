"""Client-side encoders for V2 commands (SPEC 1.6): values in, bytes to send out.

Used by nsqpy.client, the tools and the tests; ``CommandParser`` reads exactly these bytes.
Names and message IDs are checked so that a caller cannot inject a second command into a
line; FIN/REQ/TOUCH check a real ID (16 ASCII letters or digits) on a fast path and anything
else in full, and topic names are remembered once checked, so the checks cost little on a
client's hot paths. Imports only the standard library and sibling protocol modules.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from functools import lru_cache

from nsqpy.protocol.frames import MAGIC_V2
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

_I32 = struct.Struct(">i")
_BytesLike = bytes | bytearray | memoryview


@lru_cache(maxsize=1024)
def _topic(topic: str) -> bytes:
    """The name as bytes; ValueError (never cached) when it is not a valid topic name."""
    if not valid_topic_name(topic):
        raise ValueError(f"invalid topic name {topic!r}")
    return topic.encode("ascii")


def _msg_id(msg_id: _BytesLike, binary: bool = False) -> bytes:
    """The slow path of the ID check: any 16 bytes without space or newline (any 16 bytes
    when ``binary``: youzan's binary IDs, which nsqd reads by their length)."""
    raw = bytes(msg_id)
    if len(raw) != 16 or (not binary and (b" " in raw or b"\n" in raw)):
        raise ValueError(f"message ID must be 16 bytes without space or newline: {raw!r}")
    return raw


def _count(value: int, what: str) -> bytes:
    if value < 0:
        raise ValueError(f"{what} must not be negative: {value}")
    return b"%d" % value


def encode_magic() -> bytes:
    """The 4 bytes a client sends first: ``"  V2"``."""
    return MAGIC_V2


def encode_identify_body(fields: Mapping[str, object]) -> bytes:
    """IDENTIFY's JSON body, compact like Go's encoder."""
    return json.dumps(dict(fields), separators=(",", ":")).encode()


def encode_identify(fields: Mapping[str, object]) -> bytes:
    """``IDENTIFY\\n`` [size] [JSON]."""
    body = encode_identify_body(fields)
    return b"IDENTIFY\n" + _I32.pack(len(body)) + body


def encode_auth(secret: bytes | str) -> bytes:
    """``AUTH\\n`` [size] [secret]."""
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    return b"AUTH\n" + _I32.pack(len(raw)) + raw


def encode_sub(topic: str, channel: str) -> bytes:
    """``SUB <topic> <channel>\\n``."""
    if not valid_channel_name(channel):
        raise ValueError(f"invalid channel name {channel!r}")
    return b"SUB " + _topic(topic) + b" " + channel.encode("ascii") + b"\n"


def _partition(partition: int) -> bytes:
    """`` <partition>`` (Youzan's partitioned form), or nothing for -1 (nsqd picks)."""
    if partition < -1:
        raise ValueError(f"partition must be -1 (any) or a partition number: {partition}")
    return b"" if partition == -1 else b" %d" % partition


def encode_pub(topic: str, body: _BytesLike, partition: int = -1) -> bytes:
    """``PUB <topic> [<partition>]\\n`` [size] [body]."""
    head = b"PUB " + _topic(topic) + _partition(partition) + b"\n"
    return b"".join((head, _I32.pack(len(body)), body))


def encode_mpub(topic: str, bodies: Sequence[_BytesLike], partition: int = -1) -> bytes:
    """``MPUB <topic> [<partition>]\\n`` [body size] [count] then [size][body] per message."""
    pack = _I32.pack
    head = b"MPUB " + _topic(topic) + _partition(partition) + b"\n"
    parts: list[_BytesLike] = [head, b"", pack(len(bodies))]
    total = 4
    for body in bodies:
        parts.append(pack(len(body)))
        parts.append(body)
        total += 4 + len(body)
    parts[1] = pack(total)
    return b"".join(parts)


def encode_dpub(topic: str, defer_ms: int, body: _BytesLike) -> bytes:
    """``DPUB <topic> <defer_ms>\\n`` [size] [body]."""
    line = b"DPUB " + _topic(topic) + b" " + _count(defer_ms, "defer_ms") + b"\n"
    return b"".join((line, _I32.pack(len(body)), body))


def encode_rdy(count: int) -> bytes:
    """``RDY <count>\\n``."""
    if count >= 0:
        return b"RDY %d\n" % count
    return b"RDY " + _count(count, "RDY count") + b"\n"


def encode_fin(msg_id: _BytesLike, *, binary: bool = False) -> bytes:
    """``FIN <id>\\n`` (``binary``: the ID may be any 16 bytes, see ``_msg_id``)."""
    if len(msg_id) == 16 and type(msg_id) is bytes and msg_id.isalnum():
        return b"FIN " + msg_id + b"\n"
    return b"FIN " + _msg_id(msg_id, binary) + b"\n"


def encode_req(msg_id: _BytesLike, timeout_ms: int, *, binary: bool = False) -> bytes:
    """``REQ <id> <timeout_ms>\\n``."""
    if len(msg_id) == 16 and type(msg_id) is bytes and msg_id.isalnum() and timeout_ms >= 0:
        return b"REQ %s %d\n" % (msg_id, timeout_ms)
    return b"REQ " + _msg_id(msg_id, binary) + b" " + _count(timeout_ms, "timeout_ms") + b"\n"


def encode_touch(msg_id: _BytesLike, *, binary: bool = False) -> bytes:
    """``TOUCH <id>\\n``."""
    if len(msg_id) == 16 and type(msg_id) is bytes and msg_id.isalnum():
        return b"TOUCH " + msg_id + b"\n"
    return b"TOUCH " + _msg_id(msg_id, binary) + b"\n"


def encode_cls() -> bytes:
    """``CLS\\n``."""
    return b"CLS\n"


def encode_nop() -> bytes:
    """``NOP\\n``."""
    return b"NOP\n"
