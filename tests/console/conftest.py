"""A broker with its metrics on, ``samsa console`` in front of it, and headless Chromium."""

from __future__ import annotations

import os
import shutil

import pytest
from console_process import ARTIFACTS, ConsoleProcess

from broker_process import BrokerProcess, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory) -> BrokerProcess:
    port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("console-broker"), **{"prometheus.listener": f"http://127.0.0.1:{port}"})
    b.metrics_url = f"http://127.0.0.1:{port}/metrics"
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def console(console_broker) -> ConsoleProcess:
    c = ConsoleProcess(console_broker.bootstrap, "--metrics-url", console_broker.metrics_url)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's headless Chromium through chromedriver (./test installs both)."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("Chromium is missing: apt-get install chromium chromium-driver (./test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
