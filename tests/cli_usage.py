"""The one stderr line of a ``kernevo`` command line refused as a usage error, for the CLI
tests: ``main(argv)`` exits 2 through argparse, prints nothing on stdout and exactly one line
on stderr (``kernevo.cli.strict_parser._Parser.error``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kernevo.cli import main


def usage_line(capsys: pytest.CaptureFixture[str], argv: Sequence[str]) -> str:
    """The stderr line of ``argv`` (without its newline), asserting exit 2, an empty stdout and
    one line ending in a newline."""
    with pytest.raises(SystemExit) as caught:
        main(list(argv))
    captured = capsys.readouterr()
    assert (caught.value.code, captured.out) == (2, ""), captured.err
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n"), captured.err
    return captured.err.rstrip("\n")
