"""A connected client as the broker sees it: its RDY window, in-flight count and counters.

The TCP server owns the socket and hands the broker a ``Client`` whose ``sink`` receives
message frames; the broker never touches a socket. Must not import asyncio or any server.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol

from nsqpy.protocol.state import INIT

_ids = itertools.count(1)


class Sink(Protocol):
    """Where a client's message frames go (the connection's output buffer)."""

    def send_message(self, frame: bytes) -> None: ...

    def close_by_server(self) -> None: ...


class ExtendedSink(Protocol):
    """A client's sink for youzan's extended message frames (``extend_support``): the
    channel hands it the parts of a message and the record's stored extension (None when
    not at hand: the sink finds it); the message ID as an integer."""

    def send_extended(
        self, timestamp: int, attempts: int, id_value: int, body: bytes, stored: bytes | None
    ) -> None: ...


@dataclass(eq=False)
class Client:
    """State and counters of one client connection (the fields of /stats ClientStats)."""

    sink: Sink
    remote_address: str = ""
    client_id: str = ""
    hostname: str = ""
    user_agent: str = ""
    connect_ts: int = 0
    id: int = field(default_factory=lambda: next(_ids))
    state: int = INIT
    ready_count: int = 0
    in_flight_count: int = 0
    message_count: int = 0
    finish_count: int = 0
    requeue_count: int = 0
    msg_timeout_ns: int = 60_000_000_000
    sample_rate: int = 0
    desired_tag: str = ""  # youzan's dispatch tag (IDENTIFY desired_tag): only its messages
    deflate: bool = False
    snappy: bool = False
    tls: bool = False
    tls_version: str = ""
    tls_cipher_suite: str = ""
    tls_negotiated_protocol: str = ""
    tls_negotiated_protocol_is_mutual: bool = False
    authed: bool = False
    cluster_peer: bool = False  # a node of the cluster forwarding publishes (mutual TLS)
    auth_identity: str = ""
    auth_identity_url: str = ""
    pub_counts: dict[str, int] = field(default_factory=dict)
    channel: object | None = None  # the broker Channel it subscribed to
    write_paused: bool = False  # its connection's write buffer is full: send it nothing
    extended: ExtendedSink | None = None  # with extend_support: where its messages go

    @property
    def capacity(self) -> int:
        """How many more messages the client's RDY window admits right now (none while its
        connection cannot take more bytes)."""
        if self.write_paused:
            return 0
        return self.ready_count - self.in_flight_count

    def stats(self, topic: str | None = None) -> dict[str, object]:
        """ClientStats; ``pub_counts`` holds at most one entry (for ``topic`` when given),
        the quirk of nsqd 1.3.0 whose loop stops after the first."""
        out: dict[str, object] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "version": "V2",
            "remote_address": self.remote_address,
            "state": self.state,
            "ready_count": self.ready_count,
            "in_flight_count": self.in_flight_count,
            "message_count": self.message_count,
            "finish_count": self.finish_count,
            "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts,
            "sample_rate": self.sample_rate,
            "deflate": self.deflate,
            "snappy": self.snappy,
            "user_agent": self.user_agent,
        }
        if self.cluster_peer:
            out["cluster_peer"] = True
        if self.authed:
            out["authed"] = True
            if self.auth_identity:
                out["auth_identity"] = self.auth_identity
            if self.auth_identity_url:
                out["auth_identity_url"] = self.auth_identity_url
        counts = [
            {"topic": t, "count": c}
            for t, c in self.pub_counts.items()
            if topic is None or t == topic
        ]
        if counts:
            out["pub_counts"] = counts[:1]
        out.update(
            {
                "tls": self.tls,
                "tls_cipher_suite": self.tls_cipher_suite,
                "tls_version": self.tls_version,
                "tls_negotiated_protocol": self.tls_negotiated_protocol,
                "tls_negotiated_protocol_is_mutual": self.tls_negotiated_protocol_is_mutual,
            }
        )
        return out
