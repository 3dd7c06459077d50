"""The reports open in headless Chromium: no console error, no network request, a page
that is not blank, and the numbers the manifest holds."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardwise.plan import EpochPlan, Topology
from shardwise.report import plan_view, render_plan

pytestmark = pytest.mark.slow

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-pings",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # belt and braces: no name resolves
    "--window-size=1280,2000",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    assert binary and driver_path, "install Debian's chromium and chromium-driver (make test does)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def _open(driver: Any, page: Path) -> list[str]:
    """Load ``page``; return every URL the page requested (from the DevTools log)."""
    driver.get_log("performance")  # drop what came before
    driver.get_log("browser")
    driver.get(page.as_uri())
    driver.execute_script("return document.readyState")
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _check_page(driver: Any, page: Path, shot: Path) -> None:
    urls = _open(driver, page)
    assert urls and all(u == page.as_uri() or u.startswith("data:") for u in urls), urls
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    broken = driver.execute_script(
        "return [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => "
        "i.id)"
    )
    assert broken == []
    assert driver.execute_script("return document.images.length") >= 3
    png = driver.get_screenshot_as_png()
    shot.write_bytes(png)
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)
    assert pixels.std() > 10 and (pixels < 128).mean() > 0.005  # text and charts, not a blank page


def _cells(driver: Any, table_id: str) -> dict[str, str]:
    rows = driver.execute_script(
        f"return [...document.querySelectorAll('#{table_id} tr')].map(r => [...r.cells].map(c => "
        "c.textContent))"
    )
    return {r[0]: r[1] for r in rows}


def test_the_run_report_renders_with_the_manifest_numbers(
    browser: Any, run_dir: Path, tmp_path: Path
) -> None:
    _check_page(browser, run_dir / "_report.html", tmp_path / "run.png")
    m = json.loads((run_dir / "_manifest.json").read_text())
    summary = _cells(browser, "summary-table")
    for label, key in (
        ("rows in", "rows_in"),
        ("rows out", "rows_out"),
        ("rows quarantined", "quarantined"),
    ):
        assert summary[label] == f"{m[key]:,}"
    ledger = _cells(browser, "ledger-table")
    for op, reasons in m["dropped"].items():
        for reason, n in reasons.items():
            assert ledger[f"{op}: {reason}"] == f"{n:,}"
    quarantine = browser.execute_script(
        "return [...document.querySelectorAll('#quarantine-table tbody tr')].map(r => "
        "r.cells[0].textContent)"
    )
    assert quarantine == [e[0] for e in m["quarantine_examples"]]


def test_the_plan_view_of_64_ranks_by_8_workers_renders(browser: Any, tmp_path: Path) -> None:
    counts = np.random.default_rng(0).integers(200, 2_000, size=1_500)
    plan = EpochPlan(counts, Topology(64, 8, 32, drop_last=False, interleave=8), seed=1)
    view = plan_view(plan, counts * 300, samples_total=int(counts.sum()))
    page = tmp_path / "plan.html"
    page.write_text(render_plan(view))
    _check_page(browser, page, tmp_path / "plan.png")
    steps = _cells(browser, "steps-summary")
    assert steps["steps per rank"] == f"{plan.batches_per_rank:,}"
    assert _cells(browser, "edges-table")["padded"] == f"{plan.num_padded:,}"
    ranks = browser.execute_script(
        "return [...document.querySelectorAll('#rank-table tbody tr')].map(r => "
        "r.cells[0].textContent)"
    )
    assert ranks == ["0-63"]  # every rank the same steps and samples


def test_the_checks_see_a_request_and_a_console_error(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="http://fonts.invalid/x.png">'
        "<script>console.error('boom')</script></body></html>"
    )
    urls = _open(browser, page)
    assert "http://fonts.invalid/x.png" in urls
    assert any("boom" in e["message"] for e in browser.get_log("browser"))
