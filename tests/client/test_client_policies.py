"""The pure policies: RDY planning (SPEC 7.2), backoff (SPEC 7.3), lookupd URL/reply parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.client.backoff import Backoff
from nsqpy.client.errors import ClientError
from nsqpy.client.lookup import lookup_url, parse_producers
from nsqpy.client.rdy import RdyMode, RdySlot, RdyTimeouts, changes, plan_rdy


def slots(n: int, **kw: object) -> list[RdySlot]:
    return [RdySlot(key=f"c{i}", **kw) for i in range(n)]  # type: ignore[arg-type]


# ---- RDY -----------------------------------------------------------------------------------
def test_even_split_gives_the_remainder_to_the_first_connections() -> None:
    assert plan_rdy(slots(3), 10, RdyMode.NORMAL, 0.0) == {"c0": 4, "c1": 3, "c2": 3}


def test_even_split_is_capped_by_the_servers_max_rdy_count() -> None:
    s = slots(2, max_rdy=5)
    assert plan_rdy(s, 100, RdyMode.NORMAL, 0.0) == {"c0": 5, "c1": 5}


def test_paused_and_zero_budget_mean_rdy_zero_everywhere() -> None:
    s = slots(3, rdy=2)
    assert plan_rdy(s, 6, RdyMode.PAUSED, 0.0) == {"c0": 0, "c1": 0, "c2": 0}
    assert plan_rdy(s, 0, RdyMode.NORMAL, 0.0) == {"c0": 0, "c1": 0, "c2": 0}


def test_testing_grants_one_rdy_to_the_connection_that_waited_longest() -> None:
    s = slots(3)
    s[0].rdy_changed_at, s[1].rdy_changed_at, s[2].rdy_changed_at = 5.0, 1.0, 3.0
    assert plan_rdy(s, 10, RdyMode.TESTING, 10.0) == {"c0": 0, "c1": 1, "c2": 0}


def test_testing_hands_the_test_on_when_the_tester_is_idle_at_a_rotation_tick() -> None:
    s = slots(2)
    s[0].rdy, s[0].rdy_changed_at, s[0].last_message_at = 1, 0.0, 0.0
    t = RdyTimeouts(idle_timeout=1.0, hold_timeout=100.0)
    assert plan_rdy(s, 5, RdyMode.TESTING, 5.0, timeouts=t) == {"c0": 1, "c1": 0}
    assert plan_rdy(s, 5, RdyMode.TESTING, 5.0, rotate=True, timeouts=t) == {"c0": 0, "c1": 1}


def test_low_rdy_grants_at_most_max_in_flight_connections_rdy_one() -> None:
    plan = plan_rdy(slots(5), 2, RdyMode.NORMAL, 0.0)
    assert sorted(plan.values()) == [0, 0, 0, 1, 1]


def test_low_rdy_keeps_busy_holders_without_a_rotation_tick() -> None:
    s = slots(3)
    s[2].rdy = 1
    s[2].in_flight = 1
    assert plan_rdy(s, 1, RdyMode.NORMAL, 100.0) == {"c0": 0, "c1": 0, "c2": 1}


def test_low_rdy_rotation_moves_an_idle_grant_to_the_longest_waiting() -> None:
    s = slots(3)
    s[0].rdy, s[0].rdy_changed_at, s[0].last_message_at = 1, 10.0, 10.0
    s[1].rdy_changed_at = 4.0
    s[2].rdy_changed_at = 2.0
    t = RdyTimeouts(idle_timeout=5.0, hold_timeout=60.0)
    assert plan_rdy(s, 1, RdyMode.NORMAL, 16.0, rotate=True, timeouts=t) == {
        "c0": 0,
        "c1": 0,
        "c2": 1,
    }


def test_low_rdy_rotation_takes_back_a_grant_held_too_long_even_when_busy() -> None:
    s = slots(2)
    s[0].rdy, s[0].rdy_changed_at, s[0].in_flight, s[0].last_message_at = 1, 0.0, 1, 29.0
    t = RdyTimeouts(idle_timeout=5.0, hold_timeout=30.0)
    assert plan_rdy(s, 1, RdyMode.NORMAL, 31.0, rotate=True, timeouts=t) == {"c0": 0, "c1": 1}


@given(n=st.integers(2, 12), data=st.data())
def test_low_rdy_rotation_never_starves_a_connection(n: int, data: st.DataObject) -> None:
    """Simulate ticks with idle connections: every connection gets a grant within n ticks."""
    mif = data.draw(st.integers(1, n - 1))
    s = slots(n)
    t = RdyTimeouts(idle_timeout=1.0, hold_timeout=3.0)
    granted: set[str] = set()
    now = 0.0
    for _ in range(n + 1):
        plan = plan_rdy(s, mif, RdyMode.NORMAL, now, rotate=True, timeouts=t)
        assert sum(plan.values()) <= mif
        for slot in s:
            if plan[slot.key] != slot.rdy:
                slot.rdy, slot.rdy_changed_at = plan[slot.key], now
            if slot.rdy:
                granted.add(slot.key)
        now += 1.5
    assert granted == {x.key for x in s}


@given(
    n=st.integers(1, 20),
    mif=st.integers(0, 3000),
    max_rdy=st.integers(1, 2500),
    mode=st.sampled_from(list(RdyMode)),
    rotate=st.booleans(),
    rdys=st.lists(st.integers(0, 3), min_size=20, max_size=20),
)
def test_plans_never_exceed_the_budget_or_the_server_limit(
    n: int, mif: int, max_rdy: int, mode: RdyMode, rotate: bool, rdys: list[int]
) -> None:
    s = slots(n, max_rdy=max_rdy)
    for slot, r in zip(s, rdys, strict=False):
        slot.rdy = r
    plan = plan_rdy(s, mif, mode, 100.0, rotate=rotate)
    assert set(plan) == {x.key for x in s}
    assert sum(plan.values()) <= mif
    assert all(0 <= v <= max_rdy for v in plan.values())
    if mode is RdyMode.TESTING:
        assert sum(plan.values()) == min(1, mif)
    if mode is RdyMode.NORMAL and mif > 0 and n <= mif and max_rdy * n >= mif:
        assert sum(plan.values()) == mif


def test_changes_lists_only_changed_values_with_decreases_first() -> None:
    s = slots(3)
    s[0].rdy, s[1].rdy, s[2].rdy = 5, 0, 2
    assert changes(s, {"c0": 2, "c1": 3, "c2": 2}) == [("c0", 2), ("c1", 3)]


# ---- backoff -------------------------------------------------------------------------------
def test_backoff_blocks_then_tests_then_recovers_step_by_step() -> None:
    b = Backoff(multiplier=1.0, max_duration=8.0)
    assert b.mode is RdyMode.NORMAL
    assert b.signal(False) == 2.0 and b.mode is RdyMode.PAUSED  # go-nsq: multiplier * 2^1
    assert b.signal(False) is None  # ignored while blocked
    b.unblock()
    assert b.mode is RdyMode.TESTING
    assert b.signal(False) == 4.0 and b.level == 2
    b.unblock()
    assert b.signal(True) == 2.0 and b.level == 1  # success at level 2: block shorter
    b.unblock()
    assert b.signal(True) is None and b.mode is RdyMode.NORMAL
    assert b.signal(True) is None and b.level == 0


def test_backoff_duration_is_capped_and_the_level_stops_growing() -> None:
    b = Backoff(multiplier=1.0, max_duration=5.0)
    durations = []
    for _ in range(10):
        durations.append(b.signal(False))
        b.unblock()
    assert durations[:3] == [2.0, 4.0, 4.0]  # 8 s would exceed 5 s: the level stays at 2
    assert set(durations[2:]) == {4.0}
    assert b.level == b.max_level == 2


def test_backoff_defaults_follow_go_nsq() -> None:
    """go-nsq's defaults (backoff_multiplier 1s, max_backoff_duration 2m): 2, 4, … 64 s."""
    b = Backoff()
    durations = []
    for _ in range(8):
        durations.append(b.signal(False))
        b.unblock()
    assert durations == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 64.0, 64.0]
    assert Backoff(multiplier=1.0, max_duration=1.5).signal(False) is None  # never backs off


def test_backoff_disabled_with_zero_max_duration() -> None:
    b = Backoff(max_duration=0.0)
    assert b.signal(False) is None and b.mode is RdyMode.NORMAL


# ---- lookupd -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("127.0.0.1:4161", "http://127.0.0.1:4161/lookup?topic=t"),
        ("http://127.0.0.1:4161", "http://127.0.0.1:4161/lookup?topic=t"),
        ("http://127.0.0.1:4161/", "http://127.0.0.1:4161/lookup?topic=t"),
        ("https://h:1/api/lookup?x=1", "https://h:1/api/lookup?x=1&topic=t"),
        ("http://h:1/lookup?topic=old", "http://h:1/lookup?topic=t"),
    ],
)
def test_lookup_url_normalisation(address: str, url: str) -> None:
    assert lookup_url(address, "t") == url


def test_parse_producers_reads_broadcast_address_and_tcp_port() -> None:
    payload = {
        "channels": ["c"],
        "producers": [
            {"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151},
            {"address": "10.0.0.2", "tcp_port": 4150},  # pre-1.0 lookupd
            {"broadcast_address": "::1", "tcp_port": 4150},
            {"broadcast_address": "127.0.0.1", "tcp_port": 4150},  # duplicate
            {"broadcast_address": "", "tcp_port": 4150},
            {"broadcast_address": "x", "tcp_port": "4150"},
            "junk",
        ],
    }
    assert parse_producers(payload) == ["127.0.0.1:4150", "10.0.0.2:4150", "[::1]:4150"]
    legacy = {"status_code": 200, "data": {"producers": [{"address": "a", "tcp_port": 1}]}}
    assert parse_producers(legacy) == ["a:1"]


@pytest.mark.parametrize("payload", [[], "x", {"channels": []}, {"producers": 3}])
def test_parse_producers_rejects_malformed_replies(payload: object) -> None:
    with pytest.raises(ClientError):
        parse_producers(payload)


def test_the_client_never_imports_servers_or_the_test_kit() -> None:
    import ast
    from pathlib import Path

    import nsqpy.client

    forbidden = ("nsqpy.nsqd", "nsqpy.lookupd", "nsqpy.broker", "nsqpy.storage", "nsqpy.testing")
    found = []
    for path in Path(nsqpy.client.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.startswith(forbidden)]
    assert found == []
