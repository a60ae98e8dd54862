"""Headless Chromium through selenium, for the dashboard tests and scripts/screenshots.py.

Uses the Debian packages (``chromium``, ``chromium-driver``) found on PATH;
selenium's own driver download (Selenium Manager) is never needed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WAIT = 20.0


def find_browser() -> tuple[str, str] | None:
    """(browser, chromedriver) paths, or None when either is not installed."""
    driver = shutil.which("chromedriver")
    browser = next((p for b in BROWSERS if (p := shutil.which(b))), None)
    return (browser, driver) if browser and driver else None


def missing() -> str | None:
    """Why a browser test cannot run here, or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if find_browser() is None:
        return "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
    return None


def make_driver(width: int = 1400, height: int = 1000) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_browser()
    assert found is not None, missing()
    browser, driver = found
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-extensions", "--no-first-run", f"--window-size={width},{height}"):
        opts.add_argument(arg)
    # the browser log, read by console_errors()
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=opts, service=Service(executable_path=driver))
    d.set_page_load_timeout(WAIT)
    d.set_script_timeout(WAIT)
    return d


def console_errors(driver: Any) -> list[str]:
    """Errors the page logged since the last call (reading the log drains it)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait(driver: Any, cond: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll ``cond(driver)`` until truthy; elements replaced by a refresh are retried."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05,
                         ignored_exceptions=(NoSuchElementException,
                                             StaleElementReferenceException)).until(
        cond, f"timed out after {timeout}s waiting for {what}")


def text_of(css: str) -> Callable[[Any], str]:
    from selenium.webdriver.common.by import By

    return lambda d: d.find_element(By.CSS_SELECTOR, css).text


def login_form(driver: Any, base_url: str) -> Any:
    """Open the dashboard logged out; its login form."""
    from selenium.webdriver.common.by import By

    driver.get(base_url + "/")
    driver.execute_script("sessionStorage.clear()")  # credentials live per tab
    driver.refresh()
    # drop what the page logged before: an earlier test's expected errors, or the
    # 401 of a stale login (a user an earlier test deleted) on the first load
    console_errors(driver)
    return wait(driver, lambda d: d.find_element(By.ID, "login").is_displayed()
                and d.find_element(By.ID, "login"), "the login form")


def submit_login(form: Any, user: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    form.find_element(By.NAME, "user").send_keys(user)
    form.find_element(By.NAME, "password").send_keys(password)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def log_in(driver: Any, base_url: str, user: str = "guest", password: str = "guest") -> None:
    """Open the dashboard and log in through its form."""
    from selenium.webdriver.common.by import By

    submit_login(login_form(driver, base_url), user, password)
    wait(driver, lambda d: d.find_element(By.ID, "nav").is_displayed(), "the navigation")


def open_page(driver: Any, hash_path: str, loaded: str) -> None:
    """Go to ``#/<hash_path>`` and wait until its first refresh has rendered."""
    from selenium.webdriver.common.by import By

    # drop the old page's mark first: the hashchange handler runs after this script
    driver.execute_script(
        "document.getElementById('main').removeAttribute('data-loaded');"
        "if (location.hash === arguments[0]) window.dispatchEvent(new HashChangeEvent('hashchange'));"
        "else location.hash = arguments[0];", "#/" + hash_path)
    wait(driver, lambda d: d.find_element(By.ID, "main").get_attribute("data-loaded") == loaded,
         f"page {hash_path!r} to load")


def fill(driver: Any, form_css: str, values: dict[str, str], submit: bool = True) -> None:
    """Type ``values`` into the named fields of a form (replacing what is there;
    a select is chosen by its value) and submit it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    form = driver.find_element(By.CSS_SELECTOR, form_css)
    for name, value in values.items():
        el = form.find_element(By.NAME, name)
        if el.tag_name == "select":
            wait(driver, lambda d, el=el, value=value: any(
                o.get_attribute("value") == value for o in el.find_elements(By.TAG_NAME, "option")),
                f"option {value!r} of {name}")
            Select(el).select_by_value(value)
        else:
            el.clear()
            el.send_keys(value)
    if submit:
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def choose_vhost(driver: Any, vhost: str) -> None:
    """Pick a virtual host ("" = all) in the header's selector."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    el = driver.find_element(By.ID, "vhost")
    wait(driver, lambda d: any(o.get_attribute("value") == vhost
                               for o in el.find_elements(By.TAG_NAME, "option")),
         f"vhost {vhost!r} in the selector")
    Select(el).select_by_value(vhost)


def click_twice(driver: Any, css: str) -> None:
    """A confirm button: the first click arms it, the second acts."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, css).click()
    wait(driver, lambda d: "Confirm" in d.find_element(By.CSS_SELECTOR, css).text,
         f"{css} to ask for confirmation")
    driver.find_element(By.CSS_SELECTOR, css).click()
