"""The HTML report in a real browser: headless Chromium (Debian's chromium and chromedriver)
opens the report of a stored run of every kind with no network, and finds the tables and
every chart present and visible, nothing requested beyond the page itself, and the page as
wide as a phone's screen. Screenshots are kept in test-artifacts/browser/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from knoblab import cli
from knoblab.store import Store

GOLDEN = Path(__file__).parent / "data" / "golden"
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts" / "browser"

webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = pytest.mark.skipif(shutil.which("chromedriver") is None
                                or shutil.which("chromium") is None,
                                reason="Chromium and chromedriver are installed by "
                                       "scripts/setup --browser")


def _runs() -> list[tuple[str, str]]:
    store = Store(f"sqlite:///{GOLDEN / 'store.sqlite'}")
    return sorted((run["name"], run["id"]) for run in store.list_runs(limit=1000))


def chrome(offline: bool = True):
    """Headless Chromium under chromedriver; `offline`: no network at all, so that a request
    that leaves the page fails, and is seen."""
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium") or ""
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    # every request the page makes, from the DevTools log
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    if offline:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    return driver


@pytest.fixture(scope="module")
def browser():
    driver = chrome()
    yield driver
    driver.quit()


def _requests(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


@pytest.mark.parametrize(("name", "run_id"), _runs())
def test_the_report_reads_in_a_browser_with_no_network(name: str, run_id: str, tmp_path: Path,
                                                       browser, capsys) -> None:
    from selenium.webdriver.common.by import By

    shutil.copy(GOLDEN / "store.sqlite", tmp_path / "store.sqlite")
    out = tmp_path / "report"
    assert cli.main(["--store", f"sqlite:///{tmp_path / 'store.sqlite'}", "report", run_id,
                     "--out", str(out)]) == 0
    capsys.readouterr()
    result = json.loads((out / "result.json").read_text())
    browser.get_log("performance")  # what earlier pages asked for
    browser.set_window_size(1280, 900)
    browser.get((out / "report.html").as_uri())

    tables = browser.find_elements(By.CSS_SELECTOR, "table.results")
    assert tables and all(t.is_displayed() and t.size["height"] > 0 for t in tables)
    rows = sum(len(t.find_elements(By.CSS_SELECTOR, "tbody tr")) for t in tables)
    assert rows >= len(result["points"]) or result.get("steps")
    images = browser.find_elements(By.CSS_SELECTOR, "figure img")
    assert len(images) == len(list(out.glob("*.png"))) >= 1
    for image in images:
        browser.execute_script("arguments[0].scrollIntoView()", image)
        assert image.is_displayed()
        # decoded: a broken image has no natural size
        assert browser.execute_script("return arguments[0].complete && "
                                      "arguments[0].naturalWidth", image) > 100
    conclusion = browser.find_element(By.CSS_SELECTOR, "p.conclusion")
    assert conclusion.is_displayed() and conclusion.text == result["conclusion"]["text"]

    asked = [url for url in _requests(browser) if not url.startswith("data:")]
    assert asked == [(out / "report.html").as_uri()], asked

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1280, min(int(height) + 100, 12000))
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))

    # A phone: the page is as wide as the screen; wide tables scroll inside their box.
    browser.set_window_size(390, 844)
    width = browser.execute_script("return document.documentElement.scrollWidth")
    viewport = browser.execute_script("return window.innerWidth")
    assert width <= viewport, (width, viewport)
    browser.save_screenshot(str(ARTIFACTS / f"{name}-phone.png"))
