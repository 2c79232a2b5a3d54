"""Ctrl-C before a command runs, and what building ``kernevo``'s parser imports.

A fresh-user trial: Ctrl-C in the first second of any command printed a 30-line traceback (a
KeyboardInterrupt while ``_parser`` imported ``evolver.worker``, hence OpenEvolve), and that
import made every command, ``--help`` included, take about 1.5 s.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernevo import cli


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "where",
    [
        "kernevo.cli.parser._add_queue_commands",
        "kernevo.cli._check_environment",
        "kernevo.cli.jobs._cmd_jobs",
    ],
)
def test_ctrl_c_before_or_while_a_command_runs_is_one_line_and_130(
    where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(where, _interrupt)
    assert cli.main(["jobs", "--limit", "1"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "kernevo: interrupted\n"
    assert captured.out == ""


def test_building_the_parser_imports_no_openevolve_or_sqlalchemy() -> None:
    probe = (
        "import sys, kernevo.cli.parser as p; p._parser(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'openevolve', 'sqlalchemy', 'db', 'api', 'fastapi', 'numpy'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_worker_defaults_module_agrees_with_the_heartbeat_rule() -> None:
    from db.heartbeat import MISSED_BEATS
    from evolver import worker, worker_defaults

    assert worker_defaults.MIN_BEATS_PER_GRACE == MISSED_BEATS
    assert worker.MIN_BEATS_PER_GRACE == MISSED_BEATS
