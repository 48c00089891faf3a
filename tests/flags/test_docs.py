"""docs/flags.md is generated from the declarations and cannot drift from them."""

from __future__ import annotations

from nsqpy.flagdocs import PAGE, render
from nsqpy.flags import declared
from nsqpy.options import NsqdOptions


def test_docs_flags_md_is_up_to_date() -> None:
    assert PAGE.read_text() == render(), (
        "docs/flags.md is stale: run `.venv/bin/python -m nsqpy.flagdocs`"
    )


def test_every_nsqd_flag_is_documented() -> None:
    page = PAGE.read_text()
    for opt in declared(NsqdOptions):
        assert f"`--{opt.name}" in page, opt.name
    assert "`/config`" in page and "computed: `default_node_id()`" in page
