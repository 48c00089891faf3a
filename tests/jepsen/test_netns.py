"""The harness's network (``nsqpy.jepsen.netns``) for real: namespaces, veths and nftables
rules made by the test (root), probed with TCP connections between them, and torn down."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.jepsen.netns import Network, clean_stale, preflight
from nsqpy.testing.disks import SmallDisk

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

PORT = 23456
LISTEN = (
    "import socket, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"s.bind(('0.0.0.0', {PORT})); s.listen(64); print('up', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.close()\n"
)
CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.7).close()\n"
    "except OSError:\n"
    "    sys.exit(1)\n"
)


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.split()}


@pytest.fixture
def net() -> Iterator[Network]:
    problem = preflight()
    assert problem is None, problem
    network = Network(["a", "b", "c"]).create()
    listeners = []
    try:
        for host in network.hosts:
            proc = subprocess.Popen(
                [*network.exec_prefix(host), sys.executable, "-c", LISTEN], stdout=subprocess.PIPE
            )
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
            listeners.append(proc)
        yield network
    finally:
        for proc in listeners:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        network.destroy()


def reaches(net: Network, src: str, dst: str) -> bool:
    probe = subprocess.run(
        [*net.exec_prefix(src), sys.executable, "-c", CONNECT, net.address(dst), str(PORT)],
        capture_output=True,
    )
    return probe.returncode == 0


def test_hosts_reach_each_other_and_only_by_their_own_addresses(net: Network) -> None:
    assert all(reaches(net, a, b) for a in net.hosts for b in net.hosts if a != b)
    root = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True).stdout
    assert "10.77.0." not in root  # the root namespace got no address of the range


def test_a_cut_drops_both_ways_between_the_groups_only(net: Network) -> None:
    net.cut(["a"], ["b"])
    assert not reaches(net, "a", "b") and not reaches(net, "b", "a")
    assert reaches(net, "a", "c") and reaches(net, "c", "b")
    net.heal()
    assert reaches(net, "a", "b") and reaches(net, "b", "a")


def test_isolate_keeps_the_hosts_asked_for(net: Network) -> None:
    net.isolate("a", keep=["c"])
    assert not reaches(net, "a", "b") and not reaches(net, "b", "a")
    assert reaches(net, "c", "a") and reaches(net, "a", "c")
    net.heal()
    assert reaches(net, "b", "a")


def test_a_lossy_host_drops_part_of_what_it_receives(net: Network) -> None:
    udp = (
        "import socket, sys\n"
        "r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(('0.0.0.0', 0))\n"
        "r.settimeout(0.03); s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); got = 0\n"
        "for _ in range(400):\n"
        "    s.sendto(b'x', ('127.0.0.1', r.getsockname()[1]))\n"
        "    try:\n"
        "        r.recv(8); got += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print(got)\n"
    )

    def received() -> int:
        out = subprocess.run([*net.exec_prefix("b"), sys.executable, "-c", udp],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return int(out.stdout)

    assert received() == 400
    what = net.lossy("b", 40, 100, 1000)
    assert "40%" in what
    assert 120 < received() < 360  # 40% of 400 lost, give or take
    net.heal()
    assert received() == 400


def test_destroy_removes_every_namespace() -> None:
    network = Network(["x", "y"]).create()
    made = {network.ns("x"), network.ns("y"), network.switch}
    assert made <= namespaces()
    network.destroy()
    assert not made & namespaces()


def test_namespaces_of_a_dead_harness_are_cleaned_and_a_live_ones_kept() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    time.sleep(0.05)
    orphan = Network(["z"], prefix=f"nsqpyj{dead.pid}-").create()
    live = Network(["z"], prefix=f"nsqpyj{os.getpid()}-zz").create()
    # the folder a dead harness mounted its nodes' small disks in (one still mounted)
    orphan_disks = Path(f"/tmp/nsqpyj{dead.pid}-disks")
    disk = SmallDisk(orphan_disks / "n1", 1 << 20)
    try:
        disk.mount()
        removed = clean_stale()
        assert orphan.ns("z") in removed and orphan.switch in removed
        assert orphan.ns("z") not in namespaces()
        assert live.ns("z") in namespaces()
        assert str(disk.path) in removed, "its disk unmounted"
        assert str(orphan_disks) in removed and not orphan_disks.exists()
    finally:
        orphan.destroy()
        live.destroy()
        disk.unmount()
        shutil.rmtree(orphan_disks, ignore_errors=True)
