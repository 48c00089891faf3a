"""The suite loads nsqpy's test kit as a pytest plugin (``nsqpy.testing.pytest_plugin``): the
shared fixtures (``clock``, ``nsqd``, ``nsqd_servers``, ``data_path``, ``start_nsqd``) and
the teardown after every test that closes the connections it left open. The kit's own
``assert`` statements (``subscriber``, ``publish``) are rewritten to show their values.

Every etcd member a test starts through ``nsqpy.testing.etcd`` keeps its data on /dev/shm
when there is room (``IN_MEMORY_ENV``): a member's fsync then never waits behind what other
tests write to the disk, which took longer than the test clusters' 2 s leases. (The Jepsen
harness's members keep theirs on disk.)

With ``NSQPY_ARTIFACTS`` set (``make test``), each test's start and end, and the pytest-xdist
worker that ran it, go to ``timeline.jsonl`` there: where a run's wall time went."""

import json
import os
import time
from collections.abc import Iterator

import pytest

pytest.register_assert_rewrite("nsqpy.testing")
os.environ.setdefault("NSQPY_TEST_ETCD_IN_MEMORY", "1")  # (nsqpy.testing.etcd.IN_MEMORY_ENV)

pytest_plugins = ["nsqpy.testing.pytest_plugin"]


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The position of every ``os.pread`` made from here on (what was read from a disk)."""
    reads: list[int] = []
    pread = os.pread

    def counted(fd: int, n: int, at: int) -> bytes:
        reads.append(at)
        return pread(fd, n, at)

    monkeypatch.setattr(os, "pread", counted)
    return reads


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    start = time.time()
    yield
    base = os.environ.get("NSQPY_ARTIFACTS")
    if base:
        line = json.dumps({"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                           "start": round(start, 2), "end": round(time.time(), 2)})  # fmt: skip
        os.makedirs(base, exist_ok=True)
        with open(os.path.join(base, "timeline.jsonl"), "a") as out:
            out.write(line + "\n")
