"""Every ``kernevo`` subcommand and option says what it is for in ``--help``."""

from __future__ import annotations

import argparse

import pytest

from kernevo import cli
from kernevo.cli import arguments
from kernevo.cli.parser import _parser
from seeds.ops import OPS


def _undocumented(parser: argparse.ArgumentParser, name: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            described = {choice.dest: choice.help for choice in action._choices_actions}
            for command, sub in action.choices.items():
                if not described.get(command):
                    missing.append(f"{name} {command}")
                missing += _undocumented(sub, f"{name} {command}")
        elif action.option_strings and action.dest != "help" and not action.help:
            missing.append(f"{name} {'/'.join(action.option_strings)}")
    return missing


def test_every_subcommand_and_option_has_a_help_text() -> None:
    assert _undocumented(_parser(), "kernevo") == []


def test_the_op_help_names_every_op() -> None:
    assert arguments.OP_HELP.split(", ") == list(OPS)


def _subcommands(
    parser: argparse.ArgumentParser, name: str
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                found.append((f"{name} {command}", sub))
                found += _subcommands(sub, f"{name} {command}")
    return found


def test_every_subcommand_describes_itself_atop_its_own_help() -> None:
    """``kernevo serve --help`` said nothing of what serve does (nor that it migrates)."""
    commands = _subcommands(_parser(), "kernevo")
    assert len(commands) == 15
    assert [name for name, sub in commands if not sub.description] == []
    serve = dict(commands)["kernevo serve"]
    assert serve.description is not None and "migrates the database" in serve.description


def test_every_command_names_a_function_that_exists() -> None:
    """The parser names each command's function by module and name (imported when the command
    runs: ``kernevo.cli.parser._Run``), so a misspelt one would fail only when run."""
    commands = dict(_subcommands(_parser(), "kernevo"))
    runs = {name: sub.get_default("func") for name, sub in commands.items()}
    assert [name for name, run in runs.items() if run is None] == ["kernevo token"]
    assert all(callable(run.function()) for run in runs.values() if run is not None)


def _option_help(command: str, option: str) -> str:
    parser = dict(_subcommands(_parser(), "kernevo"))[f"kernevo {command}"]
    [action] = [action for action in parser._actions if option in action.option_strings]
    return str(action.help)


def test_evolve_help_lists_every_path() -> None:
    from seeds.registry import PATHS

    text = _option_help("evolve", "--path")
    assert all(path in text for path in PATHS)


@pytest.mark.parametrize(
    ("command", "option", "range_"),
    [
        ("worker", "--max-attempts", "1..1000"),
        ("worker", "--in-flight", "1..4096"),
        ("evolve", "--in-flight", "1..4096"),
        ("jobs", "--limit", "1..2147483647"),
        ("best", "--m", "trsm 0..2147483647, trsm_batched 1..64"),
        ("best", "--n", "trsm 0..2147483647, solve_tri 1..2147483647"),
        ("bench-loader", "--shapes", "1..2147483647"),
    ],
)
def test_bounded_options_state_their_range(command: str, option: str, range_: str) -> None:
    assert range_ in _option_help(command, option)


@pytest.mark.parametrize(
    ("argv", "names"),
    [(["token"], "{create,list,revoke}"), ([], "COMMAND")],
)
def test_a_missing_subcommand_names_the_choices_not_an_internal_name(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"the following arguments are required: {names}" in err
    assert "token_command" not in err and "required: command" not in err


@pytest.mark.parametrize("command", ["best", "export"])
@pytest.mark.parametrize("gpu", ["bogus gpu!", "h200/../x", " -h200", "nvidia h200?", "+"])
def test_a_malformed_gpu_name_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: str, gpu: str
) -> None:
    """``best --gpu 'bogus gpu!'`` asked the service for ``bogus-gpu`` (``export --gpu=+`` was
    refused only after opening the database, exit 1). Caught by
    ``kernevo.cli.arguments._gpu_name``'s ``_GPU_NAME`` pattern."""
    argv = [command, "--dtype", "float64", "--gpu", gpu]
    argv += ["--m", "8", "--n", "8"] if command == "best" else ["-o", "out"]
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "argument --gpu: expected a GPU name such as nvidia-h200 or 'NVIDIA H200'" in line


@pytest.mark.parametrize(
    "gpu", ["nvidia-h200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "h200"]
)
def test_gpu_names_and_keys_are_accepted(gpu: str) -> None:
    assert arguments._gpu_name("a GPU name")(gpu) == gpu
