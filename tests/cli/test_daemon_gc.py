"""A daemon settles the garbage collector once it has started (``nsqpy.daemon.settle_gc``):
what existed at start-up is frozen out of the collector's sight, and the young generation
is collected far less often than Python's default. Run in a subprocess: the settings are
process-wide and must not leak into the test session."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from nsqpy.daemon import GC_THRESHOLDS

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, os, signal
    from nsqpy.daemon import run, serve_until_signal

    class Service:
        async def start(self):
            print("before", gc.get_threshold(), gc.get_freeze_count() > 0)
            asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)

        async def stop(self):
            print("after", gc.get_threshold(), gc.get_freeze_count() > 0)

    run(serve_until_signal(Service()))
    """
)


def test_serving_daemon_freezes_startup_objects_and_raises_the_young_threshold() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    before, after = proc.stdout.splitlines()
    assert before == "before (700, 10, 10) False"  # Python's defaults while starting
    assert after == f"after {GC_THRESHOLDS} True"
