"""The registration DB and Registry without sockets: time comes from a FakeClock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.lookupd.registry import (
    CLIENT_REGISTRATION,
    PeerInfo,
    Producer,
    Registration,
    RegistrationDB,
    Registry,
)
from nsqpy.testing import FakeClock

SECOND_MS = 1000


def peer(n: int = 1, address: str = "10.0.0.1", http_port: int = 4151) -> PeerInfo:
    return PeerInfo(
        id=f"127.0.0.1:{50000 + n}",
        remote_address=f"127.0.0.1:{50000 + n}",
        hostname=f"host{n}",
        broadcast_address=address,
        tcp_port=4150,
        http_port=http_port,
        version="1.3.0",
    )


@pytest.fixture
def reg(clock: FakeClock) -> Registry:
    return Registry(clock=clock, inactive_producer_timeout_ms=300_000, tombstone_lifetime_ms=45_000)


def live(reg: Registry, topic: str) -> list[str]:
    """Ids of the producers /lookup would show for ``topic``."""
    found = reg.lookup(topic)
    assert found is not None
    return [p.id for p in found[1]]


# -- IDENTIFY, REGISTER, UNREGISTER ---------------------------------------------------------


def test_identify_stamps_the_peer_and_joins_the_client_registration(
    reg: Registry, clock: FakeClock
) -> None:
    a = peer(1)
    assert reg.identify(a) is True
    assert a.last_update == clock.now
    assert reg.db.lookup_registrations(a.id) == [CLIENT_REGISTRATION]
    assert reg.identify(a) is False  # already there: the existing producer is kept


def test_register_with_channel_adds_channel_and_topic(reg: Registry) -> None:
    a = peer(1)
    reg.identify(a)
    added = reg.register(a, "t", "c")
    assert added == [Registration("channel", "t", "c"), Registration("topic", "t")]
    assert reg.register(a, "t", "c") == []  # idempotent
    assert reg.topics() == ["t"]
    assert reg.channels("t") == ["c"]
    assert reg.lookup("t") == (["c"], [a])


def test_register_topic_only_adds_no_channel(reg: Registry) -> None:
    a = peer(1)
    reg.identify(a)
    assert reg.register(a, "t") == [Registration("topic", "t")]
    assert reg.channels("t") == []
    assert reg.lookup("t") == ([], [a])


def test_unregister_channel_leaves_topic_and_keeps_empty_registration(reg: Registry) -> None:
    a = peer(1)
    reg.identify(a)
    reg.register(a, "t", "c")
    assert reg.unregister(a, "t", "c") == [Registration("channel", "t", "c")]
    assert reg.channels("t") == ["c"]  # a durable channel's registration stays
    assert reg.lookup("t") == (["c"], [a])  # still a producer of the topic
    assert reg.unregister(a, "t", "c") == []  # nothing left to remove


def test_unregister_ephemeral_channel_removes_it_with_the_last_producer(reg: Registry) -> None:
    a, b = peer(1), peer(2)
    for p in (a, b):
        reg.identify(p)
        reg.register(p, "t", "c#ephemeral")
    reg.unregister(a, "t", "c#ephemeral")
    assert reg.channels("t") == ["c#ephemeral"]  # b is still there
    reg.unregister(b, "t", "c#ephemeral")
    assert reg.channels("t") == []


def test_unregister_topic_leaves_all_its_channels(reg: Registry) -> None:
    a, b = peer(1), peer(2)
    for p in (a, b):
        reg.identify(p)
        reg.register(p, "t", "c1")
        reg.register(p, "t", "c2")
    reg.register(a, "other", "c1")
    left = reg.unregister(a, "t")
    assert set(left) == {
        Registration("channel", "t", "c1"),
        Registration("channel", "t", "c2"),
        Registration("topic", "t"),
    }
    assert reg.lookup("t") == (["c1", "c2"], [b])
    assert reg.lookup("other") == (["c1"], [a])
    producers = reg.db.producers_of(Registration("channel", "t", "c1"))
    assert producers is not None and list(producers) == [b.id]


def test_unregister_ephemeral_topic_removes_it_when_empty(reg: Registry) -> None:
    a, b = peer(1), peer(2)
    for p in (a, b):
        reg.identify(p)
        reg.register(p, "t#ephemeral")
    reg.register(a, "durable")
    reg.unregister(a, "t#ephemeral")
    assert "t#ephemeral" in reg.topics()
    reg.unregister(b, "t#ephemeral")
    assert reg.lookup("t#ephemeral") is None
    reg.unregister(a, "durable")
    assert reg.lookup("durable") == ([], [])  # a durable topic's registration stays


def test_remove_peer_leaves_everything_and_spares_other_peers(reg: Registry) -> None:
    a, b = peer(1), peer(2)
    for p in (a, b):
        reg.identify(p)
        reg.register(p, "t", "c")
    reg.register(a, "only-a", "x#ephemeral")
    gone = reg.remove_peer(a.id)
    assert CLIENT_REGISTRATION in gone and len(gone) == 5
    assert reg.db.lookup_registrations(a.id) == []
    assert reg.lookup("t") == (["c"], [b])
    # registrations stay, even empty and even ephemeral ones (as nsqlookupd does)
    assert reg.lookup("only-a") == (["x#ephemeral"], [])
    assert [p.id for p, _, _ in reg.nodes()] == [b.id]
    assert reg.remove_peer(a.id) == []


# -- time: inactivity and tombstones ----------------------------------------------------------


def test_inactive_producer_hidden_until_it_pings(reg: Registry, clock: FakeClock) -> None:
    a, b = peer(1), peer(2)
    for p in (a, b):
        reg.identify(p)
        reg.register(p, "t")
    clock.advance_ms(200 * SECOND_MS)
    reg.ping(b)
    clock.advance_ms(100 * SECOND_MS)  # a: exactly 300 s since IDENTIFY -> still active
    assert live(reg, "t") == [a.id, b.id]
    clock.advance_ms(1)
    assert live(reg, "t") == [b.id]
    assert [p.id for p, _, _ in reg.nodes()] == [b.id]
    reg.ping(a)
    assert live(reg, "t") == [a.id, b.id]
    assert reg.topics() == ["t"]  # inactivity never removes registrations


def test_tombstone_hides_producer_for_its_lifetime_only(reg: Registry, clock: FakeClock) -> None:
    a, b = peer(1, "10.0.0.1"), peer(2, "10.0.0.2")
    for p in (a, b):
        reg.identify(p)
        reg.register(p, "t", "c")
        reg.register(p, "u")
    assert reg.tombstone("t", "10.0.0.1:4151") == 1
    assert reg.tombstone("t", "10.0.0.9:4151") == 0
    assert reg.tombstone("t", "10.0.0.1:9999") == 0
    assert live(reg, "t") == [b.id]
    assert live(reg, "u") == [a.id, b.id]
    nodes = {p.id: (topics, tombs) for p, topics, tombs in reg.nodes()}
    assert nodes[a.id] == (["t", "u"], [True, False])  # still listed, flagged per topic
    assert nodes[b.id] == (["t", "u"], [False, False])
    clock.advance_ms(45 * SECOND_MS - 1)
    assert live(reg, "t") == [b.id]
    clock.advance_ms(1)
    assert live(reg, "t") == [a.id, b.id]
    assert {p.id: t for p, _, t in reg.nodes()}[a.id] == [False, False]


def test_reregister_keeps_tombstone_but_unregister_clears_it(reg: Registry) -> None:
    a = peer(1)
    reg.identify(a)
    reg.register(a, "t")
    reg.tombstone("t", "10.0.0.1:4151")
    reg.register(a, "t")  # same producer object: still tombstoned
    assert reg.lookup("t") == ([], [])
    reg.unregister(a, "t")
    reg.register(a, "t")  # a new producer
    assert reg.lookup("t") == ([], [a])


def test_tombstones_parallel_to_topics_for_every_node(reg: Registry) -> None:
    a = peer(1)
    reg.identify(a)
    for i in range(10):
        reg.register(a, f"t{i}", "c" if i % 2 else None)
        if i % 3 == 0:
            reg.tombstone(f"t{i}", "10.0.0.1:4151")
    ((_, topics, tombstones),) = reg.nodes()
    assert topics == [f"t{i}" for i in range(10)]
    assert tombstones == [i % 3 == 0 for i in range(10)]


# -- the HTTP operations ------------------------------------------------------------------------


def test_create_and_delete_topics_and_channels(reg: Registry) -> None:
    assert reg.lookup("t") is None
    reg.create_topic("t")
    assert reg.lookup("t") == ([], [])
    reg.create_channel("u", "c")
    assert reg.topics() == ["t", "u"]
    assert reg.channels("u") == ["c"]
    assert reg.delete_channel("u", "c") is True
    assert reg.delete_channel("u", "c") is False
    assert reg.channels("u") == []
    reg.create_channel("u", "c")
    reg.delete_topic("u")
    assert reg.topics() == ["t"]
    assert reg.channels("u") == []


def test_delete_topic_removes_registrations_with_their_producers(reg: Registry) -> None:
    a = peer(1)
    reg.identify(a)
    reg.register(a, "t", "c")
    reg.delete_topic("t")
    assert reg.db.lookup_registrations(a.id) == [CLIENT_REGISTRATION]
    assert reg.nodes()[0][1:] == ([], [])


def test_star_is_a_wildcard_like_in_nsqlookupd(reg: Registry) -> None:
    a = peer(1)
    reg.identify(a)
    reg.register(a, "t1", "c1")
    reg.register(a, "t2", "c2")
    assert reg.channels("*") == ["c1", "c2"]
    assert reg.lookup("*") == (["c1", "c2"], [a])  # producers once per peer
    reg.delete_topic("*")
    assert reg.topics() == []


# -- RegistrationDB against a brute-force model ------------------------------------------------

NAMES = st.sampled_from(["a", "b", "*"])
REGS = st.builds(Registration, st.sampled_from(["topic", "channel"]), NAMES, NAMES)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add_reg"), REGS, st.integers(0, 2)),
        st.tuples(st.just("add"), REGS, st.integers(0, 2)),
        st.tuples(st.just("remove"), REGS, st.integers(0, 2)),
        st.tuples(st.just("remove_reg"), REGS, st.integers(0, 2)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_db_indexes_agree_with_a_full_scan(ops: list[tuple[str, Registration, int]]) -> None:
    db = RegistrationDB()
    peers = [peer(i) for i in range(3)]
    model: dict[Registration, dict[str, Producer]] = {}
    for op, r, n in ops:
        if op == "add_reg":
            db.add_registration(r)
            model.setdefault(r, {})
        elif op == "add":
            fresh = r not in model or peers[n].id not in model[r]
            assert db.add_producer(r, Producer(peers[n])) is fresh
            model.setdefault(r, {}).setdefault(peers[n].id, Producer(peers[n]))
        elif op == "remove":
            was = r in model and peers[n].id in model[r]
            left = len(model[r]) - was if r in model else 0
            assert db.remove_producer(r, peers[n].id) == (was, left)
            if r in model:
                model[r].pop(peers[n].id, None)
        else:
            db.remove_registration(r)
            model.pop(r, None)
    assert len(db) == len(model)
    for category in ("topic", "channel"):
        for key in ("a", "b", "*"):
            for subkey in ("a", "b", "*"):
                got = db.find_registrations(category, key, subkey)
                want = [r for r in model if r.matches(category, key, subkey)]
                if key != "*" and subkey != "*":
                    want = [r for r in model if r == Registration(category, key, subkey)]
                assert sorted(got, key=repr) == sorted(want, key=repr)
                found = {p.peer.id for p in db.find_producers(category, key, subkey)}
                assert found == {pid for r in want for pid in model[r]}
                assert len(db.find_producers(category, key, subkey)) == len(found)
    for p in peers:
        assert set(db.lookup_registrations(p.id)) == {r for r, ps in model.items() if p.id in ps}
