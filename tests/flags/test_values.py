"""What a flag's text means, once: Go's SplitHostPort, host:port checks, log levels, /config."""

from __future__ import annotations

import pytest

from nsqpy.errors import ConfigError
from nsqpy.flags import (
    LOG_LEVELS,
    Option,
    api_value,
    check_host_port,
    log_level_check,
    log_level_number,
    parse_bool,
    shown_log_level,
    split_host_port,
)
from nsqpy.flags.values import listen_host_port


@pytest.mark.parametrize(
    ("address", "parts"),
    [
        ("host:80", ("host", "80")),
        (":80", ("", "80")),
        ("[::1]:80", ("::1", "80")),
        ("[fe80::1%eth0]:4150", ("fe80::1%eth0", "4150")),
        ("host:", ("host", "")),
        ("host:port", ("host", "port")),
    ],
)
def test_split_host_port_is_gos(address: str, parts: tuple[str, str]) -> None:
    assert split_host_port(address) == parts


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("host", "missing port"),
        ("::1:80", "too many colons"),
        ("[::1]", "missing port"),
        ("[::1]:80:1", "too many colons"),
        ("[::1]x:80", "missing port"),
        ("[::1:80", "missing ']'"),
        ("a]:80", "unexpected bracket"),
        ("a[b:80", "unexpected bracket"),
    ],
)
def test_split_host_port_refuses_what_go_refuses(address: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("[", r"\[")):
        split_host_port(address)


def test_check_host_port_names_the_flag() -> None:
    assert check_host_port("a", "127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert check_host_port("a", ":0") == ("", 0)
    assert check_host_port("a", "[::1]:5", need_host=True) == ("::1", 5)
    assert listen_host_port("a", ":4161") == ("0.0.0.0", 4161)
    for address in ("foo", "h:x", "h:99999", "h:-1", "::1:5", "a b:1", "h/x:1"):
        with pytest.raises(ConfigError, match=rf"^--a '{address}' is not <addr>:<port>$"):
            check_host_port("a", address)
    for address in (":4160", "h:0"):
        with pytest.raises(ConfigError, match=r"is not <host>:<port>$"):
            check_host_port("lookupd-tcp-address", address, need_host=True)


def test_parse_bool_refuses_other_spellings() -> None:
    for text in ("yes", "no", "on", "off", "tRUE", " true", ""):
        with pytest.raises(ValueError, match="not a boolean"):
            parse_bool(text)


def test_one_log_level_table() -> None:
    assert list(LOG_LEVELS) == ["debug", "info", "warn", "error", "fatal"]
    assert [log_level_number(n) for n in ("DEBUG", "info", "warn", "error", "fatal")] == [
        1,
        2,
        3,
        4,
        5,
    ]
    check = log_level_check()
    check("log-level", "WARN")
    with pytest.raises(ConfigError, match=r"^invalid --log-level 'loud' \(debug, info, warn"):
        check("log-level", "loud")

    class Oops(Exception):
        pass

    with pytest.raises(Oops):
        log_level_check(Oops)("log-level", "warning")


def test_config_api_values() -> None:
    assert api_value(Option("t", "t_ms", "duration_ms"), 2000) == 2_000_000_000
    assert api_value(Option("n", "n", "int"), 7) == 7
    assert api_value(Option("l", "l", shown=shown_log_level), "error") == 4
