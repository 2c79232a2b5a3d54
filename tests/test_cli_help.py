"""Every ``kernevo`` subcommand and option says what it is for in ``--help``."""

from __future__ import annotations

import argparse

from kernevo import cli
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
    assert _undocumented(cli._parser(), "kernevo") == []


def test_the_op_help_names_every_op() -> None:
    assert cli.OP_HELP.split(", ") == list(OPS)
