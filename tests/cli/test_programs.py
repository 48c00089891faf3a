"""The console scripts of the daemons and the ``nsqpy`` command: help, dispatch, bad flags.

The real programs run as subprocesses (concurrently, to keep this quick); flag matrices run
``parse_args`` in-process, which stops before any I/O.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy import cli
from nsqpy.flags import Option
from nsqpy.lookupd import app as lookupd_app
from nsqpy.nsqadmin import app as nsqadmin_app
from nsqpy.nsqadmin.options import FLAGS as NSQADMIN_FLAGS
from nsqpy.nsqadmin.options import NsqAdminOptions
from nsqpy.nsqd import app as nsqd_app
from nsqpy.options import NsqdOptions

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def run_all(commands: dict[str, list[str]]) -> dict[str, tuple[int, str, str]]:
    procs = {
        key: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for key, argv in commands.items()
    }
    out = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=60)
        out[key] = (proc.returncode, stdout.decode(), stderr.decode())
    return out


def shown_default(flag: Option, defaults: object) -> bool:
    """Whether Go's flag package would print a default for this flag."""
    if not hasattr(defaults, flag.field):
        return False
    value = getattr(defaults, flag.field)
    return bool(value) and flag.kind not in ("list", "float_list")


DAEMONS = {
    "nsqd": (nsqd_app.FLAGS, NsqdOptions()),
    "nsqlookupd": (lookupd_app.FLAGS, lookupd_app.NsqLookupdOptions()),
    "nsqadmin": (NSQADMIN_FLAGS, NsqAdminOptions()),
}


def test_daemon_help_lists_each_flag_once_with_its_default() -> None:
    commands = {name: [str(BIN / name), "--help"] for name in DAEMONS}
    commands["nsqpy nsqadmin"] = [str(BIN / "nsqpy"), "nsqadmin", "--help"]
    results = run_all(commands)
    for name, (flags, defaults) in DAEMONS.items():
        code, out, err = results[name]
        assert code == 0 and err == "", (name, err)
        assert out.startswith(f"Usage: {name} [flags]\n"), out[:200]
        assert "{" not in out and "%(" not in out, name  # no argparse internals
        entries = re.split(r"\n(?=  -)", out.split("\nFlags:\n", 1)[1])
        heads = [e.split("\n", 1)[0].split()[0] for e in entries]
        assert sorted(heads) == sorted(set(heads)), name  # each flag once
        by_name = {e.split("\n", 1)[0].split()[0]: e for e in entries}
        for flag in flags:
            entry = by_name[f"--{flag.name}"]
            assert ("(default " in entry) == shown_default(flag, defaults), (name, entry)
        assert "--config string" in out and "--version" in out and "-h, --help" in out
    assert results["nsqpy nsqadmin"][:2] == results["nsqadmin"][:2]
    nsqd_help = results["nsqd"][1]
    assert '(default "nsq.%s")' in nsqd_help and "--msg-timeout duration" in nsqd_help
    assert "(default 1m0s)" in nsqd_help and "--deflate\n" in nsqd_help


def test_nsqpy_dispatches_every_subcommand() -> None:
    commands = {name: [str(BIN / "nsqpy"), name, "--help"] for name in cli.COMMANDS}
    commands.update(
        {f"{name} version": [str(BIN / "nsqpy"), name, "--version"] for name in cli.COMMANDS}
    )
    commands["nsqadmin script"] = [str(BIN / "nsqadmin"), "--version"]
    commands["bogus"] = [str(BIN / "nsqpy"), "bogus"]
    commands["list"] = [str(BIN / "nsqpy"), "--help"]
    commands["run help"] = [str(BIN / "nsqpy"), "run", "--help"]
    results = run_all(commands)
    for name in cli.COMMANDS:
        code, out, err = results[name]
        assert code == 0, (name, err)
        if name in (
            "pipeline",
            "channel",
            "jepsen",
            "cert",
            "spark",
        ):  # argparse, actions of their own
            assert out.startswith(f"usage: nsqpy {name}")
            continue
        assert out.startswith(f"Usage: {name} [flags]\n"), (name, out[:100])
        code, out, err = results[f"{name} version"]
        assert code == 0 and out.startswith(f"{name} v1.3.0 (nsqpy "), (name, out, err)
    assert results["nsqadmin script"][1].startswith("nsqadmin v1.3.0")
    assert results["bogus"][0] == 2 and "unknown command 'bogus'" in results["bogus"][2]
    listing = results["list"][1]
    assert all(f"  {name} " in listing for name in [*cli.COMMANDS, "run"])
    assert "--nsqadmin-http-port int" in results["run help"][1]


def test_every_console_script_is_installed_and_in_the_readme() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    scripts = [line.split("=")[0].strip() for line in section.splitlines() if "=" in line]
    assert "nsqadmin" in scripts
    readme = (ROOT / "README.md").read_text()
    for script in scripts:
        assert (BIN / script).exists(), script
        assert f"`{script}`" in readme, script


@pytest.mark.parametrize(
    ("parse", "argv", "needle"),
    [
        (nsqd_app.parse_args, ["--lookupd-tcp-address=foo"], "--lookupd-tcp-address 'foo'"),
        (nsqd_app.parse_args, ["--lookupd-tcp-address=foo:"], "--lookupd-tcp-address"),
        (nsqd_app.parse_args, ["--lookupd-tcp-address=:4160"], "<host>:<port>"),
        # "4150" alone is a unix socket path to nsqd 1.3.0 (what SplitHostPort cannot split)
        (nsqd_app.parse_args, ["--tcp-address=h:port"], "--tcp-address"),
        (nsqd_app.parse_args, ["--http-address=h:99999"], "--http-address"),
        (nsqd_app.parse_args, ["--statsd-address=statsd"], "--statsd-address"),
        (nsqd_app.parse_args, ["--auth-http-address=auth"], "--auth-http-address"),
        (nsqd_app.parse_args, ["--statsd-interval=0s"], "--statsd-interval"),
        (nsqd_app.parse_args, ["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (lookupd_app.parse_args, ["--tcp-address=foo"], "--tcp-address 'foo'"),
        (lookupd_app.parse_args, ["--http-address=:x"], "--http-address"),
        (nsqadmin_app.parse_args, ["--lookupd-http-address=foo"], "--lookupd-http-address"),
        (nsqadmin_app.parse_args, ["--nsqd-http-address=h:p"], "--nsqd-http-address"),
        (
            nsqadmin_app.parse_args,
            ["--http-address=x", "--nsqd-http-address=h:1"],
            "--http-address",
        ),
    ],
)
def test_bad_addresses_exit_2_with_one_line(
    parse: object, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse(argv)  # type: ignore[operator]
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert needle in captured.err and "error" in captured.err


def test_good_addresses_are_accepted() -> None:
    opts = nsqd_app.parse_args(
        [
            "--lookupd-tcp-address=127.0.0.1:4160",
            "--lookupd-tcp-address=[::1]:4160",
            "--tcp-address=:4150",
            "--http-address=",
            "--statsd-address=localhost:8125",
            "--auth-http-address=http://auth/x",
        ]
    )
    assert opts.lookupd_tcp_addresses == ["127.0.0.1:4160", "[::1]:4160"]
    assert opts.http_address == ""
