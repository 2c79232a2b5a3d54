"""No environment variable of the job reaches anything the system stores or serves.

A whole compile-only job (``kernevo evolve --compile-only``, a real process tree: the CLI,
OpenEvolve's pool workers, the compiler children) runs with a random marker variable and an
API key holding a marker value in its environment, against a local OpenAI-compatible stub whose
answers try to include ``/proc/self/environ`` in several ways — some the screen refuses, one it
lets through after intake. The sandboxed compiler is also called directly with an include the
screen would refuse, so one reaches NVRTC. Then the markers must appear nowhere: report files
and every other file under the work folder, every database row, every API response (programs
with and without the token, lineage, jobs, best kernel), stdout/stderr and logs.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path

import pytest
from openai_stub import serve_chat
from sqlalchemy import MetaData, create_engine, select

from evaluator.compile import compile_cubin
from evaluator.compile_sandbox import shared_compiler
from evolver.offline_mutator import extract_current_program
from seeds.registry import get_path
from seeds.tunables import parse_tunables

STUB_MODEL = "stub-attacker-1"
# Not KERNEVO_*: the job's settings refuse KERNEVO_ variables they do not know.
MARKER_NAME = f"KV_TEST_MARKER_{secrets.token_hex(4).upper()}"
MARKER_VALUE = f"marker-{secrets.token_hex(12)}"
KEY_NAME = f"OPENAI_API_KEY_TEST_{secrets.token_hex(4).upper()}"
KEY_VALUE = f"sk-marker-{secrets.token_hex(12)}"
# The key variable's *name* is recorded with the job on purpose (a resume reads the key from it
# again); its value and the other variable, name and value, must appear nowhere.
MARKERS = (MARKER_NAME, MARKER_VALUE, KEY_VALUE)

ENVIRON = '"/proc/self/environ"'
# Each answer appends its code after the first tunable's line; the last two do not compile.
ATTACKS = [
    f"#include {ENVIRON}",
    f"#define KV_H {ENVIRON}\n#include KV_H",
    f"%:include {ENVIRON}",
    f"int kv_a = 0x1'0; int kv_b = __has_include({ENVIRON}) + 'c';",
    f"#\rinclude {ENVIRON}",  # intake makes it '#' LF 'include ...': a compile error, no read
    "#if 0\r\n#endif\r\n__device__ int kv_c = 1 ??/\r\n;",  # CR LF answer, canonical at intake
]


@dataclass
class AttackerLLM:
    url: str = ""
    requests: list[dict] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)

    def answer(self, body: dict) -> str:
        self.requests.append(body)
        program = extract_current_program(body["messages"][-1]["content"])
        assert program is not None
        line = parse_tunables(program)[0].line
        attack = ATTACKS[(len(self.requests) - 1) % len(ATTACKS)]
        return f"<<<<<<< SEARCH\n{line}\n=======\n{line}\n{attack}\n>>>>>>> REPLACE\n"


@pytest.fixture
def attacker() -> Iterator[AttackerLLM]:
    stub = AttackerLLM()

    def answer(body: dict, headers: Message) -> str:
        stub.authorizations.append(headers.get("Authorization", ""))
        return stub.answer(body)

    with serve_chat(STUB_MODEL, answer) as url:
        stub.url = url
        yield stub


def _leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


def _dump_tables(url: str) -> str:
    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        rows = []
        with engine.connect() as connection:
            for table in meta.sorted_tables:
                rows += [f"{table.name}: {tuple(r)!r}" for r in connection.execute(select(table))]
        return "\n".join(rows)
    finally:
        engine.dispose()


def _api_responses(url: str, token: str) -> list[tuple[str, str]]:
    """(url, body) of every GET the service offers over this database, with a token that may
    read everything (compile logs included)."""
    from fastapi.testclient import TestClient

    from api.app import create_app

    out = []
    with TestClient(create_app(url), headers={"Authorization": f"Bearer {token}"}) as client:
        jobs = client.get("/v1/jobs")
        out.append(("/v1/jobs", jobs.text))
        for job in jobs.json():
            out.append((f"/v1/jobs/{job['id']}", client.get(f"/v1/jobs/{job['id']}").text))
            for program_id in range(1, job["programs"] + 1):
                r = client.get(f"/v1/programs/{program_id}")
                out.append((f"/v1/programs/{program_id}", r.text))
                r = client.get(f"/v1/programs/{program_id}/lineage")
                out.append((f"/v1/programs/{program_id}/lineage", r.text))
        listing = client.get("/v1/programs", params={"limit": 1000})
        out.append(("/v1/programs", listing.text))
        best = "/v1/kernels/best?op=trsm&dtype=float64&gpu=none&m=64&n=64"
        out.append((best, client.get(best).text))
        manifest = "/v1/manifest?gpu=none"
        out.append((manifest, client.get(manifest).text))
    return out


def test_no_environment_marker_reaches_reports_rows_responses_or_logs(
    tmp_path: Path, attacker: AttackerLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    work = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env.update(
        {
            MARKER_NAME: MARKER_VALUE,
            KEY_NAME: KEY_VALUE,
            "KERNEVO_COMPILE_CACHE": str(tmp_path / "cubin-cache"),
        }
    )
    iterations = len(ATTACKS)
    done = subprocess.run(
        [
            sys.executable, "-m", "kernevo.cli", "evolve", "--path", "trsm_small",
            "--dtype", "float64", "--compile-only", "--iterations", str(iterations),
            "--checkpoint-interval", "2", "--llm-base-url", attacker.url,
            "--llm-model", STUB_MODEL, "--llm-api-key-env", KEY_NAME,
            "--database-url", db_url, "--work-dir", str(work),
        ],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # The markers were really there: the key went to the endpoint, every answer was asked for.
    assert len(attacker.requests) == iterations
    assert all(a == f"Bearer {KEY_VALUE}" for a in attacker.authorizations)

    # One direct call of the sandboxed compiler with an include the screen would refuse: it
    # reaches NVRTC, in a child that has no environment and opens no file.
    monkeypatch.setenv(MARKER_NAME, MARKER_VALUE)
    monkeypatch.setenv(KEY_NAME, KEY_VALUE)
    spec = get_path("trsm_small")
    # Without Landlock the parent's /proc/<pid>/environ is readable: only the screen guards it.
    shared_compiler().version()  # starts the child, which reports whether Landlock is on
    parent = [f"/proc/{os.getpid()}/environ"] if shared_compiler().landlock_abi > 0 else []
    for target in ["/proc/self/environ", *parent]:
        source = spec.seed_source().replace(
            "// EVOLVE-BLOCK-START\n", f'// EVOLVE-BLOCK-START\n#include "{target}"\n'
        )
        direct = compile_cubin(
            source, spec.compile_options("float64", "sm_90"), "sm_90", cache_dir=tmp_path / "c"
        )
        assert _leaks(direct.log) == [] and "PATH=" not in direct.log

    findings: list[str] = []
    findings += [f"stdout: {m}" for m in _leaks(done.stdout)]
    findings += [f"stderr: {m}" for m in _leaks(done.stderr)]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    reports = [p for p in files if p.suffix == ".json" and "report" in str(p).lower()]
    assert reports, "the job wrote no report files"
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        findings += [f"{path.relative_to(tmp_path)}: {m}" for m in _leaks(text)]
    rows = _dump_tables(db_url)
    findings += [f"database: {m}" for m in _leaks(rows)]
    token = "marker-test-token-0123456789-abcdefg"
    monkeypatch.setenv("KERNEVO_API_TOKEN", token)
    for url, body in _api_responses(db_url, token):
        findings += [f"GET {url}: {m}" for m in _leaks(body)]
    assert findings == []

    # The attacks were refused by the screen (a child inherits its parent's attack, so which
    # answer fails how depends on OpenEvolve's sampling), none for a non-canonical text: the
    # CR and CR LF answers arrived as LF text through intake, and so they are stored.
    outcomes = [json.loads(p.read_text()) for p in reports]
    assert {o["status"] for o in outcomes} <= {"screen_error", "compile_error", "compiled"}
    refused = [o["failure"]["check"] for o in outcomes if o["status"] == "screen_error"]
    assert len(refused) >= 3 and set(refused) == {"include"}
    assert "\\r" not in rows and "\r" not in rows


def test_program_detail_needs_a_token_and_then_serves_the_compile_log(
    api_client, seeded, api_token
):
    """Compile logs echo what NVRTC read: no route serves them without a token (401), and a
    token's holder gets them whole (every route that serves them needs a read token)."""
    url = f"/v1/programs/{seeded.grandchild_id}"
    assert api_client.get(url).status_code == 401
    private = api_client.get(url, headers={"Authorization": f"Bearer {api_token}"}).json()
    assert private["evaluations"][0]["report"]["compile"]["log"] == "ptxas info: 40 registers"
    wrong = api_client.get(url, headers={"Authorization": "Bearer wrong-token"})
    assert wrong.status_code == 401


@pytest.mark.parametrize(
    "check", ["compile", "compiler_crash", "compile_time_limit", "compile_memory_limit"]
)
def test_a_compile_error_line_needs_a_token_too(fresh_database_url, monkeypatch, api_token, check):
    """A compile-stage failure's detail may quote the log (an error line, or once a limit
    overrun's first NVRTC line): it echoes what NVRTC read, so no route serves it without a
    token."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from db import repository as repo
    from db.session import make_engine, session_scope

    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            job = repo.create_job(s, path="trsm_small", dtype="float64", gpu="none",
                                  shape_bucket="m64n64", config={}, backend="offline",
                                  model=None)  # fmt: skip
            program, _ = repo.record_program(s, job_id=job.id, uid="p", source="x",
                                             parent_uid=None, island=0, generation=0,
                                             iteration=0, diff=None, backend="seed",
                                             model=None)  # fmt: skip
            report = {"status": "compile_error", "compile": {"log": "secret line"},
                      "failure": {"check": check, "detail": "secret line"}}  # fmt: skip
            repo.record_evaluation(s, program_id=program.id, report_json=json.dumps(report),
                                   gpu_key="none", gpu_name="none", arch="sm_90",
                                   driver_version=None, nvrtc_version="13.5", score=0.0,
                                   state="failed", error_kind="compile_error")  # fmt: skip
            program_id = program.id
    finally:
        engine.dispose()
    monkeypatch.setenv("KERNEVO_API_TOKEN", api_token)
    with TestClient(create_app(fresh_database_url)) as client:
        for url in (f"/v1/programs/{program_id}", "/v1/programs", "/v1/kernels/best",
                    "/v1/manifest?gpu=none"):  # fmt: skip
            assert "secret line" not in client.get(url).text
        auth = {"Authorization": f"Bearer {api_token}"}
        assert "secret line" in client.get(f"/v1/programs/{program_id}", headers=auth).text
