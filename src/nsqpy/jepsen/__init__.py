"""The Jepsen-style fault harness of a replicated nsqpy cluster (``nsqpy jepsen``).

``netns`` (the hosts' network namespaces and the network faults), ``schedule`` (profiles
and the seeded nemesis schedule), ``servers`` (etcd, nsqlookupd and nsqd in their
namespaces), ``nemesis`` (each fault done and undone), ``worker`` (one client process) and
``clients`` (the run's client processes and the drain), ``harness`` (one run, inside the
clients' namespace), ``cli`` (``nsqpy jepsen``: the network around a run, always torn
down); ``history`` is the events' format, ``checker`` the total-queue check and
availability, ``report`` the summary and the plot.
``docs/jepsen.md`` tells how to run it and what it found.
"""
