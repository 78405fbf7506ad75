"""A run started from the Prefect UI's form, in headless Chromium, as a user would.

Uses Debian's chromium and chromium-driver (apt), never a downloaded browser.
Skipped with the reason when they are missing, unless SPECSWEEP_REQUIRE_BROWSER=1
(CI), where a missing browser fails.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.e2e.conftest import TARGET, PrefectStack

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        reason = "needs chromium and chromedriver: apt-get install chromium chromium-driver"
        if os.environ.get("SPECSWEEP_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1100")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(20)
    try:
        yield driver
    finally:
        driver.quit()


def test_a_custom_run_from_the_ui_form_completes(prefect_stack: PrefectStack, browser, tmp_path):
    from selenium.webdriver.common.by import By

    d = browser
    d.get(f"{prefect_stack.ui}/deployments")
    d.find_element(
        By.XPATH, "//a[normalize-space()='step-sweep' and contains(@href, '/deployment/')]"
    ).click()
    d.find_element(By.XPATH, "//button[normalize-space()='Run']").click()
    d.find_element(By.XPATH, "//*[normalize-space()='Custom run']").click()

    def field(label: str) -> str:
        """The form field under a parameter's label."""
        return (
            f"//span[normalize-space()='{label}']"
            "/ancestor::div[contains(concat(' ', @class, ' '), ' p-label ')][1]"
        )

    # Change two parameters in the form: the config's name and the run_id.
    name = d.find_element(By.XPATH, field("Name (Optional)") + "//textarea")
    name.clear()
    name.send_keys("ui-form-sweep")
    run_id = field("run_id (Optional)")
    d.find_element(By.XPATH, run_id + "//button[normalize-space()='str']").click()
    # The field re-renders as a text box once its type is str: find it afresh.
    d.find_element(By.XPATH, f"{run_id}//textarea | {run_id}//input").send_keys("ui-run")
    d.find_element(By.XPATH, "//button[@type='submit' and normalize-space()='Submit']").click()

    # The UI confirms with a toast that links to the new flow run; follow it.
    view_run = d.find_element(By.XPATH, "//button[normalize-space()='View run']")
    d.execute_script("arguments[0].click()", view_run)  # the toast is still sliding in
    deadline = time.monotonic() + 30
    while "/runs/flow-run/" not in d.current_url:
        assert time.monotonic() < deadline, d.current_url
        time.sleep(0.3)
    flow_run_id = d.current_url.rstrip("/").split("/runs/flow-run/")[1].split("?")[0]
    run = prefect_stack.wait_state(flow_run_id, {"COMPLETED", "FAILED", "CRASHED"}, 150)
    assert run["state_type"] == "COMPLETED", run["state"]
    assert run["parameters"]["run_id"] == "ui-run"
    assert run["name"] == f"step-sweep/{TARGET}/steps=2"
    d.refresh()
    d.find_element(By.XPATH, "//*[normalize-space()='Completed']")
    d.find_element(By.XPATH, "//*[contains(text(), 'run ui-run: 2 variants x 2 levels')]")  # logs
    shot = tmp_path / "ui-run.png"
    d.save_screenshot(str(shot))
    if os.environ.get("SPECSWEEP_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["SPECSWEEP_SCREENSHOT_DIR"]) / shot.name)

    runs = pd.read_parquet(prefect_stack.project / "results" / "runs")
    row = runs.set_index("run_id").loc["ui-run"]
    assert row["sweep_name"] == "ui-form-sweep" and row["status"] == "completed"
    levels = pd.read_parquet(prefect_stack.project / "results" / "levels" / "ui-run")
    assert len(levels) == 4 and set(levels["status"]) == {"ok"}
