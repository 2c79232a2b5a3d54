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

import pytest
from conftest import create_api_token
from script_module import load_script
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
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
