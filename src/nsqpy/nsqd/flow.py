"""Flow control and deadlines of a TCP client connection: what one client may hold.

A connection stops running commands and reading its socket while the replies it has not
read are over ``WRITE_HIGH_WATER``: replies queued in nsqd (each counted with
``REPLY_OVERHEAD`` for the objects that keep it) or the transport's buffer; it reads again
once they drain, as nsqd's blocking write stops its read loop. A burst of FINs runs at most
``FIN_BATCH`` at a time, so one step cannot queue more than that many error replies.
Deadlines follow nsqd's (``SetReadDeadline(now + 2 * heartbeat)`` before each read of a
command, ``SetWriteDeadline(now + heartbeat)`` before each write): a command (line and body)
must arrive within two heartbeat intervals of when the connection began waiting for it (time
with reading paused by nsqd does not count), and output that could not be written for one
heartbeat interval closes the connection. With heartbeats disabled (IDENTIFY
``heartbeat_interval: -1``) there is no deadline, as in nsqd, except before AUTH when the
server requires it: then the default interval (half of ``--client-timeout``) applies, and the
client may send at most ``pre_auth_budget`` bytes. Time is the server's clock (fake in tests).

``connection_bytes`` is the worst case one connection holds (the formula is in
``docs/limits.md``). Pure functions and constants: no asyncio, no sockets.
"""

from __future__ import annotations

from nsqpy.protocol.limits import MAX_LINE_LENGTH, PRE_AUTH_BODY_SIZE, Limits

# The transport's buffer past this pauses a client's deliveries and the reading of its
# commands (the transport resumes below a quarter); replies queued in nsqd past it stop
# the reading too.
WRITE_HIGH_WATER = 256 * 1024
# What a queued reply is counted for beyond its frame: the objects that keep it (its
# acknowledgement, its entry in the queue) and the command's own while it is answered.
REPLY_OVERHEAD = 128
# The most FINs of one burst run as a batch (each may answer an E_FIN_FAILED).
FIN_BATCH = 1024
# An E_FIN_FAILED frame: size, type, "E_FIN_FAILED FIN <id> failed client does not own
# message" (76 bytes; "ID not in flight" is shorter).
MAX_FIN_ERROR = 80
# What one socket read hands over at most (uvloop's and asyncio's receive buffer).
READ_CHUNK = 256 * 1024
# A message frame beyond its body: size, type, timestamp, attempts, ID.
MESSAGE_FRAME_HEADER = 4 + 4 + 8 + 2 + 16


def connection_bytes(limits: Limits) -> int:
    """The worst case, in payload bytes, that one TCP connection holds in nsqd (its stream
    codec's buffers aside): see the module doc and ``docs/limits.md``."""
    incoming = MAX_LINE_LENGTH + 4 + limits.max_body_size + READ_CHUNK
    decoding = limits.max_body_size  # an MPUB's bodies, copied out of the input
    outgoing = (
        2 * WRITE_HIGH_WATER
        + FIN_BATCH * MAX_FIN_ERROR
        + limits.max_output_buffer_size
        + limits.max_msg_size
        + MESSAGE_FRAME_HEADER
    )
    return incoming + decoding + outgoing


def pre_auth_budget(limits: Limits) -> int:
    """Bytes a client may send before AUTH succeeds: the magic, an IDENTIFY and an AUTH
    with the largest bodies allowed before AUTH and their lines, and as much again for
    NOPs."""
    body = min(PRE_AUTH_BODY_SIZE, limits.max_body_size)
    return 4 + 2 * (2 * (MAX_LINE_LENGTH + 4) + 2 * body)


# The longest a connection goes without ``expired`` being asked at all (``next_look``),
# however far its deadlines are: what a missed change of its state can cost.
MAX_LOOK_NS = 60_000_000_000


def next_look(
    now_ns: int,
    heartbeat_ns: int,
    *,
    pre_auth_ns: int,
    read_since: int,
    stalled_since: int,
    reading: bool,
    last_heartbeat: int,
) -> int:
    """When a connection next needs looking at (a heartbeat due, or ``expired`` saying
    something), as of ``now_ns`` and its state as given (the same arguments as
    ``expired``, and when it was last sent a heartbeat); never more than ``MAX_LOOK_NS``
    ahead. A state that changes (a stall, a pause of its reading, an IDENTIFY, an AUTH)
    calls for a look at once: this answer was for the state before."""
    due = now_ns + MAX_LOOK_NS
    interval = heartbeat_ns if heartbeat_ns > 0 else pre_auth_ns
    if interval <= 0:
        return due
    if heartbeat_ns > 0:
        due = min(due, last_heartbeat + heartbeat_ns)
    if stalled_since:
        due = min(due, stalled_since + interval + 1)
    if reading:
        due = min(due, read_since + 2 * interval + 1)
    return due


def expired(
    now_ns: int,
    heartbeat_ns: int,
    *,
    pre_auth_ns: int,
    read_since: int,
    stalled_since: int,
    reading: bool,
) -> str:
    """Why a connection must close at ``now_ns`` ('' if it need not).

    ``heartbeat_ns`` is the negotiated interval (<= 0: heartbeats disabled, when
    ``pre_auth_ns``, the default interval before AUTH, applies instead unless it is 0);
    ``read_since`` is when the connection began waiting for its next command, ``reading``
    whether nsqd is reading it (not while its output is over the high-water mark or its
    commands are held), ``stalled_since`` when its output passed the mark (0: it is not).
    """
    interval = heartbeat_ns if heartbeat_ns > 0 else pre_auth_ns
    if interval <= 0:
        return ""
    if stalled_since and now_ns - stalled_since > interval:
        return f"output not read for {interval // 1_000_000}ms"
    if reading and now_ns - read_since > 2 * interval:
        return f"no complete command within {2 * interval // 1_000_000}ms"
    return ""
