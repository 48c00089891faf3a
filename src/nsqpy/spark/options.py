"""The options of the ``nsq`` data source and sink, parsed and checked before any I/O.

Owns option names and defaults (after Spark's Kafka source where they fit), the parsing of
``startingOffsets``/``endingOffsets`` (``earliest``, ``latest`` or JSON per partition,
-2 = earliest, -1 = latest) and the split of ``maxOffsetsPerTrigger`` between
partitions. A topic may live on several nsqd, each with its own logs (partition 0 on
every node in classic NSQ), so a partition is named by its node and number:
``"<broadcast_address>:<http_port>/<partition>"``. Offsets travel as
``{topic: {"node/partition": offset}}`` dicts, which is also the shape Spark keeps in
its checkpoint; in the JSON options a bare ``"<partition>"`` means that partition on
every node. Pure: imports only the standard library, ``nsqpy.errors`` and
``nsqpy.protocol.names``; never pyspark or the network.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nsqpy.errors import ConfigError
from nsqpy.protocol.names import valid_topic_name

EARLIEST = -2
LATEST = -1
MAX_PARTITION = 1023

# {topic: {"node/partition": offset}}: Spark's offset dicts and the JSON option values.
OffsetDict = dict[str, dict[str, int]]
# (topic, node, partition); node is "broadcast_address:http_port", "" in an option naming
# a partition on every node
PartitionKey = tuple[str, str, int]
ANY_NODE = ""


def partition_name(node: str, partition: int) -> str:
    """The key of a partition in offset dicts: ``node/partition``."""
    return f"{node}/{partition}"


def parse_partition_name(text: object) -> tuple[str, int] | None:
    """``"node/P"`` -> (node, P); ``"P"`` -> ("", P); None when malformed."""
    if not isinstance(text, str):
        return None
    node, _, number = text.rpartition("/")
    if "/" in text and not node:
        return None
    part = _partition_number(number)
    return None if part is None else (node, part)


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: ``earliest``, ``latest`` or explicit offsets per partition."""

    kind: str  # "earliest" | "latest" | "json"
    offsets: dict[PartitionKey, int] = field(default_factory=dict)

    def lookup(self, key: PartitionKey) -> int | None:
        """The explicit offset (or -2/-1) for ``key`` (by node, else for any node); None
        when the JSON does not name it."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        found = self.offsets.get(key)
        return self.offsets.get((key[0], ANY_NODE, key[2])) if found is None else found


@dataclass(frozen=True)
class TlsOptions:
    """HTTPS to nsqd (``nsq.ssl.*`` options): the CA that signed nsqd's certificate (None:
    the system's), a client certificate and key for nsqd's ``--tls-client-auth-policy``,
    and whether the certificate must name the host. Plain strings, so that Spark can send
    them to its executors; each process makes its own SSL context."""

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.cafile)
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile or None)
        if not self.check_hostname:
            context.check_hostname = False
        return context


def tls_options(options: Mapping[str, str]) -> TlsOptions | None:
    """``nsq.ssl.enabled``, ``nsq.ssl.cafile``, ``nsq.ssl.certfile``, ``nsq.ssl.keyfile``,
    ``nsq.ssl.checkHostname`` (named after the Kafka source's ``kafka.ssl.*``): None unless
    enabled or a file is named; each file named must be readable."""
    files = {name: _get(options, f"nsq.ssl.{name}") for name in ("cafile", "certfile", "keyfile")}
    if not _bool(options, "nsq.ssl.enabled", any(files.values())):
        return None
    for name, path in files.items():
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(f"option nsq.ssl.{name}={path!r} is not a readable file")
    if files["keyfile"] and not files["certfile"]:
        raise ConfigError("option nsq.ssl.keyfile needs nsq.ssl.certfile")
    return TlsOptions(files["cafile"], files["certfile"], files["keyfile"],
                      _bool(options, "nsq.ssl.checkHostname", True))  # fmt: skip


@dataclass(frozen=True)
class SourceOptions:
    """What a read needs to know; built by ``source_options``."""

    topics: tuple[str, ...]
    nsqd: tuple[str, ...]
    lookupd: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp_ms: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    min_partitions: int
    fetch_max_count: int
    fetch_max_bytes: int
    timeout: float
    tls: TlsOptions | None = None


@dataclass(frozen=True)
class SinkOptions:
    """What the sink needs to know; built by ``sink_options``."""

    topic: str | None
    nsqd: tuple[str, ...]
    lookupd: tuple[str, ...]
    mpub_max_bytes: int
    timeout: float
    tls: TlsOptions | None = None


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Option lookup ignoring case (Spark hands options in as a case-insensitive dict)."""
    for key, value in options.items():
        if key.lower() == name.lower():
            return None if value is None else str(value)
    return None


def _addresses(text: str | None) -> tuple[str, ...]:
    return tuple(a.strip() for a in (text or "").split(",") if a.strip())


def _int(options: Mapping[str, str], name: str, default: int | None, low: int) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name}={raw!r} is not an integer") from None
    if value < low:
        raise ConfigError(f"option {name}={value} must be >= {low}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name}={raw!r} is not a boolean (true or false)")


def _topics(options: Mapping[str, str], required: bool) -> tuple[str, ...]:
    one, many = _get(options, "topic"), _get(options, "topics")
    if one is not None and many is not None and _addresses(one) != _addresses(many):
        raise ConfigError("give the topics with either option topic or option topics, not both")
    topics = _addresses(one if one is not None else many)
    if required and not topics:
        raise ConfigError("option topic is required (a topic, or several separated by commas)")
    for name in topics:
        if not valid_topic_name(name):
            raise ConfigError(f"topic {name!r} is not a valid topic name")
    if len(set(topics)) != len(topics):
        raise ConfigError(f"topic given twice in {','.join(topics)}")
    return topics


def _servers(options: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    nsqd, lookupd = _addresses(_get(options, "nsqd")), _addresses(_get(options, "lookupd"))
    if bool(nsqd) == bool(lookupd):
        raise ConfigError(
            "give exactly one of the options nsqd (nsqd HTTP addresses) or lookupd "
            "(nsqlookupd HTTP addresses), comma-separated"
        )
    return nsqd, lookupd


def parse_offset_spec(text: str, name: str, topics: Iterable[str]) -> OffsetSpec:
    """``earliest``, ``latest`` or ``{"topic": {"0": 23, "host:4151/1": -2}}`` (-2 earliest,
    -1 latest; a bare partition number means that partition on every node)."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return OffsetSpec(stripped.lower())
    try:
        doc = json.loads(stripped)
    except ValueError:
        raise ConfigError(f"option {name} must be earliest, latest or JSON, got {text!r}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f'option {name} JSON must be an object like {{"topic": {{"0": 5}}}}')
    known = set(topics)
    offsets: dict[PartitionKey, int] = {}
    for topic, parts in doc.items():
        if topic not in known:
            raise ConfigError(f"option {name} names topic {topic!r}, which is not being read")
        if not isinstance(parts, dict):
            raise ConfigError(f"option {name}: the value for topic {topic!r} must be an object")
        for part, offset in parts.items():
            named = parse_partition_name(part)
            if named is None:
                raise ConfigError(
                    f"option {name}: {part!r} is not a partition (0-1023, or "
                    "broadcast_address:http_port/0-1023)"
                )
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise ConfigError(
                    f"option {name}: offset {offset!r} of {topic}/{part} must be an integer >= 0, "
                    "-2 (earliest) or -1 (latest)"
                )
            offsets[(topic, *named)] = offset
    return OffsetSpec("json", offsets)


def _partition_number(text: object) -> int | None:
    if not isinstance(text, str) or not text.isdigit() or not text.isascii():
        return None
    number = int(text)
    return number if number <= MAX_PARTITION else None


def source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse and check the read options; ConfigError names the bad option and value."""
    topics = _topics(options, required=True)
    nsqd, lookupd = _servers(options)
    raw_start = _get(options, "startingOffsets")
    starting = parse_offset_spec(
        raw_start or ("latest" if streaming else "earliest"), "startingOffsets", topics
    )
    raw_end = _get(options, "endingOffsets")
    if raw_end is not None and streaming:
        raise ConfigError("option endingOffsets is for batch reads only")
    ending = parse_offset_spec(raw_end or "latest", "endingOffsets", topics)
    if ending.kind == "earliest" or any(v == EARLIEST for v in ending.offsets.values()):
        raise ConfigError("option endingOffsets cannot be earliest (-2)")
    max_per_trigger = _int(options, "maxOffsetsPerTrigger", None, 1)
    if max_per_trigger is not None and not streaming:
        raise ConfigError("option maxOffsetsPerTrigger is for streaming reads only")
    timeout = _int(options, "timeoutMs", 30_000, 1)
    assert timeout is not None
    return SourceOptions(
        topics=topics,
        nsqd=nsqd,
        lookupd=lookupd,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=_int(options, "startingTimestamp", None, 0),
        max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        min_partitions=_int(options, "minPartitions", 1, 1) or 1,
        fetch_max_count=_int(options, "fetchMaxCount", 20_000, 1) or 1,
        fetch_max_bytes=_int(options, "fetchMaxBytes", 4 << 20, 1) or 1,
        timeout=timeout / 1000,
        tls=tls_options(options),
    )


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Parse and check the write options."""
    topics = _topics(options, required=False)
    if len(topics) > 1:
        raise ConfigError("the sink takes one default topic (option topic)")
    nsqd, lookupd = _servers(options)
    max_bytes = _int(options, "mpubMaxBytes", 4 << 20, 16)
    timeout = _int(options, "timeoutMs", 30_000, 1)
    assert max_bytes is not None and timeout is not None
    return SinkOptions(
        topic=topics[0] if topics else None,
        nsqd=nsqd,
        lookupd=lookupd,
        mpub_max_bytes=max_bytes,
        timeout=timeout / 1000,
        tls=tls_options(options),
    )


def split_limit(lags: Mapping[PartitionKey, int], limit: int) -> dict[PartitionKey, int]:
    """Share ``limit`` offsets between partitions in proportion to their lag (Kafka's way).

    Each share is at most the partition's lag, the shares sum to ``min(limit, total lag)``,
    and the remainder of the proportional split goes to the largest lags first.
    """
    total = sum(max(0, lag) for lag in lags.values())
    if total <= limit:
        return {key: max(0, lag) for key, lag in lags.items()}
    shares = {key: max(0, lag) * limit // total for key, lag in lags.items()}
    left = limit - sum(shares.values())
    for key in sorted(lags, key=lambda k: (-lags[k], k)):
        if left <= 0:
            break
        if shares[key] < lags[key]:
            shares[key] += 1
            left -= 1
    return shares


def to_offset_dict(offsets: Mapping[PartitionKey, int]) -> OffsetDict:
    """``{(topic, node, p): o}`` -> ``{topic: {"node/p": o}}`` (sorted: stable checkpoints)."""
    out: OffsetDict = {}
    for (topic, node, part), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[partition_name(node, part)] = offset
    return out


def from_offset_dict(doc: Mapping[str, Mapping[str, int]]) -> dict[PartitionKey, int]:
    """The inverse of ``to_offset_dict``; ConfigError for a malformed checkpoint offset."""
    out: dict[PartitionKey, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, Mapping):
            raise ConfigError(f"bad offset for topic {topic!r}: {parts!r}")
        for part, offset in parts.items():
            named = parse_partition_name(part)
            if (
                named is None
                or not named[0]
                or isinstance(offset, bool)
                or not isinstance(offset, int)
            ):
                raise ConfigError(f"bad offset {topic}/{part}: {offset!r}")
            out[(topic, *named)] = offset
    return out
