"""Options of one mutually exclusive group are refused together whatever their values.

argparse counts an option for its exclusion only when the value differs from the default: a
fresh-user trial's ``kernevo best --gpu x --device 0`` was accepted silently (``--device 0``
ignored), ``--device 1`` refused. ``kernevo.cli.strict_parser._Parser`` now refuses any explicit
pair.
"""

from __future__ import annotations

import pytest

from kernevo.cli import main

BEST = ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--api-url", "http://127.0.0.1:9"]
EXPORT = ["export", "--dtype", "float64", "-o", "/nonexistent/kernevo-export"]


@pytest.mark.parametrize(("command", "name"), [(BEST, "best"), (EXPORT, "export")])
@pytest.mark.parametrize(
    "pair",
    [
        ["--gpu", "nvidia-h200", "--device", "0"],
        ["--device", "0", "--gpu", "nvidia-h200"],
        ["--gpu", "nvidia-h200", "--device", "1"],
        ["--gpu=nvidia-h200", "--dev", "0"],  # an abbreviation is the same option
    ],
)
def test_gpu_with_any_explicit_device_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: list[str], name: str, pair: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, *pair])
    captured = capsys.readouterr()
    assert exited.value.code == 2
    assert captured.out == ""
    assert captured.err == (
        f"kernevo {name}: error: argument --device: not allowed with argument --gpu "
        f"(see kernevo {name} --help)\n"
    )


def test_one_option_of_the_group_alone_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    """``--gpu`` alone reaches the service (here: nothing listens, exit 1)."""
    assert main([*BEST, "--gpu", "nvidia-h200"]) == 1
    assert "is unreachable" in capsys.readouterr().err
