"""The web page in headless Chromium (Debian's ``chromium`` and ``chromedriver``, driven by
Selenium through ``scripts/screenshot_ui.py``): the service runs with uvicorn on a free
127.0.0.1 port over a SQLite database holding the demo job of tests/web_demo.py, and the page
must show the jobs with their progress, the best score over iterations, the lineage tree with
an edge's diff and score change, the champion table with speedups, and the champion's facts
and promotion history — with no browser error but the 401s of the reads made before a token
is pasted (a CSP violation or a script error would be one). Screenshots are kept in
``tests/artifacts/web/`` (ignored by git).

Skipped, with the reason, only where chromium or chromedriver is not installed (CI installs
both: .ci/run).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import create_api_token
from script_module import load_script
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait
from web_demo import DemoJob, build_demo_job

ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "web"
WAIT_S = 30.0


ui = load_script("screenshot_ui.py", "screenshot_ui")
_BROWSER = ui.browser_paths()
pytestmark = pytest.mark.skipif(
    isinstance(_BROWSER, str), reason=f"no headless browser: {_BROWSER}"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DemoJob, str]]:
    """(base URL, demo job, read token): the service over a fresh SQLite database with the
    demo job, no configured token (the page must work with a database read token)."""
    from db.migrate import upgrade

    folder = tmp_path_factory.mktemp("web")
    url = f"sqlite:///{folder / 'kernevo.db'}"
    upgrade(url)
    demo = build_demo_job(url, folder / "keys")
    token = create_api_token(url, "read", "web-page")
    with ui.serve(url) as base_url:
        yield base_url, demo, token


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = ui.start_browser()
    try:
        yield driver
    finally:
        driver.quit()


def _text(driver: WebDriver, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def _severe(driver: WebDriver) -> list[str]:
    """The browser console's errors since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_without_a_token_the_page_asks_for_one_and_shows_the_open_champions(
    site: tuple[str, DemoJob, str], browser: WebDriver
) -> None:
    base_url, _, _ = site
    browser.get(f"{base_url}/")  # redirected to /ui/
    ui.wait_for_loads(browser, 1)
    assert browser.current_url.startswith(f"{base_url}/ui/")
    assert "needs a read token" in _text(browser, "jobs-status")
    # The database holds a job: an unread table must not say "no jobs yet" (a trial's finding).
    assert browser.find_element(By.CSS_SELECTOR, "#jobs tbody").text == (
        "jobs not read: see the line above"
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#champions tbody tr[data-key]")) == 1
    assert "no token" in _text(browser, "token-state")
    errors = _severe(browser)
    assert errors and all("401" in message for message in errors), errors


def test_the_page_shows_jobs_plot_lineage_diff_champions_and_facts(
    site: tuple[str, DemoJob, str], browser: WebDriver
) -> None:
    base_url, demo, token = site
    ids = demo.program_ids
    ui.open_page(browser, base_url, token=token)
    before_token = _severe(browser)  # the reads made before the token was pasted
    assert all("401" in message for message in before_token), before_token
    shown = ui.rendered(browser)
    assert shown.statuses == []
    assert "a token is set" in _text(browser, "token-state")
    assert browser.execute_script("return sessionStorage.getItem('kernevo.token')") == token

    # Jobs and their progress.
    assert shown.jobs == 1
    row = browser.find_element(By.CSS_SELECTOR, f"#jobs tr[data-job-id='{demo.job_id}']")
    for expected in ("trsm_small", "float64", "nvidia-h200", "complete", "11 / 12", "2.310"):
        assert expected in row.text
    progress = row.find_element(By.TAG_NAME, "progress")
    assert (progress.get_attribute("value"), progress.get_attribute("max")) == ("11", "12")

    # The plot: one dot per scored program (the unevaluated one has none), the best line.
    assert shown.plot_points == len(demo.scores) == 11
    assert shown.best_line
    assert f"best 2.310 (program #{ids['i9']}) after iteration 10" in _text(browser, "plot-caption")
    failed = "#plot circle.state-failed[data-program-id]"  # the legend's dot has no program
    failed_dots = browser.find_elements(By.CSS_SELECTOR, failed)
    assert len(failed_dots) == 2

    # The lineage tree, the best program selected and its edge's diff shown.
    assert shown.tree_nodes == 12
    best = browser.find_element(By.CSS_SELECTOR, f"#lineage li[data-program-id='{ids['i9']}']")
    assert (
        "best" in best.text and "+0.260" in best.text and "selected" in best.get_attribute("class")
    )
    assert shown.diff_title == f"#{ids['i7']} → #{ids['i9']}"
    diff = _text(browser, "diff")
    assert "2.050 (verified) → 2.310 (verified)" in diff and "+0.260" in diff
    assert f"+++ program-{ids['i9']}.cu" in diff
    added = browser.find_elements(By.CSS_SELECTOR, "#diff pre.diff span.add")
    removed = browser.find_elements(By.CSS_SELECTOR, "#diff pre.diff span.del")
    assert len(added) == len(removed) >= 1
    for span in added:
        assert span.text[1:] in demo.sources["i9"] and span.text[1:] not in demo.sources["i7"]

    # Another edge: a click on the failed child in the tree, then a dot of the plot.
    browser.find_element(By.CSS_SELECTOR, f"#lineage li[data-program-id='{ids['i6']}']").click()
    WebDriverWait(browser, WAIT_S).until(
        lambda d: _text(d, "diff-title") == f"#{ids['i4']} → #{ids['i6']}"
    )
    assert "1.620 (scored) → 0.000 (failed)" in _text(browser, "diff")
    assert "−1.620" in _text(browser, "diff")
    assert f"program={ids['i6']}" in browser.current_url
    browser.find_element(By.CSS_SELECTOR, f"#plot circle[data-program-id='{ids['i2']}']").click()
    WebDriverWait(browser, WAIT_S).until(
        lambda d: _text(d, "diff-title") == f"#{ids['seed']} → #{ids['i2']}"
    )

    # The champion table with speedups, and the selected champion's facts and history.
    assert shown.champions == 1
    champion = browser.find_element(By.CSS_SELECTOR, "#champions tbody tr[data-key]")
    for expected in ("nvidia-h200", "trsm", "trsm_small", "m64n64", "2.31×", "signed"):
        assert expected in champion.text
    assert "16×16 2.31× · 48×48 2.31× · 64×64 2.31×" in champion.text
    facts = _text(browser, "facts")
    for expected in (
        "kernevo.certificate.v2",
        "held_out_shapes",
        "sanitizer_racecheck",
        "version 2025.3.1.0",
        "NVIDIA driver 580.95.05",
        "noise floor\n2.0 %",
        "4 seeds, 2 held-out seeds",
        "dtypes other than float64",
        "PROMOTION HISTORY (2)",
        demo.signing_key_id,
    ):
        assert expected in facts, expected
    history = browser.find_elements(By.CSS_SELECTOR, "#facts table.history tbody tr")
    assert [row.text.split()[3] for row in history] == [f"#{ids['i9']}", f"#{ids['i7']}"]

    # The filters come from the champions and ask the API with them.
    dtype = Select(browser.find_element(By.ID, "filter-dtype"))
    assert [option.text for option in dtype.options] == ["any", "float64"]
    dtype.select_by_visible_text("float64")
    WebDriverWait(browser, WAIT_S).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#champions tbody tr[data-key]")) == 1
    )
    assert _severe(browser) == []  # no script error, no CSP violation, no failed request

    written = ui.screenshots(browser, ARTIFACTS)
    assert [path.name for path in written] == ["page.png", *ui.SHOTS]
    for path in written:
        width, height = _png_size(path)
        assert width > 300 and height > 80, (path, width, height)
    page_width, page_height = _png_size(ARTIFACTS / "page.png")
    assert page_height > 1200  # the whole page, not one window's height
    (ARTIFACTS / "rendered.json").write_text(json.dumps(shown.__dict__, indent=2) + "\n")


def test_the_screenshot_script_writes_every_picture_of_a_given_database(
    tmp_path: Path,
) -> None:
    """``scripts/screenshot_ui.py DB_URL OUT_DIR --job … --program …``, as the lead runs it
    on a database exported from the GPU host: it migrates, serves with a token of its own,
    opens the page on the given job and edge, and writes the pictures and what they show."""
    url = f"sqlite:///{tmp_path / 'exported.db'}"
    from db.migrate import upgrade

    upgrade(url)
    demo = build_demo_job(url, tmp_path / "keys")
    out = tmp_path / "shots"
    code = ui.main([url, str(out), "--job", str(demo.job_id), "--program",
                    str(demo.program_ids["i4"])])  # fmt: skip
    assert code == 0
    shown = json.loads((out / "rendered.json").read_text())
    assert shown["diff_title"] == f"#{demo.program_ids['i2']} → #{demo.program_ids['i4']}"
    assert (shown["jobs"], shown["tree_nodes"], shown["champions"]) == (1, 12, 1)
    assert sorted(path.name for path in out.glob("*.png")) == sorted(["page.png", *ui.SHOTS])


# --- the fresh-user trial's job view: a compile-only job's speedup, a failed job's reason, the
# plot legend's counts ---------------------------------------------------------------------------

# A failed job's reason as the runner stores it (bare: no 'job N failed:'), and one holding
# markup, which the page must show as text.
REASON = "Evolution failed: 0/1 iterations produced a program (last: no valid diffs found)"
MARKUP_REASON = 'its workers died: <img src=x onerror="document.title=1"> &amp; exit 9'
NOTHING_TIMED = "n/a: nothing timed (a compile-only job, or no candidate passed)"


def _trial_jobs(url: str) -> dict[str, int]:
    """Jobs like the trial's, by name: ``compile_only`` (complete, best score and speedup 0:
    nothing timed), ``waiting`` (no best yet), ``failed`` (a scored seed and, at iteration 1,
    the trial's #294: a program whose diff did not apply, ``diff_error``, then failed with
    :data:`REASON`), ``markup`` (failed with :data:`MARKUP_REASON`), ``unexplained`` (failed
    with no stored reason, as rows stored before the field)."""
    from db import repository as repo
    from db.session import make_engine, session_scope

    engine = make_engine(url)
    ids: dict[str, int] = {}
    try:
        with session_scope(engine) as s:
            for name in ("compile_only", "waiting", "failed", "markup", "unexplained"):
                job = repo.create_job(
                    s, path="trsm_small", dtype="float64", gpu="nvidia-h200",
                    shape_bucket="m64n64", config={"path": "trsm_small", "iterations": 2},
                    backend="offline", model=None,
                )  # fmt: skip
                ids[name] = job.id
                if name == "waiting":
                    continue
                repo.update_job_progress(s, job.id, state="running", iteration=0)
            seed, _ = repo.record_program(
                s, job_id=ids["failed"], uid="seed", source="// seed", parent_uid=None,
                island=0, generation=0, iteration=0, diff=None, backend="offline", model=None,
            )  # fmt: skip
            child, _ = repo.record_program(
                s, job_id=ids["failed"], uid="failed-294", source="// seed", parent_uid="seed",
                island=0, generation=1, iteration=1, diff=None, backend="offline", model=None,
            )  # fmt: skip
            ids["seed"], ids["diff_error"] = seed.id, child.id
            for program, score, state, kind in ((seed, 0.94, "scored", None),
                                                (child, 0.0, "failed", "diff_error")):  # fmt: skip
                repo.record_evaluation(
                    s, program_id=program.id, report_json={"status": kind or "ok"},
                    gpu_key="nvidia-h200", gpu_name="NVIDIA H200", arch="sm_90",
                    driver_version=None, nvrtc_version=None, score=score, state=state,
                    error_kind=kind,
                )  # fmt: skip
            repo.update_job_progress(
                s, ids["compile_only"], state="complete", iteration=2, best_score=0.0,
                best_speedup=0.0,
            )  # fmt: skip
            for name, reason in (("failed", REASON), ("markup", MARKUP_REASON),
                                 ("unexplained", None)):  # fmt: skip
                repo.update_job_progress(
                    s, ids[name], state="failed", iteration=1, last_failure_kind="error",
                    failure_reason=reason,
                )  # fmt: skip
    finally:
        engine.dispose()
    return ids


@pytest.fixture(scope="module")
def trial_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict, str]]:
    """(base URL, :func:`_trial_jobs`' ids, read token) over a fresh SQLite database."""
    from db.migrate import upgrade

    folder = tmp_path_factory.mktemp("web-trial")
    url = f"sqlite:///{folder / 'kernevo.db'}"
    upgrade(url)
    ids = _trial_jobs(url)
    token = create_api_token(url, "read", "web-trial")
    with ui.serve(url) as base_url:
        yield base_url, ids, token


def _api_jobs(base_url: str, token: str) -> dict[int, dict]:
    """``GET /v1/jobs`` as the CLI reads it, by id."""
    import urllib.request

    request = urllib.request.Request(
        f"{base_url}/v1/jobs", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
        return {row["id"]: row for row in json.load(answer)}


def _open(driver: WebDriver, base_url: str, **where: Any) -> None:
    """``ui.open_page``, then drop the 401s of the reads made before the token was pasted."""
    ui.open_page(driver, base_url, **where)
    before_token = _severe(driver)
    assert all("401" in message for message in before_token), before_token


def _cell(driver: WebDriver, job_id: int, column: int) -> WebElement:
    return driver.find_element(
        By.CSS_SELECTOR, f"#jobs tr[data-job-id='{job_id}'] td:nth-child({column})"
    )


SPEEDUP_COLUMN, STATE_COLUMN, SCORE_COLUMN = 8, 5, 7


def test_a_job_with_nothing_timed_shows_no_speedup_as_kernevo_jobs_does(
    trial_site: tuple[str, dict, str], browser: WebDriver
) -> None:
    """The trial's compile-only job showed ``0.00×`` where ``kernevo jobs`` shows ``-``: the
    service sends ``null`` (nothing timed) and the cell says why on hover (jobs.js)."""
    from kernevo.cli.job_table import _job_line

    base_url, ids, token = trial_site
    _open(browser, base_url, token=token, job_id=ids["compile_only"])
    rows = _api_jobs(base_url, token)
    assert rows[ids["compile_only"]]["best_speedup"] is None  # the row's 0.0 is not served
    # The CLI's rule, for the same row: best 0.000, speedup '-'.
    assert " 0.000       -  " in _job_line(rows[ids["compile_only"]])
    cell = _cell(browser, ids["compile_only"], SPEEDUP_COLUMN)
    assert (cell.text, cell.get_dom_attribute("title")) == ("—", NOTHING_TIMED)
    assert _cell(browser, ids["compile_only"], SCORE_COLUMN).text == "0.000"
    waiting = _cell(browser, ids["waiting"], SPEEDUP_COLUMN)  # no best yet: absent, no "why"
    assert (waiting.text, waiting.get_dom_attribute("title")) == ("—", None)
    assert "0.00×" not in browser.find_element(By.ID, "jobs").text
    assert _severe(browser) == []


def test_a_failed_jobs_reason_is_shown_in_kernevo_jobs_words(
    trial_site: tuple[str, dict, str], browser: WebDriver
) -> None:
    """The job view names why a failed job failed (``#job-failure``, jobs.js
    ``failureLine``), the line ``kernevo jobs`` prints; the state badge says it on hover."""
    from kernevo.cli.job_table import _failure_lines

    base_url, ids, token = trial_site
    rows = _api_jobs(base_url, token)
    _open(browser, base_url, token=token, job_id=ids["failed"])
    line = f"job {ids['failed']} failed: {REASON}"
    assert _failure_lines([rows[ids["failed"]]]) == [line]
    assert _text(browser, "job-failure") == line
    assert (
        _cell(browser, ids["failed"], STATE_COLUMN)
        .find_element(By.CSS_SELECTOR, "span.badge")
        .get_dom_attribute("title")
        == line
    )

    # Markup in a reason is text: shown whole, no element made from it.
    _cell(browser, ids["markup"], 1).click()
    WebDriverWait(browser, WAIT_S).until(
        lambda d: _text(d, "job-failure") == f"job {ids['markup']} failed: {MARKUP_REASON}"
    )
    assert browser.find_elements(By.CSS_SELECTOR, "#job-section img, #jobs img") == []
    assert browser.title == "kernevo"

    # No line for a failed job without a stored reason, nor for a job that did not fail.
    for name in ("unexplained", "compile_only"):
        _cell(browser, ids[name], 1).click()
        WebDriverWait(browser, WAIT_S).until(
            lambda d, name=name: f"Job #{ids[name]}:" in _text(d, "job-title")
        )
        assert _text(browser, "job-failure") == "", name
        assert not browser.find_element(By.ID, "job-failure").is_displayed(), name
    assert _severe(browser) == []


def _legend(driver: WebDriver) -> dict[str, str]:
    return {
        str(entry.get_attribute("data-state")): str(entry.find_element(By.TAG_NAME, "text").text)
        for entry in driver.find_elements(By.CSS_SELECTOR, "#plot g.legend-entry")
    }


def _dots(driver: WebDriver, state: str) -> int:
    dots = f"#plot circle.state-{state}[data-program-id]"  # the legend's own have no program
    return len(driver.find_elements(By.CSS_SELECTOR, dots))


def test_the_plot_legend_counts_the_dots_it_colours(
    trial_site: tuple[str, dict, str], site: tuple[str, DemoJob, str], browser: WebDriver
) -> None:
    """The trial's legend said ``failed (0)`` beside a failed program (a diff that did not
    apply, ``diff_error``) plotted at iteration 1: plot.js ``legendCounts`` counts the plotted
    dots by the state that colours them."""
    base_url, ids, token = trial_site
    _open(browser, base_url, token=token, job_id=ids["failed"], program_id=ids["seed"])
    failed = f"#plot circle[data-program-id='{ids['diff_error']}']"
    dot = browser.find_element(By.CSS_SELECTOR, failed)
    assert "state-failed" in dot.get_attribute("class")
    assert "iteration 1" in dot.find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert _legend(browser) == {"verified": "verified (0)", "scored": "scored (1)",
                                "failed": "failed (1)"}  # fmt: skip
    assert "2 programs plotted" in _text(browser, "plot-caption")

    # The demo job: a compile error and a wrong answer fail; the promoted programs are verified.
    demo_url, demo, demo_token = site
    _open(browser, demo_url, token=demo_token, job_id=demo.job_id)
    legend = _legend(browser)
    assert legend["failed"] == "failed (2)"
    for state, text in legend.items():
        assert text == f"{state} ({_dots(browser, state)})", (state, text)
    assert sum(_dots(browser, state) for state in legend) == len(demo.scores) == 11
    assert _severe(browser) == []
