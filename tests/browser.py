"""A real browser for the tests of report.html: Debian's Chromium, headless, driven by Selenium
through Debian's chromium-driver (both from apt: ``.ci/run`` installs them). Where they are
missing the tests skip, unless ``REQUIRE_BROWSER`` is set (CI): then they fail."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
_INSTALL = "apt-get install --no-install-recommends chromium chromium-driver"


def start_browser() -> Any:
    """A headless Chromium, its console read back (``console_errors``); None where none is here."""
    if not (Path(CHROMIUM).exists() and shutil.which(CHROMEDRIVER)):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # the driver named, so that Selenium Manager looks for none on the network
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    driver = start_browser()
    if driver is None:
        if os.environ.get("REQUIRE_BROWSER"):
            pytest.fail(f"REQUIRE_BROWSER is set, {CHROMIUM} or {CHROMEDRIVER} missing. HINT: {_INSTALL}")
        pytest.skip(f"no {CHROMIUM} and {CHROMEDRIVER} ({_INSTALL})")
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver: Any, page: Path) -> list[str]:
    """Load ``page`` from disk; returns the console's errors while it loaded."""
    driver.get_log("browser")  # what an earlier page left
    driver.get(page.resolve().as_uri())
    return console_errors(driver)


def console_errors(driver: Any) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
