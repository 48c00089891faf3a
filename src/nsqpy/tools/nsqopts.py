"""The consumers and producers the tools run, built from their flags on ``nsqpy.client``.

``ConsumerFactory.from_flags`` builds one ``Consumer`` per topic from the consumer flags a
tool declares (``ConsumerFlags``: nsqd and lookupd addresses, ``--max-in-flight``,
``--consumer-opt`` read by ``clientopts``); ``start`` connects to every nsqd address first, so an
unreachable one is a single clear ``ToolError`` (as go-nsq's ``ConnectToNSQD`` fails).
``connect_producers`` probes and connects one ``Producer`` per destination. Imported only
when a tool runs (it pulls in aiohttp through the client); must not import the servers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nsqpy.client import Connection, Consumer, IdentifyOptions, Message, Producer
from nsqpy.client.secure import tls_context
from nsqpy.errors import ConfigError, NsqError
from nsqpy.flags import FlagError
from nsqpy.tools.clientopts import ClientConfig, parse_client_opts
from nsqpy.tools.common import ToolError, describe, user_agent

log = logging.getLogger("nsqpy.tools")


def identify_options(config: ClientConfig, tool: str) -> IdentifyOptions:
    """The IDENTIFY fields: the tool's user agent unless ``user_agent`` was given."""
    fields = {"user_agent": user_agent(tool), **config.identify}
    try:
        if config.tls:
            fields["tls_context"] = tls_context(**config.tls)
        return IdentifyOptions(**fields)
    except ConfigError as exc:
        raise FlagError(f"invalid client option: {exc}") from None


class ConsumerFlags(Protocol):
    """The consumer flags a consuming tool declares (its options dataclass has them)."""

    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    max_in_flight: int
    consumer_opts: list[str]


@dataclass
class ConsumerFactory:
    """Builds a started ``Consumer`` per topic from the tools' common consumer flags."""

    tool: str
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    max_in_flight: int
    config: ClientConfig

    def __post_init__(self) -> None:
        self.identify = identify_options(self.config, self.tool)

    @classmethod
    def from_flags(
        cls, tool: str, opts: ConsumerFlags, max_in_flight: int | None = None
    ) -> ConsumerFactory:
        """From a tool's ``--nsqd-tcp-address``, ``--lookupd-http-address``,
        ``--max-in-flight`` (unless ``max_in_flight`` overrides it) and ``--consumer-opt``."""
        return cls(
            tool,
            opts.nsqd_tcp_addresses,
            opts.lookupd_http_addresses,
            opts.max_in_flight if max_in_flight is None else max_in_flight,
            parse_client_opts(opts.consumer_opts, "consumer-opt"),
        )

    def build(
        self, topic: str, channel: str, handler: Callable[[Message], Any], **overrides: Any
    ) -> Consumer:
        kwargs: dict[str, Any] = {**self.config.consumer, "max_in_flight": self.max_in_flight}
        if self.config.connect_timeout is not None:
            kwargs["connect_timeout"] = self.config.connect_timeout
        kwargs.update(overrides)
        return Consumer(
            topic,
            channel,
            handler,
            nsqd_tcp_addresses=self.nsqd_tcp_addresses,
            lookupd_http_addresses=self.lookupd_http_addresses,
            identify=self.identify,
            **kwargs,
        )

    async def start(self, consumer: Consumer) -> None:
        """Connect to every nsqd address (as go-nsq's ConnectToNSQD, failing loudly), then run."""
        for address in self.nsqd_tcp_addresses:
            try:
                await consumer.connect_to_nsqd(address)
            except (OSError, TimeoutError, NsqError) as exc:
                await consumer.close(timeout=1.0)
                raise ToolError(f"cannot connect to nsqd {address}: {describe(exc)}") from None
        await consumer.start()


async def connect_producers(
    tool: str, addresses: Sequence[str], config: ClientConfig, flag: str
) -> dict[str, Producer]:
    """One connected ``Producer`` per address; an unreachable one is a ``ToolError``."""
    identify = identify_options(config, tool)
    producers: dict[str, Producer] = {}
    timeout = config.connect_timeout if config.connect_timeout is not None else 1.0
    for address in addresses:
        try:  # a probe first: its failure names the real cause (refused, timed out, E_...)
            probe = await Connection.connect(address, identify, timeout=timeout)
            probe.close()
            await probe.wait_closed()
            producer = Producer(address, connect_timeout=timeout, identify=identify)
            producers[address] = producer
            await producer.connect()
        except (OSError, TimeoutError, NsqError) as exc:
            for p in producers.values():
                await p.close()
            raise ToolError(f"cannot connect to --{flag} {address}: {describe(exc)}") from None
    return producers
