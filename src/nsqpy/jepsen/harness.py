"""One Jepsen run, from inside the clients' namespace: ``python -m nsqpy.jepsen.harness``.

``nsqpy jepsen`` (``jepsen.cli``) makes the network (``netns.Network``) and runs this module
inside host ``c``'s namespace, so that every socket it and its workers open reaches the
hosts at their 10.77.0.x addresses and nothing of this machine's own network. Here:

1. the servers (``servers.Cluster``: three etcd members, two nsqlookupd, the nsqd, every
   flag at its default, each nsqd's data on a tmpfs of its own), logs under the run
   directory;
2. the topics (``layout``): ``jepsen``, ``partition_num`` and 3 replicas, and
   ``jepsen-r2``, 2 replicas, made through lookupd; then the consumers (``clients``), and
   once they are subscribed on every leader, the producers;
3. the nemesis schedule (``schedule.make_schedule``, done by ``nemesis.Nemesis``), each
   step's start, moves and stop written to the history;
4. everything healed, a quiet while, the producers stopped, the consumers given
   ``profile.drain`` seconds to read what was acknowledged;
5. the histories merged, checked (``checker.check``) and reported (``report``); beside
   them ``run.json``: the run's config, the commit it ran on and its wall time.

Exit status 0 when the check is valid, 1 when it is not, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from nsqpy.jepsen.clients import CHANNELS, Workers, drain
from nsqpy.jepsen.history import HistoryWriter, read_history, write_history
from nsqpy.jepsen.layout import R2_PARTITIONS, R2_REPLICAS, R2_TOPIC, TOPIC, TOPIC_REPLICAS, TOPICS
from nsqpy.jepsen.nemesis import Nemesis
from nsqpy.jepsen.netns import Network
from nsqpy.jepsen.schedule import PROFILES, Profile, Step, make_schedule
from nsqpy.jepsen.servers import Cluster, wait_for

SUBSCRIBE_TIMEOUT = 30.0  # seconds for the consumers to subscribe on every leader
QUIET_AFTER = 6.0  # seconds of traffic after the last heal, before the producers stop


@dataclass
class RunConfig:
    profile: str
    seed: int
    out: str
    prefix: str  # the namespaces' prefix (netns.Network)
    hosts: list[str]
    netem: bool = False  # whether the kernel has netem (the network probed it)
    unsafe_ack: bool = False
    insecure: bool = False  # the daemons' links without mutual TLS (secure by default)
    kinds: list[str] = field(default_factory=list)  # only these nemeses (default: all)
    cycles: int = 0  # steps of each kind (default: the profile's)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    def run_profile(self) -> Profile:
        """The profile with this run's ``kinds`` and ``cycles``, when given."""
        profile = PROFILES[self.profile]
        if self.kinds:
            profile = replace(profile, kinds=tuple(self.kinds))
        if self.cycles > 0:
            profile = replace(profile, cycles=self.cycles)
        return profile

    def steps(self) -> list[Step]:
        nodes = sum(h.startswith("n") for h in self.hosts)
        return make_schedule(self.run_profile(), self.seed, nodes=nodes)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls(**json.loads(text))


def run(config: RunConfig) -> int:
    """One run (see the module docstring); its exit status."""
    profile = config.run_profile()
    out = Path(config.out)
    (out / "histories").mkdir(parents=True, exist_ok=True)
    net = Network(config.hosts, prefix=config.prefix)  # made by the caller: only used here
    net.netem = config.netem
    steps = config.steps()
    (out / "schedule.json").write_text(json.dumps([s.to_json() for s in steps], indent=1))
    origin = time.monotonic()
    nemesis_history = HistoryWriter(out / "histories" / "nemesis.jsonl", "nemesis", origin)

    def say(msg: str) -> None:
        nemesis_history.log(msg)
        print(f"[jepsen {nemesis_history.now():7.1f}s] {msg}", flush=True)

    cluster = Cluster(
        config.hosts, net, out, unsafe_ack=config.unsafe_ack, secure=not config.insecure
    )
    workers = Workers(cluster, out, origin, profile)
    say(f"profile {profile.name}, seed {config.seed}, {len(steps)} steps; starting the cluster")
    try:
        _play(cluster, workers, Nemesis(cluster, net), steps, nemesis_history, say)
    except (TimeoutError, OSError, RuntimeError) as exc:
        say(f"run failed: {exc}")
        return 2
    finally:
        workers.kill()
        cluster.close()
        nemesis_history.close()
    status = _verdict(config, profile, out, workers)
    _write_run(config, out, time.monotonic() - origin)
    return status


def _play(cluster: Cluster, workers: Workers, nemesis: Nemesis, steps: Sequence[Step],
          history: HistoryWriter, say: Callable[[str], None]) -> None:  # fmt: skip
    """Start, run the schedule, heal, stop the producers, drain."""
    cluster.start()
    cluster.create_topic(TOPIC, workers.profile.partitions, TOPIC_REPLICAS)
    cluster.create_topic(R2_TOPIC, R2_PARTITIONS, R2_REPLICAS)
    workers.start_consumers()
    wait_for(lambda: cluster.subscribed(TOPICS, CHANNELS), SUBSCRIBE_TIMEOUT,
             "consumers on every leader")  # fmt: skip
    workers.start_producers()
    say("cluster up, topic made, clients running")
    begun = time.monotonic()  # the schedule's times count from here (warmup first)
    for step in steps:
        _sleep_until(begun + step.at)
        detail, state = nemesis.start(step)
        history.nemesis("start", step.kind, step.index, detail)
        say(f"step {step.index}: {step.kind}: {detail} for {step.duration:.1f}s")
        for offset, move in nemesis.moves(step):
            _sleep_until(begun + step.at + offset)
            done = nemesis.move(step, state, move)
            history.nemesis("move", step.kind, step.index, done)
            say(f"step {step.index}: {step.kind}: {done}")
        _sleep_until(begun + step.at + step.duration)
        nemesis.stop(step, state)
        history.nemesis("stop", step.kind, step.index, detail)
    nemesis.heal_all()
    say("schedule done, everything healed")
    cluster.wait_ready()
    _sleep_until(time.monotonic() + QUIET_AFTER)
    workers.stop(workers.producers())
    say("producers stopped; draining")
    drain(workers, workers.profile, say)
    workers.stop(workers.consumers())


def _verdict(config: RunConfig, profile: Profile, out: Path, workers: Workers) -> int:
    """The histories merged, checked and reported; 0 valid, 1 not."""
    from nsqpy.jepsen.checker import check
    from nsqpy.jepsen.report import summary_text, write_report

    events = read_history([*workers.histories(), out / "histories" / "nemesis.jsonl"])
    write_history(events, out / "history.jsonl")
    result = check(events, CHANNELS)
    title = f"nsqpy jepsen, profile {profile.name}, seed {config.seed}"
    if config.unsafe_ack:
        title += " (UNSAFE build: acknowledges before replication)"
    write_report(out, events, result, title=title)
    print(summary_text(result, title), flush=True)
    return 0 if result.valid else 1


def _commit() -> str:
    """The commit of the checkout this code runs from, with ``-dirty`` when its tracked
    files differ from it; ``unknown`` outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head


def _write_run(config: RunConfig, out: Path, wall: float) -> None:
    """``run.json``: what ran (profile, seed, nemeses, hosts), on which commit, how long."""
    doc = {
        "profile": config.profile,
        "seed": config.seed,
        "kinds": config.kinds or list(config.run_profile().kinds),
        "cycles": config.run_profile().cycles,
        "hosts": config.hosts,
        "prefix": config.prefix,  # (of its namespaces and /tmp/<prefix>disks)
        "unsafe_ack": config.unsafe_ack,
        "secure": not config.insecure,
        "netem": config.netem,
        "commit": _commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - wall)),
        "wall_seconds": round(wall, 1),
    }
    (out / "run.json").write_text(json.dumps(doc, indent=1) + "\n")


def _sleep_until(when: float) -> None:
    delay = when - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsqpy.jepsen.harness")
    p.add_argument("config", help="the run's RunConfig as JSON (jepsen.cli makes it)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    return run(RunConfig.from_json(args.config))


if __name__ == "__main__":
    sys.exit(main())
