"""Choosing a destination per message: ``--mode`` round-robin, hostpool or epsilon-greedy.

``round-robin`` cycles through the addresses. ``hostpool`` follows bitly/go-hostpool's
standard pool: hosts are tried in turn; a host whose request failed is skipped until its
retry time (30 s, doubling per failure up to 900 s), and when every host is dead all are
revived. ``epsilon-greedy`` (go-hostpool's other pool, simplified) picks, with probability
``epsilon`` (0.3), a random live host to explore, otherwise the live host with the lowest
moving average of response time; failures count as in ``hostpool``.

Pure policy with an injected clock and random source: no I/O, no asyncio.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MODES = ("round-robin", "hostpool", "epsilon-greedy")
INITIAL_RETRY = 30.0
MAX_RETRY = 900.0


@dataclass
class _Host:
    address: str
    dead: bool = False
    retry_at: float = 0.0
    retry_delay: float = INITIAL_RETRY
    average: float | None = None  # seconds, epsilon-greedy only


class Selector:
    """``pick()`` an address, later ``mark(address, ok, elapsed)`` how it went."""

    def __init__(
        self,
        mode: str,
        addresses: Sequence[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        epsilon: float = 0.3,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        if not addresses:
            raise ValueError("no addresses to choose from")
        self.mode = mode
        self.hosts = [_Host(a) for a in addresses]
        self.by_address = {h.address: h for h in self.hosts}
        self.clock = clock
        self.rng = rng or random.Random()
        self.epsilon = epsilon
        self._next = 0

    def pick(self) -> str:
        if self.mode == "round-robin":
            host = self.hosts[self._next % len(self.hosts)]
            self._next += 1
            return host.address
        if self.mode == "epsilon-greedy":
            return self._greedy().address
        return self._round_robin_alive().address

    def mark(self, address: str, ok: bool, elapsed: float = 0.0) -> None:
        host = self.by_address.get(address)
        if host is None or self.mode == "round-robin":
            return
        if ok:
            host.dead = False
            host.retry_delay = INITIAL_RETRY
            if host.average is None:
                host.average = elapsed
            else:
                host.average = 0.8 * host.average + 0.2 * elapsed
        elif not host.dead:
            host.dead = True
            host.retry_delay = INITIAL_RETRY
            host.retry_at = self.clock() + host.retry_delay

    def _usable(self, host: _Host, now: float) -> bool:
        """Alive, or dead and due for a retry (which pushes the next retry back)."""
        if not host.dead:
            return True
        if host.retry_at > now:
            return False
        host.retry_delay = min(host.retry_delay * 2, MAX_RETRY)
        host.retry_at = now + host.retry_delay
        return True

    def _reset(self) -> _Host:
        for host in self.hosts:  # everyone is dead: start over
            host.dead = False
        self._next = 1
        return self.hosts[0]

    def _round_robin_alive(self) -> _Host:
        now = self.clock()
        n = len(self.hosts)
        for i in range(n):
            index = (self._next + i) % n
            host = self.hosts[index]
            if self._usable(host, now):
                self._next = index + 1
                return host
        return self._reset()

    def _greedy(self) -> _Host:
        now = self.clock()
        alive = [h for h in self.hosts if self._usable(h, now)]
        if not alive:
            return self._reset()
        unknown = [h for h in alive if h.average is None]
        if unknown:
            return unknown[0]
        if self.rng.random() < self.epsilon:
            return self.rng.choice(alive)
        return min(alive, key=lambda h: h.average or 0.0)
