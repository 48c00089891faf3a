"""The auth server contract (SPEC 1.11): its reply, the permission check, nsqd's AUTH texts.

``parse_auth_reply`` decodes the auth server's JSON as nsqd's Go code does (keys matched
case-insensitively, unknown keys and ``null`` ignored, strict types) and validates it: only
``subscribe``/``publish`` permissions, regexes that compile, ``ttl`` > 0; anything else is
``AuthReplyError`` (nsqd answers the client ``E_AUTH_FAILED``). ``AuthState.is_allowed``
is nsqd's check: a channel needs ``subscribe``, publishing (channel ``""``) needs
``publish``; the topic regex and at least one channel regex must match, searched unanchored
as Go's ``MatchString`` does. The regexes are compiled and run by RE2 (``google-re2``), the
engine whose syntax Go's regexp implements: matching takes time linear in the name, so no
pattern the auth server sends (``(a+)+$``) can hold the event loop, and what Go refuses
(look-arounds, back-references, repeat counts over 1000) is refused here too. Imports only
the standard library and re2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import re2

PERMISSIONS = frozenset(("subscribe", "publish"))


class Pattern(Protocol):
    """A compiled RE2 regex (google-re2 ships no type information)."""

    def search(self, text: str) -> object | None: ...


class AuthReplyError(ValueError):
    """The auth server's reply is unusable (nsqd logs it and sends E_AUTH_FAILED)."""


@dataclass(frozen=True)
class Authorization:
    topic: Pattern
    channels: tuple[Pattern, ...]
    permissions: frozenset[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions:
            return False
        if self.topic.search(topic) is None:
            return False
        return any(c.search(channel) is not None for c in self.channels)


@dataclass
class AuthState:
    """What the auth server granted one connection, until ``expires_ns`` (monotonic)."""

    ttl: int
    identity: str = ""
    identity_url: str = ""
    authorizations: list[Authorization] = field(default_factory=list)
    expires_ns: int = 0

    def is_allowed(self, topic: str, channel: str) -> bool:
        return any(a.is_allowed(topic, channel) for a in self.authorizations)

    def is_expired(self, now_ns: int) -> bool:
        return self.expires_ns < now_ns


def _fields(value: Any, what: str) -> dict[str, Any]:
    """A JSON object's values by lower-cased key (Go matches keys case-insensitively)."""
    if not isinstance(value, dict):
        raise AuthReplyError(f"{what} is not a JSON object")
    return {k.lower(): v for k, v in value.items() if v is not None}


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise AuthReplyError(f"{what} is not a string")
    return value


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AuthReplyError(f"{what} is not an array")
    return [_str(v, what) if v is not None else "" for v in value]


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our error to report, not RE2's stderr
    return options


_RE2_OPTIONS = _re2_options()


def _regex(pattern: str, what: str) -> Pattern:
    """``pattern`` compiled by RE2 (Go's syntax; linear-time matching)."""
    try:
        compiled: Pattern = re2.compile(pattern, _RE2_OPTIONS)
    except (re2.error, UnicodeEncodeError) as exc:  # a lone surrogate is no UTF-8 for RE2
        reason = exc.args[0] if isinstance(exc, re2.error) and exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise AuthReplyError(f"unable to compile {what} {pattern!r} {reason}") from None
    return compiled


def _authorization(value: Any) -> Authorization:
    if value is None:
        value = {}
    doc = _fields(value, "authorization")
    permissions = _str_list(doc.get("permissions"), "permissions")
    for perm in permissions:
        if perm not in PERMISSIONS:
            raise AuthReplyError(f"unknown permission {perm}")
    topic = _regex(_str(doc.get("topic", ""), "topic"), "topic")
    channels = tuple(_regex(c, "channel") for c in _str_list(doc.get("channels"), "channels"))
    return Authorization(topic, channels, frozenset(permissions))


def parse_auth_reply(body: bytes, now_ns: int) -> AuthState:
    """The auth server's 200 reply as an ``AuthState`` expiring ``ttl`` seconds after now."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise AuthReplyError(f"invalid JSON reply: {exc}") from None
    doc = _fields(value, "reply")
    ttl = doc.get("ttl", 0)
    if type(ttl) is not int:
        raise AuthReplyError(f"ttl {ttl!r} is not an integer")
    auths = doc.get("authorizations")
    if auths is not None and not isinstance(auths, list):
        raise AuthReplyError("authorizations is not an array")
    state = AuthState(
        ttl=ttl,
        identity=_str(doc.get("identity", ""), "identity"),
        identity_url=_str(doc.get("identity_url", ""), "identity_url"),
        authorizations=[_authorization(a) for a in auths or []],
    )
    if ttl <= 0:
        raise AuthReplyError(f"invalid TTL {ttl} (must be >0)")
    state.expires_ns = now_ns + ttl * 1_000_000_000
    return state


def auth_endpoint(address: str) -> str:
    """``host:port`` -> ``http://host:port/auth``; a full URL (with ``://``) is used as is."""
    return address if "://" in address else f"http://{address}/auth"


def unauthorized_text(verb: str, topic: str, channel: str) -> str:
    """nsqd's E_UNAUTHORIZED description for a refused SUB/PUB/MPUB/DPUB."""
    return f"AUTH failed for {verb} on {json.dumps(topic)} {json.dumps(channel)}"
