"""What the CLI and the service refuse at start, one line each (a fresh user's findings, issue 9):
a guessable configured write token, credentials of ``KERNEVO_API_URL`` echoed in errors, options
that contradict each other or do nothing."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kernevo.cli import main
from kernevo.environment import without_credentials


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# --- a configured write token is long enough not to be guessed --------------------------------


@pytest.mark.parametrize("token", ["Q", "Zq" * 15 + "Z", "kvt_sh0rtXY", "   Qw3"])
def test_a_short_configured_token_is_refused_at_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", token)
    code = main(["serve", "--port", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("kernevo: KERNEVO_API_TOKEN (value hidden): ")
    assert f"at least 32 characters, not {len(token)}" in err
    assert len(token.strip()) < 4 or token.strip() not in err


def test_the_app_itself_refuses_a_short_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """``uvicorn --factory api.app:create_app`` goes through the same settings."""
    from api.app import create_app
    from api.settings import MIN_TOKEN_LENGTH, ApiSettings

    monkeypatch.setenv("KERNEVO_API_TOKEN", "a")
    with pytest.raises(ValidationError, match="at least 32 characters"):
        create_app("sqlite:///:memory:")
    monkeypatch.setenv("KERNEVO_API_TOKEN", "t" * MIN_TOKEN_LENGTH)
    assert ApiSettings().token() == "t" * 32


# --- credentials in a service URL never reach an error line -----------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://alice:s3cret@127.0.0.1:9", "http://alice:***@127.0.0.1:9"),
        ("https://s3cret@host/v1", "https://***@host/v1"),
        ("http://a:b:s3cret@h", "http://a:***@h"),
        ("http://a@b:s3cret@h/x?y=1", "http://a@b:***@h/x?y=1"),
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
        # Not even split (a broken IPv6 host): the whole user part hidden.
        ("http://u:s3cret@[::1/x", "http://***@[::1/x"),
        ("not a url @ all", "not a url @ all"),
    ],
)
def test_without_credentials(url: str, shown: str) -> None:
    assert without_credentials(url) == shown


@pytest.mark.parametrize(
    ("argv", "environ", "shown"),
    [
        (
            ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--gpu", "nvidia-h200"],
            {"KERNEVO_API_URL": "http://alice:s3cret@127.0.0.1:9"},
            "service at http://alice:***@127.0.0.1:9/v1/kernels/best is unreachable",
        ),
        (
            ["jobs", "--api-url", "http://s3cret@127.0.0.1:9"],
            {},
            "service at http://***@127.0.0.1:9/v1/jobs is unreachable",
        ),
        (
            ["jobs"],
            {"KERNEVO_API_URL": "http://alice:s3cret@127.0.0.1:x"},
            "KERNEVO_API_URL='http://alice:***@127.0.0.1:x': not a URL:",
        ),
    ],
)
def test_service_url_credentials_are_masked_in_errors(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    environ: dict[str, str],
    shown: str,
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (1, 2) and err.count("\n") == 1
    assert shown in err and "s3cret" not in err


def test_a_bad_api_url_option_hides_its_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(capsys, ["jobs", "--api-url", "http://bob:s3cret@host:port"])
    assert "bob:***@host:port" in line and "s3cret" not in line


# --- options that contradict each other or do nothing -----------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["jobs", "--api-url", "http://127.0.0.1:9", "--database-url", "sqlite:///k.db"],
            "kernevo jobs: error: --api-url and --database-url name two places to ask; give one",
        ),
        (
            ["cancel", "3", "--api-url", "http://127.0.0.1:9", "--database-url", "sqlite:///k.db"],
            "kernevo cancel: error: --api-url and --database-url name two places to ask",
        ),
        (
            ["jobs", "--interval", "5"],
            "kernevo jobs: error: --interval is --watch's refresh; add --watch or leave it out",
        ),
        (
            ["jobs", "--api-url", "http://127.0.0.1:9", "--interval", "5"],
            "--interval is --watch's refresh",
        ),
        (
            [
                "best",
                "--dtype",
                "float64",
                "--m",
                "8",
                "--n",
                "8",
                "--gpu",
                "h200",
                "--device",
                "1",
            ],
            "argument --device: not allowed with argument --gpu",
        ),
        (
            ["export", "--dtype", "float64", "-o", "x", "--device", "1", "--gpu", "h200"],
            "argument --gpu: not allowed with argument --device",
        ),
    ],
)
def test_contradictory_or_idle_options_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert says in _usage_error(capsys, argv)


# --- a GPU name with a control character is refused, never rewritten --------------------------

CONTROL_GPU_NAMES = ["x\x1b[2J", "nvidia\th200", "h200\x07", "h\x7f200", "nvidia-h200\u2028"]


@pytest.mark.parametrize("name", CONTROL_GPU_NAMES)
@pytest.mark.parametrize(
    "argv",
    [
        ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--gpu"],
        ["export", "--dtype", "float64", "-o", "out", "--gpu"],
        ["evolve", "--path", "trsm_small", "--dtype", "float64", "--gpus", "0", "--gpu-key"],
        ["dask-worker", "--scheduler", "tcp://127.0.0.1:9", "--compile-only", "--gpu-key"],
    ],
)
def test_a_gpu_name_with_a_control_character_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], name: str
) -> None:
    """``kernevo best --gpu $'x\\e[2J'`` asked for the GPU ``x-2j``; POST /v1/jobs refused it."""
    line = _usage_error(capsys, [*argv, name])
    assert "must be printable text (no control characters), not '" in line
    assert line.isprintable()


@pytest.mark.parametrize("name", CONTROL_GPU_NAMES)
@pytest.mark.parametrize("route", ["/v1/jobs", "/v1/champions"])
def test_gpu_filters_of_the_api_refuse_control_characters(
    api_client: Any, api_token: str, route: str, name: str
) -> None:
    response = api_client.get(
        route, params={"gpu": name}, headers={"Authorization": f"Bearer {api_token}"}
    )
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith("gpu: must be printable text (no control characters), not '")
    # The same input in a job body: refused with the same words.
    body = {"path": "trsm_small", "dtype": "float64", "gpu": name}
    created = api_client.post(
        "/v1/jobs", json=body, headers={"Authorization": f"Bearer {api_token}"}
    )
    assert created.status_code == 422
    assert "must be printable text (no control characters)" in created.json()["detail"][0]["msg"]


# --- usage errors of kernevo evolve, exit 2 -----------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["evolve", "--resume"], "--resume without a job id needs --path and --dtype"),
        (["evolve", "--resume", "--path", "trsm_small"], "--resume without a job id needs"),
        (["evolve", "--resume", "--dtype", "float64"], "--resume without a job id needs"),
        (["evolve"], "evolve needs --path and --dtype (or --config FILE naming them)"),
        (["evolve", "--dtype", "float64"], "evolve needs --path and --dtype"),
        (["evolve", "--config", "/nonexistent/bad.yaml"], "no such job file"),
        (["evolve", "--config", "/"], "is not a file (a job YAML file is)"),
        (
            ["evolve", "--resume", "3", "--config", __file__],
            "--config cannot be combined with --resume",
        ),
    ],
)
def test_evolve_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert says in _usage_error(capsys, argv)
