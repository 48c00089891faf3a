"""The layers stay honest (DESIGN "Layers"): each lower layer imports only what it may.

An allow-list per layer, checked on the source: every import statement of every module
(lazy imports inside functions too), relative imports resolved to the module they name,
and ``importlib.import_module``/``__import__`` calls with a literal name.

- protocol: the standard library (minus event loops, sockets, HTTP and processes),
  ``crc32c`` (snappy framing checksums), ``re2`` (the auth regexes), and from nsqpy only
  ``nsqpy.errors`` and its own package.
- storage: the same.
- broker: the same, plus ``nsqpy.protocol``, ``nsqpy.storage``, ``nsqpy.options`` and the
  bare ``nsqpy`` package (its version constants); never a server, a socket or aiohttp.
- cluster: the standard library (network included), ``nsqpy.errors``, ``protocol``,
  ``storage``, ``options``, ``flags``, ``durations``, ``httpapi``, the bare ``nsqpy``, and
  ``aiohttp``, ``aetcd`` (and the ``grpc`` it runs on), ``uvloop`` (its TLS protocol, on
  the daemons' loop); never ``broker``, ``nsqd``,
  ``lookupd``, ``nsqadmin`` or ``testing``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nsqpy"

# Standard-library modules no lower layer may use: event loops, sockets, HTTP, processes.
NETWORK_STDLIB = {
    "asyncio", "socket", "socketserver", "selectors", "select", "ssl", "http", "urllib",
    "xmlrpc", "ftplib", "smtplib", "poplib", "imaplib", "telnetlib", "wsgiref", "subprocess",
    "multiprocessing",
}  # fmt: skip
BOTTOM = {"nsqpy.errors"}
ALLOWED: dict[str, set[str]] = {
    "protocol": BOTTOM | {"nsqpy.protocol", "crc32c", "re2"},
    "storage": BOTTOM | {"nsqpy.storage", "crc32c"},
    "broker": BOTTOM
    | {"nsqpy.broker", "nsqpy.protocol", "nsqpy.storage", "nsqpy.options", "crc32c"},
    "cluster": BOTTOM
    | {
        "nsqpy.cluster", "nsqpy.protocol", "nsqpy.storage", "nsqpy.options", "nsqpy.flags",
        "nsqpy.durations", "nsqpy.httpapi", "aiohttp", "aetcd", "grpc", "crc32c", "uvloop",
    },
}  # fmt: skip
EXACT: dict[str, set[str]] = {
    "protocol": set(),
    "storage": set(),
    "broker": {"nsqpy"},
    "cluster": {"nsqpy"},
}
NETWORK_LAYERS = {"cluster"}  # layers that may use sockets, event loops and HTTP


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str | None = None) -> set[str]:
    """Every module ``path`` (the module ``module``, by default its place in src) imports,
    by absolute name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = module or module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
            if node.module is None or node.level:  # `from . import x`: x may be a module
                found.update(f"{name}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if called in ("import_module", "__import__") and isinstance(arg, ast.Constant):
                found.add(str(arg.value))
    return found


def allowed(layer: str, name: str) -> bool:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names and top != "nsqpy":
        return top not in NETWORK_STDLIB or layer in NETWORK_LAYERS
    if name in EXACT[layer]:
        return True
    return any(name == a or name.startswith(a + ".") for a in ALLOWED[layer])


def violations(layer: str) -> list[str]:
    out = []
    for path in sorted((SRC / layer).rglob("*.py")):
        for name in sorted(imports_of(path)):
            if not allowed(layer, name):
                out.append(f"{path.relative_to(SRC)} imports {name}")
    return out


@pytest.mark.parametrize("layer", ["protocol", "storage", "broker", "cluster"])
def test_each_lower_layer_imports_only_what_it_may(layer: str) -> None:
    assert (SRC / layer).is_dir()
    assert violations(layer) == []


# The test kit and the Jepsen harness (a test tool shipped as ``nsqpy jepsen``: it starts
# daemons and etcd as the test kit does, so it uses the kit); nothing else may import them.
TEST_SIDE = ("testing", "jepsen")


def test_product_code_never_imports_the_test_kit() -> None:
    bad = [
        f"{p.relative_to(SRC)}"
        for p in SRC.rglob("*.py")
        if not set(TEST_SIDE) & set(p.relative_to(SRC).parts)
        and any(
            n.split(".")[:2] in (["nsqpy", "testing"], ["nsqpy", "jepsen"]) for n in imports_of(p)
        )
    ]
    assert bad == []


def test_the_checker_sees_lazy_relative_and_dynamic_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\n"
        "from . import records\n"
        "from .. import nsqd\n"
        "from ..broker.channel import Channel\n"
        "def f():\n"
        "    import asyncio\n"
        "    import importlib\n"
        "    importlib.import_module('aiohttp.web')\n"
        "    __import__('nsqpy.nsqadmin')\n"
    )
    found = imports_of(probe, "nsqpy.storage.probe")
    assert {
        "os", "nsqpy.storage.records", "nsqpy.nsqd", "nsqpy.broker.channel", "asyncio",
        "aiohttp.web", "nsqpy.nsqadmin",
    } <= found  # fmt: skip
    bad = {n for n in found if not allowed("storage", n)}
    assert bad >= {"nsqpy.nsqd", "nsqpy.broker.channel", "asyncio", "aiohttp.web", "nsqpy.nsqadmin"}
    assert "os" not in bad and "nsqpy.storage.records" not in bad


@pytest.mark.parametrize(
    ("layer", "name", "ok"),
    [
        ("broker", "nsqpy.nsqadmin", False),
        ("broker", "nsqpy.nsqd.http", False),
        ("broker", "nsqpy.httpapi", False),
        ("broker", "nsqpy.client", False),
        ("broker", "aiohttp", False),
        ("broker", "socket", False),
        ("broker", "nsqpy.options", True),
        ("broker", "nsqpy.storage.cursor", True),
        ("broker", "nsqpy", True),
        ("storage", "nsqpy.options", False),
        ("storage", "nsqpy.protocol", False),
        ("storage", "nsqpy", False),
        ("storage", "crc32c", True),
        ("protocol", "crc32c", True),
        ("protocol", "cramjam", False),
        ("protocol", "http.client", False),
        ("protocol", "json", True),
        ("cluster", "aetcd", True),
        ("cluster", "grpc.aio", True),
        ("cluster", "asyncio", True),
        ("cluster", "nsqpy.httpapi", True),
        ("cluster", "nsqpy.broker", False),
        ("cluster", "nsqpy.broker.topic", False),
        ("cluster", "nsqpy.nsqd", False),
        ("cluster", "nsqpy.lookupd", False),
        ("cluster", "nsqpy.testing", False),
    ],
)
def test_the_allow_lists(layer: str, name: str, ok: bool) -> None:
    assert allowed(layer, name) is ok
