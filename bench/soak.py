"""Soak: a cluster under steady load for a long while, its nodes stopped and restarted in
turn, watched for what grows. What an operator who runs it for months needs to know:
that memory, descriptors, threads and etcd's database stay flat, that a stop ends
cleanly, and that nothing acknowledged is lost on the way.

Starts a ``LocalCluster`` (etcd, 2 nsqlookupd, 3 nsqd on this machine), one topic with
``--partitions`` partitions of three replicas, and:

  - a producer (nsqpy's client, given every nsqd: a node that does not lead forwards)
    publishing MPUB of ``--batch`` numbered messages at ``--rate`` messages a second,
    sending a batch that failed (a failover) again until it is acknowledged;
  - two consumers found through both nsqlookupd: channel ``fin`` finishes every message,
    channel ``req`` requeues one in twenty once with a 1 s delay, then finishes it;
  - every ``--kill-every`` seconds (0: never) one nsqd in turn, all but nsqd0 (it stays
    up the whole run, the witness of growth; ``--stop-all``: nsqd0 too, so that every
    partition fails over), is stopped, by SIGKILL and by SIGTERM in alternation (a
    crash, a rolling restart), restarted ``--down`` seconds later, and the run waits for
    every ISR to be full again;
  - every ``--sample`` seconds, each daemon's resident memory, open descriptors and
    threads (from ``/proc``), and etcd's database size in use and key count (its
    ``/metrics``).

At the end it stops publishing, waits up to ``--drain`` seconds for both channels to see
every acknowledged message, and prints:

  - each daemon's figures from its first sample ``--warmup`` seconds after it started to
    its last, and the change per hour (a restarted nsqd's over its last life: short lives
    give no figure);
  - etcd's database in use, smallest and largest after the warm-up (the coordinator
    compacts its history every few minutes: it is a saw, not a line);
  - messages acknowledged, per channel those never seen (lost) and the deliveries beyond
    the first (a failover's redeliveries, and batches the producer sent again after an
    error although they had been stored; ``req``'s own requeues counted apart);
  - how long the SIGTERM stops took and their exit statuses;
  - the log lines of every nsqd, killed ones included, at ERROR or worse.

Exits 1 when an acknowledged message never reached a channel, a stop failed, or the run
itself broke (no batch acknowledged for ``--stall`` seconds, a node that did not come
back).

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 2000] [--kill-every 120]
        [--sample 30] [--warmup 300] [--keep DIR]

``--keep DIR`` (an empty or new folder) runs the cluster there and leaves its data and
every daemon life's log (``lifeNN-<daemon>.log``) behind, for reading after a loss.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import signal
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

from nsqpy.client import Consumer, Message, Producer
from nsqpy.errors import NsqError
from nsqpy.protocol.logread import decode_columns
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.http import http_request

TOPIC = "soak"
CHANNELS = ("fin", "req")
REQUEUE_EVERY = 20  # channel "req" requeues one message in this many, once
BAD_LINE = re.compile(r" (ERROR|CRITICAL): ")  # (nsqpy's log line: "<time> <LEVEL>: <text>")


@dataclass
class Sample:
    at: float  # seconds since the run began
    rss_kb: int
    fds: int
    threads: int


@dataclass
class Watched:
    name: str
    samples: list[Sample] = field(default_factory=list)
    started_at: float = 0.0  # (its figures count from its last start)


def proc_figures(pid: int) -> tuple[int, int, int] | None:
    """(resident kB, descriptors, threads); None for a process gone, or a zombie."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = re.search(r"VmRSS:\s+(\d+)", status)
    threads = re.search(r"Threads:\s+(\d+)", status)
    if rss is None or threads is None:
        return None
    return int(rss.group(1)), fds, int(threads.group(1))


def etcd_figures(endpoint: str) -> tuple[int, int]:
    """(database bytes in use, keys) from etcd's own metrics."""
    url = endpoint if "://" in endpoint else f"http://{endpoint}"
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = {}
    for name in ("etcd_mvcc_db_total_size_in_use_in_bytes", "etcd_debugging_mvcc_keys_total"):
        m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        found[name] = int(float(m.group(1))) if m else -1
    return found["etcd_mvcc_db_total_size_in_use_in_bytes"], found["etcd_debugging_mvcc_keys_total"]


class Seen:
    """Which message numbers a channel saw, a byte each (millions of them)."""

    def __init__(self) -> None:
        self.flags = bytearray()
        self.count = 0

    def add(self, n: int) -> None:
        if n >= len(self.flags):
            self.flags.extend(bytes(max(n + 1 - len(self.flags), 1 << 16)))
        if not self.flags[n]:
            self.flags[n] = 1
            self.count += 1

    def __contains__(self, n: int) -> bool:
        return n < len(self.flags) and self.flags[n] == 1

    def gap(self, upto: int) -> bool:
        """Whether a number below ``upto`` was never seen."""
        return 0 in self.flags[:upto].ljust(upto, b"\0")

    def missing(self, upto: int) -> list[int]:
        """The numbers below ``upto`` never seen."""
        if not self.gap(upto):
            return []
        flags = self.flags[:upto].ljust(upto, b"\0")
        return [n for n in range(upto) if not flags[n]]


class Soak:
    def __init__(self, cluster: LocalCluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.args = args
        self.acked = 0  # (messages 0 .. acked-1 are acknowledged: batches go in order)
        self.seen = {c: Seen() for c in CHANNELS}
        self.deliveries: dict[str, int] = dict.fromkeys(CHANNELS, 0)
        self.requeued = Seen()
        self.retries = 0
        self.retried_for: dict[str, int] = {}  # (the error's class -> batches sent again)
        self.batches: list[tuple[float, str]] = []  # (each batch acknowledged: when, to whom)
        self.events: list[tuple[float, str]] = []  # (stops, starts and retries: when, what)
        self.broken = ""  # (what went wrong with the run itself)
        self.kills = 0
        self.stops: list[tuple[float, int]] = []  # (seconds a SIGTERM took, exit status)
        self.old_logs: list[tuple[str, list[str]]] = []  # (nsqd, log lines) of ended lives
        self.started = time.monotonic()
        self.watched = {f"nsqd{i}": Watched(f"nsqd{i}") for i in range(len(cluster.nodes))}
        self.watched.update({f"nsqlookupd{i}": Watched(f"nsqlookupd{i}")
                             for i in range(len(cluster.lookupds))})  # fmt: skip
        self.watched["etcd"] = Watched("etcd")
        self.etcd: list[tuple[float, int, int]] = []
        self.stop = asyncio.Event()
        self.last_ack = time.monotonic()  # (when a batch was last acknowledged)

    def now(self) -> float:
        return time.monotonic() - self.started

    def say(self, what: str) -> None:
        """Printed with the run's time, and kept for ``explain``."""
        self.events.append((self.now(), what))
        print(f"[{self.now():7.2f} s] {what}", flush=True)

    def fail(self, why: str) -> None:
        print(f"[{self.now():7.0f} s] RUN BROKEN: {why}", flush=True)
        self.broken = self.broken or why
        self.stop.set()

    def pids(self) -> dict[str, int]:
        found = {}
        for i, node in enumerate(self.cluster.nodes):
            if node.proc is not None:
                found[f"nsqd{i}"] = node.proc.pid
        for i, lookupd in enumerate(self.cluster.lookupds):
            if lookupd.proc is not None:
                found[f"nsqlookupd{i}"] = lookupd.proc.pid
        etcd = self.cluster.etcd.procs[0]
        if etcd is not None:
            found["etcd"] = etcd.pid
        return found

    async def produce(self) -> None:
        """MPUB after MPUB at ``--rate``; a batch that failed goes again (the same
        numbers), through a producer given the addresses as they are now (a restarted nsqd
        listens on new ports here). After an outage the rate starts again from then: no
        backlog is sent at once."""
        batch, rate = self.args.batch, self.args.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            addresses = [self.cluster.nsqd_tcp(i) for i in range(len(self.cluster.nodes))]
            async with Producer(addresses, connect_timeout=1.0, retry_interval=0.2) as producer:
                while not self.stop.is_set():
                    numbers = range(self.acked, self.acked + batch)
                    first_try = addresses[producer._next % len(addresses)]  # (the likely one)
                    try:
                        await asyncio.wait_for(
                            producer.mpub(TOPIC, [b"%d" % n for n in numbers]), 10
                        )
                    except (NsqError, OSError, TimeoutError) as err:
                        self.retries += 1
                        name = type(err).__name__
                        self.retried_for[name] = self.retried_for.get(name, 0) + 1
                        self.events.append((self.now(), f"batch from {self.acked} sent again "
                                            f"after {err!r}"))  # fmt: skip
                        await asyncio.sleep(0.2)
                        next_at = time.monotonic()
                        break
                    self.batches.append((self.now(), first_try))
                    self.acked += batch
                    self.last_ack = time.monotonic()
                    next_at += batch / rate
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def watch_stalls(self) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(1)
            if time.monotonic() - self.last_ack > self.args.stall:
                self.fail(f"no batch acknowledged for {self.args.stall:g} s")

    def handler(self, channel: str):  # type: ignore[no-untyped-def]
        seen, requeue = self.seen[channel], channel == "req"

        async def handle(msg: Message) -> None:
            n = int(msg.body)
            self.deliveries[channel] += 1
            if requeue and n % REQUEUE_EVERY == 0 and n not in self.requeued:
                self.requeued.add(n)
                msg.requeue(1.0, backoff=False)
                return
            seen.add(n)

        return handle

    async def kill_in_turn(self) -> None:
        """Every ``--kill-every`` seconds the next nsqd in turn but nsqd0 goes down, by
        SIGKILL and by SIGTERM in alternation (a crash, then a rolling restart's stop: its
        exit status and how long it took are kept), and comes back ``--down`` seconds
        later. What fails here breaks the run (reported, not raised)."""
        every = self.args.kill_every
        victims = list(range(0 if self.args.stop_all else 1, len(self.cluster.nodes)))
        if every <= 0 or not victims:
            return
        turn = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), every)
            if self.stop.is_set():  # (a node down is back by now: the run's end waits for it)
                return
            victim = victims[turn % len(victims)]
            turn += 1
            try:
                await self.stop_and_restart(victim, graceful=self.kills % 2 == 1)
            except Exception as err:
                self.fail(f"stopping and restarting nsqd{victim}: {err!r}")
                return

    async def stop_and_restart(self, victim: int, graceful: bool) -> None:
        self.kills += 1
        node = self.cluster.nodes[victim]
        try:  # (a diagnosis: never what breaks the run)
            found = await asyncio.to_thread(self.cluster.partitions, TOPIC)
            leaders: object = {  # (a node id ends with its --node-id: nsqd<i>)
                p: "nsqd" + str(info.get("id", "?")).rsplit(":", 1)[-1] for p, info in found.items()
            }
        except Exception as err:
            leaders = f"unknown: {err!r}"
        self.say(f"{'SIGTERM' if graceful else 'SIGKILL'} nsqd{victim} (leaders {leaders})")
        if graceful:
            began = time.monotonic()
            status = await asyncio.to_thread(self.cluster.stop_nsqd, victim, 60)
            self.stops.append((time.monotonic() - began, status))
        else:
            self.cluster.kill_nsqd(victim)
        await asyncio.sleep(self.args.down)
        self.old_logs.append((f"nsqd{victim}", node.log_lines))  # (its reader fills it still)
        await asyncio.to_thread(self.cluster.restart_nsqd, victim)
        self.say(f"nsqd{victim} restarted")
        self.watched[f"nsqd{victim}"].started_at = self.now()
        await asyncio.to_thread(self.wait_isr_full)
        self.say(f"nsqd{victim} back, every ISR full")

    def wait_isr_full(self) -> None:
        self.cluster.wait_for(
            lambda: all(len(p["isr"]) == 3 for p in self.cluster.partitions(TOPIC).values()),
            120,
            "every ISR full again",
        )

    async def sample(self) -> None:
        endpoint = self.cluster.etcd.endpoints[0]
        while True:
            try:
                at = self.now()
                for name, pid in self.pids().items():
                    figures = proc_figures(pid)
                    if figures is not None:
                        self.watched[name].samples.append(Sample(at, *figures))
                size, keys = await asyncio.to_thread(etcd_figures, endpoint)
                self.etcd.append((at, size, keys))
            except Exception as err:  # (one sample lost, said; the next is taken)
                print(f"[{self.now():7.0f} s] a sample failed: {err!r}", flush=True)
            await asyncio.sleep(self.args.sample)

    async def run(self) -> int:
        lookupds = [self.cluster.lookupd_http(i) for i in range(len(self.cluster.lookupds))]
        consumers = [
            Consumer(
                TOPIC,
                channel,
                self.handler(channel),
                lookupd_http_addresses=lookupds,
                max_in_flight=200,
                max_attempts=0,
                lookupd_poll_interval=5.0,
                reconnect_interval=1.0,
                requeue_delay=1.0,
            )
            for channel in CHANNELS
        ]
        for consumer in consumers:
            await consumer.start()
        killing = asyncio.create_task(self.kill_in_turn())
        sampling = asyncio.create_task(self.sample())
        stalls = asyncio.create_task(self.watch_stalls())
        producing = asyncio.create_task(self.produce())
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.args.minutes * 60)
            self.stop.set()
            for what, task in (("the producer", producing), ("the stops", killing)):
                try:
                    await task
                except Exception as err:  # (reported, and the run fails: figures printed)
                    self.fail(f"{what} ended: {err!r}")
            stalls.cancel()
            if not self.broken:
                try:
                    await asyncio.to_thread(self.wait_isr_full)
                except TimeoutError as err:
                    self.fail(str(err))
            deadline = time.monotonic() + self.args.drain
            while time.monotonic() < deadline and any(
                s.gap(self.acked) for s in self.seen.values()
            ):
                await asyncio.sleep(2)
        finally:
            sampling.cancel()
            await asyncio.gather(sampling, stalls, return_exceptions=True)
            for consumer in consumers:
                await consumer.close(timeout=5)
        return self.report()

    def explain(self, missing: list[int]) -> None:
        """Where the missing numbers went: when each of their batches was acknowledged and
        to whom it was likely sent, what happened around then, and which node's log of
        which partition holds them (read through the log-read API, which serves committed
        records only: an uncommitted copy does not show)."""
        batch = self.args.batch
        for index in sorted({n // batch for n in missing})[:20]:
            at, first_try = self.batches[index] if index < len(self.batches) else (-1.0, "?")
            print(f"  batch from {index * batch}: acknowledged at {at:.2f} s (sent to "
                  f"{first_try} first)")  # fmt: skip
            for when, what in [e for e in self.events if abs(e[0] - at) < 30][:6]:
                print(f"    {when - at:+.2f} s: {what}")
        wanted = {b"%d" % n for n in missing}
        for i in range(len(self.cluster.nodes)):
            for partition in range(self.args.partitions):
                found, offset, end = [], 0, None
                try:  # (from the low watermark on, up to what is committed)
                    marks = self.cluster.request(
                        "GET", self.cluster.nsqd_http(i), f"/log/watermarks?topic={TOPIC}"
                    )[1]
                    offset = next(
                        m["low"] for m in marks["partitions"] if m["partition"] == partition
                    )
                    while True:
                        url = (f"http://{self.cluster.nsqd_http(i)}/log/read?topic={TOPIC}"
                               f"&partition={partition}&offset={offset}&max_count=100000"
                               f"&max_bytes=16777216")  # fmt: skip
                        status, body, _headers = http_request("GET", url, timeout=60)
                        if status != 200:
                            end = f"HTTP {status} {body[:80]!r}"
                            break
                        records = decode_columns(body)
                        found += [(r.offset, r.body) for r in records if r.body in wanted]
                        if not records:
                            end = f"log end {offset}"
                            break
                        offset = records[-1].offset + 1
                except Exception as err:  # (a diagnosis: said, not raised)
                    end = f"failed: {err!r}"
                print(f"  nsqd{i} partition {partition}: {len(found)} of the missing in its "
                      f"log ({end}), e.g. {found[:3]}")  # fmt: skip

    def report(self) -> int:
        warmup = self.args.warmup
        print(f"\n# {self.now() / 60:.1f} min, {self.kills} nodes stopped, {self.acked:,} "
              f"messages acknowledged, {self.retries} batches sent again "
              f"{self.retried_for}")  # fmt: skip
        if self.stops:
            took = max(t for t, _ in self.stops)
            statuses = sorted({status for _, status in self.stops})
            print(f"SIGTERM stops: {len(self.stops)}, the longest {took:.1f} s, exit statuses "
                  f"{statuses}")  # fmt: skip
        print(f"{'daemon':<12} {'from':>7} {'to':>7}  {'RSS MB':>15} {'per hour':>9}  "
              f"{'fds':>9}  {'threads':>9}")  # fmt: skip
        for watched in self.watched.values():
            since = watched.started_at + warmup
            kept = [s for s in watched.samples if s.at >= since]
            if len(kept) < 2 or kept[-1].at - kept[0].at < warmup:
                print(f"{watched.name:<12} (its last life gave under {warmup:g} s of samples "
                      f"past its warm-up)")  # fmt: skip
                continue
            first, last = kept[0], kept[-1]
            per_hour = (last.rss_kb - first.rss_kb) / 1024 / ((last.at - first.at) / 3600)
            print(f"{watched.name:<12} {first.at:>6.0f}s {last.at:>6.0f}s  "
                  f"{first.rss_kb / 1024:>6.1f}->{last.rss_kb / 1024:>6.1f} {per_hour:>+8.1f}  "
                  f"{first.fds:>4}->{last.fds:<4}  {first.threads:>4}->{last.threads:<4}")  # fmt: skip
        kept_etcd = [e for e in self.etcd if e[0] >= warmup]
        if kept_etcd:
            sizes = [size for _, size, _ in kept_etcd]
            keys = [k for _, _, k in kept_etcd]
            span = (kept_etcd[-1][0] - kept_etcd[0][0]) / 60
            print(f"etcd database in use {min(sizes) / 1024:,.0f}-{max(sizes) / 1024:,.0f} KiB "
                  f"(last {sizes[-1] / 1024:,.0f}), keys {min(keys)}-{max(keys)}, over "
                  f"{span:.1f} min after the warm-up")  # fmt: skip
        lost = 0
        for channel in CHANNELS:
            seen = self.seen[channel]
            missing = seen.missing(self.acked)
            lost += len(missing)
            own = self.requeued.count if channel == "req" else 0
            again = self.deliveries[channel] - seen.count - own
            print(f"channel {channel}: {self.acked - len(missing):,} of {self.acked:,} "
                  f"acknowledged seen, {len(missing)} missing (e.g. {missing[:5]}), "
                  f"{again:,} deliveries beyond the first"
                  + (f" and {own:,} requeued by it" if own else ""))  # fmt: skip
            if missing:
                self.explain(missing)
        lives = [
            *self.old_logs,
            *((f"nsqd{i}", n.log_lines) for i, n in enumerate(self.cluster.nodes)),
        ]
        bad = [(name, line) for name, lines in lives for line in lines if BAD_LINE.search(line)]
        print(f"nsqd log lines at ERROR or worse, in {len(lives)} lives: {len(bad)}")
        for name, line in bad[:10]:
            print(f"  {name}: {line[:240]}")
        if self.broken:
            print(f"RUN BROKEN: {self.broken}")
        failed_stop = any(status != 0 for _, status in self.stops)
        return 1 if lost or failed_stop or self.broken else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=int, default=2000, help="messages a second")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=120, help="seconds; 0: no stop")
    parser.add_argument("--down", type=float, default=5, help="seconds a stopped node stays down")
    parser.add_argument("--sample", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=300,
                        help="seconds after a daemon's start before its figures count")  # fmt: skip
    parser.add_argument("--drain", type=float, default=120)
    parser.add_argument("--stall", type=float, default=60,
                        help="seconds without an acknowledged batch that break the run")  # fmt: skip
    parser.add_argument("--stop-all", action="store_true",
                        help="stop nsqd0 in its turn too (every partition fails over; no "
                             "witness of growth then)")  # fmt: skip
    parser.add_argument("--keep", metavar="DIR",
                        help="run the cluster in DIR and leave it there (logs, data) afterwards")  # fmt: skip
    args = parser.parse_args()
    print(f"# {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"3 nsqd + 2 nsqlookupd + etcd on this machine; {args.partitions} partitions x 3 "
          f"replicas, {args.rate} msgs/s, a node stopped every {args.kill_every:g} s")  # fmt: skip
    with contextlib.ExitStack() as stack:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            if os.listdir(args.keep):
                sys.exit(f"soak: --keep {args.keep} is not empty (a run of its own, each time)")
            tmp = args.keep
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
        cluster = stack.enter_context(LocalCluster(tmp, lease_ttl="2s"))
        soak: Soak | None = None
        if args.keep:  # every daemon life's log, for reading afterwards (however the run ends)
            stack.callback(lambda: write_lives(tmp, cluster, soak))
        status, _ = cluster.post(
            f"/topic/create?topic={TOPIC}&partition_num={args.partitions}&replicator=3"
            "&multipart=true"
        )
        assert status == 200, status
        for channel in CHANNELS:  # (before the first message: each channel gets every one)
            for i in range(len(cluster.nodes)):
                path = f"/channel/create?topic={TOPIC}&channel={channel}"
                status, body = cluster.request("POST", cluster.nsqd_http(i), path)
                assert status == 200, (status, body)
        soak = Soak(cluster, args)
        soak.wait_isr_full()
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        sys.exit(asyncio.run(soak.run()))


def write_lives(folder: str, cluster: LocalCluster, soak: Soak | None) -> None:
    """Each nsqd life's log (ended ones too) and each nsqlookupd's, into ``folder``."""
    lives = [
        *(soak.old_logs if soak is not None else []),
        *((f"nsqd{i}", n.log_lines) for i, n in enumerate(cluster.nodes)),
        *((f"lookupd{i}", n.log_lines) for i, n in enumerate(cluster.lookupds)),
    ]
    for k, (name, lines) in enumerate(lives):
        with open(os.path.join(folder, f"life{k:02d}-{name}.log"), "w") as out:
            out.writelines(line + "\n" for line in lines)


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
