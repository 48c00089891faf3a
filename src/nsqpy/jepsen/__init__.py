"""The Jepsen-style fault harness of a replicated nsqpy cluster (``nsqpy jepsen``).

``netns`` (the hosts' network namespaces and the network faults) < ``schedule`` (profiles
and the seeded nemesis schedule) < ``worker`` (the client processes) < ``harness`` (one
run: the cluster, the nemesis, the drain) < ``cli``; ``history`` is the events' format,
``checker`` the total-queue check and availability, ``report`` the summary and the plot.
``docs/jepsen.md`` tells how to run it and what it found.
"""
