"""The Jepsen harness's network: one Linux network namespace per host, made and torn down
by the harness, so that faults can be put between hosts without touching this machine's
own network.

Layout (every name starts with ``nsqpyj<pid>-``, the harness's process id, so the
namespaces of a harness that died can be told from those of one still running)::

    <prefix>sw        a namespace holding only a bridge, br0: the switch
    <prefix><host>    one per host (n1.. nsqd, l1 l2 nsqlookupd, e1 etcd, c clients);
                      its eth0 is a veth whose other end is a port of br0,
                      with 10.77.0.<k>/24 (the range exists only inside these namespaces)

Faults, all undone by ``heal``:

- ``cut(a, b)``: every packet from a host of ``a`` to a host of ``b`` and back is dropped
  on arrival (an nftables set per host, ``inet jepsen cut``), as a partition does: open
  connections stall, connects time out, nothing is refused.
- ``lossy(host, loss, ...)``: a share of the packets the host receives is dropped at
  random (nftables ``numgen``), and its sending is slowed: ``tc netem`` delay where the
  kernel has netem, else a token bucket (``tbf``) that queues what exceeds its rate.

The root namespace is never changed: no address, route, rule or interface is added there.
Needs root, ``ip`` (iproute2), ``nft`` (nftables) and ``tc``; ``preflight()`` says clearly
what is missing. ``clean_stale()`` removes what a harness that died left behind (its
namespaces, and tmpfs mounts under a directory named with its prefix, and that directory).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from nsqpy.testing.processes import pid_alive

SUBNET = "10.77.0"
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)
PREFIX_BASE = "nsqpyj"
_STALE = re.compile(rf"^{PREFIX_BASE}(\d+)-")


class NetworkError(RuntimeError):
    """A network operation failed (the message carries the command and what it said)."""


def _run(argv: Sequence[str], stdin: str | None = None) -> str:
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def preflight() -> str | None:
    """None when this machine can run the harness, else why not (one clear sentence)."""
    if os.geteuid() != 0:
        return "the Jepsen harness needs root (it makes network namespaces and mounts tmpfs)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("tc", "iproute2")):
        if shutil.which(tool) is None:
            return f"the Jepsen harness needs `{tool}` (Debian package {package})"
    probe = f"{PREFIX_BASE}{os.getpid()}-probe"
    try:
        _run(["ip", "netns", "add", probe])
    except NetworkError as exc:
        return f"this kernel does not let the harness make network namespaces ({exc})"
    try:
        _run(["ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe"])
    except NetworkError as exc:
        return f"nftables does not work in a network namespace here ({exc})"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _setns(fd: int, where: str) -> None:
    if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
        raise NetworkError(f"setns into {where}: {os.strerror(ctypes.get_errno())}")


def clean_stale() -> list[str]:
    """Delete the namespaces and unmount the tmpfs mounts of harnesses that are no longer
    running (a crash, a SIGKILL); returns what was removed."""
    removed: list[str] = []
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for line in listing.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _STALE.match(name)
        if m and not pid_alive(int(m.group(1))):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            removed.append(name)
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f]
    for mount in reversed(mounts):  # the deepest first
        m = re.search(rf"/{PREFIX_BASE}(\d+)-", mount)
        if m and not pid_alive(int(m.group(1))):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
            removed.append(mount)
    for folder in Path("/tmp").glob(f"{PREFIX_BASE}*-disks"):  # (their mount points)
        m = re.fullmatch(rf"{PREFIX_BASE}(\d+)-disks", folder.name)
        if m and not pid_alive(int(m.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


class Network:
    """The namespaces of one harness run (see the module docstring)."""

    def __init__(self, hosts: Sequence[str], prefix: str | None = None) -> None:
        if len(hosts) > 250:
            raise ValueError("at most 250 hosts")
        self.prefix = prefix or f"{PREFIX_BASE}{os.getpid()}-"
        self.hosts = list(hosts)
        self._addresses = {host: f"{SUBNET}.{k + 1}" for k, host in enumerate(self.hosts)}
        self._made: list[str] = []
        self._slowed: set[str] = set()
        self.netem: bool | None = None  # whether the kernel has netem (known after create)

    # -- names ------------------------------------------------------------------------

    def ns(self, host: str) -> str:
        return f"{self.prefix}{host}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}sw"

    def address(self, host: str) -> str:
        return self._addresses[host]

    def host_of(self, address: str) -> str | None:
        for host, addr in self._addresses.items():
            if addr == address:
                return host
        return None

    def exec_prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns(host)]

    def _nft(self, host: str, script: str) -> None:
        _run([*self.exec_prefix(host), "nft", "-f", "-"], stdin=script)

    # -- life cycle -------------------------------------------------------------------

    def create(self) -> Network:
        try:
            self._add_ns(self.switch)
            _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
            for host in self.hosts:
                self._add_host(host)
            self.netem = self._has_netem()
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_ns(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self._made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _add_host(self, host: str) -> None:
        ns = self.ns(host)
        self._add_ns(ns)
        port = f"p-{host}"[:15]
        _run(["ip", "-n", self.switch, "link", "add", port, "type", "veth",
              "peer", "name", "eth0", "netns", ns])  # fmt: skip
        _run(["ip", "-n", self.switch, "link", "set", port, "master", "br0", "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        self._nft(
            host,
            "table inet jepsen {\n"
            "  set cut { type ipv4_addr; }\n"
            "  chain in { type filter hook input priority 0; ip saddr @cut drop; }\n"
            "  chain loss { type filter hook input priority 1; }\n"
            "}\n",
        )

    def _has_netem(self) -> bool:
        ns = self.ns(self.hosts[0])
        probe = subprocess.run(
            ["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
        )
        if probe.returncode == 0:
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", "lo", "root"], check=False)
        return probe.returncode == 0

    def destroy(self) -> None:
        """Delete every namespace this run made (their veths and rules go with them)."""
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        self._made.clear()

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    @contextlib.contextmanager
    def inside(self, host: str) -> Iterator[None]:
        """The calling thread in ``host``'s namespace for the block, then back where it was:
        the sockets it opens and the processes it starts there are on that host (setns(2)
        moves one thread only; use it from the thread that does the work)."""
        with open("/proc/thread-self/ns/net") as own, open(f"/run/netns/{self.ns(host)}") as ns:
            _setns(ns.fileno(), host)
            try:
                yield
            finally:
                _setns(own.fileno(), "the namespace it came from")

    # -- faults -----------------------------------------------------------------------

    def cut(self, a: Iterable[str], b: Iterable[str]) -> None:
        """Drop every packet between a host of ``a`` and a host of ``b``, both ways."""
        a, b = list(a), list(b)
        for side, other in ((a, b), (b, a)):
            addrs = ", ".join(self.address(h) for h in other if h not in side)
            if not addrs:
                continue
            for host in side:
                self._nft(host, f"add element inet jepsen cut {{ {addrs} }}\n")

    def isolate(self, host: str, keep: Iterable[str] = ()) -> None:
        """Cut ``host`` from every other host but those of ``keep``."""
        kept = set(keep)
        self.cut([host], [h for h in self.hosts if h != host and h not in kept])

    def lossy(self, host: str, loss_percent: int, delay_ms: int, rate_kbit: int) -> str:
        """Drop ``loss_percent`` of what ``host`` receives; delay what it sends by
        ``delay_ms`` (netem) or, without netem, queue what exceeds ``rate_kbit``. Returns
        what was done, for the history."""
        self._nft(host, f"add rule inet jepsen loss numgen random mod 100 < {loss_percent} drop\n")
        ns = self.ns(host)
        if self.netem:
            _run(["tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "netem",
                  "delay", f"{delay_ms}ms", f"{max(1, delay_ms // 4)}ms"])  # fmt: skip
            slowed = f"netem delay {delay_ms}ms"
        else:
            _run(["tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "tbf",
                  "rate", f"{rate_kbit}kbit", "burst", "16kb", "latency", f"{delay_ms}ms"])  # fmt: skip
            slowed = f"tbf rate {rate_kbit}kbit latency {delay_ms}ms (no netem in this kernel)"
        self._slowed.add(host)
        return f"{loss_percent}% of received packets dropped, {slowed}"

    def heal(self) -> None:
        """Undo every fault: no cut, no loss, no slowing."""
        for host in self.hosts:
            with contextlib.suppress(NetworkError):
                self._nft(host, "flush set inet jepsen cut\nflush chain inet jepsen loss\n")
        for host in sorted(self._slowed):
            subprocess.run(
                ["tc", "-n", self.ns(host), "qdisc", "del", "dev", "eth0", "root"],
                capture_output=True,
                check=False,
            )
        self._slowed.clear()
