"""The one flag parser (nsqpy.flags): every kind, Go's flag rules, --config files, the daemons'
shell, and a mistake as the same one line the programs have always printed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from nsqpy.errors import ConfigError
from nsqpy.flags import (
    FlagError,
    UnknownArgument,
    check_options,
    declared,
    must,
    option,
    parse_flags,
    parse_into,
)


@dataclass
class Opts:
    topics: list[str] = option("topic", ["default"], "a topic")
    count: int = option("count", 200, "how many", config_key="how_many")
    ratio: float = option("ratio", 1.0, "a fraction")
    quiet: bool = option("quiet", False, "be quiet")
    loud: bool = option("loud", True, "be loud")
    every: float = option("every", 30.0, "how often", kind="duration")
    timeout_ms: int = option("timeout", 2000, "how long", kind="duration_ms")
    percentiles: list[float] = option("percentile", [], "quantiles", kind="float_list")
    name: str = option("name", "x", "a name")


def parse(*argv: str, config_file: bool = False) -> Opts:
    opts = Opts()
    assert parse_into(opts, declared(Opts), argv, config_file=config_file).action == "run"
    return opts


def mistake(*argv: str, config_file: bool = False) -> str:
    with pytest.raises(FlagError) as info:
        parse_into(Opts(), declared(Opts), argv, config_file=config_file)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_the_declarations_are_read_back_in_field_order() -> None:
    names = [(o.name, o.field, o.kind) for o in declared(Opts)]
    assert names[:4] == [
        ("topic", "topics", "list"),
        ("count", "count", "int"),
        ("ratio", "ratio", "float"),
        ("quiet", "quiet", "bool"),
    ]
    assert declared(Opts)[1].key == "how_many" and declared(Opts)[2].key == "ratio"
    first, second = Opts(), Opts()
    first.topics.append("mine")
    assert second.topics == ["default"]  # a list default is copied for each instance


def test_every_kind_from_the_command_line() -> None:
    opts = parse(
        "-topic", "a", "--topic=b", "--count", "7", "-ratio=0.5", "--quiet", "--loud=false",
        "--every=1m30s", "--timeout", "250ms", "--percentile=0.5,0.9", "--percentile", "0.99",
        "-name=",
    )  # fmt: skip
    assert opts == Opts(
        topics=["a", "b"],
        count=7,
        ratio=0.5,
        quiet=True,
        loud=False,
        every=90.0,
        timeout_ms=250,
        percentiles=[0.5, 0.9, 0.99],
        name="",
    )
    assert parse("--count=1", "--count=2").count == 2  # the last one wins
    assert parse("--timeout=1h").timeout_ms == 3_600_000
    assert parse("--timeout=0").timeout_ms == 0
    assert parse("--count", "-5").count == -5  # a value may start with "-"


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_true_is_gos_parse_bool(text: str) -> None:
    assert parse(f"--quiet={text}").quiet is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_false_is_gos_parse_bool(text: str) -> None:
    assert parse(f"--loud={text}").loud is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--count=ten"], 'invalid value "ten" for flag --count: not an integer'),
        (["--count=1.5"], 'invalid value "1.5" for flag --count: not an integer'),
        (["--ratio=half"], 'invalid value "half" for flag --ratio: not a number'),
        (["--percentile=0.5,x"], 'invalid value "0.5,x" for flag --percentile: not a number'),
        (
            ["--quiet=yes"],
            'invalid value "yes" for flag --quiet: not a boolean (true, false, 1, 0)',
        ),
        (["--quiet=tRuE"], 'invalid value "tRuE" for flag --quiet: not a boolean'),
        (
            ["--every=5"],
            "invalid value \"5\" for flag --every: invalid duration '5' "
            "(expected e.g. 90s, 1h30m, 250ms)",
        ),
        (["--timeout=soon"], 'invalid value "soon" for flag --timeout: invalid duration'),
        (["--nope"], "flag provided but not defined: --nope (see --help)"),
        (["--count"], "flag needs an argument: --count"),
        (["stray"], "unexpected argument 'stray' (flags only; see --help)"),
        (["--", "stray"], "unexpected argument 'stray'"),
        (["---x"], "bad flag syntax: ---x"),
        (["--quiet", "false"], "unexpected argument 'false'"),  # Go: a bool takes no 2nd arg
        (["--config=x.toml"], "flag provided but not defined: --config"),
    ],
)
def test_mistakes_are_one_line(argv: list[str], message: str) -> None:
    assert message in mistake(*argv)


def test_unknown_arguments_carry_what_was_given() -> None:
    for argv, given in ((["--nope=1"], "--nope=1"), (["stray"], "stray")):
        with pytest.raises(UnknownArgument) as info:
            parse_into(Opts(), declared(Opts), argv)
        assert info.value.argument == given


def test_help_and_version_end_the_parse() -> None:
    opts = Opts()
    assert parse_into(opts, declared(Opts), ["--count=1", "-h", "--nope"]).action == "help"
    assert parse_into(opts, declared(Opts), ["-help"]).action == "help"
    assert parse_into(opts, declared(Opts), ["--version"]).action == "version"
    parsed = parse_into(opts, declared(Opts), ["--version=false", "--quiet"])
    assert parsed.action == "run" and parsed.given == {"quiet"}
    assert "flag --version" in mistake("--version=maybe")


def test_config_file_values_then_the_command_line(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        'how_many = 5\nratio = 2\nquiet = true\nloud = "false"\nevery = "1m"\n'
        'timeout = 3000000000\npercentile = [0.5, "0.9,0.99"]\ntopic = "one"\n'
        'name = 7\nunknown_key = "ignored"\n'
    )
    opts = parse(f"--config={config}", config_file=True)
    assert opts == Opts(
        topics=["one"],
        count=5,
        ratio=2.0,
        quiet=True,
        loud=False,
        every=60.0,
        timeout_ms=3000,
        percentiles=[0.5, 0.9, 0.99],
        name="7",
    )
    opts = parse("--topic=a", "--config", str(config), "--topic=b", "--count=1", config_file=True)
    assert (opts.topics, opts.count, opts.ratio) == (["a", "b"], 1, 2.0)  # the flags win
    config.write_text("count = 9\n")  # the flag name with "_" is read too
    assert parse(f"--config={config}", config_file=True).count == 9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("how_many = 1.5\n", 'invalid value "1.5" for how_many in {path}: not an integer'),
        ("how_many = true\n", 'invalid value "True" for how_many in {path}: not an integer'),
        ('quiet = "yes"\n', 'invalid value "yes" for quiet in {path}: not a boolean'),
        ('timeout = "soon"\n', 'invalid value "soon" for timeout in {path}: invalid duration'),
        ("how_many = \n", "failed to load config file {path}: "),
    ],
)
def test_config_file_mistakes(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        parse_into(Opts(), declared(Opts), [f"--config={config}"], config_file=True)
    assert message.format(path=config) in str(info.value)
    with pytest.raises(ConfigError, match="failed to load config file"):
        parse(f"--config={tmp_path / 'missing.toml'}", config_file=True)


@dataclass
class Checked:
    low: int = option("low", 1, "low", check=must(lambda v: v >= 0, "--{flag} {value} < 0"))
    name: str = option(
        "name", "ok", "name", check=must(lambda v: v != "bad", "--{flag} {value!r} is bad")
    )


def test_declared_checks_run_in_field_order() -> None:
    check_options(Checked())
    with pytest.raises(ConfigError, match=r"^--low -1 < 0$"):
        check_options(Checked(low=-1, name="bad"))
    with pytest.raises(ConfigError, match=r"^--name 'bad' is bad$"):
        check_options(Checked(name="bad"))


def daemon(argv: list[str]) -> Checked:
    def validate(opts: Checked) -> None:
        check_options(opts)
        if opts.low > 10:
            raise ConfigError("--low too high")

    return parse_flags(
        Checked, argv, prog="d", description="A daemon.", version="d v1", validate=validate
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--nope"], "d: error: unrecognized arguments: --nope (see --help)\n"),
        (["stray"], "d: error: unrecognized arguments: stray (see --help)\n"),
        (
            ["--low=x"],
            'd: error: invalid value "x" for flag --low: not an integer (see --help)\n',
        ),
        (["--low=-1"], "d: error: --low -1 < 0\n"),
        (["--low=11"], "d: error: --low too high\n"),
    ],
)
def test_the_daemons_shell_exits_2_with_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        daemon(argv)
    assert info.value.code == 2
    assert capsys.readouterr() == ("", line)


def test_the_daemons_shell_answers_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert daemon(["--low=3"]) == Checked(low=3)
    for argv in (["--help"], ["--version"]):
        with pytest.raises(SystemExit) as info:
            daemon(argv)
        assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: d [flags]\n\nA daemon.\n\nFlags:\n  --config string\n")
    assert "  --low int\n        low (default 1)\n" in out
    assert out.endswith("  -h, --help\n        show this help and exit\nd v1\n")
