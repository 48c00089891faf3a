"""What nsqadmin's request handlers are given: ``AdminContext``, built by the server.

The JSON API (``api``), the HTML pages (``pages``) and the message trace (``trace``) read
exactly these: the options (``/config`` also changes ``log_level`` and the lookupd list in
place), the cluster view, the sampled history behind the graphs, the upstream HTTP client
and the notifier of admin actions. ``NsqAdmin`` (``server``) creates them and hands this
context down, so no handler module imports ``server``. Imports the nsqadmin modules below
the handlers only; never aiohttp, a handler module or ``server``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsqpy.nsqadmin.cluster import Cluster
from nsqpy.nsqadmin.history import History
from nsqpy.nsqadmin.notify import Notifier
from nsqpy.nsqadmin.options import NsqAdminOptions
from nsqpy.nsqadmin.upstream import Upstream


@dataclass(frozen=True, slots=True)
class AdminContext:
    """The daemon's parts a handler may use (shared objects, not copies)."""

    opts: NsqAdminOptions
    cluster: Cluster
    history: History
    upstream: Upstream
    notifier: Notifier
