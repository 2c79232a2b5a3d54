"""Champion promotion skips a kernel that already is the champion (no GPU needed)."""

from __future__ import annotations

from sqlalchemy import select

import evaluator.champion
from db.models import Program
from db.session import make_engine
from evolver.champion import promote_best
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
