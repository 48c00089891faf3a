"""The utilities' pure parts, in-process: flags, client options, modes, rate, JSON filter, URLs."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy import version_line
from nsqpy.flags import FlagError, Option, format_help, parse_into
from nsqpy.tools.clientopts import parse_client_opts
from nsqpy.tools.common import ephemeral_channel
from nsqpy.tools.hostpool import INITIAL_RETRY, Selector
from nsqpy.tools.metrics import TimerMetrics
from nsqpy.tools.nsq_to_nsq import JsonFilter
from nsqpy.tools.nsqopts import identify_options
from nsqpy.tools.to_http import get_url, parse_headers
from nsqpy.tools.to_nsq import RateLimiter, split_chunks


@dataclass
class Opts:
    topics: list[str] = field(default_factory=list)
    count: int = 200
    ratio: float = 1.0
    quiet: bool = False
    every: float = 30.0
    name: str = "x"


FLAGS = [
    Option("topic", "topics", "list", "a topic"),
    Option("count", "count", "int", "how many"),
    Option("ratio", "ratio", "float", "a fraction"),
    Option("quiet", "quiet", "bool", "be quiet"),
    Option("every", "every", "duration", "how often"),
    Option("name", "name", "str", "a name"),
    Option("n", "count", "int", "short form"),
]


def parse(*argv: str) -> Opts:
    opts = Opts()
    assert parse_into(opts, FLAGS, argv).action == "run"
    return opts


def test_go_flag_forms() -> None:
    opts = parse(
        "-topic",
        "a",
        "--topic=b",
        "--count",
        "7",
        "-ratio=0.5",
        "--quiet",
        "--every=1m30s",
        "-name=",
    )
    assert opts == Opts(topics=["a", "b"], count=7, ratio=0.5, quiet=True, every=90.0, name="")
    assert parse("--quiet=false").quiet is False
    assert parse("-n", "3").count == 3
    assert parse("--every=250ms").every == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nope"], "flag provided but not defined: --nope"),
        (["--count=ten"], 'invalid value "ten" for flag --count: not an integer'),
        (["--every=5"], 'invalid value "5" for flag --every'),
        (["--quiet=maybe"], 'invalid value "maybe" for flag --quiet'),
        (["--count"], "flag needs an argument: --count"),
        (["stray"], "unexpected argument 'stray'"),
        (["---x"], "bad flag syntax: ---x"),
    ],
)
def test_flag_mistakes_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_into(Opts(), FLAGS, argv)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_help_and_version_actions() -> None:
    assert parse_into(Opts(), FLAGS, ["--count=1", "-h"]).action == "help"
    assert parse_into(Opts(), FLAGS, ["--version"]).action == "version"
    text = format_help("tool", "Does things.", Opts(), FLAGS)
    assert text.startswith("Usage: tool [flags]\n")
    assert "  --count int\n        how many (default 200)" in text
    assert "  --every duration\n        how often (default 30s)" in text
    assert '  --name string\n        a name (default "x")' in text
    assert "  -n int" in text and "  --version" in text


def test_version_line_and_ephemeral_channel() -> None:
    assert re.fullmatch(r"nsq_tail v1\.3\.0 \(nsqpy \S+, python \S+\)", version_line("nsq_tail"))
    for _ in range(20):
        assert re.fullmatch(r"tail\d{6}#ephemeral", ephemeral_channel())


def test_consumer_opts_map_go_nsq_keys() -> None:
    config = parse_client_opts(
        ["max_in_flight,5", "max-attempts,3", "default_requeue_delay,2s", "heartbeat_interval,5s",
         "msg_timeout,1m", "dial_timeout,250ms", "lookupd_poll_jitter,0.1", "sample_rate,10"],
        "consumer-opt",
    )  # fmt: skip
    assert config.consumer == {
        "max_in_flight": 5, "max_attempts": 3, "requeue_delay": 2.0, "lookupd_poll_jitter": 0.1,
    }  # fmt: skip
    assert config.identify == {"heartbeat_interval": 5.0, "msg_timeout": 60.0, "sample_rate": 10}
    assert config.connect_timeout == pytest.approx(0.25)
    assert identify_options(config, "nsq_tail").user_agent.startswith("nsq_tail/1.3.0 nsqpy/")


def test_tls_compression_and_auth_opts_map_to_the_client(tmp_path: Path) -> None:
    from nsqpy.testing.certs import make_certs

    certs = make_certs(tmp_path)
    config = parse_client_opts(
        ["tls_v1", f"tls_root_ca_file,{certs.ca}", f"tls_cert,{certs.client_cert}",
         f"tls_key,{certs.client_key}", "tls_min_version,tls1.2", "deflate,true",
         "deflate_level,3", "auth_secret,s3cret"],
        "producer-opt",
    )  # fmt: skip
    assert config.identify == {
        "tls_v1": True, "deflate": True, "deflate_level": 3, "auth_secret": "s3cret",
    }  # fmt: skip
    identify = identify_options(config, "to_nsq")
    assert identify.tls_v1 and identify.deflate and identify.auth_secret == "s3cret"
    assert identify.tls_context is not None
    assert identify.tls_context.minimum_version.name == "TLSv1_2"
    with pytest.raises(FlagError, match="both deflate and snappy"):
        parse_client_opts(["snappy", "deflate"], "consumer-opt")
    bad = parse_client_opts(["tls_v1", "tls_root_ca_file,/nonexistent/ca.pem"], "consumer-opt")
    with pytest.raises(FlagError, match="cannot load TLS files"):
        identify_options(bad, "nsq_tail")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("bogus,1", "invalid option bogus"),
        ("max_in_flight,x", "max_in_flight,x"),
        ("max_in_flight", "needs a value"),
        ("default_requeue_delay,90", "default_requeue_delay,90"),
        ("tls_config,x", "not supported"),
        ("deflate_level,10", "out of range"),
        ("tls_v1,maybe", "tls_v1,maybe"),
        ("max_attempts,70000", "out of range"),
    ],
)
def test_bad_consumer_opts(item: str, message: str) -> None:
    with pytest.raises(FlagError, match=re.escape(message)):
        parse_client_opts([item], "consumer-opt")


def test_round_robin_cycles() -> None:
    selector = Selector("round-robin", ["a", "b", "c"])
    assert [selector.pick() for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]
    selector.mark("b", False)  # round-robin ignores failures
    assert [selector.pick() for _ in range(3)] == ["a", "b", "c"]


def test_hostpool_skips_a_failed_host_until_its_retry_time() -> None:
    now = [100.0]
    selector = Selector("hostpool", ["a", "b"], clock=lambda: now[0])
    assert selector.pick() == "a"
    selector.mark("a", False)
    assert {selector.pick() for _ in range(5)} == {"b"}
    now[0] += INITIAL_RETRY + 1
    picks = [selector.pick() for _ in range(3)]
    assert picks.count("a") == 1  # retried once, then back off again (60 s)
    selector.mark("a", True)
    assert {selector.pick() for _ in range(4)} == {"a", "b"}


def test_hostpool_revives_everyone_when_all_failed() -> None:
    selector = Selector("hostpool", ["a", "b"], clock=lambda: 0.0)
    selector.mark("a", False)
    selector.mark("b", False)
    assert selector.pick() == "a"
    assert not any(h.dead for h in selector.hosts)


def test_epsilon_greedy_prefers_the_fastest_host() -> None:
    selector = Selector("epsilon-greedy", ["slow", "fast"], rng=random.Random(7), epsilon=0.1)
    selector.mark("slow", True, 0.5)
    selector.mark("fast", True, 0.01)
    picks = [selector.pick() for _ in range(200)]
    assert picks.count("fast") > 150
    assert "slow" in picks  # still explored now and then
    with pytest.raises(ValueError):
        Selector("fanout", ["a"])


def test_rate_limiter_allows_rate_per_second() -> None:
    now = [0.0]
    limiter = RateLimiter(4, clock=lambda: now[0])
    assert limiter.delay() == 0.0  # one token at start
    assert limiter.delay() == pytest.approx(0.25)
    now[0] += 10.0  # credit is capped at one second (4 tokens)
    assert [limiter.delay() for _ in range(4)] == [0.0] * 4
    assert limiter.delay() > 0


@given(
    st.lists(st.binary(max_size=8).filter(lambda b: b"," not in b), max_size=20),
    st.binary(max_size=5),
)
def test_split_chunks_keeps_every_non_empty_chunk(parts: list[bytes], tail: bytes) -> None:
    tail = tail.replace(b",", b"")
    buffer = bytearray(b"".join(p + b"," for p in parts) + tail)
    assert split_chunks(buffer, ord(",")) == [p for p in parts if p]
    assert bytes(buffer) == tail


def test_json_filter_require_and_whitelist() -> None:
    f = JsonFilter("kind", "click", ["id", "n", "html"])
    assert f.should_pass({"kind": "click"}) == (True, False)
    assert f.should_pass({"kind": "view"}) == (False, False)
    assert f.should_pass({"other": 1}) == (False, True)  # missing field with a value: backoff
    assert f.should_pass([1, 2]) == (False, True)
    number = JsonFilter("n", "2", [])
    assert number.should_pass({"n": 2.0}) == (True, False)
    assert number.should_pass({"n": True}) == (False, False)
    assert JsonFilter("n", "", []).should_pass({"n": None}) == (True, False)
    doc = {"kind": "click", "n": 3.0, "id": 7, "html": "<a&b>"}
    assert f.filtered(doc, b"raw") == b'{"html":"\\u003ca\\u0026b\\u003e","id":7,"n":3}'
    with pytest.raises(ValueError):
        f.filtered([1], b"raw")
    assert JsonFilter("", "", []).filtered({"a": 1}, b"raw") == b"raw"


def test_get_url_and_headers() -> None:
    assert get_url("http://h/x?d=%s&p=100%%", b"a b&c/\xff") == "http://h/x?d=a+b%26c%2F%FF&p=100%"
    assert parse_headers(["X-A: 1", "Auth:Bearer t:x"]) == {"X-A": "1", "Auth": "Bearer t:x"}


def test_timer_metrics_logs_every_n() -> None:
    metrics = TimerMetrics(4, "[aggregate]:")
    for elapsed in (0.001, 0.002, 0.003, 0.004, 0.005):
        metrics.status(elapsed)
    assert metrics.lines == ["[aggregate]: finished 4 - 99th: 3.00ms - 95th: 3.00ms - avg: 2.50ms"]
    silent = TimerMetrics(0, "x")
    silent.status(1.0)
    assert silent.lines == [] and silent.timings == []


async def test_nsq_stat_repeats_the_header_every_25_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from nsqpy.tools import stat
    from nsqpy.tools.common import Signals

    polls = iter(range(100))

    async def fake_poll(http: object, opts: object) -> stat.ChannelTotals:
        n = next(polls)
        return stat.ChannelTotals(
            depth=5 + n, backend_depth=2, message_count=10 * n, client_count=1
        )

    monkeypatch.setattr(stat, "poll", fake_poll)
    out = io.StringIO()
    opts = stat.StatOptions(
        topic="t", channel="c", interval=0.01, count=30, nsqd_http_addresses=["h:1"]
    )
    assert await stat.run(opts, Signals(), out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 + 24 + 2 + 6
    assert lines[0:2] == stat.header_lines() and lines[26:28] == stat.header_lines()
    # ingress = 10 msgs / 0.01 s; egress = (10 - 1 more in depth) / 0.01 s
    assert (
        lines[2]
        == f"{1000:7d} {900:7d} | {6:7d} {4:7d} {2:7d} {0:5d} {0:5d} | {0:7d} {0:7d} {10:12d} {1:7d}"
    )
