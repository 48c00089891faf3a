"""The auth server's regexes cannot freeze nsqd: they are matched in linear time (RE2).

A backtracking engine takes time exponential in the topic name for ``(a+)+$`` against
``aaaa…a-``: Python's ``re`` needs about 2**40 steps for the 40 letters here, and nsqd has
one event loop, so every client would wait. RE2 answers at once, and refuses (as Go's regexp
does) what it cannot run in linear time, such as a look-ahead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nsqpy.testing import StartNsqd, WireClient, pub, wait_for
from nsqpy.testing.auth import AuthStub, auth_reply, authed_client, grant, timed_pub

EVIL_TOPIC = "a" * 40 + "-"  # a valid topic name that makes (a+)+$ backtrack 2**40 ways


@pytest.fixture
def auth_stub() -> Iterator[AuthStub]:
    with AuthStub() as stub:
        yield stub


def test_a_backtracking_topic_regex_does_not_hold_other_clients(
    start_nsqd: StartNsqd, auth_stub: AuthStub
) -> None:
    auth_stub.replies = {"evil": grant("(a+)+$"), "probe": grant("^probe$")}
    nsqd = start_nsqd(f"--auth-http-address={auth_stub.address}")
    probe = authed_client(nsqd.tcp_port, "probe", timeout=3.0)
    timed_pub(probe, "probe")
    evil = authed_client(nsqd.tcp_port, "evil", timeout=3.0)

    # Each answer comes within the clients' 3 s timeout (read_frame fails after it), where
    # a backtracking engine would take hours: no bound timed on the machine is needed.
    evil.send(pub(EVIL_TOPIC, b"x"))
    timed_pub(probe, "probe")  # answered while EVIL_TOPIC is checked
    refused = b'E_UNAUTHORIZED AUTH failed for PUB on "%s" ""' % EVIL_TOPIC.encode()
    assert evil.read_frame() == (1, refused)
    assert evil.closed()
    timed_pub(probe, "probe")


def test_patterns_go_refuses_are_refused(start_nsqd: StartNsqd, auth_stub: AuthStub) -> None:
    """A look-ahead compiles in Python's re but neither in Go's regexp nor in RE2: the
    client gets E_AUTH_FAILED, nsqd's log says why, and RE2 writes nothing of its own."""
    auth_stub.replies = {"ahead": grant("^(?=a)a")}
    nsqd = start_nsqd(f"--auth-http-address={auth_stub.address}")
    assert auth_reply(WireClient(nsqd.tcp_port, timeout=3.0), "ahead") == (
        1,
        b"E_AUTH_FAILED AUTH failed",
    )
    wait_for(lambda: any("unable to compile topic" in line for line in nsqd.log_lines), 5.0)
    assert not any("re2.cc" in line for line in nsqd.log_lines)
