"""Screenshots of the web page (``/ui/``) over a given database, in headless Chromium.

    python scripts/screenshot_ui.py DB_URL OUT_DIR [--job N] [--program N] [--token T]

Serves ``api.app.create_app(DB_URL)`` with uvicorn on a free 127.0.0.1 port, in this process,
after migrating the database to the Alembic head as ``kernevo serve`` does (``--no-migrate``
to leave it as it is; it must then be at the head already), opens the page in Debian's
``chromium`` driven by Selenium through Debian's ``chromedriver`` (never Selenium Manager: it
would download a browser), pastes a read token into the page's token form, waits until the page
has loaded, and writes to OUT_DIR:

- ``page.png``: the whole page; ``jobs.png``: the jobs table; ``job.png``: the selected job's
  plot, lineage tree and edge diff; ``plot.png``: the plot alone; ``champions.png``: the
  champion table and the selected champion's facts and history;
- ``rendered.json``: what the page showed (counts of rows, dots, tree nodes, diff lines, the
  facts' text), so a screenshot can be checked without looking at it.

The token: ``--token`` (a token of the database, ``kernevo token create --scope read``); without
it the service runs with a random configured ``KERNEVO_API_TOKEN`` for this run only. DB_URL is
any SQLAlchemy URL, e.g. ``sqlite:////tmp/h200-kernevo.db`` for a SQLite file copied from the
GPU host (work on a copy: migrating changes the file). ``--job`` picks the job shown (default:
the newest job with programs), ``--program`` the edge shown (default: the job's best program).
Exit status 0 when every screenshot was written, 1 otherwise (the reason on stderr, one
line): a SQLite file that does not exist or a database without kernevo tables is refused before
anything is created or migrated, and a section the page leaves empty (0 px: the plot of a
database without a job) is named rather than photographed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

# Debian's packages (`apt-get install chromium chromium-driver`); PATH is searched after these.
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
CHROMEDRIVER_CANDIDATES = ("/usr/bin/chromedriver", "chromedriver")
STARTUP_TIMEOUT_S = 30.0
# Seconds to wait for the page to load its data (each load is a few local requests).
PAGE_TIMEOUT_S = 60.0
WINDOW = (1500, 1100)
# A full-page screenshot is cut at this height (pixels): a job with thousands of programs
# scrolls inside its tree panel, so the page itself stays far shorter.
MAX_PAGE_HEIGHT = 12000
# What a refusal of a database that is not a kernevo one (or not there) suggests.
EXISTING_HINT = "give an existing kernevo database, e.g. a copy of the GPU host's"
SHOTS = {
    "jobs.png": "jobs-section",
    "job.png": "job-section",
    "plot.png": "plot",
    "champions.png": "champions-section",
}


def _find(candidates: tuple[str, ...]) -> str | None:
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_paths() -> tuple[str, str] | str:
    """(chromium, chromedriver) paths, or the reason one is missing (one line)."""
    chromium = _find(CHROMIUM_CANDIDATES)
    driver = _find(CHROMEDRIVER_CANDIDATES)
    if chromium is None or driver is None:
        missing = [
            name
            for name, path in (("chromium", chromium), ("chromedriver", driver))
            if path is None
        ]
        return (
            f"{' and '.join(missing)} not found (Debian: apt-get install -y chromium "
            "chromium-driver)"
        )
    return chromium, driver


def start_browser(width: int = WINDOW[0], height: int = WINDOW[1]) -> WebDriver:
    """Headless Chromium through chromedriver at their installed paths, the browser console
    logged (``driver.get_log("browser")``); nothing is downloaded.

    Raises:
        RuntimeError: chromium or chromedriver is not installed.
        selenium.common.exceptions.WebDriverException: the browser does not start.
    """
    paths = browser_paths()
    if isinstance(paths, str):
        raise RuntimeError(paths)
    chromium, chromedriver = paths
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        f"--window-size={width},{height}",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


@contextmanager
def serve(database_url: str, configured_token: str | None = None) -> Iterator[str]:
    """The service over ``database_url`` (already migrated) on a free 127.0.0.1 port, in a
    thread of this process, with ``KERNEVO_API_TOKEN`` = ``configured_token`` (``None``: only
    the database's tokens); yields its base URL, stops it on exit.

    Raises:
        RuntimeError: uvicorn did not start within ``STARTUP_TIMEOUT_S``.
    """
    from api.app import create_app

    saved = os.environ.pop("KERNEVO_API_TOKEN", None)
    try:
        if configured_token is not None:
            os.environ["KERNEVO_API_TOKEN"] = configured_token
        app = create_app(database_url)  # reads the settings once, here
    finally:
        os.environ.pop("KERNEVO_API_TOKEN", None)
        if saved is not None:
            os.environ["KERNEVO_API_TOKEN"] = saved
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the service did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_TIMEOUT_S)
        sock.close()


@dataclass(frozen=True)
class Rendered:
    """What the page showed: rows of the jobs and champion tables, dots of the plot, whether
    its best-so-far line was drawn, nodes of the lineage tree, lines of the edge diff, the
    edge's title, the texts of the facts panel and of the page's status lines (errors)."""

    jobs: int
    plot_points: int
    best_line: bool
    tree_nodes: int
    diff_lines: int
    diff_title: str
    champions: int
    facts: str
    statuses: list[str]


def loads(driver: WebDriver) -> int:
    """How many times the page has finished loading its data."""
    return int(driver.execute_script("return Number(document.body.dataset.loads || 0)"))


def wait_for_loads(driver: WebDriver, count: int, timeout_s: float = PAGE_TIMEOUT_S) -> None:
    """Wait until the page has finished ``count`` loads."""
    WebDriverWait(driver, timeout_s).until(lambda d: loads(d) >= count)


def open_page(
    driver: WebDriver,
    base_url: str,
    *,
    token: str,
    job_id: int | None = None,
    program_id: int | None = None,
) -> None:
    """Open the page (on job ``job_id`` and edge ``program_id`` when given), paste ``token``
    into its token form and wait until it has loaded again with it."""
    fragment = "&".join(
        f"{name}={value}"
        for name, value in (("job", job_id), ("program", program_id))
        if value is not None
    )
    driver.get("about:blank")  # a fresh document, even when only the fragment differs
    driver.get(f"{base_url}/ui/#{fragment}")
    wait_for_loads(driver, 1)
    before = loads(driver)
    driver.find_element(By.ID, "token-input").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()
    wait_for_loads(driver, before + 1)


def rendered(driver: WebDriver) -> Rendered:
    """Read what the page shows now."""

    def count(selector: str) -> int:
        return len(driver.find_elements(By.CSS_SELECTOR, selector))

    def text(element_id: str) -> str:
        return str(driver.find_element(By.ID, element_id).text)

    return Rendered(
        jobs=count("#jobs tbody tr[data-job-id]"),
        plot_points=count("#plot circle.point[data-program-id]"),
        best_line=count("#plot path.best-line") == 1,
        tree_nodes=count("#lineage li.node"),
        diff_lines=count("#diff pre.diff span"),
        diff_title=text("diff-title"),
        champions=count("#champions tbody tr[data-key]"),
        facts=text("facts"),
        statuses=[
            str(node.text) for node in driver.find_elements(By.CSS_SELECTOR, ".status") if node.text
        ],
    )


def full_page_png(driver: WebDriver) -> bytes:
    """The whole page as PNG bytes, beyond the window's height (Chromium's DevTools
    ``Page.captureScreenshot``), cut at ``MAX_PAGE_HEIGHT`` pixels."""
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    content = metrics["cssContentSize"]
    clip = {
        "x": 0,
        "y": 0,
        "width": content["width"],
        "height": min(content["height"], MAX_PAGE_HEIGHT),
        "scale": 1,
    }
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    return base64.b64decode(shot["data"])


class EmptySectionError(RuntimeError):
    """A section of the page to photograph is empty (0 px wide or high)."""


def screenshots(driver: WebDriver, out_dir: Path) -> list[Path]:
    """Write the page's screenshots (module doc) to ``out_dir``; their paths.

    Raises:
        EmptySectionError: a section of ``SHOTS`` is 0 px wide or high (one line naming it).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, element_id in SHOTS.items():
        path = out_dir / name
        element = driver.find_element(By.ID, element_id)
        size = element.size
        if size["width"] == 0 or size["height"] == 0:
            # Chromium refuses with a DevTools error ("Cannot take screenshot with 0 height").
            raise EmptySectionError(
                f"cannot write {name}: the page shows nothing in #{element_id} "
                f"({size['width']}x{size['height']} px; a database without a job has no plot)"
            )
        driver.execute_script("arguments[0].scrollIntoView(true)", element)
        element.screenshot(str(path))
        written.append(path)
    page = out_dir / "page.png"
    page.write_bytes(full_page_png(driver))
    return [page, *written]


def capture(
    database_url: str,
    out_dir: Path,
    *,
    token: str | None = None,
    job_id: int | None = None,
    program_id: int | None = None,
) -> Rendered:
    """Serve ``database_url`` (migrated), open the page with ``token`` (default: a random
    configured token for this run), write the screenshots and ``rendered.json`` to
    ``out_dir``, and return what the page showed."""
    configured = None if token is not None else secrets.token_urlsafe(32)
    with serve(database_url, configured) as base_url:
        driver = start_browser()
        try:
            open_page(
                driver,
                base_url,
                token=token if token is not None else str(configured),
                job_id=job_id,
                program_id=program_id,
            )
            shown = rendered(driver)
            screenshots(driver, out_dir)
        finally:
            driver.quit()
    (out_dir / "rendered.json").write_text(json.dumps(asdict(shown), indent=2) + "\n")
    return shown


def main(argv: list[str] | None = None) -> int:
    """The command line (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url", metavar="DB_URL", help="SQLAlchemy URL of the database")
    parser.add_argument("out_dir", metavar="OUT_DIR", type=Path, help="folder for the PNGs")
    parser.add_argument("--job", type=int, default=None, help="the job to show")
    parser.add_argument("--program", type=int, default=None, help="the edge to show")
    parser.add_argument("--token", default=None, help="a read token of the database")
    parser.add_argument(
        "--no-migrate", action="store_true", help="serve the database as it is (at the head)"
    )
    args = parser.parse_args(argv)
    reason = browser_paths()
    if isinstance(reason, str):
        print(f"screenshot_ui: {reason}", file=sys.stderr)
        return 1
    from selenium.common.exceptions import WebDriverException

    from evolver.errors import StoreError
    from evolver.store import open_existing_store, open_store

    try:
        # Never create a database: a mistyped path would only photograph an empty page.
        if args.no_migrate:
            open_existing_store(args.database_url).dispose()
        else:
            open_store(args.database_url, create=False, hint=EXISTING_HINT).dispose()
        shown = capture(
            args.database_url,
            args.out_dir,
            token=args.token,
            job_id=args.job,
            program_id=args.program,
        )
    except (StoreError, EmptySectionError) as error:
        print(f"screenshot_ui: {error}", file=sys.stderr)
        return 1
    except (WebDriverException, RuntimeError, OSError) as error:
        lines = str(error).strip().splitlines()
        reason = lines[0] if lines else type(error).__name__
        print(f"screenshot_ui: {type(error).__name__}: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(shown), indent=2))
    if shown.statuses:
        print(f"screenshot_ui: the page reported: {shown.statuses}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
