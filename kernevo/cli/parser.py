"""``kernevo``'s command line: every command, its options and their help.

Building the parser imports no OpenEvolve or SQLAlchemy (``evolver.worker_defaults`` holds the
worker's defaults for its help), and no command's module: each command is imported when it runs
(:class:`_Run`), so that ``kernevo --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernevo.cli.arguments import (
    OP_HELP,
    _count,
    _database_url,
    _dtype,
    _env_name,
    _gpu_key_arg,
    _gpu_list,
    _gpu_name,
    _host,
    _in_flight_local,
    _int_in,
    _job_file,
    _job_id,
    _job_int,
    _job_range,
    _op,
    _path_arg,
    _path_id,
    _port,
    _resume,
    _scheduler,
    _seconds,
    _service_url,
    _text,
    _url,
)
from kernevo.cli.op_options import _dimension, _dimension_help, _shape_help, _shape_values
from kernevo.cli.strict_parser import _Parser

DEFAULT_WATCH_INTERVAL_S = 2.0  # kernevo jobs --watch's refresh


@dataclass(frozen=True)
class _Run:
    """A command: the function ``name`` of ``kernevo.cli.<module>``, imported only when the
    command runs, so that building the parser (``--help`` included) compiles none of the
    commands' modules; a test's patch of a command function is the one called."""

    module: str
    name: str

    def function(self) -> Callable[[argparse.Namespace], int]:
        module = importlib.import_module(f"kernevo.cli.{self.module}")
        function: Callable[[argparse.Namespace], int] = getattr(module, self.name)
        return function

    def __call__(self, args: argparse.Namespace) -> int:
        return int(self.function()(args))


def _command(commands: Any, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand whose one line ``text`` is both its entry in the parent's ``--help`` and
    the description atop its own."""
    parser: argparse.ArgumentParser = commands.add_parser(name, help=text, description=text)
    # Usage errors found after parsing (a value the job configuration refuses, arguments no
    # option takes) name the subcommand they belong to: ``kernevo best: error: …``.
    parser.set_defaults(parser=parser)
    return parser


def _add_gpu_arguments(command: argparse.ArgumentParser) -> None:
    """``--gpu`` (a GPU name or key) or ``--device`` (the index asked when it is unset): one of
    the two, as ``--device`` means nothing beside ``--gpu`` (a usage error, not ignored)."""
    which = command.add_mutually_exclusive_group()
    which.add_argument(
        "--gpu",
        type=_gpu_name("a GPU name"),
        help="GPU name or key, e.g. nvidia-h200 or 'NVIDIA H200' (default: the GPU of --device "
        "on this machine; on a machine without one, --gpu is needed)",
    )
    which.add_argument(
        "--device",
        type=_job_int("gpu", "a device index"),
        default=0,
        help="this machine's device whose GPU to ask for, when --gpu is not given (default 0)",
    )


def _add_cluster_arguments(command: argparse.ArgumentParser, *, local: bool) -> None:
    """The Dask cluster a job evaluates on (``cluster._cluster_options``): ``--scheduler``, with
    ``local`` evolve's ``--gpus`` (a cluster started for the job), ``--gpu-key``,
    ``--in-flight``, ``--lost-after-s``."""
    command.add_argument(
        "--scheduler",
        type=_scheduler,
        help="evaluate on this Dask cluster (tcp://host:8786; workers: kernevo dask-worker)",
    )
    if local:
        command.add_argument(
            "--gpus",
            type=_gpu_list,
            help="evaluate on a Dask cluster of these local devices, started for the job (0,1)",
        )
    command.add_argument(
        "--gpu-key",
        type=_gpu_key_arg,
        help="with a cluster of several GPU models: the one to evaluate on (nvidia-h200)",
    )
    command.add_argument(
        "--in-flight",
        type=_in_flight_local if local else _int_in(1, 4096, "a number of candidates"),
        help="candidates evaluated at once: with a cluster 1..4096 (default 2 per worker of the "
        "GPU key)"
        + (
            f"; on the local GPU {_job_range('in_flight')} (default 1; verifications share the "
            "GPU, timings take turns)"
            if local
            else ""
        ),
    )
    command.add_argument(
        "--lost-after-s",
        type=_seconds(1, 86400),
        help="with a cluster: seconds the scheduler may stay unreachable before a job stops, "
        "failed; 1..86400 (default 30)",
    )


def _installed_version() -> str:
    """The installed distribution's version (the service's, else the light loader's), or
    "unknown" from a source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("kernevo-service", "kernevo"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kernevo", description="LLM-driven evolution of CUDA kernels.")
    parser.add_argument("--version", action="version", version=f"kernevo {_installed_version()}")
    # COMMAND, not the dest, in "the following arguments are required: …"; --help lists them.
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )

    evolve = _command(commands, "evolve", "run or resume an evolution job")
    from seeds.registry import PATHS  # loaded already, with the job configuration's ranges

    evolve.add_argument(
        "--path", type=_path_id, help=f"algorithmic path, one of: {', '.join(PATHS)}"
    )
    evolve.add_argument("--dtype", type=_dtype, help="float32 | float64 | complex64 | complex128")
    evolve.add_argument(
        "--bucket",
        type=_text("a shape bucket"),
        help="the path's shape bucket, e.g. m2049_16384 of trsm_blocked (default: its first)",
    )
    evolve.add_argument("--config", type=_job_file, help="job YAML file (keys of JobConfig)")
    evolve.add_argument(
        "--iterations",
        type=_job_int("iterations", "a number of iterations"),
        help=f"total iterations, {_job_range('iterations')} (default 60)",
    )
    evolve.add_argument(
        "--gpu",
        type=_job_int("gpu", "a device index"),
        help=f"CUDA device index, {_job_range('gpu')} (default KERNEVO_GPU or 0)",
    )
    evolve.add_argument(
        "--resume",
        type=_resume,
        nargs="?",
        const="latest",
        metavar="JOB_ID",
        help="continue a job from its last checkpoint; without an id, the newest unfinished "
        "job of --path and --dtype",
    )
    evolve.add_argument(
        "--compile-only",
        action="store_true",
        help="run without a GPU: evaluations stop after compiling and score 0 (tests, CI)",
    )
    for name, what, meaning in (
        ("checkpoint_interval", "a number of iterations", "iterations between checkpoints"),
        ("islands", "a number of islands", "MAP-Elites islands"),
        ("population", "a population size", "programs kept"),
        ("seed", "a seed", "random seed"),
        ("promote_every", "a number of iterations", "iterations between promotions"),
    ):
        evolve.add_argument(
            f"--{name.replace('_', '-')}",
            type=_job_int(name, what),
            help=f"{meaning}, {_job_range(name)}",
        )
    evolve.add_argument(
        "--llm-base-url", type=_url, help="OpenAI-compatible endpoint (default: offline)"
    )
    evolve.add_argument(
        "--llm-model",
        type=_text("a model name"),
        help="the model the LLM endpoint serves (default KERNEVO_LLM_MODEL)",
    )
    evolve.add_argument(
        "--llm-api-key-env", type=_env_name, help="name of the variable holding the API key"
    )
    evolve.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    evolve.add_argument("--work-dir", type=_path_arg, help="default KERNEVO_WORK_DIR (./runs)")
    _add_cluster_arguments(evolve, local=True)
    evolve.set_defaults(func=_Run("evolve", "_cmd_evolve"))

    serve = _command(
        commands,
        "serve",
        "run the REST service; first migrates the database to the newest schema (creating a "
        "SQLite file that does not exist)",
    )
    serve.add_argument(
        "--host", type=_host, default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--port", type=_port, default=8000, help="1..65535 (default 8000)")
    serve.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    serve.set_defaults(func=_Run("serve", "_cmd_serve"))

    best = _command(commands, "best", "ask the service for the champion kernel serving a problem")
    best.set_defaults(parser=best)  # a shape the op refuses: best's usage error
    best.add_argument("--op", type=_op, default="trsm", help=OP_HELP)
    best.add_argument(
        "--dtype", type=_dtype, required=True, help="float32 | float64 | complex64 | complex128"
    )
    best.add_argument("--shape", type=_shape_values, help=_shape_help())
    best.add_argument("--m", type=_dimension("m"), help=_dimension_help("m"))
    best.add_argument("--n", type=_dimension("n"), help=_dimension_help("n"))
    _add_gpu_arguments(best)
    best.add_argument("--api-url", type=_service_url, help="default KERNEVO_API_URL")
    best.set_defaults(func=_Run("best", "_cmd_best"))

    jobs = _command(commands, "jobs", "list jobs and their progress (database or service)")
    jobs.set_defaults(parser=jobs)  # contradictory options: jobs' usage errors
    jobs.add_argument(
        "--state",
        choices=["waiting", "running", "complete", "failed", "cancelled"],
        help="only jobs in this state",
    )
    jobs.add_argument(
        "--limit", type=_count, default=20, help="newest jobs shown, 1..2147483647 (default 20)"
    )
    jobs.add_argument(
        "--api-url", type=_service_url, help="ask the service instead of the database"
    )
    jobs.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    jobs.add_argument(
        "--watch",
        action="store_true",
        help="redraw the table until no job is waiting or running (Ctrl-C ends)",
    )
    jobs.add_argument(
        "--interval",
        type=_seconds(0.1, 3600),
        help=f"--watch's refresh, seconds, 0.1..3600 (default {DEFAULT_WATCH_INTERVAL_S:g}); "
        "only with --watch",
    )
    jobs.set_defaults(func=_Run("jobs", "_cmd_jobs"))

    _add_queue_commands(commands)

    keys = _command(
        commands, "keys", "the key signing champions: create the local pair if missing, show it"
    )
    keys.add_argument("--dir", type=_path_arg, help="default KERNEVO_KEY_DIR")
    keys.set_defaults(func=_Run("keys", "_cmd_keys"))
    lock = _command(
        commands, "lock", "pin the trusted champions of the loader's disk cache in a lock file"
    )
    lock.add_argument("-o", "--output", type=_path_arg, required=True, help="lock file to write")
    lock.add_argument("--cache-dir", type=_path_arg, help="default KERNEVO_CACHE_DIR")
    lock.set_defaults(func=_Run("lock", "_cmd_lock"))
    _add_token_commands(commands)
    from kernevo.bench_loader import add_arguments as bench_loader_arguments

    bench_loader = _command(
        commands,
        "bench-loader",
        "time a loaded kernel per call against its raw launch and cuBLAS (needs a GPU)",
    )
    bench_loader_arguments(bench_loader)
    bench_loader.set_defaults(func=_Run("bench_loader", "_cmd_bench_loader"))
    return parser


def _add_queue_commands(commands: Any) -> None:
    """The parsers of ``worker``, ``cancel`` and ``export``."""
    from evolver.worker_defaults import (
        DEFAULT_GRACE_S,
        DEFAULT_HEARTBEAT_S,
        DEFAULT_MAX_ATTEMPTS,
        DEFAULT_POLL_S,
        MIN_BEATS_PER_GRACE,
    )

    worker = _command(
        commands,
        "worker",
        "claim queued jobs and run them (one per GPU, or one on a Dask cluster)",
    )
    worker.set_defaults(parser=worker, func=_Run("queue", "_cmd_worker"))
    worker.add_argument(
        "--gpus",
        type=_gpu_list,
        help="this host's device indices, e.g. 0,1 (default KERNEVO_GPU or 0; not with "
        "--scheduler)",
    )
    worker.add_argument(
        "--compile-only",
        action="store_true",
        help="no GPU: run compile-only jobs, evaluations stop after compiling (CI)",
    )
    worker.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    worker.add_argument("--work-dir", type=_path_arg, help="default KERNEVO_WORK_DIR (./runs)")
    _add_cluster_arguments(worker, local=False)  # one slot; its jobs evaluate on the cluster
    for name, default, high, meaning in (
        ("heartbeat-s", DEFAULT_HEARTBEAT_S, 3600, "seconds between heartbeats"),
        (
            "grace-s",
            DEFAULT_GRACE_S,
            86400,
            "seconds without a heartbeat after which a job is requeued; at least "
            f"{MIN_BEATS_PER_GRACE} x --heartbeat-s, and a job is never requeued before "
            f"{MIN_BEATS_PER_GRACE} of its own process's heartbeats went missing",
        ),
        ("poll-s", DEFAULT_POLL_S, 3600, "seconds between looks at the queue"),
    ):
        worker.add_argument(
            f"--{name}",
            type=_seconds(0.1, high),
            default=default,
            help=f"{meaning}; 0.1..{high} (default {default:g})",
        )
    worker.add_argument(
        "--max-attempts",
        type=_int_in(1, 1000, "a number of attempts"),
        default=DEFAULT_MAX_ATTEMPTS,
        help="claims of a job whose workers died before it fails, 1..1000 (default "
        f"{DEFAULT_MAX_ATTEMPTS})",
    )

    dask_worker = _command(
        commands, "dask-worker", "a Dask worker of one GPU for jobs evaluating on a cluster"
    )
    dask_worker.set_defaults(parser=dask_worker, func=_Run("cluster", "_cmd_dask_worker"))
    dask_worker.add_argument("--scheduler", type=_scheduler, required=True, help="tcp://host:8786")
    dask_worker.add_argument(
        "--gpu",
        type=_job_int("gpu", "a device index"),
        help="device index (among CUDA_VISIBLE_DEVICES when set)",
    )
    dask_worker.add_argument(
        "--compile-only", action="store_true", help="no GPU: compile-only evaluations (key none)"
    )
    dask_worker.add_argument(
        "--gpu-key", type=_gpu_key_arg, help="refuse to start unless the device is of this key"
    )
    dask_worker.add_argument(
        "--name", type=_text("a worker name"), help="default <host>-gpu<I> (<host>-cpu-<pid>)"
    )

    cancel = _command(commands, "cancel", "cancel a job (queued or running)")
    cancel.set_defaults(parser=cancel)
    cancel.add_argument("job", type=_job_id, metavar="JOB", help="job id")
    cancel.add_argument(
        "--api-url", type=_service_url, help="cancel through the service (token needed)"
    )
    cancel.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    cancel.set_defaults(func=_Run("queue", "_cmd_cancel"))

    export = _command(
        commands, "export", "write a champion's source, cubin, signature and reports as files"
    )
    export.add_argument("--op", type=_op, default="trsm", help=OP_HELP)
    export.add_argument(
        "--dtype", type=_dtype, required=True, help="float32 | float64 | complex64 | complex128"
    )
    _add_gpu_arguments(export)
    export.add_argument("--path", type=_path_id, help="only this path's champion")
    export.add_argument("-o", "--output", type=_path_arg, required=True, help="folder to write")
    export.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    # parser: export's usage error, for a --path contradicting --op/--dtype.
    export.set_defaults(parser=export, func=_Run("export", "_cmd_export"))


def _add_token_commands(commands: Any) -> None:
    """``kernevo token create|list|revoke``."""
    token = _command(commands, "token", "the API's bearer tokens: create, list, revoke")
    # The metavar names the subcommands in "the following arguments are required: …", which
    # would otherwise name the internal dest.
    actions = token.add_subparsers(
        dest="token_command",
        required=True,
        parser_class=_Parser,
        metavar="{create,list,revoke}",
        title="subcommands",
    )
    create = _command(actions, "create", "a new token; its secret is printed once")
    create.add_argument(
        "--scope",
        choices=["read", "write"],
        required=True,
        help="read: sources, reports, lineage, jobs; write: also create and cancel jobs",
    )
    create.add_argument("--name", type=_text("a token name", 128), help="default: '<scope> token'")
    listing = _command(actions, "list", "the tokens (never their secrets)")
    listing.add_argument("--all", action="store_true", help="revoked tokens too")
    revoke = _command(actions, "revoke", "refuse a token from now on")
    revoke.add_argument("id", type=_int_in(1, 2**31 - 1, "a token id"), help="its id (token list)")
    for action in (create, listing, revoke):
        action.add_argument(
            "--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL"
        )
        action.set_defaults(func=_Run("token", "_cmd_token"))
