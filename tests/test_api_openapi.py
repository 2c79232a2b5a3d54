"""The OpenAPI document against the running service, checked by a property-based tester
(schemathesis): every operation gets generated requests, valid and not, with a write token, and
every answer must be documented (status, content type, headers, body schema) and never a 5xx.

The service runs for real (uvicorn on 127.0.0.1, a free port, in a thread) over a migrated
database per backend, seeded with a lineage and a champion so that the routes answer with data,
not only 404s. Bounded by ``MAX_EXAMPLES`` per operation: well under a minute per backend on
the 2-core CI machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import schemathesis
import uvicorn
from conftest import API_TOKEN, BACKENDS, _empty_database, bearer, seed_lineage, unused_port
from hypothesis import HealthCheck, given, settings

# Generated requests per operation: enough to reach every parameter's edge (bounds, unknown
# enum values, strings with NUL and lone surrogates) on 16 operations in about 10 s per backend.
MAX_EXAMPLES = 40
STARTUP_TIMEOUT_S = 30.0
# Every check schemathesis has but one: ``positive_data_acceptance`` (a request the document
# allows must not get 4xx) cannot hold for a problem the routes refuse by its meaning, not its
# form — a shape outside every path's envelope, an unknown path or dtype, a GPU name with no
# letter — which are 422s with a text ``detail`` (documented as such). Requests that do not
# match the document must still be refused (``negative_data_rejection``).
EXCLUDED_CHECKS = [schemathesis.checks.positive_data_acceptance]


@dataclass(frozen=True)
class Service:
    """A running service: its base URL and the write token's header."""

    base_url: str
    auth: dict[str, str]


@pytest.fixture(scope="module", params=BACKENDS)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """The service over a migrated, seeded database of the backend, with KERNEVO_API_TOKEN
    set (scope write), served by uvicorn until the module's tests are done."""
    from api.app import create_app
    from db.migrate import upgrade

    with (
        _empty_database(request.param, request, tmp_path_factory.mktemp("db")) as url,
        pytest.MonkeyPatch.context() as patch,
    ):
        upgrade(url)
        seed_lineage(url)
        patch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
        port = unused_port()
        config = uvicorn.Config(
            create_app(url), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        assert httpx.get(f"{base_url}/healthz", timeout=5).status_code == 200
        try:
            yield Service(base_url=base_url, auth=bearer(API_TOKEN))
        finally:
            server.should_exit = True
            thread.join(timeout=30)


def test_the_service_answers_as_its_openapi_document_says(service: Service) -> None:
    """Every operation of the served document, ``MAX_EXAMPLES`` generated requests each
    (schemathesis's strategies under Hypothesis, every check it has: no 5xx, documented status
    codes, content types, headers and body schemas, negative data rejected). The operations
    are run in one test (schemathesis's pytest plugin cannot take a fixture's schema under
    pytest 9), each failure named with its operation."""
    api = schemathesis.openapi.from_url(f"{service.base_url}/openapi.json")
    failures: list[str] = []
    operations = 0
    for result in api.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=service.auth, excluded_checks=EXCLUDED_CHECKS)

        try:
            check()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as failure:  # one operation's failure must not hide the others'
            failures.append(f"{operation.label}: {failure}")
    assert operations >= 15, f"only {operations} operations in the document"
    assert failures == [], "\n\n".join(failures)


def test_every_get_operation_answers_head_with_its_status_and_headers_and_no_body(
    service: Service,
) -> None:
    """``HEAD`` on each ``GET`` path of the document and on the pages outside it, through the
    real server (``api.head_requests``; it was a 405): ``GET``'s status, content type and
    length, no body; a bad query or a missing token is refused as under ``GET``."""
    document = httpx.get(f"{service.base_url}/openapi.json", timeout=10).json()
    paths = [p for p, ops in document["paths"].items() if "get" in ops]
    paths = [p.replace("{job_id}", "1").replace("{program_id}", "1") for p in paths]
    paths += ["/docs", "/ui/", "/v1/jobs?limit=0", "/v1/jobs?limt=5"]
    assert len(paths) >= 15
    with httpx.Client(base_url=service.base_url, headers=service.auth, timeout=10) as client:
        for path in paths:
            get, head = client.get(path), client.head(path)
            assert head.status_code == get.status_code != 405, path
            assert head.headers["content-type"] == get.headers["content-type"], path
            if path not in ("/healthz", "/v1/version"):  # their answers carry timings
                assert head.headers["content-length"] == get.headers["content-length"], path
            assert head.content == b"", path
        assert client.head("/v1/jobs?limt=5").status_code == 422
        assert client.head("/v1/jobs", headers={"Authorization": ""}).status_code == 401
