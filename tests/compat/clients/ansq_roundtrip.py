"""ansq (asyncio) against an nsqd: writer PUB/MPUB/DPUB, reader with FIN, REQ and TOUCH.

Usage: ansq_roundtrip.py TCP_ADDR TOPIC N
Prints one JSON line: {"bodies": [...], "attempts": {...}, "pub": [...]}.
"""

from __future__ import annotations

import asyncio
import json
import sys

from ansq import create_reader, create_writer


async def run(address: str, topic: str, n: int) -> dict[str, object]:
    bodies = [f"ansq-{i}" for i in range(n)]
    writer = await create_writer(nsqd_tcp_addresses=[address])
    replies = [await writer.pub(topic, bodies[0])]
    replies.append(await writer.mpub(topic, *bodies[1:-1]))
    replies.append(await writer.dpub(topic, bodies[-1], 100))
    await writer.close()
    reader = await create_reader(topic=topic, channel="compat", nsqd_tcp_addresses=[address])
    for conn in reader.connections:
        await conn.rdy(10)  # ansq's reader starts at RDY 1 and cannot change it
    got: dict[str, int] = {}
    requeued = False
    async with asyncio.timeout(20):
        async for message in reader.messages():
            body = message.body.decode()
            if body == bodies[1] and not requeued:
                requeued = True
                await message.touch()
                await message.req(0)
                continue
            got[body] = message.attempts
            await message.fin()
            if len(got) == n:
                break
    await reader.close()
    return {"bodies": sorted(got), "attempts": got, "pub": [str(r) for r in replies]}


def main() -> int:
    report = asyncio.run(run(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
