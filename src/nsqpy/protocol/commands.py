"""V2 commands: the server-side incremental ``CommandParser`` (the objects it returns are in
``nsqpy.protocol.verbs``).

Bytes in, commands out (sans-IO). Everything nsqd checks without server state is checked
here, in nsqd v1.3.0's order and with its codes and texts (SPEC 1.2, 1.6, 1.7): the magic,
the 16 KiB line limit, single-space splitting, unknown verbs, parameter counts, names,
numbers, RDY/DPUB ranges, REQ clamping, message ID lengths and body sizes. State checks live
in ``state``; an optional ``gate`` lets the server run them at nsqd's point in the order
(before the parameters). Every error raised here is fatal. Youzan's extensions are parsed
too (``nsqpy.protocol.extend``): an optional partition after the topic of PUB/MPUB and
after the channel of SUB (a decimal number, -1 meaning "none", else E_BAD_PARTITION),
SUB_ORDERED, PUB_EXT/MPUB_EXT (split into header and body; the header's JSON is checked by
the server, where its error is not fatal) and PUB_TRACE/MPUB_TRACE (their parsing is in
``extend``, over this parser's ``read_topic``/``read_message_body``/``read_mpub``). Imports
only the standard library and nsqpy.errors (plus sibling protocol modules); never asyncio
or sockets.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TypeAlias

from nsqpy.errors import (
    BadBody,
    BadChannel,
    BadExt,
    BadMessage,
    BadPartition,
    BadProtocol,
    BadTopic,
    InvalidError,
    ProtocolError,
)
from nsqpy.protocol._gofmt import (
    RawInvalidError,
    as_int64,
    go_quote,
    ms_to_duration_ns,
    parse_base10,
)
from nsqpy.protocol.extend import (
    parse_mpub_ext,
    parse_mpub_trace,
    parse_partition,
    parse_pub_ext,
    parse_pub_trace,
)
from nsqpy.protocol.frames import MAGIC_V2
from nsqpy.protocol.limits import DEFAULT_LIMITS, MAX_IDENTIFY_BODY_SIZE, MAX_LINE_LENGTH, Limits
from nsqpy.protocol.message import MSG_ID_LENGTH, hex_ids
from nsqpy.protocol.names import valid_name_bytes
from nsqpy.protocol.verbs import (
    Auth,
    Cls,
    Command,
    Dpub,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
)

# A gate sees each verb before its parameters are checked; it raises a ProtocolError to refuse
# it, returns False to drop the line silently (only for bodiless verbs: RDY while closing),
# or True to go on. See ``state.check_verb``. It must be a pure check: it runs again each
# time ``next`` re-reads a command whose body has not fully arrived.
Gate: TypeAlias = Callable[[bytes], bool]


class LineTooLong(InvalidError):
    """A command line longer than 16384 bytes: nsqd drops the connection without a frame."""

    silent = True


_I32 = struct.Struct(">i")
_COMPACT_AT = 1 << 16
_NOP = Nop()
_CLS = Cls()
_Buffer: TypeAlias = bytes | bytearray
_Parsed: TypeAlias = tuple[Command, int] | None
_Params: TypeAlias = Sequence[bytes | bytearray]


def _body(buf: _Buffer, start: int, stop: int) -> bytes:
    if type(buf) is bytes:
        return buf[start:stop]
    with memoryview(buf) as view:
        return view[start:stop].tobytes()


# A run of FIN commands in their plain form (what every client sends): 21 bytes each.
_FIN_LINE = 21
_FIN_RUN = re.compile(rb"(?:FIN [0-9a-f]{16}\n)+")


class CommandParser:
    """Incremental parser of one V2 connection's byte stream (server side).

    ``feed`` buffers bytes; ``next`` returns one command, or None when more bytes are needed.
    A declared size over its limit raises as soon as the size field is read, so no oversized
    body is ever buffered. Every error here is fatal: once raised, ``next`` raises it again.
    """

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        expect_magic: bool = True,
        gate: Gate | None = None,
    ) -> None:
        self.limits = limits
        self.gate = gate
        self._need_magic = expect_magic
        self._buf: _Buffer = b""
        self._pos = 0
        self._error: ProtocolError | None = None
        # A partly received MPUB: (messages read, next size field, body spans), all
        # relative to the command's first byte so compaction cannot invalidate them.
        self._mpub: tuple[int, int, list[int]] | None = None
        self._names: dict[bytes, str] = {}
        # youzan's binary message IDs (a client with ``extend_support``): FIN, REQ and TOUCH
        # carry the 16 bytes as sent (a uint64 ID, a uint64 trace id), which may hold a
        # newline or a space; each is read as the 16 hex digits of its ID.
        self.binary_ids = False
        self._max_msg = limits.max_msg_size
        self._max_body = limits.max_body_size
        # The largest IDENTIFY or AUTH body taken (``limits.MAX_IDENTIFY_BODY_SIZE`` at
        # most); a server that requires AUTH lowers it until the client has authenticated
        # (``limits.PRE_AUTH_BODY_SIZE``), then sets it back.
        self.max_command_body_size = min(limits.max_body_size, MAX_IDENTIFY_BODY_SIZE)
        self._handlers: dict[bytes, Callable[[_Params, int], _Parsed]] = {
            b"FIN": self._fin,
            b"RDY": self._rdy,
            b"REQ": self._req,
            b"PUB": self._pub,
            b"MPUB": self._mpub_cmd,
            b"DPUB": self._dpub,
            b"NOP": self._nop,
            b"TOUCH": self._touch,
            b"SUB": self._sub,
            b"CLS": self._cls,
            b"AUTH": self._auth,
            b"IDENTIFY": self._identify,
            b"SUB_ORDERED": self._sub_ordered,
            b"SUB_ADVANCED": self._sub_advanced,
            b"INTERNAL_CREATE_TOPIC": self._internal_create_topic,
            # Youzan's extended publishing (``nsqpy.protocol.extend``), over ``read_topic``,
            # ``read_message_body`` and ``read_mpub``
            b"PUB_EXT": partial(parse_pub_ext, self),
            b"MPUB_EXT": partial(parse_mpub_ext, self),
            b"PUB_TRACE": partial(parse_pub_trace, self),
            b"MPUB_TRACE": partial(parse_mpub_trace, self),
        }

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed by a returned command."""
        return len(self._buf) - self._pos

    def take_buffered(self) -> bytes:
        """Remove and return the bytes received but not parsed (a stream upgrade re-reads them)."""
        with memoryview(self._buf) as view:
            rest = view[self._pos :].tobytes()
        self._buf, self._pos = b"", 0
        return rest

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes (copied: the caller may reuse its buffer).

        Small leftovers are joined into an immutable ``bytes`` (fast slicing, hashable
        params); a leftover of 64 KiB or more (a big body arriving) moves to a ``bytearray``
        that grows in place, so a large body costs linear time.
        """
        buf = self._buf
        pos = self._pos
        left = len(buf) - pos
        if left <= 0:
            self._buf = data if type(data) is bytes else bytes(data)
        elif left < _COMPACT_AT:
            with memoryview(buf) as view:
                self._buf = b"".join((view[pos:], data))
        elif type(buf) is bytes:
            with memoryview(buf) as view:
                grown = bytearray(view[pos:])
            grown += data
            self._buf = grown
        else:
            assert isinstance(buf, bytearray)
            del buf[:pos]
            buf += data
        self._pos = 0

    def commands(self) -> Iterator[Command]:
        """Every complete command buffered so far."""
        while (command := self.next()) is not None:
            yield command

    def take_fins(self, limit: int = 1 << 30) -> list[bytes]:
        """The message IDs of a run of plain ``FIN <16 lowercase hex>\\n`` lines at the head
        of the buffer (at most ``limit`` of them), consumed; empty when the next command is
        anything else.

        A consumer's acknowledgements arrive in bursts: this lets the server handle them as
        one batch instead of one parsed command each. Anything unusual (a CR, upper case, a
        bad ID, a pending error or the magic still due) is left to ``next``, so the replies
        are the same either way; the caller applies the state gate as ``next`` would.
        """
        return [b"%016x" % value for value in self.take_fin_values(limit)]

    def take_fin_values(self, limit: int = 1 << 30) -> list[int]:
        """``take_fins`` with each ID as its integer (``b"%016x" % value`` is the ID)."""
        if self._error is not None or self._need_magic or self.binary_ids:
            return []
        buf = self._buf
        match = _FIN_RUN.match(buf, self._pos, self._pos + limit * _FIN_LINE)
        if match is None:
            return []
        start, end = match.span()
        self._pos = end
        return hex_ids(buf, start, end, _FIN_LINE)

    def take_publish(self, data: bytes) -> tuple[bool, str, list[bytes]] | None:
        """(is MPUB, topic, bodies) when ``data`` is exactly one whole, valid ``PUB <topic>``
        or ``MPUB <topic>`` (no partition) and nothing is buffered: what a publisher waiting
        for each OK sends. None, with nothing consumed, for anything else (``feed`` and
        ``next`` then parse it, with their errors). A topic name must be one already
        checked (``read_topic``'s cache)."""
        if self._pos < len(self._buf) or self._need_magic or self._error is not None:
            return None
        newline = data.find(b"\n", 0, 64 + 6)
        if newline < 0 or len(data) < newline + 5:
            return None
        verb, _, raw = data[:newline].partition(b" ")
        topic = self._names.get(raw)
        if topic is None:
            return None
        size: int = _I32.unpack_from(data, newline + 1)[0]
        start = newline + 5
        if len(data) != start + size or size <= 0:
            return None
        if verb == b"PUB":
            if size > self._max_msg:
                return None
            return False, topic, [data[start:]]
        if verb != b"MPUB" or size > self._max_body or size < 8:
            return None
        count: int = _I32.unpack_from(data, start)[0]
        if count <= 0 or count > self.limits.max_mpub_count:
            return None
        bodies = []
        at = start + 4
        unpack, max_msg, end = _I32.unpack_from, self._max_msg, len(data)
        for _ in range(count):
            if end - at < 4:
                return None
            msg_size: int = unpack(data, at)[0]
            stop = at + 4 + msg_size
            if msg_size <= 0 or msg_size > max_msg or stop > end:
                return None
            bodies.append(data[at + 4 : stop])
            at = stop
        if at != end:  # (nsqd ignores what the size declares beyond the messages: not here)
            return None
        return True, topic, bodies

    def next(self) -> Command | None:
        """One parsed command, or None when more bytes are needed; raises ProtocolError."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except ProtocolError as err:
            self._error = err
            raise

    def _next(self) -> Command | None:
        buf = self._buf
        pos = self._pos
        if self._need_magic:
            if len(buf) - pos < 4:
                return None
            if buf[pos : pos + 4] != MAGIC_V2:
                raise BadProtocol()
            pos += 4
            self._pos = pos
            self._need_magic = False
        while True:
            params: _Params | None = None
            if self.binary_ids and buf[pos : pos + 1] in _BINARY_ID_FIRST:
                found = self._binary_id_params(buf, pos)
                if found is None:
                    return None
                if found[0]:
                    params, newline = found
            if params is None:
                newline = buf.find(b"\n", pos)
                if newline < 0:
                    if len(buf) - pos >= MAX_LINE_LENGTH:
                        raise LineTooLong(f"command line longer than {MAX_LINE_LENGTH} bytes")
                    return None
                if newline - pos >= MAX_LINE_LENGTH:
                    raise LineTooLong(f"command line longer than {MAX_LINE_LENGTH} bytes")
                stop = newline - 1 if newline > pos and buf[newline - 1] == 13 else newline
                params = buf[pos:stop].split(b" ")
            verb = params[0]
            if type(verb) is not bytes:
                verb = bytes(verb)
            if self.gate is not None and not self.gate(verb):
                pos = self._pos = newline + 1
                continue
            handler = self._handlers.get(verb)
            if handler is None:
                raise RawInvalidError("invalid command ", verb)
            parsed = handler(params, newline + 1)
            if parsed is None:
                return None
            command, self._pos = parsed
            return command

    def _binary_id_params(self, buf: _Buffer, pos: int) -> tuple[list[bytes], int] | None:
        """The params of a FIN, REQ or TOUCH line at ``pos`` whose ID is 16 raw bytes, the
        ID given as its 16 hex digits, and where its line ends; ``([], -1)`` when the line
        is no such command (read as any other); None when more bytes are needed."""
        for verb in _BINARY_ID_VERBS:
            if buf[pos : pos + len(verb)] == verb:
                break
        else:
            return [], -1
        at = pos + len(verb)
        if len(buf) < at + MSG_ID_LENGTH:
            return None
        raw = bytes(buf[at : at + MSG_ID_LENGTH])
        newline = buf.find(b"\n", at + MSG_ID_LENGTH)
        if newline < 0:
            if len(buf) - pos >= MAX_LINE_LENGTH:
                raise LineTooLong(f"command line longer than {MAX_LINE_LENGTH} bytes")
            return None
        stop = (
            newline - 1 if buf[newline - 1] == 13 and newline - 1 >= at + MSG_ID_LENGTH else newline
        )
        rest = bytes(buf[at + MSG_ID_LENGTH : stop]).split(b" ")[1:]
        msg_id = b"%016x" % int.from_bytes(raw[:8], "big")
        return [verb[:-1], msg_id, *rest], newline

    # -- helpers -------------------------------------------------------------------------

    def read_topic(self, raw: bytes | bytearray, verb: str, prefix: str = "") -> str:
        name = self._names.get(raw) if type(raw) is bytes else None
        if name is not None:
            return name
        if not valid_name_bytes(raw):
            raise BadTopic(f"{prefix}{verb} topic name {go_quote(raw)} is not valid")
        name = raw.decode("ascii")
        if len(self._names) >= 1024:
            self._names.clear()
        self._names[bytes(raw)] = name
        return name

    def _size(self, start: int) -> int | None:
        if len(self._buf) - start < 4:
            return None
        size: int = _I32.unpack_from(self._buf, start)[0]
        return size

    def read_message_body(self, verb: str, start: int) -> tuple[bytes, int] | None:
        """PUB/DPUB: a size checked against --max-msg-size, then the body."""
        size = self._size(start)
        if size is None:
            return None
        if size <= 0:
            raise BadMessage(f"{verb} invalid message body size {size}")
        if size > self._max_msg:
            raise BadMessage(f"{verb} message too big {size} > {self._max_msg}")
        stop = start + 4 + size
        if len(self._buf) < stop:
            return None
        return _body(self._buf, start + 4, stop), stop

    def _command_body(
        self, verb: str, start: int, limit: int | None = None
    ) -> tuple[bytes, int] | None:
        """IDENTIFY/AUTH: a size checked against ``limit`` (--max-body-size unless given;
        too big first), then the body."""
        size = self._size(start)
        if size is None:
            return None
        limit = self._max_body if limit is None else limit
        if size > limit:
            raise BadBody(f"{verb} body too big {size} > {limit}")
        if size <= 0:
            raise BadBody(f"{verb} invalid body size {size}")
        stop = start + 4 + size
        if len(self._buf) < stop:
            return None
        return _body(self._buf, start + 4, stop), stop

    @staticmethod
    def _msg_id(params: _Params, verb: str) -> bytes:
        if len(params) < 2:
            raise InvalidError(f"{verb} insufficient number of params")
        msg_id = params[1]
        if len(msg_id) != MSG_ID_LENGTH:
            raise InvalidError("invalid message ID")
        return msg_id if type(msg_id) is bytes else bytes(msg_id)

    # -- one method per verb -------------------------------------------------------------

    def _pub(self, params: _Params, start: int) -> _Parsed:
        # The hot path: _topic and _message_body inlined.
        if len(params) < 2:
            raise InvalidError("PUB insufficient number of parameters")
        raw = params[1]
        topic = self._names.get(raw) if type(raw) is bytes else None
        if topic is None:
            topic = self.read_topic(raw, "PUB")
        if len(params) == 3:
            parse_partition(params[2])  # refused before the body, as youzan's nsqd does
        buf = self._buf
        if len(buf) - start < 4:
            return None
        size: int = _I32.unpack_from(buf, start)[0]
        if size <= 0:
            raise BadMessage(f"PUB invalid message body size {size}")
        if size > self._max_msg:
            raise BadMessage(f"PUB message too big {size} > {self._max_msg}")
        stop = start + 4 + size
        if len(buf) < stop:
            return None
        body = buf[start + 4 : stop] if type(buf) is bytes else _body(buf, start + 4, stop)
        if len(params) == 3:
            return Pub(topic, body, parse_partition(params[2])), stop
        return Pub(topic, body), stop

    def _dpub(self, params: _Params, start: int) -> _Parsed:
        if len(params) < 3:
            raise InvalidError("DPUB insufficient number of parameters")
        topic = self.read_topic(params[1], "DPUB")
        defer = parse_base10(params[2])
        if defer is None:
            raise RawInvalidError("DPUB could not parse timeout ", params[2])
        duration = ms_to_duration_ns(defer)
        max_ms = self.limits.max_req_timeout_ms
        if duration < 0 or duration > max_ms * 1_000_000:
            raise InvalidError(f"DPUB timeout {defer} out of range 0-{max_ms}")
        parsed = self.read_message_body("DPUB", start)
        if parsed is None:
            return None
        return Dpub(topic, defer, parsed[0]), parsed[1]

    def _mpub_cmd(self, params: _Params, start: int) -> _Parsed:
        parsed = self.read_mpub(params, start, "MPUB")
        if parsed is None:
            return None
        (topic, partition, bodies), stop = parsed
        return Mpub(topic, bodies, partition), stop

    def read_mpub(
        self, params: _Params, start: int, verb: str
    ) -> tuple[tuple[str, int, list[bytes]], int] | None:
        """MPUB and its extended forms: (topic, partition, raw message bodies), end."""
        if len(params) < 2:
            raise InvalidError(f"{verb} insufficient number of parameters")
        topic = self.read_topic(params[1], verb, prefix="E_BAD_TOPIC ")
        partition = parse_partition(params[2]) if len(params) == 3 else -1
        size = self._size(start)
        if size is None:
            return None
        if size <= 0:
            raise BadBody(f"{verb} invalid body size {size}")
        if size > self._max_body:
            raise BadBody(f"{verb} body too big {size} > {self._max_body}")
        count = self._size(start + 4)
        if count is None:
            return None
        if count <= 0 or count > self.limits.max_mpub_count:
            raise BadBody(f"{verb} invalid message count {count}")
        parsed = self._mpub_messages(count, start)
        if parsed is None:
            return None
        return (topic, partition, parsed[0]), parsed[1]

    def _mpub_messages(self, count: int, start: int) -> tuple[list[bytes], int] | None:
        # nsqd reads the messages one by one and never checks them against the body size.
        buf = self._buf
        base = self._pos
        if self._mpub is not None:
            index, at, spans = self._mpub
            at += base
        else:
            index, at, spans = 0, start + 8, []
        end = len(buf)
        unpack = _I32.unpack_from
        max_msg = self._max_msg
        while index < count:
            if end - at < 4:
                break
            msg_size: int = unpack(buf, at)[0]
            if msg_size <= 0:
                raise BadMessage(f"MPUB invalid message({index}) body size {msg_size}")
            if msg_size > max_msg:
                raise BadMessage(f"MPUB message too big {msg_size} > {max_msg}")
            stop = at + 4 + msg_size
            if stop > end:
                break
            spans.append(at + 4 - base)
            spans.append(stop - base)
            index += 1
            at = stop
        if index < count:
            self._mpub = (index, at - base, spans)
            return None
        self._mpub = None
        if type(buf) is bytes:
            bodies = [buf[base + spans[i] : base + spans[i + 1]] for i in range(0, len(spans), 2)]
        else:
            with memoryview(buf) as view:
                bodies = [
                    view[base + spans[i] : base + spans[i + 1]].tobytes()
                    for i in range(0, len(spans), 2)
                ]
        return bodies, at

    def _fin(self, params: _Params, start: int) -> _Parsed:
        if len(params) == 2 and len(params[1]) == MSG_ID_LENGTH and type(params[1]) is bytes:
            return Fin(params[1]), start
        return Fin(self._msg_id(params, "FIN")), start

    def _touch(self, params: _Params, start: int) -> _Parsed:
        return Touch(self._msg_id(params, "TOUCH")), start

    def _req(self, params: _Params, start: int) -> _Parsed:
        if len(params) < 3:
            raise InvalidError("REQ insufficient number of params")
        msg_id = self._msg_id(params, "REQ")
        timeout = parse_base10(params[2])
        if timeout is None:
            raise RawInvalidError("REQ could not parse timeout ", params[2])
        duration = ms_to_duration_ns(timeout)
        max_ms = self.limits.max_req_timeout_ms
        if duration < 0:
            timeout_ms = 0
        elif duration > max_ms * 1_000_000:
            timeout_ms = max_ms
        else:
            timeout_ms = duration // 1_000_000
        return Req(msg_id, timeout_ms), start

    def _rdy(self, params: _Params, start: int) -> _Parsed:
        count = 1
        if len(params) > 1:
            parsed = parse_base10(params[1])
            if parsed is None:
                raise RawInvalidError("RDY could not parse count ", params[1])
            count = as_int64(parsed)
        max_rdy = self.limits.max_rdy_count
        if count < 0 or count > max_rdy:
            raise InvalidError(f"RDY count {count} out of range 0-{max_rdy}")
        return Rdy(count), start

    def _sub(self, params: _Params, start: int) -> _Parsed:
        return self._read_sub(params), start

    def _read_sub(self, params: _Params) -> Sub:
        if len(params) < 3:
            raise InvalidError("SUB insufficient number of parameters")
        topic = self.read_topic(params[1], "SUB")
        raw_channel = params[2]
        if not valid_name_bytes(raw_channel):
            raise BadChannel(f"SUB channel name {go_quote(raw_channel)} is not valid")
        partition = parse_partition(params[3]) if len(params) == 4 else -1
        return Sub(topic, raw_channel.decode("ascii"), partition)

    def _sub_ordered(self, params: _Params, start: int) -> _Parsed:
        sub = self._read_sub(params)
        sub.ordered = True
        return sub, start

    def _sub_advanced(self, params: _Params, start: int) -> _Parsed:
        """youzan's ``SUB_ADVANCED <topic> <channel> [<partition> [<position>]]``: a SUB whose
        messages carry youzan's detail and that may first move the channel's cursor to
        ``position`` (``type:value``, checked where it is applied)."""
        if len(params) > 5:
            raise InvalidError("SUB_ADVANCED too many parameters")
        sub = self._read_sub(params[:4])
        sub.advanced, sub.start = True, bytes(params[4]) if len(params) == 5 else b""
        return sub, start

    def _internal_create_topic(self, params: _Params, start: int) -> _Parsed:
        """``INTERNAL_CREATE_TOPIC <topic> <partition> [<ext>]``, checked as youzan's nsqd
        checks it (the ext flag as Go's strconv.ParseBool reads it)."""
        if len(params) < 3:
            raise InvalidError("CREATE_TOPIC insufficient number of parameters")
        if not valid_name_bytes(params[1]):
            raise BadTopic(f"topic name {go_quote(params[1])} is not valid")
        topic = params[1].decode("ascii")
        raw = bytes(params[2])
        digits = raw[1:] if raw[:1] in (b"-", b"+") else raw
        if not digits.isdigit() or len(digits) > 18:
            raise BadPartition(f"topic partition is not valid: {go_quote(raw)}")
        partition = int(raw)
        if partition < 0:
            raise BadPartition("partition should not less than 0")
        ext = False
        if len(params) >= 4:
            flag = bytes(params[3])
            if flag not in _GO_BOOLS:
                raise BadExt(f"topic ext is not valid: {go_quote(flag)}")
            ext = _GO_BOOLS[flag]
        return InternalCreateTopic(topic, partition, ext), start

    def _identify(self, params: _Params, start: int) -> _Parsed:
        parsed = self._command_body("IDENTIFY", start, self.max_command_body_size)
        if parsed is None:
            return None
        return Identify(parsed[0]), parsed[1]

    def _auth(self, params: _Params, start: int) -> _Parsed:
        if len(params) != 1:
            raise InvalidError("AUTH invalid number of parameters")
        parsed = self._command_body("AUTH", start, self.max_command_body_size)
        if parsed is None:
            return None
        return Auth(parsed[0]), parsed[1]

    def _nop(self, params: _Params, start: int) -> _Parsed:
        return _NOP, start

    def _cls(self, params: _Params, start: int) -> _Parsed:
        return _CLS, start


# The commands that carry a message ID: with binary IDs, read by length, not by line.
_BINARY_ID_VERBS = (b"FIN ", b"REQ ", b"TOUCH ")
_BINARY_ID_FIRST = (b"F", b"R", b"T")

# Go's strconv.ParseBool
_GO_BOOLS = {
    **dict.fromkeys((b"1", b"t", b"T", b"TRUE", b"true", b"True"), True),
    **dict.fromkeys((b"0", b"f", b"F", b"FALSE", b"false", b"False"), False),
}

__all__ = ["CommandParser", "Gate", "LineTooLong"]
