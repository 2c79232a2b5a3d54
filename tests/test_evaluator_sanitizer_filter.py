"""compute-sanitizer instruments only the candidate's own kernels (evaluator/tools.py), with a
fallback when the installed version refuses the filter; a fake compute-sanitizer on the CPU
records each command line it was given."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from evaluator import tools
from evaluator.compile import compile_cubin
from evaluator.tools import cubin_kernels, kernel_filter, run_sanitizer
from seeds.registry import get_path

FAKE = """#!/usr/bin/env python3
import json, sys
log = {log!r}
if sys.argv[1:] == ["--help"]:
    print({help!r})
    sys.exit(0)
with open(log, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
filtered = "--kernel-name" in sys.argv
sys.exit({filtered_status} if filtered else {plain_status})
"""


def fake_sanitizer(
    tmp_path: Path, *, help_text: str, filtered_status: int = 0, plain_status: int = 0
) -> tuple[str, Path]:
    log = tmp_path / "argv.log"
    script = tmp_path / "compute-sanitizer"
    script.write_text(
        FAKE.format(
            log=str(log), help=help_text, filtered_status=filtered_status,
            plain_status=plain_status,
        )
    )  # fmt: skip
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    tools.sanitizer_filters_kernels.cache_clear()
    return str(script), log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture(scope="module")
def blocked_cubin(tmp_path_factory) -> bytes:
    spec = get_path("trsm_blocked")
    result = compile_cubin(
        spec.seed_source(), spec.compile_options("float64", "sm_90"), "sm_90",
        cache_dir=tmp_path_factory.mktemp("cc"),
    )  # fmt: skip
    assert result.ok, result.log
    return result.cubin


def test_the_kernels_of_a_cubin_are_its_global_functions(blocked_cubin):
    assert cubin_kernels(blocked_cubin) == (
        "kernevo_block_size", "kernevo_launch_config", "trsm_blocked_diag_kernel",
    )  # fmt: skip
    assert cubin_kernels(b"\x7fELF broken") == () and kernel_filter(()) == []


def test_only_the_candidates_kernels_are_instrumented(tmp_path, blocked_cubin):
    sanitizer, log = fake_sanitizer(tmp_path, help_text="  --kernel-name arg  filter kernels")

    assert run_sanitizer(sanitizer, "memcheck", blocked_cubin, "trsm_blocked", "float64",
                         (600, 40), 0, 60) is None  # fmt: skip

    (argv,) = calls(log)
    at = argv.index("--kernel-name")
    assert argv[at + 1] == (
        "regex=^(kernevo_block_size|kernevo_launch_config|trsm_blocked_diag_kernel)$"
    )
    assert argv[argv.index("--tool") + 1] == "memcheck"


def test_a_sanitizer_without_the_option_instruments_everything(tmp_path, blocked_cubin):
    sanitizer, log = fake_sanitizer(tmp_path, help_text="  --tool arg")

    run_sanitizer(
        sanitizer, "racecheck", blocked_cubin, "trsm_blocked", "float64", (600, 40), 0, 60
    )

    (argv,) = calls(log)
    assert "--kernel-name" not in argv


def test_a_refused_filter_is_run_again_unfiltered(tmp_path, blocked_cubin):
    # The filter's syntax refused (exit 1, no report line): the plain run decides.
    sanitizer, log = fake_sanitizer(
        tmp_path, help_text="--kernel-name", filtered_status=1, plain_status=0
    )

    assert run_sanitizer(sanitizer, "initcheck", blocked_cubin, "trsm_blocked", "float64",
                         (600, 40), 0, 60) is None  # fmt: skip

    first, second = calls(log)
    assert "--kernel-name" in first and "--kernel-name" not in second


def test_a_finding_under_the_filter_is_not_run_again(tmp_path, blocked_cubin):
    sanitizer, log = fake_sanitizer(
        tmp_path, help_text="--kernel-name", filtered_status=tools.SANITIZER_EXIT_CODE
    )

    failure = run_sanitizer(sanitizer, "memcheck", blocked_cubin, "trsm_blocked", "float64",
                            (600, 40), 0, 60)  # fmt: skip

    assert failure is not None and failure.check == "sanitizer_memcheck"
    assert len(calls(log)) == 1
