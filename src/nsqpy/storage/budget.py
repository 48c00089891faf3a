"""Process-wide bounds on what the storage layer keeps open or loaded, least recently used out.

A node may hold many thousands of partitions and terabytes of log, so neither its open
files nor its memory may grow with them. ``Budget`` keeps the most recently used holders
of a resource up to a capacity (each with a weight: a segment file is one descriptor, a
SQLite delayed store three) and asks the least recently used ones to let go (the
``evict`` callable each gave) when a new one comes in. ``OPEN_FILES`` bounds the descriptors of segment
files and delayed stores (nsqd sets it from its descriptor limit at start);
``LOADED_INDEXES`` bounds how many sealed segments keep their sparse index in memory (the
rest stay in their sidecar files until a seek needs them). Holders are let go on the
thread that asks for room (the event loop's, in nsqd); an ``evict`` that must not run now
returns False and the holder stays. Imports only the standard library.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

Evict = Callable[[], bool]  # let go of the resource; False when it cannot right now


class Budget:
    """At most ``capacity`` units held, least recently used let go first."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = max(1, capacity)
        self._held: OrderedDict[int, tuple[Evict, int]] = OrderedDict()
        self._used = 0
        self._mutex = threading.Lock()
        self.last: object = None  # the most recent owner (a caller may skip touching it again)

    @property
    def used(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._held)

    def touch(self, owner: object, evict: Evict, weight: int = 1) -> None:
        """``owner`` holds (or just used) its resource, which ``evict`` lets go: it becomes
        the most recent; older holders are let go while the budget is over its capacity."""
        key = id(owner)
        self.last = owner
        with self._mutex:
            held = self._held
            if key in held:
                held.move_to_end(key)
                if self._used <= self.capacity:
                    return
            else:
                held[key] = (evict, weight)
                self._used += weight
            victims: list[Evict] = []
            over = self._used - self.capacity
            for other_key, (other, other_weight) in held.items():
                if over <= 0 or other_key == key:
                    break
                victims.append(other)
                over -= other_weight
        for victim in victims:  # (each calls release, which takes the mutex)
            victim()

    def release(self, owner: object) -> None:
        """``owner`` let go of its resource (closed, deleted, evicted)."""
        with self._mutex:
            found = self._held.pop(id(owner), None)
            if found is not None:
                self._used -= found[1]
            if self.last is owner:
                self.last = None

    def set_capacity(self, capacity: int) -> None:
        self.capacity = max(1, capacity)


OPEN_FILES = Budget("open files", 1024)
LOADED_INDEXES = Budget("loaded segment indexes", 32)

__all__ = ["LOADED_INDEXES", "OPEN_FILES", "Budget", "Evict"]
