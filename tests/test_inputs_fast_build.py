"""The row-block builders of ``evaluator.inputs.make_problem`` and
``evaluator.checks.replay.audit_partner`` give, byte for byte, the arrays of the straightforward
whole-matrix code they replaced (kept below as the reference): a recorded seed must keep
reproducing its inputs. Compared as bytes (signed zeros, NaN payloads), with dtype, shape and
memory order, for every kind and dtype."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evaluator import inputs
from evaluator.checks.replay import audit_partner
from evaluator.inputs import (
    GRADED_DECADES,
    KINDS,
    NUMPY_DTYPES,
    TRAP_ROW_EXPONENTS,
    Problem,
    make_problem,
)

DTYPES = tuple(NUMPY_DTYPES)
SHAPES = [(1, 1), (2, 3), (33, 2), (64, 8), (129, 64), (300, 17), (1100, 5)]
SEEDS = [1, 2**31 - 1, 98765]
# The partner's seed mix of evaluator.checks.replay, as the reference audit_partner used it.
_PARTNER_SEED_MIX = 0x5A5A_5A5A
_KIND_STREAM = {"bounded": 0, "growth": 1, "trap": 2, "ill_conditioned": 3, "graded": 4}


def _reference_uniform(rng: Any, shape: tuple[int, ...], complex_: bool) -> Any:
    if complex_:
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)) / np.sqrt(2)
    return rng.uniform(-1, 1, shape)


def _reference_ldexp(x: np.ndarray, exponent: Any) -> np.ndarray:
    if np.iscomplexobj(x):
        return np.ldexp(x.real, exponent) + 1j * np.ldexp(x.imag, exponent)
    return np.ldexp(x, exponent)


def _reference_make_problem(
    m: int, n: int, dtype: str, seed: int, kind: str = "bounded"
) -> Problem:
    """``evaluator.inputs.make_problem`` as it was before the row-block build."""
    np_dtype = NUMPY_DTYPES[dtype]
    complex_ = np.issubdtype(np_dtype, np.complexfloating)
    rng = np.random.default_rng([seed, m, n, _KIND_STREAM[kind]])
    scale = inputs._off_diagonal_scale(kind, m)
    a = np.tril(_reference_uniform(rng, (m, m), complex_) * scale, -1)
    magnitude = rng.uniform(0.5, 1.0, m) if kind == "growth" else rng.uniform(1.0, 2.0, m)
    phase = np.exp(2j * np.pi * rng.uniform(0, 1, m)) if complex_ else rng.choice([-1.0, 1.0], m)
    a[np.diag_indices(m)] = magnitude * phase
    a[np.triu_indices(m, 1)] = np.nan
    b = _reference_uniform(rng, (m, n), complex_)
    if kind == "trap":
        low, high = TRAP_ROW_EXPONENTS[dtype]
        rows = rng.permutation(np.resize([low, 0, high], m))[:, None]
        a, b = _reference_ldexp(a, rows), _reference_ldexp(b, rows)
    if kind == "graded":
        a = a * 10.0 ** -rng.uniform(0, GRADED_DECADES[dtype], m)[:, None]
    return Problem(np.asfortranarray(a, np_dtype), np.asfortranarray(b, np_dtype), kind, seed)


def _reference_audit_partner(problem: Problem) -> Problem:
    """``evaluator.checks.replay.audit_partner`` as it was, on the reference builder."""
    m, n = problem.shape
    seed = problem.seed ^ _PARTNER_SEED_MIX
    fresh = _reference_make_problem(m, n, problem.b.dtype.name, seed, problem.kind)
    a = problem.a.copy(order="F")
    lower = np.tril_indices(m, -1)
    a[lower] = fresh.a[lower]
    b = problem.b.copy(order="F")
    b[1 : m - 1] = fresh.b[1 : m - 1]
    return Problem(a, b, "audit_pair", seed)


def _assert_same_bytes(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, where
    assert got.flags.f_contiguous and want.flags.f_contiguous, where
    assert got.flags.c_contiguous == want.flags.c_contiguous, where
    got_bytes, want_bytes = got.tobytes(order="F"), want.tobytes(order="F")
    if got_bytes != want_bytes:
        differ = np.frombuffer(got_bytes, np.uint8) != np.frombuffer(want_bytes, np.uint8)
        raise AssertionError(f"{where}: {int(differ.sum())} bytes differ")


def _assert_same_problem(got: Problem, want: Problem, where: str) -> None:
    _assert_same_bytes(got.a, want.a, f"{where}, A")
    _assert_same_bytes(got.b, want.b, f"{where}, B")
    assert (got.kind, got.seed) == (want.kind, want.seed), where


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_make_problem_keeps_every_byte(shape, kind, dtype):
    m, n = shape
    for seed in SEEDS:
        where = f"make_problem({m}, {n}, {dtype}, {seed}, {kind})"
        _assert_same_problem(
            make_problem(m, n, dtype, seed, kind),
            _reference_make_problem(m, n, dtype, seed, kind),
            where,
        )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(2, 3), (33, 2), (129, 64), (1100, 5)], ids=str)
def test_audit_partner_keeps_every_byte(shape, kind, dtype):
    m, n = shape
    for seed in SEEDS:
        problem = make_problem(m, n, dtype, seed, kind)
        _assert_same_problem(
            audit_partner(problem),
            _reference_audit_partner(problem),
            f"audit_partner of ({m}, {n}, {dtype}, {seed}, {kind})",
        )


@pytest.mark.parametrize("block_bytes", [1, 3584])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_make_problem_keeps_every_byte_across_block_edges(monkeypatch, block_bytes, kind, dtype):
    """Blocks of one row, and of 7 rows (float) or 3 (complex) at m = 64: every block edge
    falls inside A, at the diagonal and the NaN triangle, as it does at large m."""
    monkeypatch.setattr(inputs, "_BLOCK_BYTES", block_bytes)
    for m, n in [(2, 3), (33, 2), (64, 8)]:
        for seed in SEEDS:
            _assert_same_problem(
                make_problem(m, n, dtype, seed, kind),
                _reference_make_problem(m, n, dtype, seed, kind),
                f"make_problem({m}, {n}, {dtype}, {seed}, {kind}), {block_bytes}-byte blocks",
            )
