"""The console as a user runs it (``headrace console`` in its own process) and a real
headless Chromium (Debian's, through its chromedriver) to drive it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from headrace.testing import ConsoleProcess, EmbeddedBroker, scaled


@pytest.fixture(scope="module")
def console(broker: EmbeddedBroker) -> Iterator[str]:
    """The console's base URL (it samples every 0.5 s, so plots fill quickly)."""
    with ConsoleProcess(broker.bootstrap_servers, sample_seconds=0.5) as c:
        yield c.url


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless Chromium. A missing chromium or chromedriver fails (``make setup`` installs
    them): a missing setup step must not pass as a skip."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "chromium and chromedriver are missing: run make setup"
    options = Options()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--no-first-run",
                 "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.set_page_load_timeout(scaled(60))
    chrome.implicitly_wait(scaled(10))  # find_element waits for what the next page brings
    yield chrome
    chrome.quit()
