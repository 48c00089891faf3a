"""Errors the client raises on its own (the server's errors come from ``nsqpy.errors``).

An error frame from nsqd is raised as the ``nsqpy.errors`` class for its code (every one has
``.code`` and ``.fatal``); the classes here cover what no error frame reports: a connection
that went away, no nsqd to talk to, a reply we cannot read. Imports only ``nsqpy.errors``.
"""

from __future__ import annotations

from nsqpy.errors import NsqError


class ClientError(NsqError):
    """Base of the errors the client raises without an error frame from the server."""


class ConnectionClosedError(ClientError, ConnectionError):
    """The connection closed before the command was acknowledged.

    A PUB that fails this way may or may not have been accepted by nsqd.
    """


class NoConnectionsError(ClientError):
    """No nsqd address could be reached (every address failed or is waiting to be retried)."""


class UnexpectedResponseError(ClientError):
    """The server answered with something the protocol does not allow at that point."""
