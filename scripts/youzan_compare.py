"""Compare nsqpy's nsqd with Youzan's, side by side, on what Youzan's clients parse.

    python scripts/youzan_compare.py YOUZAN_NSQD [--nsqd NSQPY_NSQD] [--out DIR]
                                     [--resume-on HOST:PORT]

Starts Youzan's nsqd (the program given, a build of youzan/nsq) and nsqpy's, each a single
node on loopback ports of its own with a data folder of its own, sends each the same
conversations over TCP (IDENTIFY with Youzan's features, INTERNAL_CREATE_TOPIC, partitioned
PUB and SUB, SUB_ORDERED and SUB_ADVANCED with their detail, PUB_EXT and PUB_TRACE, the
errors a client acts on), and compares the answers as a client reads them: an error by its
code (the first word: clients branch on it, the text is for people), OK and other
responses byte for byte, a message by its attempts and body (its timestamp and ID are the
server's own; a detail's queue offset and size are each server's own units, so what is
compared is what a client computes from them: whether each message starts where the one
before it ends, at offset + size), IDENTIFY's reply by the keys clients read. One more
conversation resumes where a client left off: two PUB_TRACEs, then SUB_ADVANCED at the
first reply's offset + size, which must deliver the second message on both servers.
Youzan's nsqd takes such a position only in a cluster (a single one answers ``E_INVALID Not
supported while coordinator disabled``): that conversation is held only with
``--resume-on``, the TCP address of the leader of partition 0 of a topic ``cmpr`` in a
Youzan cluster (with nsqpy's single nsqd on the other side). Prints one line per step, ``same`` or both
answers, and a summary; exits 1 when any step differs. Every process it starts is stopped.
Not run in CI (Youzan's nsqd is not part of this repository).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2
DETAIL = 12  # Youzan's detail before the body: queue offset u64, raw size u32
# IDENTIFY's reply: the keys clients act on. (``version`` is NSQ's for nsqpy, so NSQ's clients
# see the server they know; output_buffer_size and _timeout are each server's default, and
# what a client asks for it gets from both.)
IDENTIFY_KEYS = ("max_rdy_count", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate",
                 "snappy", "sample_rate", "auth_required")  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def daemon(argv: list[str], http: int, log: Path) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{argv[0]} did not start; see {log}") from None
                time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Wire:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.sendall(b"  V2")
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frames(self, count: int, wait: float = 2.0) -> list[tuple[int, bytes]]:
        """Up to ``count`` frames (heartbeats answered, left out), or what came in ``wait``."""
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + wait
        while len(got) < count:
            while len(self.buf) >= 8 and len(self.buf) >= 4 + struct.unpack(">I", self.buf[:4])[0]:
                size = struct.unpack(">I", self.buf[:4])[0]
                kind, data = struct.unpack(">I", self.buf[4:8])[0], self.buf[8 : 4 + size]
                self.buf = self.buf[4 + size :]
                if (kind, data) == (FRAME_RESPONSE, b"_heartbeat_"):
                    self.send(b"NOP\n")
                    continue
                got.append((kind, data))
                if len(got) == count:
                    return got
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                got.append((-1, b"closed"))
                break
            self.buf += data
        return got

    def close(self) -> None:
        self.sock.close()


def body(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def read_as_client(kind: int, data: bytes, detail: bool) -> object:
    """What a client acts on in one frame (see the module docstring)."""
    if kind == FRAME_ERROR:
        return ("error", data.split(b" ", 1)[0].decode(errors="replace"))
    if kind == FRAME_MESSAGE:
        attempts = struct.unpack(">H", data[8:10])[0]
        rest = data[26:]  # (after the ID: 16 hex digits, or two u64s for extend_support)
        if detail:  # (offset and size in each server's own units: see ``chained``)
            offset, size = struct.unpack(">QI", rest[:DETAIL])
            return ("message", attempts, ("detail", offset, size), rest[DETAIL:])
        return ("message", attempts, rest)
    if kind == FRAME_RESPONSE and data.startswith(b"{"):
        doc = json.loads(data)
        return ("identify", {k: doc.get(k, "<absent>") for k in IDENTIFY_KEYS if k in doc})
    return ("response" if kind == FRAME_RESPONSE else f"frame {kind}", data)


def chained(seen: list[object]) -> list[object]:
    """The detailed messages of one conversation, their (offset, size) replaced by whether
    the message starts at the previous one's offset + size (None for the first)."""
    out: list[object] = []
    end = None
    for item in seen:
        if isinstance(item, tuple) and len(item) == 4 and isinstance(item[2], tuple):
            _, offset, size = item[2]
            item = (
                item[0],
                item[1],
                "starts where the last ended",
                None if end is None else offset == end,
                item[3],
            )
            end = offset + size
        out.append(item)
    return out


IDENTIFY = b"IDENTIFY\n" + body(json.dumps({
    "client_id": "cmp", "hostname": "cmp", "feature_negotiation": True, "heartbeat_interval": 30000,
    "user_agent": "go-nsq/1.7.12", "msg_timeout": 60000,
}).encode())  # fmt: skip
IDENTIFY_EXT = b"IDENTIFY\n" + body(json.dumps({
    "client_id": "cmp", "hostname": "cmp", "feature_negotiation": True, "heartbeat_interval": 30000,
    "user_agent": "go-nsq/1.7.12", "msg_timeout": 60000, "extend_support": True,
}).encode())  # fmt: skip

# (name, [(bytes to send, frames to read)], detail, binary_id): each a new connection
STEPS: list[tuple[str, list[tuple[bytes, int]], bool, bool]] = [
    ("IDENTIFY", [(IDENTIFY, 1)], False, False),
    ("INTERNAL_CREATE_TOPIC cmp 0", [(b"INTERNAL_CREATE_TOPIC cmp 0\n", 1)], False, False),
    ("INTERNAL_CREATE_TOPIC cmp 1", [(b"INTERNAL_CREATE_TOPIC cmp 1\n", 1)], False, False),
    ("INTERNAL_CREATE_TOPIC bad name", [(b"INTERNAL_CREATE_TOPIC bad! 0\n", 1)], False, False),
    ("PUB cmp 0", [(b"PUB cmp 0\n" + body(b"hello-0"), 1)], False, False),
    ("PUB cmp 1", [(b"PUB cmp 1\n" + body(b"hello-1"), 1)], False, False),
    (
        "MPUB cmp 0",
        [(b"MPUB cmp 0\n" + body(struct.pack(">I", 2) + body(b"m-a") + body(b"m-b")), 1)],
        False,
        False,
    ),
    ("PUB to a partition the topic lacks", [(b"PUB cmp 9\n" + body(b"x"), 1)], False, False),
    (
        "PUB to a topic that does not exist, partition 0",
        [(b"PUB nosuch 0\n" + body(b"x"), 1)],
        False,
        False,
    ),
    ("SUB to a partition the topic lacks", [(b"SUB cmp c 9\n", 1)], False, False),
    ("SUB cmp c 0, RDY 3", [(b"SUB cmp c 0\n", 1), (b"RDY 3\n", 3)], False, False),
    ("SUB_ORDERED cmp o 0, RDY 1", [(b"SUB_ORDERED cmp o 0\n", 1), (b"RDY 1\n", 1)], True, False),
    (
        "SUB_ADVANCED cmp a 0, RDY 3",
        [(b"SUB_ADVANCED cmp a 0\n", 1), (b"RDY 3\n", 3)],
        True,
        False,
    ),
    # (the PUB's OK and the message it delivers on the same connection come in either
    # order, on both: compared as a set)
    (
        "SUB_ADVANCED cmp e 0 special:-1, then a PUB",
        [
            (b"SUB_ADVANCED cmp e 0 special:-1\n", 1),
            (b"RDY 1\n", 0),
            (b"PUB cmp 0\n" + body(b"after"), 2),
        ],
        True,
        False,
    ),
    (
        "SUB_ADVANCED with a bad position",
        [(b"SUB_ADVANCED cmp b 0 nonsense:1\n", 1)],
        False,
        False,
    ),
    ("SUB twice", [(b"SUB cmp t 0\n", 1), (b"SUB cmp t 0\n", 1)], False, False),
    (
        "FIN of an unknown ID",
        [(b"SUB cmp f 1\n", 1), (b"FIN 0000000000000000\n", 1)],
        False,
        False,
    ),
    ("an unknown command", [(b"NOSUCH\n", 1)], False, False),
    (
        "PUB_EXT, then SUB by an extend_support client",
        [
            (IDENTIFY_EXT, 1),
            (b"INTERNAL_CREATE_TOPIC cmpx 0 1\n", 1),
            (b"PUB_EXT cmpx 0\n" + body(struct.pack(">H", 13) + b'{"k":"value"}' + b"ext-body"), 1),
            (b"SUB cmpx x 0\n", 1),
            (b"RDY 1\n", 1),
        ],
        False,
        True,
    ),
]


RESUME = "PUB_TRACE twice, then SUB_ADVANCED at the first reply's offset + size"


def resume(host: str, port: int) -> list[object]:
    """The resume conversation (see the module docstring), as a client reads it. (Its
    INTERNAL_CREATE_TOPIC's answer is left out: a cluster node answers it otherwise.)"""
    wire = Wire(port, host)
    seen: list[object] = []
    try:
        wire.send(b"INTERNAL_CREATE_TOPIC cmpr 0\n")
        wire.frames(1)
        replies = []
        for trace_id, text in ((11, b"first"), (12, b"second")):
            wire.send(b"PUB_TRACE cmpr 0\n" + body(struct.pack(">Q", trace_id) + text))
            for kind, data in wire.frames(1):
                if kind == FRAME_RESPONSE and data.startswith(b"OK") and len(data) == 30:
                    replies.append(struct.unpack(">QQQI", data[2:]))
                    seen.append(("traced", "trace id", replies[-1][1]))
                else:
                    seen.append(read_as_client(kind, data, False))
        if len(replies) == 2:
            (_, _, first, size), (_, _, second, _) = replies
            seen.append(("second at first + size", second == first + size))
            wire.send(f"SUB_ADVANCED cmpr r 0 virtual_queue:{first + size}\n".encode())
            seen += [read_as_client(k, d, True) for k, d in wire.frames(1)]
            wire.send(b"RDY 1\n")
            seen += [read_as_client(k, d, True) for k, d in wire.frames(1)]
    except OSError as exc:
        seen.append(("socket", type(exc).__name__))
    finally:
        wire.close()
    return chained(seen)


def run(port: int) -> list[list[object]]:
    answers: list[list[object]] = []
    for _name, exchange, detail, _extend in STEPS:
        wire = Wire(port)
        seen: list[object] = []
        try:
            for data, count in exchange:
                wire.send(data)
                if count:
                    seen += [read_as_client(k, d, detail)
                             for k, d in wire.frames(count)]  # fmt: skip
        except OSError as exc:
            seen.append(("socket", type(exc).__name__))
        finally:
            wire.close()
        answers.append(sorted(chained(seen), key=repr))
        time.sleep(0.05)
    return answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("youzan_nsqd")
    parser.add_argument("--nsqd", default=str(Path(sys.executable).parent / "nsqd"))
    parser.add_argument("--out", default="test-artifacts/youzan-compare")
    parser.add_argument("--resume-on", help="HOST:PORT, the leader of cmpr's partition 0 "
                        "in a Youzan cluster (for the resume conversation)")  # fmt: skip
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="yzcmp-") as tmp:
        for name, program, extra in (
            ("youzan", args.youzan_nsqd, ["--broadcast-interface=lo", "--logtostderr"]),
            ("nsqpy", args.nsqd, []),
        ):
            tcp, http = free_port(), free_port()
            data = Path(tmp) / name
            data.mkdir()
            argv = [program, f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
                    "--broadcast-address=127.0.0.1", f"--data-path={data}",
                    "--sync-timeout=100ms", *extra]  # fmt: skip
            with daemon(argv, http, out / f"{name}.log"):
                results[name] = run(tcp)
                if name == "nsqpy" and args.resume_on:
                    results[name].append(resume("127.0.0.1", tcp))
        if args.resume_on:
            host, _, port = args.resume_on.rpartition(":")
            results["youzan"].append(resume(host, int(port)))
    differ = 0
    names = [step for step, *_ in STEPS] + ([RESUME] if args.resume_on else [])
    for step, yz, ours in zip(names, results["youzan"], results["nsqpy"], strict=True):
        if yz == ours:
            print(f"same     {step}: {ours}")
        else:
            differ += 1
            print(f"DIFFERS  {step}:\n           youzan {yz}\n           nsqpy  {ours}")
    print(f"{len(names) - differ} of {len(names)} conversations answered alike")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
