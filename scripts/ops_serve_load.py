"""Issue 8's serving check: the API and the loader serve solve_tri and band_bidiag (float32).

    python3 scripts/ops_serve_load.py --api http://127.0.0.1:8765 --cache DIR
        [--key-dir DIR] [--gpu-key nvidia-h200] [--ops solve_tri band_bidiag]

Against ``kernevo serve`` on the database of the ops' evolution jobs (champions promoted and
signed; ``--key-dir`` or ``KERNEVO_KEY_DIR`` the signing key folder), on a GPU. For each op:

1. ``GET /v1/kernels/best`` at the op's query shape: one line with the champion's path, shape
   bucket, program, score and its timing at the shape as the service returns them;
2. ``kernevo.load(op, "float32")``: ``explain()`` at the query shape, then the op's timed
   shapes run through the loader and checked against the float64 host reference as
   ``tests/test_ops_registered_gpu.py`` checks them (solve_tri: per-row error within
   4·γ_{n+2}·|A⁻¹|·|A|·|X|; band_bidiag: singular values within 4·max(n, 32)·ε, the band never
   written);
3. one shape outside every envelope: ``explain()``, and the fallback's result checked alike.

A shape is expected on the kernel when the service's champion for it has an envelope holding
it (a shape whose bucket has no champion, or that no path serves, is expected on the op's
fallback). Each shape is a markdown table row. Nothing is timed: correctness and routing only.
Exit 0 when every result passed its check and every shape went where expected, else 1 with the
reasons; an unreachable service or a query shape without a champion is one line, exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from pydantic import ValidationError

from api.schemas import KernelOut
from seeds import registry
from seeds.ops import get_op
from seeds.ops.spec import describe_envelope, serves

DTYPE = "float32"
OPS: tuple[str, ...] = ("solve_tri", "band_bidiag")
QUERY_SHAPES: dict[str, tuple[int, ...]] = {"solve_tri": (64, 6, 4, 2), "band_bidiag": (1024, 32)}
TIMED_SHAPES: dict[str, tuple[tuple[int, ...], ...]] = {
    "solve_tri": ((64, 6, 4, 2), (64, 64, 8, 32), (128, 32, 4, 2), (256, 128, 4, 2)),
    "band_bidiag": ((1024, 32), (4096, 32), (8192, 32)),
}
# Past every path's envelope: solve_tri's n <= 256; band_bidiag's bandwidth <= 128 (at n = 2048
# the host reference takes seconds, where tests' (4096, 1024) would take minutes).
OUTSIDE_SHAPES: dict[str, tuple[int, ...]] = {
    "solve_tri": (300, 6, 4, 2),
    "band_bidiag": (2048, 160),
}
# The inputs' seeds of tests/test_ops_registered_gpu.py.
SOLVE_TRI_SEED = 3
BAND_SEED = 5
REQUEST_TIMEOUT_S = 30.0


class ScriptError(Exception):
    """A failure that ends the script with its one-line message (exit 1)."""


class NoChampionError(ScriptError):
    """The service has no champion for the shape asked (404)."""


@dataclass(frozen=True)
class Expected:
    """Where a shape should go: ``route`` ("kernel" or the op's fallback route), ``program``
    (the service's champion for a kernel route, else ``None``) and ``why`` in words."""

    route: str
    program: int | None
    why: str


@dataclass(frozen=True)
class Outcome:
    """A shape run through the loader: ``route`` the call took ("kernel" or the fallback's),
    ``program`` the champion it launched (``None`` on the fallback), ``passed`` whether the
    result passed the op's check, ``measure`` the error against its bound (or the failure)."""

    route: str
    program: int | None
    passed: bool
    measure: str


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (module docstring); argparse exits 2 on a usage error."""
    parser = argparse.ArgumentParser(
        description="issue 8: the API and kernevo.load serving solve_tri and band_bidiag"
    )
    parser.add_argument("--api", required=True, help="service URL, e.g. http://127.0.0.1:8765")
    parser.add_argument("--cache", required=True, help="the loader's disk-cache folder")
    parser.add_argument("--key-dir", default=None, help="key folder (default KERNEVO_KEY_DIR)")
    parser.add_argument("--gpu-key", default="nvidia-h200", help="GPU key asked of the service")
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    return parser.parse_args(argv)


def best_kernel(api: str, op: str, gpu_key: str, shape: Sequence[int]) -> KernelOut:
    """The service's champion for ``op`` in float32 at ``shape`` (``GET /v1/kernels/best`` with
    the op's shape parameters by name).

    Raises:
        NoChampionError: 404, with the service's detail.
        ScriptError: the service is unreachable, answers another status, or not a kernel.
    """
    url = f"{api.rstrip('/')}/v1/kernels/best"
    params = {"op": op, "dtype": DTYPE, "gpu": gpu_key}
    params.update(zip(get_op(op).param_names, map(str, shape), strict=True))
    try:
        response = httpx.get(url, params=params, timeout=REQUEST_TIMEOUT_S)
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        raise ScriptError(
            f"service at {api} unreachable: {type(error).__name__}: {error}"
        ) from None
    if response.status_code == 404:
        where = get_op(op).assignments(shape)
        raise NoChampionError(f"no champion for {op} {DTYPE} at {where}: {_detail(response)}")
    if response.status_code != 200:
        raise ScriptError(f"{response.status_code} from {url}: {_detail(response)}")
    try:
        return KernelOut.model_validate(response.json())
    except (ValueError, ValidationError) as error:
        first = str(error).splitlines()[0]
        raise ScriptError(f"malformed answer from {url}: {first}") from None


def _detail(response: httpx.Response) -> str:
    """The ``detail`` of a kernevo error body, else the body's start."""
    try:
        return str(response.json()["detail"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def champion_line(op: str, shape: Sequence[int], kernel: KernelOut) -> str:
    """One line: the champion answering ``op`` at ``shape``, its score and its timing at the
    shape as the service returned them (baseline / candidate = speedup)."""
    spec = get_op(op)
    score = kernel.metrics.get("combined_score", kernel.metrics.get("score"))
    timed = "not timed at this shape"
    for timing in kernel.metrics.get("timings") or []:
        if isinstance(timing, dict) and list(timing.get("shape") or []) == list(shape):
            cand, base = timing.get("candidate_us"), timing.get("baseline_us")
            numbers = isinstance(cand, float | int) and isinstance(base, float | int) and cand > 0
            speedup = f"{base / cand:.2f}x" if numbers else "speedup n/a"
            timed = f"{_number(cand)} us vs baseline {_number(base)} us ({speedup})"
    return (
        f"{op} {DTYPE} {spec.assignments(shape)}: path {kernel.path}/{kernel.shape_bucket}, "
        f"program {kernel.program_id}, score {_number(score)}, {timed}; envelope "
        f"{describe_envelope(kernel.envelope.model_dump(), spec.param_names)}"
    )


def _number(value: object) -> str:
    """A number of the service's metrics to 4 significant digits, anything else as it is."""
    return f"{value:.4g}" if isinstance(value, float | int) else str(value)


def expected_route(api: str, op: str, gpu_key: str, shape: Sequence[int]) -> Expected:
    """Where ``shape`` should go: the kernel when the service's champion for it holds it in its
    envelope, else the op's fallback (with why).

    Raises:
        ScriptError: as :func:`best_kernel`, but for a 404 (expected: the fallback).
    """
    spec = get_op(op)
    if not registry.route(op, DTYPE, *shape):
        return Expected(spec.fallback_route, None, "no path serves it")
    try:
        kernel = best_kernel(api, op, gpu_key, shape)
    except NoChampionError:
        return Expected(spec.fallback_route, None, "no champion for its shape bucket")
    if not serves(kernel.envelope.model_dump(), spec.param_names, shape):
        return Expected(
            spec.fallback_route, None, f"outside program {kernel.program_id}'s envelope"
        )
    return Expected("kernel", kernel.program_id, f"program {kernel.program_id}")


def _taken(
    solver: Any, shape: tuple[int, ...], operands: tuple[Any, ...]
) -> tuple[str, int | None]:
    """The route the solver's call on ``operands`` (of ``shape``) took, and the champion it
    launched (``None`` on the fallback)."""
    if not solver.runs_kernel(*operands):
        return get_op(solver.op).fallback_route, None
    return "kernel", getattr(solver.explain(*shape).champion, "program_id", None)


def run_solve_tri(solver: Any, shape: tuple[int, ...]) -> Outcome:
    """``solver(a, b)`` on ``seeds.solve_tri.inputs.draw_matrices(shape, 3)`` (A's strict upper
    triangle NaN), checked in place against ``reference.forward_substitution``: every row's
    relative error within ``row_error_bounds`` (float32 unit roundoff, the growth term)."""
    import cupy

    from seeds.solve_tri.inputs import draw_matrices
    from seeds.solve_tri.reference import reference, row_error_bounds, row_relative_errors

    a_host, b_host = draw_matrices(shape, SOLVE_TRI_SEED)
    a, b = cupy.asarray(a_host), cupy.asarray(b_host)
    x = solver(a, b)
    route, program = _taken(solver, shape, (a, b))
    if x is not b:
        return Outcome(route, program, False, "X not written in place in b")
    x_ref, growth = reference(a_host, b_host)
    errors = row_relative_errors(cupy.asnumpy(x), x_ref)
    bounds = row_error_bounds(shape[0], x_ref, growth)
    ratios = np.where(np.isnan(errors), np.inf, errors / bounds)
    worst = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
    measure = (
        f"{ratios[worst]:.3g} x bound (row error {errors[worst]:.2e}, bound {bounds[worst]:.2e})"
    )
    return Outcome(route, program, bool((errors <= bounds).all()), measure)


def run_band_bidiag(solver: Any, shape: tuple[int, ...]) -> Outcome:
    """``solver(band)`` on ``seeds.band_bidiag.inputs.random_band`` (seed 5, Fortran order),
    checked by ``reference.check_bidiagonal`` (singular values within 4·max(n, 32)·ε of
    DGBBRD + DBDSQR in float64), the band unchanged."""
    import cupy

    from seeds.band_bidiag.inputs import random_band
    from seeds.band_bidiag.reference import (
        bidiagonal_singular_values,
        bound,
        check_bidiagonal,
        reference_singular_values,
        singular_value_error,
    )

    n, bandwidth = shape
    band = random_band(n, bandwidth, np.float32, np.random.default_rng(BAND_SEED))
    device_band = cupy.asfortranarray(cupy.asarray(band))
    d, e = solver(device_band)
    route, program = _taken(solver, shape, (device_band,))
    if not cupy.array_equal(device_band, cupy.asarray(band)):
        return Outcome(route, program, False, "the band was written")
    d_host, e_host = cupy.asnumpy(d), cupy.asnumpy(e)
    sigma = reference_singular_values(band)
    failure = check_bidiagonal(band, d_host, e_host, sigma=sigma)
    if failure is not None:
        return Outcome(route, program, False, f"{failure.check}: {failure.detail}")
    error, _ = singular_value_error(bidiagonal_singular_values(d_host, e_host), sigma)
    limit = bound(n, band.dtype)
    return Outcome(route, program, True, f"{error / limit:.3g} x bound ({error:.2e}, {limit:.2e})")


RUNS = {"solve_tri": run_solve_tri, "band_bidiag": run_band_bidiag}


def check_shape(
    solver: Any, op: str, shape: tuple[int, ...], expected: Expected, failures: list[str]
) -> str:
    """Run ``shape`` through the solver, append any failure to ``failures`` and return its
    markdown row (op, shape, expected, route, error vs bound, ok)."""
    outcome = RUNS[op](solver, shape)
    problems = [] if outcome.passed else [outcome.measure]
    if outcome.route != expected.route:
        problems.append(f"routed to {outcome.route}, expected {expected.route}")
    elif expected.program is not None and outcome.program != expected.program:
        problems.append(f"ran program {outcome.program}, the service's is {expected.program}")
    failures += [f"{op} {shape}: {problem}" for problem in problems]
    route = outcome.route if outcome.program is None else f"kernel (program {outcome.program})"
    return (
        f"| {op} | {shape} | {expected.route} ({expected.why}) | {route} | {outcome.measure} "
        f"| {'FAIL' if problems else 'ok'} |"
    )


def serve_op(args: argparse.Namespace, op: str, failures: list[str]) -> list[str]:
    """Steps 1–3 of the module docstring for ``op``: prints the champion line and the
    ``explain()`` decisions, returns the table rows, appends failures to ``failures``.

    Raises:
        ScriptError: the service is unreachable, the query shape has no champion, or the
            loader cannot start (no GPU, a bad setting, a missing module).
    """
    query = QUERY_SHAPES[op]
    kernel = best_kernel(args.api, op, args.gpu_key, query)
    print(champion_line(op, query, kernel))
    expectations = {
        shape: expected_route(args.api, op, args.gpu_key, shape)
        for shape in (*TIMED_SHAPES[op], OUTSIDE_SHAPES[op])
    }
    if expectations[OUTSIDE_SHAPES[op]].route == "kernel":  # the registry changed: pick another
        failures.append(f"{op} {OUTSIDE_SHAPES[op]} is inside an envelope")
    try:
        import kernevo

        solver = kernevo.load(
            op, DTYPE, api_url=args.api, cache_dir=args.cache, key_dir=args.key_dir
        )
    except (ValueError, RuntimeError, ModuleNotFoundError) as error:
        raise ScriptError(f"kernevo.load({op!r}, {DTYPE!r}): {error}") from None
    print(f"explain{query}:\n{solver.explain(*query)}")
    rows = [
        check_shape(solver, op, shape, expectations[shape], failures) for shape in TIMED_SHAPES[op]
    ]
    outside = OUTSIDE_SHAPES[op]
    print(f"explain{outside} (outside the envelope):\n{solver.explain(*outside)}")
    rows.append(check_shape(solver, op, outside, expectations[outside], failures))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks of the ops ``--ops``; 0 when all passed, else 1 (module docstring)."""
    args = parse_args(argv)
    failures: list[str] = []
    rows: list[str] = []
    try:
        for op in args.ops:
            rows += serve_op(args, op, failures)
    except ScriptError as error:
        print(f"ops_serve_load: {error}", file=sys.stderr)
        return 1
    print("\n| op | shape | expected | route | error vs bound | ok |\n|---|---|---|---|---|---|")
    print("\n".join(rows))
    for failure in failures:
        print(f"FAIL {failure}")
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
