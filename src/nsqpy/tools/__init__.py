"""NSQ's utilities on nsqpy's asyncio client: nsq_tail, to_nsq, nsq_to_file, nsq_to_http,
nsq_to_nsq and nsq_stat, each a module with ``main(argv) -> int`` and NSQ v1.3.0's flags.

Each tool declares its flags on its options dataclass (``nsqpy.flags``, shared with the
daemons). Shared pieces: ``common`` (program shell, signals, logging, shared checks),
``clientopts``/``nsqopts`` (--consumer-opt/--producer-opt, consumers and producers), ``discovery``
(lookupd/nsqd HTTP look-ups), ``hostpool`` (--mode), ``metrics`` (--status-every),
``filelogger`` and ``strftime`` (nsq_to_file's files). The tools talk to the daemons only
as clients do; this package never imports the servers, the broker or ``testing``.
"""
