"""An option given twice is a usage error of the subcommand, as a repeated REST query parameter
(``repeated_parameter``) and a job file's duplicate key are refused (fresh-user trial: ``evolve
--path trsm_small --path trsm_blocked … --iterations 1 --iterations 2`` started a trsm_blocked
job of 2 iterations; ``best --m 64 --n 64 --m 100`` asked for m=100). A list option too (a
later trial: ``bench-loader --dtype float64 --shapes 16x16 --shapes 32x32`` would have timed
32x32 only). The check is ``kernevo.cli.strict_parser._given_once``, registered by every
subcommand's parser."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_usage import usage_line
from conftest import unused_port

from kernevo.cli import main
from kernevo.cli.parser import _parser

ONCE = "given twice; give it once"
LIST_ONCE = f"{ONCE}, with all its values"


def _kernevo(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env["KERNEVO_DATABASE_URL"] = f"sqlite:///{tmp_path / 'lineage.db'}"
    env["KERNEVO_WORK_DIR"] = str(tmp_path / "runs")
    env["KERNEVO_API_URL"] = f"http://127.0.0.1:{unused_port()}"
    return subprocess.run(
        [sys.executable, "-m", "kernevo.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )


def _line(command: str, option: str, says: str = ONCE) -> str:
    return f"kernevo {command}: error: argument {option}: {says} (see kernevo {command} --help)"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["evolve", "--path", "trsm_small", "--path", "trsm_blocked", "--dtype", "float64",
             "--compile-only", "--iterations", "1", "--iterations", "2"],
            _line("evolve", "--path"),
        ),
        (
            ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--m", "100", "--gpu",
             "nvidia-h200"],
            _line("best", "--m"),
        ),
    ],
)  # fmt: skip
def test_the_trials_commands_are_usage_errors_before_any_job(
    tmp_path: Path, argv: list[str], line: str
) -> None:
    done = _kernevo(*argv, tmp_path=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [line]
    assert list(tmp_path.iterdir()) == []  # no database, no work folder: no job


@pytest.mark.parametrize(
    ("argv", "command", "option"),
    [
        (["best", "--dtype", "float64", "--dtype", "float32", "--gpu", "nvidia-h200", "--m", "64",
          "--n", "64"], "best", "--dtype"),
        (["best", "--dtype", "float64", "--gpu", "nvidia-h200", "--shape", "m=64,n=64",
          "--shape", "m=100,n=64"], "best", "--shape"),
        (["best", "--dtype", "float64", "--gpu", "nvidia-h200", "--gpu", "nvidia-h100",
          "--m", "64", "--n", "64"], "best", "--gpu"),
        (["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only",
          "--iterations=1", "--iterations", "2"], "evolve", "--iterations"),
        # an abbreviation reaches the same option
        (["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only",
          "--iterations=1", "--iter=2"], "evolve", "--iterations"),
        (["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only",
          "--compile-only"], "evolve", "--compile-only"),
        (["evolve", "--resume", "--resume", "3"], "evolve", "--resume"),
        (["lock", "-o", "a.lock", "--output", "b.lock"], "lock", "-o/--output"),
        (["jobs", "--watch", "--watch"], "jobs", "--watch"),
        (["token", "create", "--scope", "read", "--scope", "write"], "create", "--scope"),
        (["bench-loader", "--dtype", "float64", "--calls", "1", "--calls", "2"], "bench-loader",
         "--calls"),
    ],
)  # fmt: skip
def test_a_single_valued_option_given_twice_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], command: str, option: str
) -> None:
    prog = "token create" if command == "create" else command
    assert usage_line(capsys, argv) == _line(prog, option)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--dtype", "float64", "--shapes", "16x16", "--shapes", "32x32"], "--shapes"),  # trial's
        (["--dtype", "float64", "--shapes", "16x16", "48x48", "--shapes", "32x32"], "--shapes"),
        (["--dtype", "float64", "--shapes=16x16", "--shap", "32x32"], "--shapes"),
        (["--dtype", "float64", "--dtype", "float32"], "--dtype"),
        (["--dtype", "float64", "float32", "--shapes", "16x16", "--dtype", "complex64"], "--dtype"),
    ],
)
def test_a_list_option_given_twice_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    """Refused while parsing, before the GPU is looked for (this machine may have none: the
    command would otherwise end with exit 1, 'bench-loader needs a GPU')."""
    line = usage_line(capsys, ["bench-loader", *argv])
    assert line == _line("bench-loader", option, LIST_ONCE)


def test_a_list_option_given_once_keeps_all_its_values() -> None:
    args = _parser().parse_args(
        ["bench-loader", "--dtype", "float64", "float32", "--shapes", "16x16", "32x48"]
    )
    assert (args.dtype, args.shapes) == (["float64", "float32"], [(16, 16), (32, 48)])


def test_a_value_from_the_environment_beside_the_option_is_no_repeat(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KERNEVO_API_URL and --api-url: the option wins, and the unreachable service it names is
    the command's error (exit 1), not a usage error."""
    monkeypatch.setenv("KERNEVO_API_URL", "http://127.0.0.1:1")
    port = unused_port()
    status = main(
        ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--gpu", "nvidia-h200",
         "--api-url", f"http://127.0.0.1:{port}"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert status == 1, err
    assert f"127.0.0.1:{port}" in err and ONCE not in err


def test_every_option_of_every_subcommand_is_checked() -> None:
    """Each option that stores one value, one flag or one list is a ``_given_once`` action;
    positionals are argparse's own."""
    checked: list[str] = []
    positionals: list[str] = []

    def walk(parser: argparse.ArgumentParser, prog: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prog} {name}")
            elif isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            elif not action.option_strings:
                positionals.append(f"{prog} {action.dest}")
            else:
                assert type(action).__name__.startswith("GivenOnce"), (prog, action.dest)
                checked.append(f"{prog} {action.dest}")

    walk(_parser(), "kernevo")
    assert "kernevo evolve path" in checked and "kernevo best m" in checked
    assert "kernevo token revoke database_url" in checked
    assert {"kernevo bench-loader dtype", "kernevo bench-loader shapes"} <= set(checked)
    assert "kernevo cancel job" in positionals
