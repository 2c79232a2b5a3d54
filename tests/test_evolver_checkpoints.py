"""Checkpoints: only the newest few stay on disk, and a resume checks every program of the one it
starts from, falling back past a broken one and saying why.

The unit tests build checkpoints the way OpenEvolve lays them out (``programs/<id>.json``, then
``metadata.json``); the job tests run real compile-only jobs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, update
from sqlalchemy.orm import Session

from db.models import Job, Program
from evolver.checkpoints import (
    Checkpoint,
    choose_resume_point,
    complete_checkpoints,
    prune_checkpoints,
    validate_checkpoint,
)
from evolver.job_config import JobConfig
from evolver.runner import resume_job, start_job
from evolver.settings import EvolverSettings

CODE = "// EVOLVE-BLOCK-START\n#define NB 32  // tune: 16 32 64\n// EVOLVE-BLOCK-END\n"


def _sha(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def _program(uid: str, code: str = CODE, **metrics: object) -> dict[str, object]:
    return {
        "id": uid,
        "code": code,
        "parent_id": None,
        "generation": 0,
        "metrics": metrics or {"combined_score": 0.0, "registers": 38.0, "speedup_64": 0.0},
    }


def _write_checkpoint(
    output: Path, iteration: int, programs: list[dict[str, object]], *, complete: bool = True
) -> Path:
    folder = output / "checkpoints" / f"checkpoint_{iteration}"
    (folder / "programs").mkdir(parents=True)
    for program in programs:
        (folder / "programs" / f"{program['id']}.json").write_text(json.dumps(program))
    if complete:
        ids = [str(p["id"]) for p in programs]
        meta = {"islands": [ids], "archive": ids[:1], "last_iteration": iteration}
        (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


def _recorded(*uids: str, code: str = CODE) -> dict[str, str]:
    return {uid: _sha(code) for uid in uids}


# --- validation ----------------------------------------------------------------------------------


def test_a_sound_checkpoint_passes(tmp_path: Path) -> None:
    folder = _write_checkpoint(tmp_path, 5, [_program("a"), _program("b")])
    assert validate_checkpoint(Checkpoint(folder, 5), _recorded("a", "b")) is None


def _failure(tmp_path: Path, programs: list[dict[str, object]], recorded: dict[str, str]):
    folder = _write_checkpoint(tmp_path, 5, programs)
    return folder, validate_checkpoint(Checkpoint(folder, 5), recorded)


def test_a_truncated_program_file_is_refused_by_program_file(tmp_path: Path) -> None:
    folder, _ = _failure(tmp_path, [_program("a"), _program("b")], _recorded("a", "b"))
    text = (folder / "programs" / "b.json").read_text()
    (folder / "programs" / "b.json").write_text(text[: len(text) // 2])  # torn by a kill
    failure = validate_checkpoint(Checkpoint(folder, 5), _recorded("a", "b"))
    assert failure is not None and (failure.check, failure.program) == ("program_file", "b")


def test_a_file_without_source_is_refused_by_program_file(tmp_path: Path) -> None:
    program = _program("a")
    del program["code"]
    _, failure = _failure(tmp_path, [program], _recorded("a"))
    assert failure is not None and failure.check == "program_file"


def test_a_file_named_after_another_program_is_refused_by_program_id(tmp_path: Path) -> None:
    folder, _ = _failure(tmp_path, [_program("a")], _recorded("a"))
    (folder / "programs" / "a.json").write_text(json.dumps(_program("z")))
    failure = validate_checkpoint(Checkpoint(folder, 5), _recorded("a", "z"))
    assert failure is not None and (failure.check, failure.program) == ("program_id", "a")


@pytest.mark.parametrize(
    "metrics",
    [
        {"combined_score": "0.5"},
        {"combined_score": None},
        {"combined_score": True},
        {"combined_score": float("nan")},
        {"speedup_64": float("inf")},
    ],
)
def test_non_numeric_metrics_are_refused_by_metrics(tmp_path: Path, metrics: dict) -> None:
    _, failure = _failure(tmp_path, [_program("a", **metrics)], _recorded("a"))
    assert failure is not None and (failure.check, failure.program) == ("metrics", "a")
    assert next(iter(metrics)) in failure.detail


def test_a_program_the_store_never_recorded_is_refused_by_not_recorded(tmp_path: Path) -> None:
    _, failure = _failure(tmp_path, [_program("a"), _program("ghost")], _recorded("a"))
    assert failure is not None and (failure.check, failure.program) == ("not_recorded", "ghost")


def test_a_source_changed_after_recording_is_refused_by_source_sha256(tmp_path: Path) -> None:
    edited = _program("a", code=CODE.replace("32", "64", 1))
    _, failure = _failure(tmp_path, [edited], _recorded("a"))
    assert failure is not None and (failure.check, failure.program) == ("source_sha256", "a")
    assert "differs from the recorded" in failure.describe()


def test_a_program_named_by_the_islands_without_a_file_is_refused_by_missing_program(
    tmp_path: Path,
) -> None:
    folder, _ = _failure(tmp_path, [_program("a"), _program("b")], _recorded("a", "b"))
    (folder / "programs" / "b.json").unlink()
    failure = validate_checkpoint(Checkpoint(folder, 5), _recorded("a", "b"))
    assert failure is not None and (failure.check, failure.program) == ("missing_program", "b")


def test_malformed_metadata_is_refused_by_metadata(tmp_path: Path) -> None:
    folder, _ = _failure(tmp_path, [_program("a")], _recorded("a"))
    (folder / "metadata.json").write_text(json.dumps({"islands": 7, "last_iteration": 5}))
    failure = validate_checkpoint(Checkpoint(folder, 5), _recorded("a"))
    assert failure is not None and failure.check == "metadata"


# --- choosing where to resume and pruning ---------------------------------------------------------


def test_resume_falls_back_past_broken_checkpoints_and_removes_newer_folders(
    tmp_path: Path,
) -> None:
    recorded = _recorded("a", "b", "c")
    _write_checkpoint(tmp_path, 4, [_program("a")])
    _write_checkpoint(tmp_path, 6, [_program("a"), _program("b")])
    _write_checkpoint(tmp_path, 8, [_program("a"), _program("b"), _program("c", registers=[1])])
    _write_checkpoint(tmp_path, 10, [_program("a"), _program("x")], complete=False)  # torn

    point = choose_resume_point(tmp_path, recorded)

    assert point.checkpoint is not None and point.checkpoint.iteration == 6
    assert [(name, f.check, f.program) for name, f in point.rejected] == [
        ("checkpoint_8", "metrics", "c")
    ]
    assert point.removed == ("checkpoint_8", "checkpoint_10")
    assert [c.iteration for c in complete_checkpoints(tmp_path)] == [6, 4]
    assert not (tmp_path / "checkpoints" / "checkpoint_10").exists()


def test_resume_from_the_seed_when_every_checkpoint_is_broken(tmp_path: Path) -> None:
    _write_checkpoint(tmp_path, 2, [_program("ghost")])
    point = choose_resume_point(tmp_path, _recorded("a"))
    assert point.checkpoint is None
    assert [f.check for _, f in point.rejected] == ["not_recorded"]
    assert point.removed == ("checkpoint_2",)


def test_prune_keeps_the_newest_complete_checkpoints(tmp_path: Path) -> None:
    for iteration in (2, 4, 6, 8, 10):
        _write_checkpoint(tmp_path, iteration, [_program("a")])
    _write_checkpoint(tmp_path, 3, [_program("a")], complete=False)  # an old torn one
    _write_checkpoint(tmp_path, 12, [_program("a")], complete=False)  # newer torn: left
    removed = prune_checkpoints(tmp_path, 3)
    assert sorted(p.name for p in removed) == ["checkpoint_2", "checkpoint_3", "checkpoint_4"]
    left = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert left == ["checkpoint_10", "checkpoint_12", "checkpoint_6", "checkpoint_8"]
    assert prune_checkpoints(tmp_path, 3) == []


def test_prune_deletes_nothing_while_fewer_than_keep_are_complete(tmp_path: Path) -> None:
    _write_checkpoint(tmp_path, 2, [_program("a")])
    _write_checkpoint(tmp_path, 1, [_program("a")], complete=False)
    assert prune_checkpoints(tmp_path, 3) == []
    with pytest.raises(ValueError):
        prune_checkpoints(tmp_path, 0)


# --- real jobs ----------------------------------------------------------------------------------

ITERATIONS = 20
INTERVAL = 2
# Measured (scripts/work_folder_size.py --iterations 20 --checkpoint-interval 2 --keep 3 100):
# 2.9 MB with 3 kept checkpoints, 5.4 MB with all ten. The bound sits between, so a job that
# stopped pruning fails here.
MAX_WORK_BYTES = 4_000_000


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_job_keeps_only_its_newest_checkpoints(tmp_path: Path) -> None:
    settings = EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None)
    job = JobConfig(
        path="trsm_small",
        dtype="float64",
        compile_only=True,
        iterations=ITERATIONS,
        checkpoint_interval=INTERVAL,
        keep_checkpoints=3,
    )
    outcome = start_job(job, settings=settings, database_url=f"sqlite:///{tmp_path / 'l.db'}")
    assert outcome.state == "complete"
    work = outcome.work_folder
    assert work is not None and work.parent == (tmp_path / "runs").resolve()
    names = sorted(p.name for p in (work / "openevolve" / "checkpoints").iterdir())
    assert names == ["checkpoint_16", "checkpoint_18", "checkpoint_20"]
    assert _folder_bytes(work) < MAX_WORK_BYTES


def test_a_resume_skips_a_tampered_checkpoint_and_marks_the_reruns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    settings = EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None)
    job = JobConfig(
        path="trsm_small", dtype="float64", compile_only=True, iterations=6, checkpoint_interval=2
    )
    first = start_job(job, settings=settings, database_url=url, write=lambda line: None)
    assert first.work_folder is not None
    output = first.work_folder / "openevolve"
    newest = output / "checkpoints" / "checkpoint_6"
    victim = sorted((newest / "programs").glob("*.json"))[0]
    data = json.loads(victim.read_text())
    data["code"] += "// edited after it was recorded\n"
    victim.write_text(json.dumps(data))
    with Session(create_engine(url)) as s:  # as if the process died before marking it complete
        s.execute(update(Job).where(Job.id == first.job_id).values(state="running"))
        s.commit()
        before = {p.uid for p in s.scalars(select(Program))}

    lines: list[str] = []
    again = resume_job(
        first.job_id, overrides={}, settings=settings, database_url=url, write=lines.append
    )

    assert lines[0] == (
        f"job {first.job_id} | checkpoint_6 is broken, not resumed from: source_sha256 "
        f"(program {victim.stem}): " + lines[0].split(": ", 2)[2]
    )
    assert "2 iterations from checkpoint at iteration 4" in lines[1]
    assert f"job {first.job_id} | iterations 5..6 run again from that checkpoint" in lines[2]
    assert (again.state, again.iteration) == ("complete", 6)
    with Session(create_engine(url)) as s:
        programs = list(s.scalars(select(Program)))
    new = [p for p in programs if p.uid not in before]
    assert {p.iteration for p in new if p.backend != "migration"} == {5, 6}
    assert all(p.rerun for p in new)
    assert not any(p.rerun for p in programs if p.uid in before)
    assert len({p.uid for p in programs}) == len(programs)
    # The checkpoint at 6 was written again, from the re-run, and is sound.
    assert (
        validate_checkpoint(Checkpoint(newest, 6), {p.uid: p.source_sha256 for p in programs})
        is None
    )


def test_resume_of_a_job_whose_folder_lost_every_checkpoint_starts_from_the_seed(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    settings = EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None)
    job = JobConfig(
        path="trsm_small", dtype="float32", compile_only=True, iterations=2, checkpoint_interval=1
    )
    first = start_job(job, settings=settings, database_url=url, write=lambda line: None)
    assert first.work_folder is not None
    shutil.rmtree(first.work_folder / "openevolve" / "checkpoints")
    with Session(create_engine(url)) as s:
        s.execute(update(Job).where(Job.id == first.job_id).values(state="failed"))
        s.commit()
    lines: list[str] = []
    again = resume_job(
        first.job_id, overrides={}, settings=settings, database_url=url, write=lines.append
    )
    assert "from the seed (no complete checkpoint yet)" in lines[0]
    assert again.state == "complete"
    with Session(create_engine(url)) as s:
        seeds = list(s.scalars(select(Program).where(Program.parent_id.is_(None))))
    # The seed ran again (a new OpenEvolve id): the second seed row is a re-run.
    assert [seed.rerun for seed in seeds] == [False, True]
