"""The kernevo service's URL is its root: ``KERNEVO_API_URL`` and ``--api-url`` ending in ``/v1``
or holding a query or fragment are refused where they are read, by one rule
(``kernevo.environment.service_url_problem``), naming the root URL to give."""

from __future__ import annotations

import pytest

from kernevo.environment import SettingsError
from kernevo.settings import LoaderSettings


# A fresh user gave the OpenAI-style base URL (`…/v1`, as KERNEVO_LLM_BASE_URL takes): the loader
# asked for /v1/v1/kernels/best and reported the service's bare 404 as "no champion".
@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (
            "http://127.0.0.1:8000/v1",
            "the service's root URL without /v1, 'http://127.0.0.1:8000' (its /v1/… routes are "
            "added)",
        ),
        (
            "https://user:secret@127.0.0.1/kernevo/v1/",
            "the service's root URL without /v1, 'https://user:***@127.0.0.1/kernevo' (its /v1/… "
            "routes are added)",
        ),
        (
            "http://127.0.0.1:8000/V1",
            "the service's root URL without /v1, 'http://127.0.0.1:8000' (its /v1/… routes are "
            "added)",
        ),
        (
            "http://127.0.0.1:8000/v1/jobs",
            "the service's root URL without /v1, 'http://127.0.0.1:8000' (its /v1/… routes are "
            "added)",
        ),
        ("http://127.0.0.1:8000/?gpu=h200", "a service URL without a query or fragment"),
        ("http://127.0.0.1:8000#top", "a service URL without a query or fragment"),
    ],
    ids=["v1", "proxy-prefix-v1", "upper-case", "a-route", "query", "fragment"],
)
def test_a_service_url_the_clients_cannot_append_routes_to_is_refused(
    monkeypatch: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    """Check: ``LoaderSettings._service_url`` (``kernevo.environment.service_url_problem``)."""
    monkeypatch.setenv("KERNEVO_API_URL", url)
    with pytest.raises(SettingsError) as caught:
        LoaderSettings()
    message = str(caught.value)
    assert message.startswith("KERNEVO_API_URL=") and reason in message
    assert "secret" not in message


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/", "https://127.0.0.1/kernevo", "http://127.0.0.1/v10"]
)
def test_a_root_or_a_proxy_prefix_is_a_service_url(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("KERNEVO_API_URL", url)
    assert LoaderSettings().api_url == url.rstrip("/")


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "--api-url"],
        ["cancel", "3", "--api-url"],
        ["best", "--op", "trsm", "--dtype", "float64", "--m", "4", "--n", "4", "--api-url"],
    ],
    ids=["jobs", "cancel", "best"],
)
def test_the_clis_api_url_takes_the_same_service_url_rule(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Check: ``kernevo.cli.arguments._service_url``: a usage error, exit 2, one line."""
    from cli_usage import usage_line

    command = argv[0]
    line = usage_line(capsys, [*argv, "http://127.0.0.1:8000/v1"])
    assert line == (
        f"kernevo {command}: error: argument --api-url: the service's root URL without /v1, "
        f"'http://127.0.0.1:8000' (its /v1/… routes are added) (see kernevo {command} --help)"
    )
    line = usage_line(capsys, [*argv, "http://127.0.0.1:8000/?gpu=h200"])
    assert "a service URL without a query or fragment" in line
