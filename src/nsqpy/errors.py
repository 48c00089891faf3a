"""The error tree of nsqpy.

Every error a peer can cause carries the wire code NSQ uses for it and whether NSQ closes
the connection after sending it (``fatal``). Only E_FIN_FAILED, E_REQ_FAILED and
E_TOUCH_FAILED (and youzan's E_INVALID_JSON_HEADER and E_FAILED_ON_NOT_LEADER) are
non-fatal; every other error frame is followed by a close.

    NsqError
    ├── ProtocolError              a peer sent something we must refuse (has .code, .fatal)
    │   ├── BadProtocol            E_BAD_PROTOCOL  wrong magic
    │   ├── InvalidError           E_INVALID       unknown command, wrong state, bad params
    │   ├── BadBody                E_BAD_BODY      IDENTIFY/AUTH/MPUB body size/JSON
    │   ├── BadTopic               E_BAD_TOPIC
    │   ├── BadChannel             E_BAD_CHANNEL
    │   ├── BadMessage             E_BAD_MESSAGE   message size/read
    │   ├── PubFailed / MpubFailed / DpubFailed
    │   ├── SubFailed              E_SUB_FAILED
    │   ├── IdentifyFailed         E_IDENTIFY_FAILED
    │   ├── AuthFirst / AuthFailed / Unauthorized / AuthDisabled / AuthError
    │   ├── BadPartition           E_BAD_PARTITION  partition number (youzan's extension)
    │   ├── TopicNotExist          E_TOPIC_NOT_EXIST  a partition the topic lacks (youzan)
    │   ├── CreateTopicFailed      E_CREATE_TOPIC_FAILED  INTERNAL_CREATE_TOPIC (non-fatal)
    │   ├── BadExt                 E_BAD_EXT       INTERNAL_CREATE_TOPIC's ext flag
    │   ├── NotLeader              E_FAILED_ON_NOT_LEADER  a write to a partition this node
    │   │                          does not lead (non-fatal, youzan's cluster mode)
    │   ├── InvalidJsonHeader      E_INVALID_JSON_HEADER  message headers (non-fatal, youzan)
    │   └── FinFailed / ReqFailed / TouchFailed   (non-fatal)
    ├── StorageError               the disk misbehaved (I/O error, corruption found)
    │   └── CorruptRecord          a record failed its length/CRC check
    └── ConfigError                a flag or option has a bad value (names value and limit)

This module imports only the standard library so every layer may use it.
"""

from __future__ import annotations


class NsqError(Exception):
    """Base of every error nsqpy raises on purpose."""


class ProtocolError(NsqError):
    """An error caused by the remote peer, reported on the wire as ``<code> <description>``."""

    code: str = "E_INVALID"
    fatal: bool = True

    def __init__(self, description: str = "") -> None:
        super().__init__(description)
        self.description = description

    def wire(self) -> bytes:
        """The error frame body: the code, then a space and the description when there is one."""
        if self.description:
            return f"{self.code} {self.description}".encode()
        return self.code.encode()

    def __str__(self) -> str:
        return self.wire().decode(errors="replace")


class BadProtocol(ProtocolError):
    """E_BAD_PROTOCOL"""

    code = "E_BAD_PROTOCOL"


class InvalidError(ProtocolError):
    """E_INVALID"""

    code = "E_INVALID"


class BadBody(ProtocolError):
    """E_BAD_BODY"""

    code = "E_BAD_BODY"


class BadTopic(ProtocolError):
    """E_BAD_TOPIC"""

    code = "E_BAD_TOPIC"


class BadChannel(ProtocolError):
    """E_BAD_CHANNEL"""

    code = "E_BAD_CHANNEL"


class BadMessage(ProtocolError):
    """E_BAD_MESSAGE"""

    code = "E_BAD_MESSAGE"


class PubFailed(ProtocolError):
    """E_PUB_FAILED"""

    code = "E_PUB_FAILED"


class MpubFailed(ProtocolError):
    """E_MPUB_FAILED"""

    code = "E_MPUB_FAILED"


class DpubFailed(ProtocolError):
    """E_DPUB_FAILED"""

    code = "E_DPUB_FAILED"


class SubFailed(ProtocolError):
    """E_SUB_FAILED"""

    code = "E_SUB_FAILED"


class IdentifyFailed(ProtocolError):
    """E_IDENTIFY_FAILED"""

    code = "E_IDENTIFY_FAILED"


class AuthFirst(ProtocolError):
    """E_AUTH_FIRST"""

    code = "E_AUTH_FIRST"


class AuthFailed(ProtocolError):
    """E_AUTH_FAILED"""

    code = "E_AUTH_FAILED"


class Unauthorized(ProtocolError):
    """E_UNAUTHORIZED"""

    code = "E_UNAUTHORIZED"


class AuthDisabled(ProtocolError):
    """E_AUTH_DISABLED"""

    code = "E_AUTH_DISABLED"


class AuthError(ProtocolError):
    """E_AUTH_ERROR"""

    code = "E_AUTH_ERROR"


class BadPartition(ProtocolError):
    """E_BAD_PARTITION: a partition number that is not a number, or out of range."""

    code = "E_BAD_PARTITION"


class NotLeader(ProtocolError):
    """E_FAILED_ON_NOT_LEADER: a write (PUB, MPUB, DPUB, PUB_EXT, HTTP /pub...) to a
    partition this node follows or does not hold, or with no partition named to a topic of
    which it leads none. Non-fatal, as youzan's nsqd sends it (a ``ClientErr``): the client
    looks the leader up again. Over HTTP: 400 ``E_FAILED_ON_NOT_LEADER``."""

    code = "E_FAILED_ON_NOT_LEADER"
    fatal = False


class NotWritable(ProtocolError):
    """E_FAILED_ON_NOT_WRITABLE (youzan): a write to a partition whose in-sync replicas are
    not more than half of its replicas (CLUSTER.md "Write path"): refused until the ISR
    grows again. Non-fatal; over HTTP 400 ``E_FAILED_ON_NOT_WRITABLE``."""

    code = "E_FAILED_ON_NOT_WRITABLE"
    fatal = False


class NotLeaderForSub(NotLeader):
    """E_FAILED_ON_NOT_LEADER for a SUB on a node that holds no partition of the topic:
    fatal, as youzan's nsqd closes such a consumer (it looks the leaders up again)."""

    fatal = True


class TopicNotExist(ProtocolError):
    """E_TOPIC_NOT_EXIST (youzan): a partition named (PUB/SUB/... with a partition number)
    that the topic lacks or this node does not hold, of a topic or not; in a cluster, a
    topic that does not exist and could not be created (``--disable-auto-create``, no
    coordinator). Fatal, as youzan's nsqd; youzan's consumer drops that node on it."""

    code = "E_TOPIC_NOT_EXIST"


class CreateTopicFailed(ProtocolError):
    """E_CREATE_TOPIC_FAILED (youzan): INTERNAL_CREATE_TOPIC refused (in a cluster with
    ``--disable-auto-create`` or no coordinator) or failed. Non-fatal, as youzan's nsqd."""

    code = "E_CREATE_TOPIC_FAILED"
    fatal = False


class BadExt(ProtocolError):
    """E_BAD_EXT (youzan): INTERNAL_CREATE_TOPIC's ext flag is not a boolean."""

    code = "E_BAD_EXT"


class InvalidJsonHeader(ProtocolError):
    """E_INVALID_JSON_HEADER: a message's extension headers are not a valid JSON object."""

    code = "E_INVALID_JSON_HEADER"
    fatal = False


class FinFailed(ProtocolError):
    """E_FIN_FAILED"""

    code = "E_FIN_FAILED"
    fatal = False


class ReqFailed(ProtocolError):
    """E_REQ_FAILED"""

    code = "E_REQ_FAILED"
    fatal = False


class TouchFailed(ProtocolError):
    """E_TOUCH_FAILED"""

    code = "E_TOUCH_FAILED"
    fatal = False


# Every wire code nsqd 1.3.0 can send, mapped to its class (clients use this to raise
# the right exception from an error frame).
BY_CODE: dict[str, type[ProtocolError]] = {
    cls.code: cls
    for cls in (
        BadProtocol,
        InvalidError,
        BadBody,
        BadTopic,
        BadChannel,
        BadMessage,
        PubFailed,
        MpubFailed,
        DpubFailed,
        SubFailed,
        IdentifyFailed,
        AuthFirst,
        AuthFailed,
        Unauthorized,
        AuthDisabled,
        AuthError,
        BadPartition,
        NotLeader,
        NotWritable,
        TopicNotExist,
        CreateTopicFailed,
        BadExt,
        InvalidJsonHeader,
        FinFailed,
        ReqFailed,
        TouchFailed,
    )
}


def from_wire(data: bytes) -> ProtocolError:
    """Build the exception for an error frame body such as ``b"E_INVALID cannot SUB"``."""
    text = data.decode(errors="replace")
    code, _, description = text.partition(" ")
    cls = BY_CODE.get(code)
    if cls is None:
        err = ProtocolError(description)
        err.code = code or "E_UNKNOWN"
        return err
    return cls(description)


class StorageError(NsqError):
    """The storage engine could not do what was asked (I/O error, closed log, bad state)."""


class CorruptRecord(StorageError):
    """A record on disk failed its length or CRC32C check."""


class ConfigError(NsqError):
    """A flag or option value is out of range or malformed; the message names value and limit."""
