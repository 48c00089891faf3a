"""The utilities stay clients: no server, broker, storage or test-kit imports; --help stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "src" / "nsqpy" / "tools"
FORBIDDEN = (
    "nsqpy.nsqd",
    "nsqpy.lookupd",
    "nsqpy.broker",
    "nsqpy.storage",
    "nsqpy.testing",
    "nsqpy.cli",
)


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_tools_import_no_server_side_module() -> None:
    bad = [
        f"{path.name} imports {name}"
        for path in sorted(TOOLS.glob("*.py"))
        for name in imports_of(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert bad == []


def test_tool_entry_modules_load_without_aiohttp_or_the_client() -> None:
    code = (
        "import sys\n"
        "import nsqpy.tools.tail, nsqpy.tools.to_nsq, nsqpy.tools.to_file\n"
        "import nsqpy.tools.to_http, nsqpy.tools.nsq_to_nsq, nsqpy.tools.stat\n"
        "heavy = sorted(m for m in sys.modules if m == 'aiohttp' or m.startswith('nsqpy.client'))\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
