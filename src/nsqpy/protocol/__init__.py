"""nsqpy.protocol: sans-IO codecs for NSQ's TCP protocol V2 (and, in ``lookupd``, V1).

Bytes in, values out; values in, bytes out. Modules: ``limits`` (server limits), ``names``
(topic/channel rule), ``frames`` (V2 frames, client FrameDecoder), ``message`` (message
frames and IDs), ``verbs`` (command objects), ``commands`` (the server's CommandParser),
``extend`` (Youzan's commands: headers, partitions, tracing), ``client_codec``
(client encoders: every byte nsqpy.client sends), ``identify`` (IDENTIFY body, negotiation,
reply), ``state`` (connection state table), ``logread`` (the body of nsqd's HTTP log-read
API, written by nsqd and read by Spark), ``replication`` (frames between nsqd). This
package imports only the standard library and nsqpy.errors: never asyncio, sockets or any
layer above it.
"""

from nsqpy.protocol.commands import CommandParser, LineTooLong
from nsqpy.protocol.frames import (
    CLOSE_WAIT_FRAME,
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    HEARTBEAT_FRAME,
    MAGIC_V2,
    OK_FRAME,
    FrameDecoder,
    encode_error,
    encode_frame,
    encode_response,
)
from nsqpy.protocol.limits import Limits
from nsqpy.protocol.message import (
    Message,
    decode_message,
    decode_message_id,
    encode_message_frame,
    encode_message_id,
)
from nsqpy.protocol.verbs import (
    Auth,
    Cls,
    Command,
    Dpub,
    Fin,
    Identify,
    Mpub,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
)

__all__ = [
    "CLOSE_WAIT_FRAME",
    "FRAME_ERROR",
    "FRAME_MESSAGE",
    "FRAME_RESPONSE",
    "HEARTBEAT_FRAME",
    "MAGIC_V2",
    "OK_FRAME",
    "Auth",
    "Cls",
    "Command",
    "CommandParser",
    "Dpub",
    "Fin",
    "FrameDecoder",
    "Identify",
    "Limits",
    "LineTooLong",
    "Message",
    "Mpub",
    "Nop",
    "Pub",
    "Rdy",
    "Req",
    "Sub",
    "Touch",
    "decode_message",
    "decode_message_id",
    "encode_error",
    "encode_frame",
    "encode_message_frame",
    "encode_message_id",
    "encode_response",
]
