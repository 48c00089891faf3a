"""The test helpers themselves: distinct free ports, and a daemon that dies at start."""

from __future__ import annotations

import socket

import pytest

from nsqpy.testing import DaemonProcess, free_ports


def test_free_ports_are_distinct() -> None:
    for _ in range(50):
        ports = free_ports(6)
        assert len(set(ports)) == 6


def test_a_daemon_that_cannot_bind_fails_its_start_clearly() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        daemon = DaemonProcess(
            "nsqlookupd", [f"--http-address=127.0.0.1:{port}", "--tcp-address=127.0.0.1:0"]
        )
        with pytest.raises(RuntimeError, match="nsqlookupd exited with"):
            daemon.start()
