"""nsqd's side of nsqlookupd: announce topics and channels, learn channels of new topics.

One ``LookupPeer`` per ``--lookupd-tcp-address`` keeps a TCP V1 connection: magic,
IDENTIFY (version, ports, the OS hostname, broadcast address), then REGISTER for every
topic (bare when it has no channel, else once per channel), REGISTER and UNREGISTER as
topics and channels come and go (to an nsqpy lookupd, which offers it in its IDENTIFY
reply, also each topic's partition count: PARTITIONS, for Youzan's clients' ``/lookup``), and PING every 15 s on its own timer, however busy the
command queue is (lookupd counts only PINGs as signs of life). Commands are queued from
the moment the connection is made: the registration snapshot is taken after that, so a
topic or channel created or deleted while the snapshot is being sent is replayed after
it, never lost. When the connection drops it reconnects with exponential backoff and
registers everything again. When a topic is created (not
while loading metadata), every lookupd's ``/channels?topic=`` is asked for the channels
it knows, and the non-ephemeral ones are created, as NSQ does. ``LookupClient`` sees nsqd
only through ``LookupHost`` (its broker, options and listening ports); imports aiohttp, the
broker and ``nsqpy.protocol``, never the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable
from typing import Protocol

import aiohttp

from nsqpy import NSQ_VERSION
from nsqpy.broker.broker import Broker
from nsqpy.broker.channel import Channel
from nsqpy.broker.topic import Topic
from nsqpy.cluster.tls import ClusterTls, dial
from nsqpy.daemon import BackgroundTasks, cancel_and_wait
from nsqpy.errors import StorageError
from nsqpy.options import NsqdOptions
from nsqpy.protocol.lookupd import (
    ResponseDecoder,
    encode_identify_v1,
    encode_partitions,
    encode_ping,
    encode_register,
    encode_unregister,
    encode_v1_magic,
)
from nsqpy.protocol.names import is_ephemeral, valid_channel_name

log = logging.getLogger("nsqpy.nsqd")

PING_INTERVAL = 15.0


class LookupPeer:
    """One lookupd connection with its command queue, PING timer and reconnect loop."""

    def __init__(
        self,
        address: str,
        identity: Callable[[], dict[str, object]],
        registrations: Callable[[bool], list[bytes]],
        *,
        ping_interval: float = PING_INTERVAL,
        tls: Callable[[], ClusterTls | None] = lambda: None,
    ) -> None:
        self.address = address
        self._tls = tls  # (read at each connect: the cluster's, once it started)
        self._identity = identity
        self._registrations = registrations
        self.ping_interval = ping_interval
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._accepting = False  # queue commands: a session is registering or registered
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.lookupd_info: dict[str, object] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)

    def send(self, command: bytes) -> None:
        """Queue a REGISTER/UNREGISTER; dropped only while disconnected (the next
        session's snapshot covers it)."""
        if self._accepting:
            self._queue.put_nowait(command)

    @property
    def takes_partitions(self) -> bool:
        """The lookupd offered nsqpy's PARTITIONS in its IDENTIFY reply (NSQ's does not:
        it is never sent one)."""
        return self.lookupd_info.get("partitions") is True

    def send_partitions(self, topic: Topic) -> None:
        """Queue a PARTITIONS of ``topic``, to a lookupd that takes it."""
        if self.takes_partitions:
            self.send(encode_partitions(topic.name, topic.partition_count))

    @property
    def http_address(self) -> str | None:
        host = self.lookupd_info.get("broadcast_address")
        port = self.lookupd_info.get("http_port")
        if isinstance(host, str) and isinstance(port, int):
            return f"{host}:{port}"
        return None

    def api_url(self) -> tuple[str, ssl.SSLContext | bool] | None:
        """Where this lookupd's HTTP API is read, and the TLS to read it with: over the
        cluster's mutual TLS at its ``rpc_port`` when both ends have it, else plain HTTP."""
        tls = self._tls()
        host = self.lookupd_info.get("broadcast_address")
        rpc = self.lookupd_info.get("rpc_port")
        if tls is not None and isinstance(host, str) and isinstance(rpc, int) and rpc > 0:
            return f"https://{host}:{rpc}", tls.client
        address = self.http_address
        return (f"http://{address}", True) if address is not None else None

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                await self._session()
                backoff = 0.1
            except (
                OSError,
                asyncio.IncompleteReadError,
                ConnectionError,
                ValueError,
                RecursionError,  # a reply nested too deep for json
            ) as exc:
                log.warning("LOOKUPD(%s): %s", self.address, exc or type(exc).__name__)
            finally:
                self._accepting = False
                self.connected.clear()
            await asyncio.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, 5.0)

    async def _request(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        decoder: ResponseDecoder,
        data: bytes,
    ) -> bytes:
        writer.write(data)
        await writer.drain()
        while True:
            async with asyncio.timeout(5.0):  # not wait_for: on 3.11 it can swallow a cancel
                data = await reader.read(65536)
            responses = decoder.feed(data)
            if responses:
                return responses[0]
            if reader.at_eof():
                raise ConnectionError("lookupd closed the connection")

    async def _session(self) -> None:
        host, _, port = self.address.rpartition(":")
        async with asyncio.timeout(2.0):
            reader, writer = await dial(host.strip("[]"), int(port), self._tls())
        decoder = ResponseDecoder()

        async def request(data: bytes) -> bytes:
            return await self._request(reader, writer, decoder, data)

        try:
            writer.write(encode_v1_magic())
            reply = await request(encode_identify_v1(self._identity()))
            if reply.startswith(b"E_"):
                raise ConnectionError(reply.decode(errors="replace"))
            self.lookupd_info = json.loads(reply)
            log.info("LOOKUPD(%s): peer info %s", self.address, self.lookupd_info)
            # From here every change is queued; the snapshot below is taken after, so a
            # change made while it is being sent is replayed once it has been.
            while not self._queue.empty():
                self._queue.get_nowait()
            self._accepting = True
            next_ping = time.monotonic() + self.ping_interval
            for command in self._registrations(self.takes_partitions):
                await self._check(await request(command))
            self.connected.set()
            while True:
                if time.monotonic() >= next_ping:
                    await self._check(await request(encode_ping()))
                    next_ping = time.monotonic() + self.ping_interval
                    continue
                try:
                    async with asyncio.timeout(max(0.0, next_ping - time.monotonic())):
                        command = await self._queue.get()  # left queued if the timer wins
                except TimeoutError:
                    continue
                await self._check(await request(command))
        finally:
            writer.close()

    async def _check(self, reply: bytes) -> None:
        if reply != b"OK":
            raise ConnectionError(f"lookupd replied {reply.decode(errors='replace')}")


class LookupHost(Protocol):
    """What ``LookupClient`` uses of nsqd (``NsqdServer`` is one; never named here): the
    ports are read when a lookupd is (re)connected, after the listeners started."""

    @property
    def broker(self) -> Broker: ...

    @property
    def opts(self) -> NsqdOptions: ...

    @property
    def tcp_port(self) -> int: ...

    @property
    def http_port(self) -> int: ...

    @property
    def cluster_tls(self) -> ClusterTls | None:
        """In a secure cluster, the mutual TLS every lookupd is dialled with."""
        ...


class LookupClient:
    """All lookupd peers of one nsqd, wired to the broker's topic/channel hooks."""

    def __init__(self, host: LookupHost, *, ping_interval: float = PING_INTERVAL) -> None:
        self.host = host
        self.ping_interval = ping_interval
        self.peers: dict[str, LookupPeer] = {}
        self._leaving: set[LookupPeer] = set()  # peers no longer wanted, stopping
        # channel pre-creations and peers stopping: held until done, cancelled at stop
        self._tasks = BackgroundTasks(log, "nsqd lookupd client")
        broker = host.broker
        broker.on_topic_created.append(self._topic_created)
        broker.on_topic_expanded.append(self._topic_expanded)
        broker.on_topic_deleted.append(self._topic_deleted)
        broker.on_channel_created.append(self._channel_created)
        broker.on_channel_deleted.append(self._channel_deleted)

    def identity(self) -> dict[str, object]:
        opts = self.host.opts
        return {
            "version": NSQ_VERSION,
            "tcp_port": opts.broadcast_tcp_port or self.host.tcp_port,
            "http_port": opts.broadcast_http_port or self.host.http_port,
            "hostname": socket.gethostname(),  # NSQ sends os.Hostname()
            "broadcast_address": opts.broadcast_address,
        }

    def registrations(self, partitions: bool = False) -> list[bytes]:
        """Every topic and channel registered; with ``partitions``, each topic's partition
        count too (nsqpy's PARTITIONS, for a lookupd that takes it)."""
        out = []
        for topic in self.host.broker.topics.values():
            if not topic.channels:
                out.append(encode_register(topic.name))
            for name in topic.channels:
                out.append(encode_register(topic.name, name))
            if partitions:
                out.append(encode_partitions(topic.name, topic.partition_count))
        return out

    def set_addresses(self, addresses: list[str]) -> None:
        for address in list(self.peers):
            if address not in addresses:
                peer = self.peers.pop(address)
                self._leaving.add(peer)
                self._tasks.spawn(self._retire(peer))
        for address in addresses:
            if address not in self.peers:
                peer = LookupPeer(
                    address,
                    self.identity,
                    self.registrations,
                    ping_interval=self.ping_interval,
                    tls=lambda: self.host.cluster_tls,
                )
                self.peers[address] = peer
                peer.start()

    async def stop(self) -> None:
        await self._tasks.close()
        for peer in [*self._leaving, *self.peers.values()]:  # (a retirement cancelled too)
            await peer.stop()
        self._leaving.clear()
        self.peers.clear()

    async def _retire(self, peer: LookupPeer) -> None:
        await peer.stop()
        self._leaving.discard(peer)

    def _send(self, command: bytes) -> None:
        for peer in self.peers.values():
            peer.send(command)

    def _topic_created(self, topic: Topic) -> None:
        self._send(encode_register(topic.name))
        self._topic_expanded(topic)
        if self.peers and not topic.ephemeral:
            self._tasks.spawn(self._precreate_channels(topic))

    def _topic_expanded(self, topic: Topic) -> None:
        for peer in self.peers.values():
            peer.send_partitions(topic)

    def _topic_deleted(self, topic: Topic) -> None:
        self._send(encode_unregister(topic.name))

    def _channel_created(self, topic: Topic, channel: Channel) -> None:
        self._send(encode_register(topic.name, channel.name))

    def _channel_deleted(self, topic: Topic, channel: Channel) -> None:
        self._send(encode_unregister(topic.name, channel.name))

    async def _precreate_channels(self, topic: Topic) -> None:
        """Create the channels lookupd already knows for a new topic (from its first offset)."""
        timeout = aiohttp.ClientTimeout(
            total=self.host.opts.http_client_request_timeout_ms / 1000,
            connect=self.host.opts.http_client_connect_timeout_ms / 1000,
        )
        names: set[str] = set()
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for peer in list(self.peers.values()):
                try:
                    async with asyncio.timeout(2.0):
                        await peer.connected.wait()
                except TimeoutError:
                    continue
                api = peer.api_url()
                if api is None:
                    continue
                address, tls = api
                url = f"{address}/channels"
                try:
                    async with session.get(url, params={"topic": topic.name}, ssl=tls) as resp:
                        if resp.status != 200:
                            continue
                        doc = await resp.json(content_type=None)
                except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                    log.warning("LOOKUPD(%s): channels of %s: %s", address, topic.name, exc)
                    continue
                found = doc.get("channels") if isinstance(doc, dict) else None
                for name in found if isinstance(found, list) else []:
                    if (
                        isinstance(name, str)
                        and valid_channel_name(name)
                        and not is_ephemeral(name)
                    ):
                        names.add(name)
        if topic.deleted:
            return
        for name in sorted(names):
            if name not in topic.channels:
                try:
                    self.host.broker.channel(topic, name, start=0)  # each partition's oldest
                except StorageError:
                    continue  # not stored (reported to the health state): not created
