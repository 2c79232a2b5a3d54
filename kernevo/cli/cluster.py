"""Dask clusters: the options naming the cluster a job evaluates on (``evolve``, ``worker``) and
``kernevo dask-worker``, one GPU's worker of a cluster."""

from __future__ import annotations

import argparse
from typing import Any


def _cluster_options(args: argparse.Namespace, *, local: bool) -> Any:
    """``ClusterOptions`` of ``--scheduler`` (or, ``local``, evolve's ``--gpus``: a cluster
    started here; the worker's ``--gpus`` are its own devices), ``None`` without one: the local
    GPU, and Dask is not imported; ``--gpu-key``/``--lost-after-s`` need one, and so does the
    worker's ``--in-flight`` (evolve's sets the job's ``in_flight`` without one)."""
    gpus = args.gpus if local else None
    if not args.scheduler and not gpus:
        needs = "--scheduler or --gpus" if local else "--scheduler"
        # evolve's --in-flight without a cluster is the job's own (its local GPU's pool).
        for given, option in (
            (args.gpu_key, "--gpu-key"),
            (None if local else args.in_flight, "--in-flight"),
            (args.lost_after_s, "--lost-after-s"),
        ):
            if given is not None:
                args.parser.error(f"{option} needs {needs} (a Dask cluster)")
        if local and args.in_flight is not None:
            # Before anything runs, a new job and a resume alike (the job config would refuse
            # it later, as a resume's exit 1).
            from evolver.job_config import int_range

            most = int_range("in_flight")[1]
            if args.in_flight > most:
                args.parser.error(
                    f"argument --in-flight: at most {most} candidates on the local GPU, not "
                    f"{args.in_flight} (a cluster, --gpus or --scheduler, takes up to 4096)"
                )
        return None
    from evolver.cluster import DEFAULT_LOST_AFTER_S, ClusterOptions

    options = ClusterOptions(
        scheduler=args.scheduler,
        gpus=gpus or (),
        gpu_key=args.gpu_key,
        in_flight=args.in_flight,
        lost_after_s=args.lost_after_s or DEFAULT_LOST_AFTER_S,
    )
    if (problem := options.problem()) is not None:
        args.parser.error(problem)
    if local and args.compile_only and args.gpu_key is not None:
        args.parser.error("--compile-only evaluates under the key none: leave out --gpu-key")
    if local and args.gpu is not None:
        # evolve's --gpu is this machine's device; a cluster's job evaluates on its workers.
        given, where = (
            ("--gpus", "a cluster of the devices it lists")
            if gpus
            else ("--scheduler", "the Dask cluster's workers")
        )
        args.parser.error(
            f"--gpu and {given} exclude each other: with {given} the job evaluates on {where}"
        )
    return options


def _cmd_dask_worker(args: argparse.Namespace) -> int:
    """One GPU's Dask worker for jobs evaluating on a cluster (``evolver.dask_worker``)."""
    from evolver.cluster import check_reachable
    from evolver.dask_worker import serve
    from evolver.progress import ConsoleWriter

    if args.compile_only == (args.gpu is not None):
        args.parser.error("give --gpu I (a GPU worker) or --compile-only (a CPU worker)")
    if args.compile_only and args.gpu_key is not None:
        args.parser.error("--compile-only evaluates under the key none: leave out --gpu-key")
    check_reachable(args.scheduler)  # Dask would retry a refused connection for its timeout
    return serve(
        args.scheduler,
        None if args.compile_only else args.gpu,
        gpu_key=args.gpu_key,
        name=args.name,
        write=ConsoleWriter(),
    )
