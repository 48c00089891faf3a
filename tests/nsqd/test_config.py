"""GET /config/<opt>: exactly nsqd 1.3.0's option names, with its value types (SPEC 2.2)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.options import NSQD_CONFIG, config_value
from nsqpy.testing import FakeClock, dpub, eventually, nsqd_options, publisher, subscriber
from nsqpy.testing.certs import make_certs

# The cfg names of nsqd 1.3.0's Options fields that carry a flag tag.
NSQD_1_3_0 = [
    "id",
    "log_level",
    "log_prefix",
    "tcp_address",
    "http_address",
    "https_address",
    "broadcast_address",
    "broadcast_tcp_port",
    "broadcast_http_port",
    "nsqlookupd_tcp_addresses",
    "auth_http_addresses",
    "http_client_connect_timeout",
    "http_client_request_timeout",
    "data_path",
    "mem_queue_size",
    "max_bytes_per_file",
    "sync_every",
    "sync_timeout",
    "queue_scan_selection_count",
    "queue_scan_worker_pool_max",
    "msg_timeout",
    "max_msg_timeout",
    "max_msg_size",
    "max_body_size",
    "max_req_timeout",
    "max_heartbeat_interval",
    "max_rdy_count",
    "max_output_buffer_size",
    "max_output_buffer_timeout",
    "min_output_buffer_timeout",
    "output_buffer_timeout",
    "max_channel_consumers",
    "statsd_address",
    "statsd_prefix",
    "statsd_interval",
    "statsd_mem_stats",
    "statsd_udp_packet_size",
    "statsd_exclude_ephemeral",
    "e2e_processing_latency_window_time",
    "e2e_processing_latency_percentiles",
    "tls_cert",
    "tls_key",
    "tls_client_auth_policy",
    "tls_root_ca_file",
    "tls_required",
    "tls_min_version",
    "deflate",
    "max_deflate_level",
    "snappy",
]


async def get(server: NsqdServer, opt: str) -> tuple[int, object]:
    url = f"http://127.0.0.1:{server.http_port}/config/{opt}"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, json.loads(await resp.read())


async def test_every_nsqd_option_and_nothing_else(nsqd: NsqdServer) -> None:
    assert sorted(NSQD_CONFIG) == sorted(NSQD_1_3_0)
    for opt in NSQD_1_3_0:
        assert (await get(nsqd, opt))[0] == 200, opt
    # nsqd has no flag for these (queue_scan_interval is a constant there) or they are ours.
    for opt in ["queue_scan_interval", "sync_always", "retention", "client_timeout", "node_id"]:
        assert await get(nsqd, opt) == (400, {"message": "INVALID_OPTION"}), opt
    assert await get(nsqd, "tls_min_version") == (200, 0x0301)
    assert await get(nsqd, "sync_timeout") == (200, 2_000_000_000)
    assert await get(nsqd, "deflate") == (200, True)


@pytest.mark.parametrize(
    ("tls_required", "policy", "level"),
    [("false", "", 0), ("tcp-https", "", 1), ("true", "", 2), ("false", "require", 2)],
)
async def test_tls_required_is_nsqds_integer(
    tmp_path: Path, clock: FakeClock, tls_required: str, policy: str, level: int
) -> None:
    certs = make_certs(tmp_path / "certs")  # requiring TLS needs a certificate to offer
    opts = nsqd_options(
        tmp_path,
        tls_required=tls_required,
        tls_client_auth_policy=policy,
        tls_cert=str(certs.server_cert),
        tls_key=str(certs.server_key),
        tls_root_ca_file=str(certs.ca),
    )
    server = NsqdServer(opts, clock=clock)
    await server.start()
    try:
        if level < 2:
            assert await get(server, "tls_required") == (200, level)
        else:  # plain HTTP is refused when TLS is required: /config answers over HTTPS only
            assert (await get(server, "tls_required"))[0] == 403
        assert config_value(server.opts, "tls_required") == level
    finally:
        await server.stop()


async def test_sync_always_makes_the_delayed_store_fsync_each_entry(
    tmp_path: Path, clock: FakeClock
) -> None:
    for always, expected in ((True, "FULL"), (False, "NORMAL")):
        server = NsqdServer(nsqd_options(tmp_path / str(always), sync_always=always), clock=clock)
        await server.start()
        try:
            await subscriber(server.tcp_port, "d", "c")
            p = await publisher(server.tcp_port)
            await p.send(dpub("d", 60_000, b"later"))
            assert await p.read_frame() == (0, b"OK")
            topic = server.broker.topics["d"]
            await eventually(lambda: topic.channels["c"].deferred_count == 1)  # noqa: B023
            delayed = topic.partitions[0].delayed
            assert delayed is not None and delayed.synchronous() == expected
        finally:
            await server.stop()
