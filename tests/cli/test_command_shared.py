"""The small helpers the commands share (``nodetopo.command``): one ``-o``/``--output`` format flag,
one name for what a non-regular file is."""

from __future__ import annotations

import argparse
import stat

import pytest

from nodetopo.command.args import add_output_format
from nodetopo.command.output import file_kind


def test_output_format_defaults_to_the_first_choice_and_refuses_others() -> None:
    parser = argparse.ArgumentParser(prog="x")
    add_output_format(parser, ("text", "json"), "the verdict as text, or JSON (default: text)")
    assert parser.parse_args([]).output == "text"
    assert parser.parse_args(["-o", "json"]).output == "json"
    assert parser.parse_args(["--output", "json"]).output == "json"
    with pytest.raises(SystemExit):
        parser.parse_args(["-o", "yaml"])
    assert "-o {text,json}, --output {text,json}" in parser.format_help()


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        (stat.S_IFDIR, "a directory"),
        (stat.S_IFIFO, "a FIFO"),
        (stat.S_IFCHR, "a character device"),
        (stat.S_IFBLK, "a block device"),
        (stat.S_IFSOCK, "a socket"),
        (stat.S_IFLNK, "not a regular file"),
    ],
)
def test_file_kind_names_each_kind_of_file(mode: int, kind: str) -> None:
    assert file_kind(mode | 0o644) == kind
