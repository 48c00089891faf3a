"""``nsqpy channel``: change a channel on an nsqd over its HTTP API (replay and friends).

``nsqpy channel setoffset`` moves a channel's cursor (``POST /channel/setoffset``, the
position in the request body) to an offset, a time, the oldest retained message or the
newest end; ``nsqpy channel setmaxattempts`` sets a channel's dead-letter limit. The tool
is an HTTP client only (standard library): nsqd checks every value and its error code is
printed as is. Imports only the standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from datetime import datetime


def _seconds(text: str) -> int:
    """Seconds since the epoch: an integer, or an ISO 8601 time (UTC unless it says)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither seconds since the epoch nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.now().astimezone().tzinfo)
    return int(when.timestamp())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nsqpy channel", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--nsqd-http-address", default="127.0.0.1:4151", help="nsqd's HTTP address")
    common.add_argument("--topic", required=True)
    common.add_argument("--channel", required=True)
    setoffset = sub.add_parser(
        "setoffset", parents=[common], help="replay or skip: move the channel's cursor"
    )
    where = setoffset.add_mutually_exclusive_group(required=True)
    where.add_argument("--offset", type=int, help="the offset (message count from the start)")
    where.add_argument(
        "--timestamp", type=_seconds, help="the first message published at or after this time"
    )
    where.add_argument("--oldest", action="store_true", help="the oldest retained message")
    where.add_argument("--newest", action="store_true", help="the end: skip everything")
    setoffset.add_argument("--partition", type=int, help="one partition (default: all)")
    attempts = sub.add_parser(
        "setmaxattempts", parents=[common], help="attempts before a message is dead-lettered"
    )
    attempts.add_argument("--max-attempts", type=int, required=True, help="0 = never")
    attempts.add_argument("--dead-letter-topic", default="", help="default <topic>.dead")
    return parser


def _position(ns: argparse.Namespace) -> bytes:
    if ns.oldest:
        return b"special:-2"
    if ns.newest:
        return b"special:-1"
    if ns.timestamp is not None:
        return b"timestamp:%d" % ns.timestamp
    return b"msgcount:%d" % ns.offset


def _post(address: str, path: str, query: dict[str, object], body: bytes) -> object:
    url = f"http://{address}{path}?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        data = reply.read()
    return json.loads(data) if data else None


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    query: dict[str, object] = {"topic": ns.topic, "channel": ns.channel}
    if ns.action == "setoffset":
        path, body = "/channel/setoffset", _position(ns)
        if ns.partition is not None:
            query["partition"] = ns.partition
    else:
        path, body = "/channel/setmaxattempts", b""
        query["max_attempts"] = ns.max_attempts
        if ns.dead_letter_topic:
            query["dead_letter_topic"] = ns.dead_letter_topic
    try:
        result = _post(ns.nsqd_http_address, path, query, body)
    except urllib.error.HTTPError as err:
        with err:
            raw = err.read()
        try:
            code = json.loads(raw).get("message", raw.decode(errors="replace"))
        except (ValueError, AttributeError):
            code = raw.decode(errors="replace")
        print(f"nsqpy channel {ns.action}: nsqd answered {err.code} {code}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"nsqpy channel {ns.action}: {ns.nsqd_http_address}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0
