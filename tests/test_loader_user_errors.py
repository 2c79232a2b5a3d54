"""What a fresh user got wrong and the loader answered badly (CPU; the GPU identity faked, the
service a fake fetcher that records each question): a bare string for ``trusted_keys``, key and
lock file errors that neither named their variable nor kept the value as written, shapes that
were not checked, an unreadable ``print(explain())``, and a loader trusting no key that still
asked the service per bucket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_loader_negative_cache import NONE
from test_loader_resolver import GPU

import kernevo
import kernevo.client
import kernevo.solver
from kernevo.decision import Compared, Decision
from kernevo.keys import KeyFileError
from kernevo.lockfile import LockFileError
from kernevo.paths import ops
from kernevo.trust import Refusal


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """A loader environment of its own (cache, key folder, no trusted key configured) whose
    service answers 404 to every question, recorded here as ``(path, *shape)``."""
    questions: list[tuple[Any, ...]] = []

    def fake_fetcher(url: str, **kwargs: Any) -> Any:
        def fetch(key: Any, *shape: Any) -> Any:
            questions.append((key.path, *shape))
            return NONE

        return fetch

    monkeypatch.setattr(kernevo.client, "service_fetcher", fake_fetcher)
    monkeypatch.setattr(kernevo.solver, "current_gpu", lambda: GPU)
    monkeypatch.setenv("KERNEVO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("KERNEVO_API_URL", "http://127.0.0.1:9")
    return questions


# --- 4: trusted_keys as one string ------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "/etc/kernevo/service.pub"])
def test_a_bare_string_of_trusted_keys_is_refused(asked: list[Any], value: str) -> None:
    """Check: ``kernevo.load`` refuses a ``str`` before ``tuple()`` reads it letter by letter."""
    with pytest.raises(ValueError) as caught:
        kernevo.load("trsm", "float64", trusted_keys=value)
    message = str(caught.value)
    assert message.startswith(f"trusted_keys={value!r}: a list of keys")
    assert f"pass [{value!r}]" in message and "\n" not in message
    assert "trusted key a:" not in message


# --- 5: key and lock file errors name the variable and the value as written -------------------


def test_a_trusted_key_that_cannot_be_read_names_the_variable_and_keeps_the_url(
    asked: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check: ``policy_from_settings`` names ``KERNEVO_TRUSTED_KEYS``; ``keys.trusted_keys``
    quotes the entry as given (no ``Path`` round trip folding ``//``)."""
    monkeypatch.setenv("KERNEVO_TRUSTED_KEYS", "http://127.0.0.1:9")
    with pytest.raises(KeyFileError) as caught:
        kernevo.load("trsm", "float64")
    message = str(caught.value)
    assert message.startswith("KERNEVO_TRUSTED_KEYS: trusted key http://127.0.0.1:9: ")
    assert message.endswith("(No such file or directory)") and "\n" not in message

    monkeypatch.delenv("KERNEVO_TRUSTED_KEYS")
    with pytest.raises(KeyFileError, match=r"^trusted_keys argument: trusted key abc: "):
        kernevo.load("trsm", "float64", trusted_keys=["abc"])


def test_a_lock_file_that_cannot_be_read_names_the_variable_and_keeps_the_value(
    asked: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check: ``policy_from_settings`` names ``KERNEVO_LOCK_FILE`` (or the argument) and
    passes the value as written to ``LockFile.load(given=)``."""
    monkeypatch.setenv("KERNEVO_LOCK_FILE", "abc")
    with pytest.raises(LockFileError) as caught:
        kernevo.load("trsm", "float64")
    assert str(caught.value) == (
        "KERNEVO_LOCK_FILE: lock file abc: cannot read (No such file or directory)"
    )
    monkeypatch.delenv("KERNEVO_LOCK_FILE")
    with pytest.raises(LockFileError) as caught:
        kernevo.load("trsm", "float64", lock_file="./pins//kernevo.lock")
    assert str(caught.value).startswith("lock_file argument: lock file ./pins//kernevo.lock: ")


# --- 6: shapes are checked --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "says"),
    [
        ((-1, 5), "shape (-1, 5): m=-1 is out of range: trsm takes 1 <= m <= 2147483647"),
        ((0, 0), "shape (0, 0): m=0 is out of range: trsm takes 1 <= m <= 2147483647"),
        (("a", "b"), "shape ('a', 'b'): m='a' is not an integer"),
        ((64.0, 64), "shape (64.0, 64): m=64.0 is not an integer"),
        ((True, 64), "shape (True, 64): m=True is not an integer"),
        ((64,), "shape (64,): trsm takes 2 shape values (m, n); got 1"),
        ((2**40, 8), "shape (1099511627776, 8): m=1099511627776 is out of range"),
    ],
)
def test_explain_refuses_what_is_not_a_shape(
    asked: list[Any], shape: tuple[Any, ...], says: str
) -> None:
    """Check: ``kernevo.solver.checked_shape`` (``OpSolver.explain``), before the resolver: no
    question reaches the service (``m=64.0`` was sent as is)."""
    solver = kernevo.load("trsm", "float64")
    with pytest.raises(ops.ShapeError) as caught:
        solver.explain(*shape)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value).startswith(says) and "\n" not in str(caught.value)
    assert asked == []


def test_explain_takes_numpy_integers_as_ints(asked: list[Any]) -> None:
    solver = kernevo.load("trsm", "float64")
    decision = solver.explain(np.int64(64), np.int32(64))
    assert decision.shape == (64, 64) and all(type(v) is int for v in decision.shape)
    assert decision is solver.explain(64, 64)


def test_a_band_of_bandwidth_zero_is_still_a_problem() -> None:
    assert kernevo.solver.checked_shape(ops.get_op("band_bidiag"), (10, 0)) == (10, 0)


def test_a_solver_called_without_its_arrays_names_them(asked: list[Any]) -> None:
    """Check: ``OpSolver._check_count`` (the call adapter's ``TypeError`` named
    ``TrsmCall.shape``)."""
    solver = kernevo.load("trsm", "float64")
    with pytest.raises(TypeError) as caught:
        solver()
    assert str(caught.value) == "the trsm solver takes 2 arrays (a, b); got 0"


# --- 7: print(explain()) ----------------------------------------------------------------------


def test_a_decision_prints_readably_and_keeps_its_repr() -> None:
    """Check: ``Decision.__str__``; ``repr`` stays the dataclass's."""
    compared = (
        Compared("trsm_small", "m64n64", "kernel", "champion program 17 from service", 17, 1.5,
                 3.2, chosen=True),
        Compared("trsm_small_z64", "m64eq_n64", "cublas", "no champion on service"),
    )  # fmt: skip
    decision = Decision(
        (64, 64),
        "cublas",
        "no serving path's champion can run: …",
        compared=compared,
        refusals=(Refusal("unsigned", "unsigned", "service"),),
        fallback="cuBLAS ?trsm (through CuPy)",
    )
    assert str(decision).splitlines() == [
        "shape (64, 64): cuBLAS ?trsm (through CuPy)",
        "  reason: no serving path's champion can run: …",
        "  compared: trsm_small/m64n64 program 17 score 1.5 3.2 us at the shape (chosen)",
        "  compared: trsm_small_z64/m64eq_n64: no champion on service",
        "  refused: unsigned (service): unsigned",
    ]
    assert repr(decision).startswith("Decision(shape=(64, 64), route='cublas', reason=")


def test_print_explain_of_a_loaded_solver_is_a_few_lines(
    asked: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_TRUST_LOCAL_KEY", "false")
    text = str(kernevo.load("trsm", "float64").explain(64, 64))
    assert text.splitlines()[0] == "shape (64, 64): cuBLAS ?trsm (through CuPy)"
    assert text.splitlines()[1].startswith("  reason: no trusted key configured (")


# --- 8: no trusted key at all -----------------------------------------------------------------


def test_with_no_trusted_key_nothing_is_asked_and_the_reason_says_how(
    asked: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check: ``Resolver._decide`` on an empty ``TrustPolicy.keys`` (``KERNEVO_TRUST_LOCAL_KEY
    =false``, no ``KERNEVO_TRUSTED_KEYS``): cuBLAS up front, no question to the service."""
    monkeypatch.setenv("KERNEVO_TRUST_LOCAL_KEY", "false")
    solver = kernevo.load("trsm", "complex128")
    for shape in [(64, 64), (16, 16), (33, 7)]:
        decision = solver.explain(*shape)
        assert decision.route == "cublas"
        assert decision.reason.startswith(
            "no trusted key configured (set KERNEVO_TRUSTED_KEYS); KERNEVO_TRUSTED_KEYS takes "
            "the public keys that sign your champions"
        )
        assert decision.reason.endswith(
            "; the local key is not trusted while KERNEVO_TRUST_LOCAL_KEY=false"
        )
        assert [r.check for r in decision.refusals] == ["no_trusted_key"]
    assert asked == []
