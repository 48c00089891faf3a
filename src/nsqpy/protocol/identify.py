"""IDENTIFY (SPEC 1.6): the request body, its validation, the negotiated values, the reply
(``identify_response`` on the server, ``parse_identify_response`` on the client).

nsqd decodes the body with Go's encoding/json into a typed struct; ``parse_identify``
reproduces that: keys matched case-insensitively (Go's simple folding), unknown keys and
``null`` values ignored, strict types (ints reject floats and bools, bools reject ints),
duplicate keys last-wins, a top-level ``null`` accepted. Validation follows nsqd's order and
texts. Imports only the standard library, nsqpy.errors and sibling protocol modules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from nsqpy.errors import BadBody, IdentifyFailed
from nsqpy.protocol._gofmt import JsonPairs, go_json
from nsqpy.protocol.client_codec import encode_identify_body as encode_identify_body
from nsqpy.protocol.limits import (
    DEFAULT_DEFLATE_LEVEL,
    DEFAULT_OUTPUT_BUFFER_SIZE,
    Limits,
)

_DECODE_FAILED = "IDENTIFY failed to decode JSON body"
_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_SURROGATE = re.compile("[\ud800-\udfff]")

# JSON key (lower case) -> (attribute, kind)
_FIELDS: dict[str, tuple[str, str]] = {
    "client_id": ("client_id", "str"),
    "hostname": ("hostname", "str"),
    "feature_negotiation": ("feature_negotiation", "bool"),
    "heartbeat_interval": ("heartbeat_interval_ms", "int"),
    "output_buffer_size": ("output_buffer_size", "int"),
    "output_buffer_timeout": ("output_buffer_timeout_ms", "int"),
    "tls_v1": ("tls_v1", "bool"),
    "snappy": ("snappy", "bool"),
    "deflate": ("deflate", "bool"),
    "deflate_level": ("deflate_level", "int"),
    "sample_rate": ("sample_rate", "int32"),
    "user_agent": ("user_agent", "str"),
    "msg_timeout": ("msg_timeout_ms", "int"),
    "extend_support": ("extend_support", "bool"),  # youzan: extended message frames
    "desired_tag": ("desired_tag", "str"),  # youzan: only messages of this dispatch tag
}
MAX_TAG_LENGTH = 100  # youzan's limit on a desired tag
# Go folds only ASCII letters plus these two runes onto ASCII (unicode.SimpleFold).
_FOLD = str.maketrans({"\u212a": "k", "\u017f": "s"})


@dataclass(slots=True)
class IdentifyRequest:
    """The decoded IDENTIFY body; zero values mean "absent" as in nsqd."""

    client_id: str = ""
    hostname: str = ""
    feature_negotiation: bool = False
    heartbeat_interval_ms: int = 0
    output_buffer_size: int = 0
    output_buffer_timeout_ms: int = 0
    tls_v1: bool = False
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 0
    sample_rate: int = 0
    user_agent: str = ""
    msg_timeout_ms: int = 0
    extend_support: bool = False
    desired_tag: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Negotiated:
    """The values in effect for the connection after IDENTIFY."""

    heartbeat_interval_ms: int  # -1 = disabled
    output_buffer_size: int  # 1 = unbuffered
    output_buffer_timeout_ms: int  # 0 = no timed flush
    msg_timeout_ms: int
    sample_rate: int
    feature_negotiation: bool
    tls_v1: bool
    snappy: bool
    deflate: bool
    deflate_level: int
    extend_support: bool = False


def _decode(body: bytes) -> JsonPairs | None:
    try:
        value = go_json(body)
    except (ValueError, RecursionError):
        raise BadBody(_DECODE_FAILED) from None
    if value is None:
        return None
    if not isinstance(value, JsonPairs):
        raise BadBody(_DECODE_FAILED)
    return value


def _typed(value: Any, kind: str) -> Any:
    if kind == "str":
        if not isinstance(value, str):
            raise BadBody(_DECODE_FAILED)
        return _SURROGATE.sub("\ufffd", value)
    if kind == "bool":
        if type(value) is not bool:
            raise BadBody(_DECODE_FAILED)
        return value
    low, high = _INT32 if kind == "int32" else _INT64
    if type(value) is not int or not low <= value <= high:
        raise BadBody(_DECODE_FAILED)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, JsonPairs):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def parse_identify(body: bytes, limits: Limits) -> IdentifyRequest:
    """Decode and validate an IDENTIFY body as nsqd does; raises fatal BadBody/IdentifyFailed."""
    pairs = _decode(body)
    req = IdentifyRequest()
    if pairs is not None:
        for key, value in pairs:
            spec = _FIELDS.get(key.translate(_FOLD).lower())
            if spec is None or value is None:
                continue
            setattr(req, spec[0], _typed(value, spec[1]))
        req.raw = _plain(pairs)
    _validate(req, limits)
    if req.feature_negotiation and req.deflate and limits.deflate and req.snappy and limits.snappy:
        raise IdentifyFailed("cannot enable both deflate and snappy compression")
    return req


def _validate(req: IdentifyRequest, limits: Limits) -> None:
    """nsqd's clientV2.Identify order: heartbeat, buffer timeout, buffer size, sample, timeout."""
    hb = req.heartbeat_interval_ms
    if hb not in (-1, 0) and not 1000 <= hb <= limits.max_heartbeat_interval_ms:
        raise BadBody(f"IDENTIFY heartbeat interval ({hb}) is invalid")
    timeout = req.output_buffer_timeout_ms
    if timeout not in (-1, 0) and not (
        limits.min_output_buffer_timeout_ms <= timeout <= limits.max_output_buffer_timeout_ms
    ):
        raise BadBody(f"IDENTIFY output buffer timeout ({timeout}) is invalid")
    size = req.output_buffer_size
    if size not in (-1, 0) and not 64 <= size <= limits.max_output_buffer_size:
        raise BadBody(f"IDENTIFY output buffer size ({size}) is invalid")
    if not 0 <= req.sample_rate <= 99:
        raise BadBody(f"IDENTIFY sample rate ({req.sample_rate}) is invalid")
    msg_timeout = req.msg_timeout_ms
    if msg_timeout != 0 and not 1000 <= msg_timeout <= limits.max_msg_timeout_ms:
        raise BadBody(f"IDENTIFY msg timeout ({msg_timeout}) is invalid")
    if len(req.desired_tag) > MAX_TAG_LENGTH:
        raise BadBody(
            f"IDENTIFY invalid tag len {len(req.desired_tag)}, exceed limit {MAX_TAG_LENGTH}"
        )


def negotiate(req: IdentifyRequest, limits: Limits) -> Negotiated:
    """The effective values for a validated request (defaults filled in, upgrades decided)."""
    hb = req.heartbeat_interval_ms
    heartbeat = -1 if hb == -1 else (hb or limits.client_timeout_ms // 2)
    timeout = req.output_buffer_timeout_ms
    buffer_timeout = 0 if timeout == -1 else (timeout or limits.output_buffer_timeout_ms)
    size = req.output_buffer_size
    if size == -1:
        buffer_size, buffer_timeout = 1, 0
    else:
        buffer_size = size or DEFAULT_OUTPUT_BUFFER_SIZE
    fn = req.feature_negotiation
    deflate = fn and limits.deflate and req.deflate
    level = req.deflate_level if deflate and req.deflate_level > 0 else DEFAULT_DEFLATE_LEVEL
    return Negotiated(
        heartbeat_interval_ms=heartbeat,
        output_buffer_size=buffer_size,
        output_buffer_timeout_ms=buffer_timeout,
        msg_timeout_ms=req.msg_timeout_ms or limits.msg_timeout_ms,
        sample_rate=req.sample_rate,
        feature_negotiation=fn,
        tls_v1=fn and limits.tls_available and req.tls_v1,
        snappy=fn and limits.snappy and req.snappy,
        deflate=deflate,
        deflate_level=min(level, limits.max_deflate_level),
        extend_support=req.extend_support,
    )


def identify_response(neg: Negotiated, limits: Limits, *, version: str = "1.3.0") -> bytes:
    """The JSON reply to a feature-negotiating IDENTIFY, in nsqd v1.3.0's field order."""
    reply = {
        "max_rdy_count": limits.max_rdy_count,
        "version": version,
        "max_msg_timeout": limits.max_msg_timeout_ms,
        "msg_timeout": neg.msg_timeout_ms,
        "tls_v1": neg.tls_v1,
        "deflate": neg.deflate,
        "deflate_level": neg.deflate_level,
        "max_deflate_level": limits.max_deflate_level,
        "snappy": neg.snappy,
        "sample_rate": neg.sample_rate,
        "auth_required": limits.auth_required,
        "output_buffer_size": neg.output_buffer_size,
        "output_buffer_timeout": neg.output_buffer_timeout_ms,
    }
    if neg.extend_support:  # only when asked: plain NSQ replies stay byte-identical
        reply["extend_support"] = True
    return json.dumps(reply, separators=(",", ":")).encode()


def parse_identify_response(data: bytes) -> dict[str, Any]:
    """The client side of the IDENTIFY reply: ``{}`` for ``OK`` (nsqd did not negotiate),
    else the JSON object; ValueError for anything else."""
    if data == b"OK":
        return {}
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"IDENTIFY reply is not a JSON object: {data[:64]!r}")
    return value


def auth_response(identity: str, identity_url: str, permission_count: int) -> bytes:
    """The JSON reply to a successful AUTH."""
    reply = {
        "identity": identity,
        "identity_url": identity_url,
        "permission_count": permission_count,
    }
    return json.dumps(reply, separators=(",", ":")).encode()
