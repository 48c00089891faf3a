"""``--consumer-opt`` / ``--producer-opt``: go-nsq ``Config`` keys read for nsqpy's client.

Each flag value is ``key,value`` (a bare ``key`` means ``true``), as go-nsq's ``ConfigFlag``
reads it; ``-`` in a key is read as ``_``. A key go-nsq knows and nsqpy's client has is
mapped (``max_in_flight``, ``max_attempts``, ``default_requeue_delay``, ``heartbeat_interval``,
``msg_timeout``, ``tls_v1``, ``tls_root_ca_file``, ``tls_cert``/``tls_key``,
``tls_insecure_skip_verify``, ``tls_min_version``, ``snappy``, ``deflate``,
``deflate_level``, ``auth_secret``, ...); a key that only tunes go-nsq's socket timeouts is
accepted and ignored with a warning; ``tls_config`` (a Go struct) is refused. The flags
themselves are declared here once (``client_opts_option``) for every tool that has them.

Pure parsing (standard library, ``durations``, ``flags``): it must stay cheap to import,
so it never imports ``nsqpy.client`` (which pulls in aiohttp).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nsqpy.durations import parse_duration
from nsqpy.errors import ConfigError
from nsqpy.flags import FlagError, option, parse_bool

log = logging.getLogger("nsqpy.tools")

# go-nsq key -> (where, argument name, kind); where: consumer | identify | both
_KEYS: dict[str, tuple[str, str, str]] = {
    "max_in_flight": ("consumer", "max_in_flight", "int"),
    "max_attempts": ("consumer", "max_attempts", "int"),
    "default_requeue_delay": ("consumer", "requeue_delay", "duration"),
    "max_requeue_delay": ("consumer", "max_requeue_delay", "duration"),
    "backoff_multiplier": ("consumer", "backoff_multiplier", "duration"),
    "max_backoff_duration": ("consumer", "max_backoff_duration", "duration"),
    "lookupd_poll_interval": ("consumer", "lookupd_poll_interval", "duration"),
    "lookupd_poll_jitter": ("consumer", "lookupd_poll_jitter", "float"),
    "rdy_redistribute_interval": ("consumer", "rdy_redistribute_interval", "duration"),
    "low_rdy_idle_timeout": ("consumer", "low_rdy_idle_timeout", "duration"),
    "low_rdy_timeout": ("consumer", "low_rdy_timeout", "duration"),
    "dial_timeout": ("both", "connect_timeout", "duration"),
    "heartbeat_interval": ("identify", "heartbeat_interval", "duration"),
    "msg_timeout": ("identify", "msg_timeout", "duration"),
    "output_buffer_size": ("identify", "output_buffer_size", "int"),
    "output_buffer_timeout": ("identify", "output_buffer_timeout", "duration"),
    "sample_rate": ("identify", "sample_rate", "int"),
    "client_id": ("identify", "client_id", "str"),
    "hostname": ("identify", "hostname", "str"),
    "user_agent": ("identify", "user_agent", "str"),
    "tls_v1": ("identify", "tls_v1", "bool"),
    "snappy": ("identify", "snappy", "bool"),
    "deflate": ("identify", "deflate", "bool"),
    "deflate_level": ("identify", "deflate_level", "int"),
    "auth_secret": ("identify", "auth_secret", "str"),
    "tls_root_ca_file": ("tls", "root_ca_file", "str"),
    "tls_insecure_skip_verify": ("tls", "insecure_skip_verify", "bool"),
    "tls_cert": ("tls", "cert_file", "str"),
    "tls_key": ("tls", "key_file", "str"),
    "tls_min_version": ("tls", "min_version", "str"),
}
_IGNORED = {"read_timeout", "write_timeout", "local_addr", "backoff_strategy"}
_UNSUPPORTED = {"tls_config"}  # a Go *tls.Config: not expressible as a flag value
_RANGES: dict[str, tuple[float, float]] = {
    "deflate_level": (1, 9),
    "max_in_flight": (0, 1_000_000),
    "max_attempts": (0, 65535),
    "lookupd_poll_jitter": (0, 1),
    "sample_rate": (0, 99),
    "output_buffer_size": (-1, 1 << 30),
}


@dataclass
class ClientConfig:
    """Keyword arguments for ``Consumer``/``Producer`` and the IDENTIFY fields, from flags."""

    consumer: dict[str, Any] = field(default_factory=dict)
    identify: dict[str, Any] = field(default_factory=dict)
    tls: dict[str, Any] = field(default_factory=dict)  # client.secure.tls_context arguments
    connect_timeout: float | None = None


def _value(key: str, kind: str, raw: str | None, flag: str) -> Any:
    if raw is None:
        if kind == "bool":
            return True
        raise FlagError(f"invalid value for flag --{flag}: option {key} needs a value ({key},X)")
    try:
        if kind == "int":
            value: Any = int(raw)
        elif kind == "float":
            value = float(raw)
        elif kind == "duration":
            value = parse_duration(raw)
        elif kind == "bool":
            value = parse_bool(raw)
        else:
            value = raw
    except (ValueError, ConfigError) as exc:
        raise FlagError(f'invalid value "{key},{raw}" for flag --{flag}: {exc}') from None
    low, high = _RANGES.get(key, (0, float("inf")) if kind != "str" else (0, 0))
    if kind in ("int", "float", "duration") and not low <= value <= high:
        raise FlagError(f'invalid value "{key},{raw}" for flag --{flag}: {key} out of range')
    return value


def parse_client_opts(items: Sequence[str], flag: str) -> ClientConfig:
    """Read ``--consumer-opt``/``--producer-opt`` values; raises ``FlagError``."""
    config = ClientConfig()
    for item in items:
        key, sep, raw = item.partition(",")
        key = key.strip().replace("-", "_")
        if key in _UNSUPPORTED:
            raise FlagError(f"--{flag} {key}: not supported by nsqpy's client")
        if key in _IGNORED:
            log.warning("--%s %s has no effect with nsqpy's client; ignored", flag, key)
            continue
        spec = _KEYS.get(key)
        if spec is None:
            raise FlagError(f'invalid value "{item}" for flag --{flag}: invalid option {key}')
        where, name, kind = spec
        value = _value(key, kind, raw if sep else None, flag)
        if where == "identify":
            config.identify[name] = value
        elif where == "tls":
            config.tls[name] = value
        elif where == "both":
            config.connect_timeout = value
        else:
            config.consumer[name] = value
    if config.tls and not config.identify.get("tls_v1"):
        log.warning("--%s: TLS settings have no effect without tls_v1 (as in go-nsq)", flag)
    if config.identify.get("snappy") and config.identify.get("deflate"):
        raise FlagError(f"--{flag}: cannot enable both deflate and snappy compression")
    return config


def check_client_opts(flag: str, items: Sequence[str]) -> None:
    """The declared check of ``--consumer-opt``/``--producer-opt`` (``parse_client_opts``)."""
    parse_client_opts(items, flag)


def opt_help(who: str) -> str:
    """The help text of --consumer-opt / --producer-opt, naming the keys nsqpy honours."""
    keys = sorted(
        k for k, (where, _, _) in _KEYS.items() if who == "consumer" or where != "consumer"
    )
    return (
        f"option to passthrough to the {who}: a go-nsq Config key,value (may be given multiple "
        f"times; durations like 90s). Keys: {', '.join(keys)}"
    )


def client_opts_option(who: Literal["consumer", "producer"]) -> list[str]:
    """The declaration of ``--consumer-opt`` / ``--producer-opt`` (one dataclass field)."""
    return option(f"{who}-opt", [], opt_help(who), metavar="key,value", check=check_client_opts)
