"""``kernevo export``: write the champions serving an op in a dtype on a GPU as files
(``evolver.export``)."""

from __future__ import annotations

import argparse

from kernevo.cli.errors import CliError
from kernevo.cli.folders import _file_in_the_way
from kernevo.cli.op_options import _op_has_dtype
from kernevo.cli.store import _store_url


def _cmd_export(args: argparse.Namespace) -> int:
    """Write the champions serving ``--op`` in ``--dtype`` on the GPU as files
    (``evolver.export``)."""
    from db.session import read_scope
    from evolver.export import export_champions
    from evolver.store import open_existing_store

    _export_path_serves(args)  # a usage error, before the GPU or the database is asked
    if (problem := _file_in_the_way("export folder", args.output, "-o/--output")) is not None:
        raise CliError(problem)
    gpu_key = _gpu_key(args.gpu, args.device)
    engine = open_existing_store(_store_url(args))
    try:
        with read_scope(engine) as s:
            written = export_champions(
                s,
                op=args.op,
                dtype=args.dtype,
                gpu_key=gpu_key,
                out_dir=args.output,
                path=args.path,
            )
    finally:
        engine.dispose()
    for item in written:
        print(
            f"{item.path} {args.dtype} on {gpu_key} (shape bucket {item.shape_bucket}): program "
            f"{item.program_id} -> {item.folder}"
        )
    return 0


def _export_path_serves(args: argparse.Namespace) -> None:
    """Refuse ``kernevo export --dtype D`` of a dtype ``--op`` lacks, and ``--path P`` when P
    does not implement ``--op`` in ``--dtype``: the options contradict each other (a usage
    error, exit 2, as ``evolve --path P --dtype D`` of a dtype P lacks), whatever the database
    holds."""
    from seeds.registry import not_implementing

    _op_has_dtype(args)
    if args.path is None:
        return
    # The path is known: checked as it was parsed (arguments._path_id).
    if why := not_implementing(args.path, args.op, args.dtype):
        args.parser.error(f"argument --path: {why}")


def _gpu_key(gpu: str | None, device: int) -> str:
    """``--gpu`` as a GPU key, or this machine's device ``device``'s key.

    Raises:
        CliError: no GPU named and none answers, or a name with no letter or digit.
    """
    from seeds.hardware import normalize_gpu_name

    if gpu is None:
        from evolver.errors import NoGpuError
        from evolver.gpu import query_gpu

        try:
            gpu = query_gpu(device).key
        except NoGpuError as error:
            raise CliError(f"{error}; name the GPU with --gpu (e.g. --gpu nvidia-h200)") from None
    try:
        return normalize_gpu_name(gpu)
    except ValueError as error:
        raise CliError(str(error)) from None
