"""Every utility's command line: --help, --version, and mistakes as one clear line, no traceback.

The real console scripts are run as subprocesses (all at once, to keep this fast); the
validation matrix calls each tool's ``main(argv)`` in-process, which stops before any I/O.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from nsqpy.tools import nsq_to_nsq, stat, tail, to_file, to_http, to_nsq

from .helpers import tool_path

TOOLS = {
    "nsq_tail": ("--print-topic", tail.main),
    "to_nsq": ("--delimiter string", to_nsq.main),
    "nsq_to_file": ("--filename-format string", to_file.main),
    "nsq_to_http": ("--content-type string", to_http.main),
    "nsq_to_nsq": ("--destination-topic string", nsq_to_nsq.main),
    "nsq_stat": ("--interval duration", stat.main),
}


def test_console_scripts_answer_help_version_and_bad_flags() -> None:
    runs = {
        (name, kind): subprocess.Popen(
            [tool_path(name), arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for name in TOOLS
        for kind, arg in (("help", "--help"), ("version", "--version"), ("bad", "--no-such-flag=1"))
    }
    outputs = {key: proc.communicate(timeout=30) for key, proc in runs.items()}
    results = {key: (runs[key].returncode, *outputs[key]) for key in runs}
    for name, (flag_line, _) in TOOLS.items():
        code, out, err = results[(name, "help")]
        assert code == 0 and err == b"", (name, err)
        text = out.decode()
        assert text.startswith(f"Usage: {name} [flags]\n"), text
        assert flag_line in text and "  --version\n" in text and "-h, --help" in text
        code, out, err = results[(name, "version")]
        assert code == 0, err
        assert re.fullmatch(rf"{name} v1\.3\.0 \(nsqpy [^,]+, python [\d.]+\)\n", out.decode()), out
        code, out, err = results[(name, "bad")]
        assert code == 2 and out == b"", (name, out)
        assert (
            err.decode() == f"{name}: flag provided but not defined: --no-such-flag (see --help)\n"
        )


HOST = "--nsqd-tcp-address=127.0.0.1:4150"
CASES = [
    ("nsq_tail", [], 1, "--topic is required"),
    ("nsq_tail", ["--topic=t"], 1, "--nsqd-tcp-address or --lookupd-http-address required"),
    ("nsq_tail", ["--topic=t", HOST, "--lookupd-http-address=h:1"], 1, "not both"),
    ("nsq_tail", ["--topic=no spaces", HOST], 1, "--topic is invalid"),
    ("nsq_tail", ["--topic=t", HOST, "--channel=a/b"], 1, "--channel is invalid"),
    ("nsq_tail", ["--max-in-flight=lots"], 2, 'invalid value "lots" for flag --max-in-flight'),
    ("nsq_tail", ["--topic=t", HOST, "--consumer-opt=nope,1"], 2, "invalid option nope"),
    ("nsq_tail", ["--topic=t", HOST, "--consumer-opt=tls_config,x"], 2, "not supported"),
    ("nsq_tail", ["--topic=t", "--nsqd-tcp-address=nohost"], 2, "expected host:port"),
    ("nsq_tail", ["--topic=t", HOST, "-n=-1"], 1, "-n must be >= 0"),
    ("to_nsq", [], 1, "--topic required"),
    ("to_nsq", ["--topic=t"], 1, "--nsqd-tcp-address required"),
    ("to_nsq", ["--topic=t", "--delimiter=ab", HOST], 1, "--delimiter must be a single byte"),
    ("to_nsq", ["--rate=fast"], 2, 'invalid value "fast" for flag --rate'),
    ("to_nsq", ["--topic=t", HOST, "--producer-opt=dial_timeout,soon"], 2, "dial_timeout,soon"),
    ("nsq_to_file", ["--topic=t", HOST, "--gzip-level=10"], 1, "invalid --gzip-level value (10), should be 1-9"),
    ("nsq_to_file", [HOST], 1, "--topic or --topic-pattern required"),
    ("nsq_to_file", ["--topic-pattern=x", HOST], 1, "--lookupd-http-address must be specified when no --topic specified"),
    ("nsq_to_file", ["--topic-pattern=[", "--lookupd-http-address=h:1"], 1, "--topic-pattern is invalid"),
    ("nsq_to_file", ["--topic=t", HOST, "--sync-interval=soon"], 2, 'invalid value "soon" for flag --sync-interval'),
    ("nsq_to_file", ["--topic=t", HOST, "--sync-interval=0"], 1, "--sync-interval should be positive"),
    ("nsq_to_file", ["--topic=t", HOST, "--rotate-size=-1"], 1, "--rotate-size and --rotate-interval must be >= 0"),
    ("nsq_to_file", ["--topic=t", HOST, "--log-level=loud"], 1, "invalid --log-level"),
    ("nsq_to_file", ["--topic=t", HOST, "--channel="], 1, "--channel is required"),
    ("nsq_to_file", ["--topic=t", HOST, "--rotate-interval=1h", "--filename-format=<TOPIC>"], 1, "missing <REV>"),
    ("nsq_to_http", [], 1, "--topic and --channel are required"),
    ("nsq_to_http", ["--topic=t", HOST], 1, "--get or --post required"),
    ("nsq_to_http", ["--topic=t", HOST, "--get=http://h/%s", "--content-type=x"], 1, "--content-type only used with --post"),
    ("nsq_to_http", ["--topic=t", HOST, "--post=http://h/", "--sample=2"], 1, "--sample must be between 0.0 and 1.0"),
    ("nsq_to_http", ["--topic=t", HOST, "--post=ftp://h/"], 1, "invalid --post address"),
    ("nsq_to_http", ["--topic=t", HOST, "--post=http://h/", "--header=NoColon"], 1, "Invalid header"),
    ("nsq_to_http", ["--topic=t", HOST, "--post=http://h/", "-n=0"], 1, "-n must be >= 1"),
    ("nsq_to_nsq", [], 1, "--topic and --channel are required"),
    ("nsq_to_nsq", ["--topic=t", HOST], 1, "--destination-nsqd-tcp-address required"),
    ("nsq_to_nsq", ["--topic=t", HOST, "--destination-nsqd-tcp-address=h:2", "--destination-topic=b@d"], 1,
     "--destination-topic is invalid"),
    ("nsq_to_nsq", ["--topic=t", HOST, "--destination-nsqd-tcp-address=h:2", "--mode=fanout"], 1, "--mode must be one of"),
    ("nsq_stat", [], 1, "--topic and --channel are required"),
    ("nsq_stat", ["--topic=t", "--channel=c"], 1, "--nsqd-http-address or --lookupd-http-address required"),
    ("nsq_stat", ["--topic=t", "--channel=c", "--nsqd-http-address=http://h:1"], 1, "address should not contain scheme"),
    ("nsq_stat", ["--topic=t", "--channel=c", "--nsqd-http-address=h:1", "--count=0"], 1, "--count should be positive"),
    ("nsq_stat", ["--topic=t", "--channel=c", "--nsqd-http-address=h:1", "--interval=0"], 1, "--interval should be positive"),
]  # fmt: skip


@pytest.mark.parametrize(("tool", "argv", "code", "message"), CASES)
def test_mistakes_exit_non_zero_with_one_line(
    tool: str, argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert TOOLS[tool][1](argv) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"{tool}: "), captured.err
    assert message in captured.err
    assert "Traceback" not in captured.err
