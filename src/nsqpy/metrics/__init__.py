"""Metrics of the daemons: NSQ's statsd push from nsqd, and nsqpy's Prometheus ``/metrics``.

``statsd`` pushes nsqd's stats with NSQ's key names, flags and UDP packet bounds;
``exposition`` writes the Prometheus text format; ``nsqd_metrics`` and ``lookupd_metrics``
turn each daemon's state into metric families and register the ``/metrics`` route with one
call from the daemon's HTTP module. Each exporter sees its daemon through a read-only view
it owns (``NsqdView``, ``LookupdView``): nothing here imports a daemon's servers (only the
broker, the options and lookupd's registry); it reads daemon state and never changes it.
"""
