"""Cluster mode's control plane: the etcd key layout and metadata model, the pure placement
and reconcile decisions, the etcd client wrapper, the watched cluster view, the coordinator
(on nsqlookupd) and the member side (on nsqd). It may import protocol, storage, errors,
options, flags, durations, httpapi, aiohttp and aetcd; never broker internals beyond a
Protocol it owns, and never nsqd, lookupd, nsqadmin or testing."""
