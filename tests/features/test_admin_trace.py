"""nsqadmin shows a message's trace: ``/api/trace`` and the ``/trace`` page, in Chromium too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from playwright.sync_api import sync_playwright

from nsqpy.nsqadmin.app import NsqAdmin, NsqAdminOptions
from nsqpy.testing import DaemonProcess, http_request, nsqd_process, wait_for

from .conftest import finish_traced_message

CHROMIUM = "/usr/bin/chromium"


@dataclass
class Traced:
    nsqd: DaemonProcess
    msg_id: str


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Traced]:
    """A real nsqd with one traced message published (trace ID 99), delivered, finished."""
    with nsqd_process(tmp_path / "data") as nsqd:
        _, raw_id = finish_traced_message(nsqd, "seen", 99)
        msg_id = raw_id.decode()

        def finished() -> bool:
            status, raw, _ = http_request("GET", f"{nsqd.http}/message/trace?trace_id=99")
            return status == 200 and b'"finished"' in raw

        wait_for(finished)
        yield Traced(nsqd, msg_id)


@pytest.fixture
async def admin(traced: Traced) -> AsyncIterator[str]:
    opts = NsqAdminOptions(
        http_address="127.0.0.1:0",
        nsqd_http_addresses=[f"127.0.0.1:{traced.nsqd.http_port}"],
        stats_sample_interval_ms=0,
    )
    nsqadmin = NsqAdmin(opts)
    await nsqadmin.start()
    yield f"http://127.0.0.1:{nsqadmin.http_port}"
    await nsqadmin.stop()


async def test_the_api_and_page_show_the_life_of_a_message(traced: Traced, admin: str) -> None:
    node = f"127.0.0.1:{traced.nsqd.http_port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{admin}/api/trace?topic=seen&id={traced.msg_id}") as resp:
            assert resp.status == 200
            doc = await resp.json()
        async with session.get(f"{admin}/api/trace?trace_id=99") as resp:
            assert (await resp.json())["events"] == doc["events"]
        async with session.get(f"{admin}/api/trace?topic=seen&id=XYZ") as resp:
            assert (resp.status, await resp.json()) == (400, {"message": "INVALID_MESSAGE_ID"})
        async with session.get(f"{admin}/api/trace") as resp:
            assert (resp.status, await resp.json()) == (400, {"message": "MISSING_ARG_ID"})
        async with session.get(f"{admin}/trace?topic=seen&id={traced.msg_id}") as resp:
            assert resp.status == 200
            page = await resp.text()
        async with session.get(f"{admin}/trace?trace_id=nope") as resp:
            assert resp.status == 400 and "INVALID_TRACE_ID" in await resp.text()
    assert doc["message"] == ""
    assert [(e["event"], e["node"], e["trace_id"]) for e in doc["events"]] == [
        ("published", node, 99),
        ("delivered", node, 99),
        ("finished", node, 99),
    ]
    assert 'id="trace-events"' in page and "finished" in page and ">Trace</a>" in page


async def test_the_trace_page_in_chromium(traced: Traced, admin: str) -> None:
    def browse() -> list[str]:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(f"{admin}/topics")
                page.click("nav >> text=Trace")
                page.fill("input[name=topic]", "seen")
                page.fill("input[name=id]", traced.msg_id)
                page.click("form.trace button[type=submit]")
                page.wait_for_selector("#trace-events tbody tr")
                cells = page.locator("#trace-events tbody tr td:nth-child(2)").all_inner_texts()
                assert errors == []
                return cells
            finally:
                browser.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        events = await asyncio.get_running_loop().run_in_executor(pool, browse)
    assert events == ["published", "delivered", "finished"]
