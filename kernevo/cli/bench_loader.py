"""``kernevo bench-loader``: time the loaded kernel per call (``kernevo.bench_loader``)."""

from __future__ import annotations

import argparse

from kernevo.cli.errors import CliError


def _cmd_bench_loader(args: argparse.Namespace) -> int:
    """Time the loaded trsm callable, its launch and cuBLAS per call (``kernevo.bench_loader``);
    1 when a way of solving failed its check, or no GPU."""
    from kernevo.bench_loader import run, wrong
    from kernevo.device import NoGpuError

    try:
        failed = wrong(run(args))
    except NoGpuError as error:
        raise CliError(f"bench-loader needs a GPU: {error}") from None
    if failed:
        raise CliError(f"wrong results from {', '.join(failed)}")
    return 0
