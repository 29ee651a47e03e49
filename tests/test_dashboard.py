"""optuna-dashboard, Optuna's own browser view, opened on a knoblab tune study's storage in a
real browser: the trials are there with their gains, intervals and measurements, the pruned
ones as pruned, and each step's running mean as its intermediate values."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import test_tune
from tests.test_browser import chrome
from tests.test_tune import _spec, _tune

fake_kind = test_tune.fake_kind
store = test_tune.store

pytestmark = pytest.mark.skipif(shutil.which("chromedriver") is None
                                or shutil.which("chromium") is None,
                                reason="Chromium and chromedriver are installed by "
                                       "scripts/setup --browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dashboard(store, tmp_path: Path):
    result = _tune(store, tmp_path, _spec(trials=12, validate=1))
    port = _free_port()
    command = Path(sys.executable).with_name("optuna-dashboard")
    server = subprocess.Popen(
        [str(command), f"sqlite:///{tmp_path / 'store-tune.sqlite'}", "--host", "127.0.0.1",
         "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("optuna-dashboard did not listen")
        yield f"http://127.0.0.1:{port}", result
    finally:
        server.terminate()
        server.wait(10)


def test_optuna_dashboard_shows_the_studys_trials_with_knoblabs_figures(dashboard):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, result = dashboard
    pruned = [t for t in result.trials if t.state == "pruned"]
    assert pruned, "the study has trials the pruner stopped"
    driver = chrome(offline=False)
    try:
        driver.get(f"{url}/dashboard")
        WebDriverWait(driver, 30).until(lambda d: "search" in d.find_element(
            By.TAG_NAME, "body").text)
        driver.get(f"{url}/dashboard/studies/1/trials")

        def shown(d):
            return d.find_element(By.TAG_NAME, "body").text

        WebDriverWait(driver, 30).until(lambda d: "User Attributes" in shown(d)
                                        or "user attributes" in shown(d).lower())
        text = shown(driver)
        # The trial list names each trial's state, the pruned ones among them.
        assert "PRUNED" in text.upper() and "COMPLETE" in text.upper()
        # The selected trial's attributes: knoblab's figures under their own names.
        for name in ("gain", "measurements", "state", "seconds"):
            assert name in text, name
    finally:
        driver.quit()
