"""The deployment files shipped in ``deploy/``: the systemd units pass ``systemd-analyze
verify`` without a warning (run against this install's programs and the example configs),
and every key of the example TOML configs is one its daemon reads, with a valid value.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nsqpy.flags import check_options
from nsqpy.flags.declare import declared
from nsqpy.flags.parse import load_config
from nsqpy.lookupd.options import NsqLookupdOptions
from nsqpy.nsqadmin.options import NsqAdminOptions
from nsqpy.options import NsqdOptions

DEPLOY = Path(__file__).parents[2] / "deploy"
DAEMONS = {"nsqd": NsqdOptions, "nsqlookupd": NsqLookupdOptions, "nsqadmin": NsqAdminOptions}


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_the_example_config_names_only_keys_its_daemon_reads(daemon: str) -> None:
    cls = DAEMONS[daemon]
    path = DEPLOY / "config" / f"{daemon}.toml"
    keys = set(tomllib.loads(path.read_text()))
    known = declared(cls)
    readable = {o.key for o in known} | {o.name.replace("-", "_") for o in known}
    assert keys and keys <= readable, keys - readable
    opts = cls()
    load_config(opts, known, str(path))
    check_options(opts)  # (the values are valid: ConfigError otherwise)


def test_the_systemd_units_verify_without_a_warning(tmp_path: Path) -> None:
    """``systemd-analyze verify`` checks the units' keys and that ExecStart runs: the
    shipped paths (/opt/nsqpy/bin, /etc/nsqpy) are pointed at this install for the check."""
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze (Debian's systemd) is needed"
    bin_dir = Path(sys.executable).parent
    units = []
    for daemon in sorted(DAEMONS):
        text = (DEPLOY / "systemd" / f"{daemon}.service").read_text()
        assert f"ExecStart=/opt/nsqpy/bin/{daemon} --config=/etc/nsqpy/{daemon}.toml" in text
        text = text.replace("/opt/nsqpy/bin/", f"{bin_dir}/")
        text = text.replace("/etc/nsqpy/", f"{DEPLOY / 'config'}/")
        unit = tmp_path / f"{daemon}.service"
        unit.write_text(text)
        units.append(str(unit))
    done = subprocess.run([analyze, "verify", *units], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
