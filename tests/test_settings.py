"""One settings model: the catalogue of every ``KERNEVO_*`` variable, the start-up check against
it, one-line settings errors, and tests that never touch the real home directory."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from api.settings import ApiSettings
from db.settings import DatabaseSettings
from evolver.settings import EvolverSettings
from kernevo import environment
from kernevo.environment import (
    CATALOGUE,
    NAMES,
    SettingsError,
    check_environment,
    read_settings,
)
from kernevo.settings import LoaderSettings

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_CLASSES = {
    "db/settings.py": DatabaseSettings,
    "api/settings.py": ApiSettings,
    "evolver/settings.py": EvolverSettings,
    "kernevo/settings.py": LoaderSettings,
}

# --- the catalogue knows every name ------------------------------------------------------------


def test_every_settings_field_is_in_the_catalogue_and_back() -> None:
    for module, settings_class in SETTINGS_CLASSES.items():
        fields = {f"KERNEVO_{name.upper()}" for name in settings_class.model_fields}
        assert fields <= NAMES, f"{module}: {sorted(fields - NAMES)} missing from the catalogue"
        listed = {v.name for v in CATALOGUE if module in v.read_by}
        assert listed <= fields, f"catalogue names {sorted(listed - fields)} not in {module}"


# Names that look like variables but are not: the seed kernels' dtype macro (-DKERNEVO_DTYPE=).
_NOT_VARIABLES = {"KERNEVO_DTYPE"}


def _mentioned_names() -> dict[str, str]:
    """Every ``KERNEVO_X`` written in the code, docs, compose file and CI script (not the tests,
    which set unknown names on purpose), with one file that mentions it."""
    files = [ROOT / name for name in ("README.md", "docker-compose.yml", "Dockerfile", ".ci/run")]
    files += sorted((ROOT / "docs").glob("*.md"))
    for folder in ("api", "db", "evaluator", "evolver", "kernevo", "seeds", "scripts"):
        files += sorted((ROOT / folder).rglob("*.py"))
    found: dict[str, str] = {}
    for file in files:
        if not file.is_file() or file.name == "environment.py":  # the catalogue itself
            continue
        for name in re.findall(
            r"KERNEVO_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])", file.read_text(errors="replace")
        ):
            found.setdefault(name, str(file.relative_to(ROOT)))
    return {name: where for name, where in found.items() if name not in _NOT_VARIABLES}


def test_every_variable_the_project_mentions_is_in_the_catalogue() -> None:
    mentioned = _mentioned_names()
    missing = {name: where for name, where in mentioned.items() if name not in NAMES}
    assert not missing, f"add to kernevo/environment.py CATALOGUE: {missing}"
    assert {"KERNEVO_COMPILE_CACHE", "KERNEVO_EVAL_GPU", "KERNEVO_TEST_POSTGRES_URL"} <= NAMES


def _readme_configuration_names() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `KERNEVO_")]
    return [
        name for row in rows for name in re.findall(r"`(KERNEVO_[A-Z0-9_]+)`", row.split("|")[1])
    ]


def test_readme_configuration_table_lists_exactly_the_catalogue() -> None:
    listed = _readme_configuration_names()
    assert len(listed) == len(set(listed)), "a variable is listed twice"
    assert set(listed) == NAMES, (
        f"README lacks {sorted(NAMES - set(listed))}, README extra {sorted(set(listed) - NAMES)}"
    )


# --- the start-up check ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("KERNEVO_GPUS", "KERNEVO_GPU"),
        ("KERNEVO_DATABSE_URL", "KERNEVO_DATABASE_URL"),
        ("KERNEVO_REQUEST_TIMEOUT", "KERNEVO_REQUEST_TIMEOUT_S"),
        ("KERNVEO_GPU", "KERNEVO_GPU"),  # a misspelt prefix is still ours
        ("KERNEV_WORK_DIR", "KERNEVO_WORK_DIR"),
        ("kernevo_gpus", "KERNEVO_GPU"),  # pydantic-settings matches any case
    ],
)
def test_an_unknown_name_is_reported_with_the_closest_known_one(name: str, suggestion: str) -> None:
    (problem,) = check_environment({name: "1"})
    assert (problem.check, problem.name) == ("unknown_variable", name)
    assert problem.message.endswith(f"did you mean {suggestion}?")


def test_far_names_get_the_table_and_unrelated_names_are_ignored() -> None:
    (problem,) = check_environment({"KERNEVO_ZZZ": "1", "KERNEL_GPU": "0", "PATH": "/bin"})
    assert problem.name == "KERNEVO_ZZZ"
    assert problem.message.endswith("see the configuration table in README.md")
    assert check_environment({"kernevo_gpu": "1", "KERNEVO_DATABASE_URL": "sqlite://"}) == []


@pytest.mark.parametrize("value", ["", " ", "\t\n"])
def test_an_empty_value_is_refused(value: str) -> None:
    (problem,) = check_environment({"KERNEVO_WORK_DIR": value})
    assert (problem.check, problem.name) == ("empty_value", "KERNEVO_WORK_DIR")
    assert "unset it for the default (./runs)" in problem.message


def test_a_variable_set_under_two_spellings_is_refused() -> None:
    (problem,) = check_environment({"KERNEVO_GPU": "1", "kernevo_gpu": "2"})
    assert problem.check == "set_twice"


def test_the_llm_key_variable_is_known_once_named() -> None:
    key = {"KERNEVO_OPENAI_KEY": "sk-x"}
    assert [p.check for p in check_environment(key)] == ["unknown_variable"]
    named = {**key, "KERNEVO_LLM_API_KEY_ENV": "KERNEVO_OPENAI_KEY"}
    assert check_environment(named) == []
    assert check_environment(key, also_known=["KERNEVO_OPENAI_KEY"]) == []


def test_several_problems_fit_one_line() -> None:
    problems = check_environment({"KERNEVO_GPUS": "1", "KERNEVO_GPU": "", "KERNEVO_X": "y"})
    line = environment.describe(problems)
    assert "\n" not in line and line.count("KERNEVO_") >= 3
    assert "(and 2 more:" in line


# --- one-line settings errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings_class", "variable", "value", "check", "expects"),
    [
        (LoaderSettings, "KERNEVO_REQUEST_TIMEOUT_S", "abc", "float_parsing", "seconds"),
        (LoaderSettings, "KERNEVO_REQUEST_TIMEOUT_S", "-1", "greater_than", "seconds"),
        (LoaderSettings, "KERNEVO_REQUEST_TIMEOUT_S", "inf", "finite_number", "seconds"),
        (LoaderSettings, "KERNEVO_REQUEST_TIMEOUT_S", "2000", "less_than_equal", "seconds"),
        (LoaderSettings, "KERNEVO_API_URL", "localhost:8000", "value_error", "http://"),
        (LoaderSettings, "KERNEVO_API_URL", "http://[::1", "value_error", "Invalid IPv6 URL"),
        (LoaderSettings, "KERNEVO_API_URL", "http://h:99999", "value_error", "Port out of range"),
        (LoaderSettings, "KERNEVO_API_URL", "http://a b", "value_error", "without spaces"),
        (LoaderSettings, "KERNEVO_API_URL", "http://" + "a" * 5000, "value_error", "at most 4096"),
        (LoaderSettings, "KERNEVO_API_URL", "http://-x-", "value_error", "host name"),
        (LoaderSettings, "KERNEVO_TRUST_LOCAL_KEY", "maybe", "bool_parsing", "true or false"),
        (EvolverSettings, "KERNEVO_GPU", "-1", "greater_than_equal", "device index"),
        (EvolverSettings, "KERNEVO_GPU", "first", "int_parsing", "device index"),
        (EvolverSettings, "KERNEVO_GPU", "1024", "less_than_equal", "device index"),
        (EvolverSettings, "KERNEVO_LLM_BASE_URL", "localhost:11434", "value_error", "http://"),
        (EvolverSettings, "KERNEVO_LLM_API_KEY_ENV", "MY KEY", "value_error", "variable name"),
        (EvolverSettings, "KERNEVO_WORK_DIR", "", "value_error", "empty"),
        (DatabaseSettings, "KERNEVO_DATABASE_URL", " ", "value_error", "empty"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    settings_class: type,
    variable: str,
    value: str,
    check: str,
    expects: str,
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        read_settings(settings_class)
    error = caught.value
    assert (error.check, error.name) == (check, variable)
    message = str(error)
    assert message.startswith(f"{variable}=") and "\n" not in message
    assert expects in message


def test_a_megabyte_value_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEVO_GPU", "9" * 1_000_000)
    with pytest.raises(SettingsError) as caught:
        read_settings(EvolverSettings)
    assert caught.value.check == "int_parsing_size"
    assert len(str(caught.value)) < 300 and "(1000000 characters)" in str(caught.value)


def test_a_secret_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", "   ")
    with pytest.raises(SettingsError) as caught:
        read_settings(ApiSettings)
    assert str(caught.value).startswith("KERNEVO_API_TOKEN (value hidden): is empty")


def test_keyword_arguments_are_named_as_arguments() -> None:
    with pytest.raises(SettingsError) as caught:
        LoaderSettings(request_timeout_s=0)
    assert caught.value.name == "request_timeout_s"
    assert str(caught.value).startswith("request_timeout_s=0: ")  # a number, not quoted text


def test_the_loader_refuses_a_bad_timeout_before_any_cuda_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kernevo

    monkeypatch.setenv("KERNEVO_REQUEST_TIMEOUT_S", "abc")
    with pytest.raises(ValueError, match=r"^KERNEVO_REQUEST_TIMEOUT_S='abc': expected seconds"):
        kernevo.load("trsm", "float64")


def test_the_loader_warns_once_about_an_unknown_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KERNEVO_CACHE_DIRS", "/tmp/x")
    monkeypatch.setattr(environment, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="kernevo"):
        LoaderSettings()
        LoaderSettings()
    warnings = [r.getMessage() for r in caplog.records if "KERNEVO_CACHE_DIRS" in r.getMessage()]
    assert warnings == [
        "kernevo: unknown environment variable KERNEVO_CACHE_DIRS; did you mean KERNEVO_CACHE_DIR?"
    ]


# --- tests never write to the real home ---------------------------------------------------------


def test_home_and_caches_point_into_a_temporary_folder(tmp_path: Path) -> None:
    from evaluator.compile import default_cache_dir

    home = Path.home()
    temporary = Path(tmp_path).parents[1]  # pytest's base temporary folder of this run
    assert temporary in home.parents
    assert LoaderSettings().cache_dir == home / ".cache" / "kernevo"
    assert default_cache_dir() == home / ".cache" / "kernevo" / "cubin"
    assert Path(os.environ["CUPY_CACHE_DIR"]).is_relative_to(home)


def test_a_run_of_tests_leaves_the_home_cache_untouched(tmp_path: Path) -> None:
    """A pytest run in a child whose HOME is a fresh folder: a compile-only evolution job and
    the default-cache compile write their caches, but not under that HOME."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("KERNEVO_", "XDG_"))}
    env.pop("CUPY_CACHE_DIR", None)
    env["HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'base'}",
         "tests/test_settings.py::test_home_and_caches_point_into_a_temporary_folder",
         "tests/test_settings.py::test_the_default_compile_cache_is_written_under_the_run_home",
         "tests/test_evolver_start.py::test_a_compile_only_job_is_recorded_on_each_backend[sqlite]"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 passed" in done.stdout
    assert list(home.iterdir()) == []  # no .cache/kernevo, no .config/kernevo, no .cupy
    written = list((tmp_path / "base").rglob("cubin"))
    assert written, "the child run compiled nothing into its temporary home"


def test_the_default_compile_cache_is_written_under_the_run_home() -> None:
    from evaluator.compile import compile_cubin
    from seeds.registry import get_path

    spec = get_path("trsm_small")
    result = compile_cubin(spec.seed_source(), spec.compile_options("float32", "sm_90"), "sm_90")
    assert result.ok
    assert any((Path.home() / ".cache" / "kernevo" / "cubin").iterdir())
