"""The shape of a Jepsen run: which hosts it has, what each runs, and its topics.

Hosts (each a network namespace of ``netns.Network``, addressed in that order):
``n1``.. the nsqd, ``l1`` ``l2`` the nsqlookupd, ``e1`` ``e2`` ``e3`` the three etcd
members, ``c`` the harness and its clients. Topics: ``jepsen`` (``Profile.partitions``
partitions of 3 replicas) and ``jepsen-r2`` (``R2_PARTITIONS`` partitions of 2 replicas,
the topic the ``leader-and-follower-down`` nemesis works on). Producer ``R2_PRODUCER``
publishes to ``jepsen-r2``, every other producer to ``jepsen``; values carry their
producer's number (``history.value_of``), so a value's topic is known from the value.

Pure data, standard library only: the schedule, the servers and the tests share it.
"""

from __future__ import annotations

LOOKUPD_HOSTS = ("l1", "l2")
ETCD_HOSTS = ("e1", "e2", "e3")
CLIENT_HOST = "c"

TOPIC = "jepsen"
TOPIC_REPLICAS = 3
R2_TOPIC = "jepsen-r2"
R2_PARTITIONS = 2
R2_REPLICAS = 2
R2_PRODUCER = 5  # the producer number of the jepsen-r2 producer
TOPICS = (TOPIC, R2_TOPIC)


def node_hosts(nodes: int) -> list[str]:
    """The nsqd hosts of a cluster of ``nodes`` nsqd: n1, n2, ..."""
    return [f"n{i + 1}" for i in range(nodes)]


def server_hosts(nodes: int) -> list[str]:
    """Every server host: the nsqd, the nsqlookupd and the etcd members."""
    return [*node_hosts(nodes), *LOOKUPD_HOSTS, *ETCD_HOSTS]


def hosts_for(nodes: int) -> list[str]:
    """Every host of a run, in the order they are addressed (10.77.0.1, .2, ...)."""
    return [*server_hosts(nodes), CLIENT_HOST]
