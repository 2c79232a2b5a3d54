"""Every route of the app × {no token, read, write, wrong, revoked, configured} → the expected
status, enumerated from the app itself: a route added without an entry in ``ROUTES`` fails
``test_every_route_of_the_app_has_an_access_rule`` until its access is decided here.

Access levels: ``open`` (anyone, the token not even read), ``kernels`` (the champion routes:
open by default, ``read`` with ``KERNEVO_API_KERNELS_REQUIRE_READ=true``), ``read`` and
``write`` (write implies read). No token, an unknown one or a revoked one: 401; a read token
where write is needed: 403; enough scope: the route's own success status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pytest
from conftest import API_TOKEN, bearer, create_api_token
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from api.app import create_app
from db.session import make_engine, session_scope
from db.tokens import revoke_token

if TYPE_CHECKING:
    from conftest import Seeded

Access = Literal["open", "kernels", "read", "write"]
Token = Literal["none", "read", "write", "wrong", "revoked", "configured"]
TOKENS: tuple[Token, ...] = ("none", "read", "write", "wrong", "revoked", "configured")


@dataclass(frozen=True)
class Rule:
    """A route's access level, a request that succeeds with enough scope over the seeded
    lineage (its path and arguments from the ids), and the success status."""

    access: Access
    request: Callable[[Seeded], dict[str, Any]]
    ok: int = 200


def _get(url: str, **params: object) -> Callable[[Seeded], dict[str, Any]]:
    return lambda seeded: {"method": "GET", "url": url.format(s=seeded), "params": params}


BEST = {"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": 64, "n": 64}
NEW_JOB = {"path": "trsm_small", "dtype": "float32", "compile_only": True, "iterations": 5}

# (method, path as the app declares it) → its rule. Keep in step with the routers.
ROUTES: dict[tuple[str, str], Rule] = {
    ("GET", "/openapi.json"): Rule("open", _get("/openapi.json")),
    ("GET", "/docs"): Rule("open", _get("/docs")),
    ("GET", "/docs/oauth2-redirect"): Rule("open", _get("/docs/oauth2-redirect")),
    ("GET", "/redoc"): Rule("open", _get("/redoc")),
    ("GET", "/docs/assets/{name}"): Rule("open", _get("/docs/assets/swagger-ui.css")),
    ("GET", "/healthz"): Rule("open", _get("/healthz")),
    ("GET", "/v1/version"): Rule("open", _get("/v1/version")),
    ("GET", "/v1/kernels/best"): Rule("kernels", _get("/v1/kernels/best", **BEST)),
    ("GET", "/v1/manifest"): Rule("kernels", _get("/v1/manifest", gpu="nvidia-h200")),
    ("GET", "/v1/programs"): Rule("read", _get("/v1/programs", job_id=1)),
    ("GET", "/v1/programs/{program_id}"): Rule("read", _get("/v1/programs/{s.grandchild_id}")),
    ("GET", "/v1/programs/{program_id}/lineage"): Rule(
        "read", _get("/v1/programs/{s.grandchild_id}/lineage")
    ),
    ("GET", "/v1/jobs"): Rule("read", _get("/v1/jobs", state="waiting")),
    ("GET", "/v1/jobs/{job_id}"): Rule("read", _get("/v1/jobs/{s.job_id}")),
    ("POST", "/v1/jobs"): Rule(
        "write", lambda seeded: {"method": "POST", "url": "/v1/jobs", "json": NEW_JOB}, ok=201
    ),
    ("PATCH", "/v1/jobs/{job_id}"): Rule(
        "write",
        lambda seeded: {
            "method": "PATCH",
            "url": f"/v1/jobs/{seeded.job_id}",
            "json": {"state": "cancelled"},
        },
    ),
    ("GET", "/v1/token"): Rule("read", _get("/v1/token")),
    # api.routes.lineage, api.routes.champions and the web page (api.web: it holds no data; the
    # routes it reads keep their own access). "/" and "/ui" redirect to "/ui/" (followed).
    ("GET", "/v1/jobs/{job_id}/lineage"): Rule("read", _get("/v1/jobs/{s.job_id}/lineage")),
    ("GET", "/v1/programs/{program_id}/diff"): Rule(
        "read", _get("/v1/programs/{s.grandchild_id}/diff")
    ),
    ("GET", "/v1/champions"): Rule("kernels", _get("/v1/champions", gpu="nvidia-h200")),
    ("GET", "/"): Rule("open", _get("/")),
    ("GET", "/ui"): Rule("open", _get("/ui")),
    ("GET", "/ui/"): Rule("open", _get("/ui/")),
    ("GET", "/ui/{name}"): Rule("open", _get("/ui/main.js")),
}


def app_routes(app: FastAPI) -> Iterator[tuple[str, str]]:
    """(method, path) of every route the app answers, HEAD aside (Starlette adds it to GET
    routes); a route without methods (a mount) as ``ANY``."""
    for context in iter_route_contexts(app.routes):
        methods = context.methods or {"ANY"}
        for method in sorted(methods - {"HEAD"}):
            yield method, str(context.path)


def expected(access: Access, token: Token, ok: int, *, kernels_need_read: bool) -> int:
    """The status a request with ``token`` must get on a route of ``access``."""
    if access == "kernels":
        access = "read" if kernels_need_read else "open"
    if access == "open":
        return ok
    if token in ("none", "wrong", "revoked"):
        return 401
    if access == "write" and token == "read":
        return 403
    return ok


@dataclass
class Tokens:
    """One secret per kind of token (``none``: no header)."""

    secrets: dict[Token, str | None]

    def headers(self, token: Token) -> dict[str, str]:
        secret = self.secrets[token]
        return {} if secret is None else bearer(secret)


def _tokens(url: str) -> Tokens:
    read = create_api_token(url, "read", "reader")
    write = create_api_token(url, "write", "writer")
    revoked = create_api_token(url, "write", "gone")
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            revoke_token(s, 3)
    finally:
        engine.dispose()
    return Tokens(
        {
            "none": None,
            "read": read,
            "write": write,
            "wrong": "kvt_" + "x" * 43,
            "revoked": revoked,
            "configured": API_TOKEN,
        }
    )


def _check_all(client: TestClient, seeded: Seeded, tokens: Tokens, *, need_read: bool) -> None:
    """Send every route's request with every token; fail with the table of wrong answers."""
    wrong: list[str] = []
    for (method, path), rule in ROUTES.items():
        for token in TOKENS:
            request = rule.request(seeded)
            response = client.request(headers=tokens.headers(token), **request)
            want = expected(rule.access, token, rule.ok, kernels_need_read=need_read)
            if response.status_code != want:
                wrong.append(f"{method} {path} [{token}]: {response.status_code}, want {want}")
                continue
            challenge = response.headers.get("www-authenticate", "")
            if want == 401 and not challenge.startswith("Bearer"):
                wrong.append(f"{method} {path} [{token}]: 401 without a Bearer challenge")
            if want == 403 and 'error="insufficient_scope"' not in challenge:
                wrong.append(f"{method} {path} [{token}]: 403 without insufficient_scope")
    assert wrong == [], "\n".join(wrong)


@pytest.fixture
def tokens(fresh_database_url: str, seeded: Seeded) -> Tokens:
    """The tokens of every kind, in the seeded database (ids 1..3, the third revoked)."""
    return _tokens(fresh_database_url)


def test_every_route_of_the_app_has_an_access_rule(fresh_database_url: str) -> None:
    app = create_app(fresh_database_url)
    declared = set(app_routes(app))
    missing = sorted(declared - set(ROUTES))
    assert missing == [], f"routes without an access rule in tests/test_api_scopes.py: {missing}"
    assert sorted(set(ROUTES) - declared) == [], "rules for routes the app no longer has"


def test_scope_matrix(
    fresh_database_url: str,
    seeded: Seeded,
    tokens: Tokens,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    with TestClient(create_app(fresh_database_url)) as client:
        _check_all(client, seeded, tokens, need_read=False)


def test_scope_matrix_with_the_champion_routes_closed(
    fresh_database_url: str,
    seeded: Seeded,
    tokens: Tokens,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    monkeypatch.setenv("KERNEVO_API_KERNELS_REQUIRE_READ", "true")
    with TestClient(create_app(fresh_database_url)) as client:
        _check_all(client, seeded, tokens, need_read=True)


def test_refused_writes_change_nothing(
    fresh_database_url: str, seeded: Seeded, tokens: Tokens
) -> None:
    with TestClient(create_app(fresh_database_url)) as client:
        for token in ("none", "read", "wrong", "revoked"):
            for rule in (ROUTES[("POST", "/v1/jobs")], ROUTES[("PATCH", "/v1/jobs/{job_id}")]):
                response = client.request(headers=tokens.headers(token), **rule.request(seeded))
                assert response.status_code in (401, 403)
        reader = tokens.headers("read")
        jobs = client.get("/v1/jobs", headers=reader)
        assert [job["state"] for job in jobs.json()] == ["waiting"]
        assert jobs.headers["x-total-count"] == "1"


def test_the_token_route_names_the_caller(
    fresh_database_url: str, seeded: Seeded, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    with TestClient(create_app(fresh_database_url)) as client:
        answers = {
            token: client.get("/v1/token", headers=tokens.headers(token)).json()
            for token in ("read", "write", "configured")
        }
        revoked = client.get("/v1/token", headers=tokens.headers("revoked"))
        unknown = client.get("/v1/token", headers=tokens.headers("wrong"))
        missing = client.get("/v1/token")
    assert answers == {
        "read": {"id": 1, "name": "reader", "scope": "read"},
        "write": {"id": 2, "name": "writer", "scope": "write"},
        "configured": {"id": None, "name": "KERNEVO_API_TOKEN", "scope": "write"},
    }
    assert revoked.json()["detail"] == "token 3 (gone) was revoked"
    assert revoked.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert unknown.json()["detail"] == "invalid bearer token"
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["detail"].startswith("missing bearer token")


def test_a_read_token_is_refused_a_write_with_the_reason(
    fresh_database_url: str, seeded: Seeded, tokens: Tokens
) -> None:
    with TestClient(create_app(fresh_database_url)) as client:
        response = client.request(
            headers=tokens.headers("read"), **ROUTES[("PATCH", "/v1/jobs/{job_id}")].request(seeded)
        )
    assert response.status_code == 403
    assert response.json()["detail"] == "token 'reader' has scope read; this needs write"
    assert response.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", scope="write"'
    )


def test_a_token_revoked_while_the_service_runs_is_refused_at_once(
    fresh_database_url: str, seeded: Seeded
) -> None:
    secret = create_api_token(fresh_database_url, "read", "short-lived")
    with TestClient(create_app(fresh_database_url)) as client:
        assert client.get("/v1/jobs", headers=bearer(secret)).status_code == 200
        engine = make_engine(fresh_database_url)
        try:
            with session_scope(engine) as s:
                revoke_token(s, 1)
        finally:
            engine.dispose()
        assert client.get("/v1/jobs", headers=bearer(secret)).status_code == 401
