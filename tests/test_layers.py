"""The layers stay honest: protocol and storage import nothing above them (DESIGN "Layers").

Checked on the source (every import statement of every module), so a lazy import inside a
function is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nsqpy"

# Modules the bottom layers must never import: event loops, sockets, HTTP, upper layers.
FORBIDDEN_BOTTOM = {
    "asyncio", "socket", "socketserver", "selectors", "ssl", "http", "urllib", "aiohttp",
    "uvloop", "tornado", "nsqpy.broker", "nsqpy.nsqd", "nsqpy.lookupd", "nsqpy.client",
    "nsqpy.tools", "nsqpy.admin", "nsqpy.cluster", "nsqpy.spark", "nsqpy.testing",
    "nsqpy.cli",
}
FORBIDDEN_BROKER = {
    "asyncio", "socket", "ssl", "aiohttp", "uvloop", "nsqpy.nsqd", "nsqpy.lookupd",
    "nsqpy.client", "nsqpy.tools", "nsqpy.admin", "nsqpy.testing", "nsqpy.cli",
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def violations(package: str, forbidden: set[str]) -> list[str]:
    out = []
    for path in sorted((SRC / package).rglob("*.py")):
        for name in imports_of(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(SRC)} imports {name}")
    return out


@pytest.mark.parametrize("package", ["protocol", "storage"])
def test_bottom_layers_import_nothing_above_them(package: str) -> None:
    assert (SRC / package).is_dir()
    assert violations(package, FORBIDDEN_BOTTOM) == []


def test_broker_imports_no_server_or_network() -> None:
    assert violations("broker", FORBIDDEN_BROKER) == []


def test_product_code_never_imports_the_test_kit() -> None:
    bad = [
        f"{p.relative_to(SRC)}"
        for p in SRC.rglob("*.py")
        if "testing" not in p.relative_to(SRC).parts
        and any(n == "nsqpy.testing" or n.startswith("nsqpy.testing.") for n in imports_of(p))
    ]
    assert bad == []


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    import asyncio\n    from nsqpy.broker import x\n")
    assert {"asyncio", "nsqpy.broker"} <= imports_of(bad)
