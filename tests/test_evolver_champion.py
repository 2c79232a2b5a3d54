"""Champion promotion (no GPU needed): it skips a kernel that already is the champion, and
signs every champion it stores so that a loader trusting the key accepts it."""

from __future__ import annotations

import base64
import hashlib
import stat
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

import evaluator.champion
import evaluator.compile
from db.models import Champion, ChampionPromotion, Evaluation, Program
from db.session import make_engine
from evaluator.report import RivalTiming
from evolver.champion import promote_best
from kernevo.client import ChampionKey, parse_champion
from kernevo.keys import PRIVATE_KEY_FILE, KeyFileError, generate_key_pair, load_signing_key
from kernevo.settings import LoaderSettings
from kernevo.trust import policy_from_settings
from seeds.registry import get_path


def test_the_champions_own_kernel_is_not_verified_again(seeded, fresh_database_url, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("verify_champion ran for the champion's own kernel")

    monkeypatch.setattr(evaluator.champion, "verify_champion", must_not_run)
    engine = make_engine(fresh_database_url)
    with engine.connect() as conn:
        uid = conn.scalar(select(Program.uid).where(Program.id == seeded.grandchild_id))
    outcome = promote_best(
        engine,
        spec=get_path("trsm_small"),
        dtype="float64",
        gpu_index=0,
        gpu_key="nvidia-h200",
        uid=uid,
        source=seeded.grandchild_source,
    )
    assert not outcome.promoted and "champion's kernel" in outcome.reason
    engine.dispose()


# --- signing at promotion ---------------------------------------------------------------------

CHILD_CUBIN = b"\x7fELF the child's verified cubin"


def _against_champion(speedup: float, low: float, high: float) -> list[RivalTiming]:
    """The candidate timed against the champion in the same rounds, one timed shape."""
    faster = low > 1.02
    return [RivalTiming("champion", 64, 64, 8.0 * speedup, 8.0, speedup, low, high, 0.02, faster)]


def _verified_report(source, path_id, dtype, gpu_index, rival_cubin=None):
    """What evaluator.champion.verify_champion returns for a kernel that passed everything,
    clearly faster than the champion when there is one to time it against."""
    from evaluator.champion import ChampionReport
    from evaluator.report import CompileInfo, GpuInfo

    return ChampionReport(
        rival_timings=_against_champion(1.5, 1.4, 1.6) if rival_cubin is not None else [],
        path_id=path_id,
        dtype=dtype,
        status="ok",
        stage="champion",
        combined_score=3.0,
        compile=CompileInfo(
            ok=True,
            log="",
            options=("-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"),
            arch="sm_90",
            nvrtc_version="13.0",
            seconds=0.04,
            cubin_sha256=hashlib.sha256(CHILD_CUBIN).hexdigest(),
        ),
        gpu=GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "580.65", "13.0"),
        verified_shapes=[(1, 1), (33, 7), (64, 64)],
        champion_checks=["held_out_shapes", "determinism", "sanitizer_memcheck"],
        sanitizer_shapes={"memcheck": [(33, 31), (64, 64)]},
        nvidia_driver_version="580.65.06",
    )


def _compiled(source, options, arch):
    return SimpleNamespace(ok=True, cubin=CHILD_CUBIN, log="")


def _promote_child(engine, seeded, **options):
    """promote_best on the seeded child (trsm_small float64 on nvidia-h200), ``options`` its
    keyword arguments beyond those."""
    with engine.connect() as conn:
        uid = conn.scalar(select(Program.uid).where(Program.id == seeded.child_id))
        source = conn.scalar(select(Program.source).where(Program.id == seeded.child_id))
    return promote_best(
        engine,
        spec=get_path("trsm_small"),
        dtype="float64",
        gpu_index=0,
        gpu_key="nvidia-h200",
        uid=uid,
        source=source,
        **options,
    )


@pytest.fixture
def verified_child(monkeypatch, tmp_path):
    """verify_champion and compile_cubin faked (no GPU), signing settings under tmp_path."""
    monkeypatch.setattr(evaluator.champion, "verify_champion", _verified_report)
    monkeypatch.setattr(evaluator.compile, "compile_cubin", _compiled)
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.delenv("KERNEVO_SIGNING_KEY", raising=False)


def test_promotion_signs_with_the_local_key_and_the_loader_accepts_it(
    seeded, fresh_database_url, api_client, verified_child, tmp_path
):
    engine = make_engine(fresh_database_url)
    outcome = _promote_child(engine, seeded)
    assert outcome.promoted, outcome.reason

    keys = tmp_path / "keys"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert stat.S_IMODE((keys / PRIVATE_KEY_FILE).stat().st_mode) == 0o600
    local_id = load_signing_key(keys / PRIVATE_KEY_FILE).key_id
    with engine.connect() as conn:
        history = conn.execute(select(ChampionPromotion.signing_key_id)).scalars().all()
    assert history[-1] == local_id
    engine.dispose()

    response = api_client.get(
        "/v1/kernels/best",
        params={"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": 64, "n": 64},
    )
    body = response.json()
    assert body["program_id"] == seeded.child_id and body["signing_key_id"] == local_id
    key = ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64")
    fetched = parse_champion(body, key)
    assert fetched.status == "ok" and fetched.champion is not None
    # A loader on this machine trusts the local key with nothing configured.
    policy = policy_from_settings(LoaderSettings(key_dir=keys))
    assert policy.check(fetched.champion) is None
    # ...and a loader trusting another key refuses it.
    other = policy_from_settings(
        LoaderSettings(key_dir=tmp_path / "elsewhere", trust_local_key=False)
    )
    refusal = other.check(fetched.champion)
    assert refusal is not None and refusal.check == "no_trusted_key"


def test_promotion_signs_with_the_configured_key(
    seeded, fresh_database_url, verified_child, monkeypatch, tmp_path
):
    configured = generate_key_pair(tmp_path / "ci-keys")
    monkeypatch.setenv("KERNEVO_SIGNING_KEY", str(tmp_path / "ci-keys" / PRIVATE_KEY_FILE))
    engine = make_engine(fresh_database_url)

    assert _promote_child(engine, seeded).promoted
    with engine.connect() as conn:
        row = conn.execute(select(Champion.signature, Champion.signing_key_id)).one()
    engine.dispose()

    assert row.signing_key_id == configured.key_id
    assert not (tmp_path / "keys").exists()  # no local pair made when a key is configured
    assert len(base64.b64decode(row.signature)) == 64


def test_the_signing_key_comes_from_the_settings_given_not_the_environment(monkeypatch, tmp_path):
    """A job started with ``EvolverSettings(key_dir=...)`` signs with that folder's pair even
    when the environment names another (the GPU test of a short solve_tri job found promotion
    reading the environment: its loader, trusting the job's folder, refused the champion)."""
    from evolver.champion import configured_signing_key
    from evolver.settings import EvolverSettings

    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "environment"))
    mine = configured_signing_key(EvolverSettings(key_dir=tmp_path / "mine"))
    assert mine.key_id == load_signing_key(tmp_path / "mine" / PRIVATE_KEY_FILE).key_id
    assert not (tmp_path / "environment").exists()
    configured = generate_key_pair(tmp_path / "ci-keys")
    chosen = configured_signing_key(
        EvolverSettings(key_dir=tmp_path / "mine", signing_key=configured.path)
    )
    assert chosen.key_id == configured.key_id  # a configured key wins over the local pair
    # Without settings, the environment's folder, as before.
    assert configured_signing_key().key_id != mine.key_id
    assert (tmp_path / "environment" / PRIVATE_KEY_FILE).exists()


def test_an_unusable_signing_key_stops_promotion_before_verification(
    seeded, fresh_database_url, verified_child, monkeypatch, tmp_path
):
    def must_not_run(*args, **kwargs):
        raise AssertionError("verification ran although the signing key is unusable")

    monkeypatch.setattr(evaluator.champion, "verify_champion", must_not_run)
    (tmp_path / "bad.pem").write_text("not a key")
    monkeypatch.setenv("KERNEVO_SIGNING_KEY", str(tmp_path / "bad.pem"))
    engine = make_engine(fresh_database_url)

    with pytest.raises(KeyFileError, match="not an unencrypted PEM key"):
        _promote_child(engine, seeded)
    with engine.connect() as conn:
        champion_program = conn.scalar(select(Champion.program_id))
    engine.dispose()
    assert champion_program == seeded.grandchild_id  # unchanged


@pytest.mark.parametrize(
    ("speedup", "low", "high"),
    [(1.0, 0.99, 1.01), (1.03, 1.01, 1.05), (0.8, 0.78, 0.82)],
    ids=["same", "within-noise", "slower"],
)
def test_a_candidate_not_faster_than_the_champion_beyond_noise_is_not_promoted(
    seeded, fresh_database_url, verified_child, monkeypatch, speedup, low, high
):
    """Timed against the champion in the same rounds (issue 6: two evaluations of one kernel
    differ by 7 %), a candidate whose speedup interval does not clear the noise floor (0.02)
    keeps the champion, whatever its own score says (3.0 here, above the champion's)."""
    seen: list[bytes | None] = []

    def report(source, path_id, dtype, gpu_index, rival_cubin=None):
        seen.append(rival_cubin)
        made = _verified_report(source, path_id, dtype, gpu_index)
        made.rival_timings = _against_champion(speedup, low, high)
        return made

    monkeypatch.setattr(evaluator.champion, "verify_champion", report)
    engine = make_engine(fresh_database_url)
    outcome = _promote_child(engine, seeded)
    with engine.connect() as conn:
        champion = conn.execute(select(Champion.program_id, Champion.cubin)).one()
    engine.dispose()

    assert not outcome.promoted
    assert outcome.reason.startswith("champion kept: beats_champion: not faster than the champion")
    assert champion.program_id == seeded.grandchild_id  # unchanged
    assert seen == [bytes(champion.cubin)]  # the champion's own cubin was the rival


# --- a stop that cuts the verification ----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "stopping", "recorded"),
    [
        ("fault", True, False),  # the GPU worker died with the job's SIGTERM: not the kernel's
        ("timeout", True, False),
        ("fault", False, True),  # no stop: the kernel's fault, recorded against it
        ("wrong", True, True),  # a wrong answer is the kernel's, stop or not
    ],
    ids=["fault-stopping", "timeout-stopping", "fault-running", "wrong-stopping"],
)
def test_a_verification_cut_by_the_jobs_stop_is_not_recorded_against_the_kernel(
    seeded, fresh_database_url, verified_child, monkeypatch, status, stopping, recorded
):
    """RESULTS section 21: call 1's SIGTERM reached the GPU worker of a champion verification
    ('GPU worker died: [Errno 32] Broken pipe') and a fault row was left on the program."""
    from evaluator.report import CheckFailure

    def cut(source, path_id, dtype, gpu_index, rival_cubin=None):
        made = _verified_report(source, path_id, dtype, gpu_index)
        made.status = status
        made.failure = CheckFailure("cuda_error", detail="GPU worker died: [Errno 32] Broken pipe")
        return made

    monkeypatch.setattr(evaluator.champion, "verify_champion", cut)
    engine = make_engine(fresh_database_url)
    with engine.connect() as conn:
        before = conn.scalar(select(func.count(Evaluation.id)))
    outcome = _promote_child(engine, seeded, stopping=lambda: stopping)
    with engine.connect() as conn:
        after = conn.scalar(select(func.count(Evaluation.id)))
        champion = conn.scalar(select(Champion.program_id))
    engine.dispose()
    assert not outcome.promoted and champion == seeded.grandchild_id
    assert (after - before == 1) is recorded
    if not recorded:
        assert outcome.reason.startswith(f"champion verification cut by the job's stop ({status})")
    else:
        assert outcome.reason.startswith(f"champion verification failed: {status}")
