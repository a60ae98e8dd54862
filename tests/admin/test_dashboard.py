"""The web dashboard in a real headless Chromium against a real broker process.

Skipped when selenium, chromium or chromedriver is missing; scripts/test.sh
installs them, so CI runs these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.admin import browser
from tests.admin.conftest import AdminBroker, publish, qname

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    why = browser.missing()
    if why is not None:
        pytest.skip(why)
    d = browser.make_driver()
    yield d
    d.quit()


@pytest.fixture
def dash(driver: Any, admin_broker: AdminBroker) -> Iterator[Any]:
    """A logged-in dashboard; the test fails if the page logged an error."""
    browser.log_in(driver, admin_broker.admin_url)
    yield driver
    assert browser.console_errors(driver) == []


def by_css(css: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return (By.CSS_SELECTOR, css)


def test_static_files_are_public_typed_and_cached(admin_broker: AdminBroker) -> None:
    with httpx.Client(base_url=admin_broker.admin_url, timeout=10) as c:
        index = c.get("/")
        assert index.status_code == 200
        assert index.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in index.headers["content-security-policy"]
        assert index.headers["x-content-type-options"] == "nosniff"
        assert '<script type="module" src="/static/app.js">' in index.text
        js = c.get("/static/app.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert c.get("/static/app.css").headers["content-type"].startswith("text/css")
        etag = js.headers["etag"]
        again = c.get("/static/app.js", headers={"if-none-match": etag})
        assert again.status_code == 304 and again.content == b""
        assert c.head("/").status_code == 200
        # only files of the static directory exist; the API still needs a login
        for path in ("/static/../static.py", "/static/%2e%2e/static.py", "/static/",
                     "/static/nope.js", "/static/..%2fhttp.py", "/static//etc/passwd"):
            assert c.get(path).status_code == 404, path
        assert c.get("/api/overview").status_code == 401
        assert c.post("/").status_code in (404, 405)


def test_login_failure_is_reported(driver: Any, admin_broker: AdminBroker) -> None:
    browser.submit_login(browser.login_form(driver, admin_broker.admin_url), "guest", "wrong")
    browser.wait(driver, lambda d: "Login failed" in browser.text_of("#login-error")(d),
                 "the login error")
    # the refused API call is the only error the browser logged
    errors = browser.console_errors(driver)
    assert errors and all("401" in e for e in errors), errors


def test_overview_shows_the_version_and_every_page_loads(dash: Any,
                                                          admin_broker: AdminBroker) -> None:
    with admin_broker.api() as api:
        version = api.get("/api/overview").json()["product_version"]
    browser.open_page(dash, "", "overview")
    assert browser.wait(dash, lambda d: browser.text_of("#version")(d),
                        "the version") == f"amqplite {version}"
    assert dash.find_element(*by_css("canvas.chart")).size["height"] > 100
    assert int(dash.find_element(*by_css("figure.chart")).get_attribute("data-points")) >= 1
    for page in ("connections", "channels", "exchanges", "queues", "bindings", "policies"):
        browser.open_page(dash, page, page)
    browser.open_page(dash, "", "overview")


def test_a_missing_queue_says_so(dash: Any) -> None:
    browser.open_page(dash, "queue/%2F/no-such-queue", "not-found")
    assert "no-such-queue" in browser.text_of("#main")(dash)
    # the 404 answer is the only error logged
    errors = browser.console_errors(dash)
    assert errors and all("404" in e for e in errors), errors


def test_publish_from_the_exchange_page_shows_in_queue_depth(dash: Any,
                                                              admin_broker: AdminBroker) -> None:
    q = qname("dash-pub")
    with admin_broker.api() as api:
        assert api.put(f"/api/queues/%2F/{q}", json={"durable": True}).status_code == 201
    browser.open_page(dash, "exchange/%2F/amq.default", "exchange")
    form = dash.find_element(*by_css("#publish-form"))
    form.find_element(*by_css("[name=routing_key]")).send_keys(q)
    form.find_element(*by_css("[name=payload]")).send_keys("hello from the dashboard")
    form.find_element(*by_css("button[type=submit]")).click()
    browser.wait(dash, lambda d: "routed" in browser.text_of("#publish-result")(d),
                 "the publish result")
    browser.open_page(dash, "queues", "queues")
    row = f'tr[data-queue="{q}"]'
    assert browser.wait(dash, lambda d: browser.text_of(f"{row} td.ready")(d) == "1",
                        "the queue depth")
    assert browser.text_of(f"{row} td.paged-out")(dash) == "0"
    # the queue page peeks at it without taking it
    browser.open_page(dash, f"queue/%2F/{quote(q)}", "queue")
    dash.find_element(*by_css("#peek-form button")).click()
    browser.wait(dash, lambda d: "hello from the dashboard" in browser.text_of("#messages")(d),
                 "the peeked message")
    assert browser.text_of("#q-ready")(dash) == "1"


def test_dead_letter_replay_from_the_queue_page(dash: Any, admin_broker: AdminBroker,
                                                 channel: Any) -> None:
    work, dlq = qname("dash-work"), qname("dash-dlq")
    channel.queue_declare(dlq, durable=True)
    channel.queue_declare(work, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    publish(channel, work, b"poison", message_id=f"m-{work}")
    method, _, _ = channel.basic_get(work)
    assert method is not None
    channel.basic_reject(method.delivery_tag, requeue=False)

    browser.open_page(dash, f"queue/%2F/{quote(dlq)}", "queue")
    browser.wait(dash, lambda d: browser.text_of("#q-ready")(d) == "1", "the dead letter")
    dash.find_element(*by_css("#replay")).click()
    browser.wait(dash, lambda d: "moved 1" in browser.text_of("#op-result")(d),
                 "the replay result")
    browser.wait(dash, lambda d: browser.text_of("#q-ready")(d) == "0", "the emptied queue")
    browser.open_page(dash, f"queue/%2F/{quote(work)}", "queue")
    assert browser.wait(dash, lambda d: browser.text_of("#q-ready")(d) == "1",
                        "the message back in its queue")

    # its whole story on the trace page
    browser.open_page(dash, f"trace/{quote('m-' + work)}", "trace")
    events = [e.text for e in dash.find_elements(*by_css("#trace-result td.event"))]
    assert events[0] == "published" and "dead_lettered" in events, events


def test_purge_and_move_from_the_queue_page(dash: Any, admin_broker: AdminBroker,
                                            channel: Any) -> None:
    src, dst = qname("dash-src"), qname("dash-dst")
    for q in (src, dst):
        channel.queue_declare(q, durable=True)
    for i in range(3):
        publish(channel, src, b"m%d" % i)
    browser.open_page(dash, f"queue/%2F/{quote(src)}", "queue")
    form = dash.find_element(*by_css("#move-form"))
    form.find_element(*by_css("[name=limit]")).send_keys("2")
    form.find_element(*by_css("[name=target]")).send_keys(dst)
    form.find_element(*by_css("button[type=submit]")).click()
    browser.wait(dash, lambda d: "moved 2" in browser.text_of("#op-result")(d), "the move")
    purge = dash.find_element(*by_css("#purge"))
    purge.click()  # asks first
    browser.wait(dash, lambda d: "Confirm" in d.find_element(*by_css("#purge")).text,
                 "the purge confirmation")
    dash.find_element(*by_css("#purge")).click()
    browser.wait(dash, lambda d: "purged 1" in browser.text_of("#op-result")(d), "the purge")
    with admin_broker.api() as api:
        assert api.get(f"/api/queues/%2F/{src}").json()["messages_ready"] == 0
        assert api.get(f"/api/queues/%2F/{dst}").json()["messages_ready"] == 2


def test_the_static_files_ship_in_the_wheel() -> None:
    """setup.cfg's package data globs static/* (not recursive): keep the directory flat."""
    from pathlib import Path

    import amqplite.admin.static as static

    root = static.ROOT
    assert (root / "index.html").is_file()
    assert [p.name for p in root.iterdir() if p.is_dir()] == []
    assert {p.suffix for p in root.iterdir()} <= set(static.TYPES)
    cfg = (Path(__file__).resolve().parents[2] / "setup.cfg").read_text()
    assert "amqplite.admin = static/*" in cfg


def test_policy_added_and_deleted_on_the_policies_page(dash: Any,
                                                       admin_broker: AdminBroker) -> None:
    name = qname("dash-pol")
    browser.open_page(dash, "policies", "policies")
    form = dash.find_element(*by_css("#policy-form"))
    form.find_element(*by_css("[name=name]")).send_keys(name)
    form.find_element(*by_css("[name=pattern]")).send_keys(f"^{name}$")
    form.find_element(*by_css("[name=definition]")).send_keys('{"max-length": 7}')
    form.find_element(*by_css("button[type=submit]")).click()
    row = f'tr[data-policy="{name}"]'
    browser.wait(dash, lambda d: "max-length" in browser.text_of(row)(d), "the new policy")
    with admin_broker.api() as api:
        got = api.get(f"/api/policies/%2F/{name}").json()
    assert got["definition"] == {"max-length": 7} and got["apply-to"] == "queues"
    dash.find_element(*by_css(f"{row} button")).click()  # asks first
    browser.wait(dash, lambda d: "Confirm" in browser.text_of(f"{row} button")(d),
                 "the delete confirmation")
    dash.find_element(*by_css(f"{row} button")).click()
    browser.wait(dash, lambda d: not d.find_elements(*by_css(row)), "the policy to go")
    with admin_broker.api() as api:
        assert api.get(f"/api/policies/%2F/{name}").status_code == 404


def test_exchange_page_shows_and_clears_retained_messages(dash: Any, admin_broker: AdminBroker,
                                                          channel: Any) -> None:
    import pika

    x = qname("dash-lvc")
    channel.exchange_declare(x, "x-lvc", durable=True)
    for key, body in (("eur", b"1.08"), ("usd", b"1.00")):
        channel.basic_publish(x, key, body, pika.BasicProperties(delivery_mode=2))
    browser.open_page(dash, f"exchange/%2F/{quote(x)}", "exchange")
    browser.wait(dash, lambda d: "2 messages" in browser.text_of("#x-retained")(d),
                 "the retained count")
    assert "1.08" in browser.text_of('#retained tr[data-key="eur"]')(dash)
    assert "1.00" in browser.text_of('#retained tr[data-key="usd"]')(dash)
    button = dash.find_element(*by_css("#clear-retained"))
    button.click()  # arms
    dash.find_element(*by_css("#clear-retained")).click()  # confirms
    browser.wait(dash, lambda d: "Nothing retained." in browser.text_of("#retained")(d),
                 "the cleared retained list", timeout=20)
    with admin_broker.api() as api:
        assert api.get(f"/api/exchanges/%2F/{x}").json()["retained"]["messages"] == 0
    channel.exchange_delete(x)


def test_a_refused_permission_keeps_the_login(driver: Any, admin_broker: AdminBroker,
                                              channel: Any) -> None:
    """A 401 that refuses one operation (the user's AMQP permissions, as RabbitMQ
    answers) is shown as an error; only a 401 that refuses the login logs out."""
    q = qname("dash-refused")
    channel.queue_declare(q, durable=True)
    user = qname("dash-noread")
    with admin_broker.api() as api:
        assert api.put(f"/api/users/{user}", json={"password": "pw",
                                                   "tags": "administrator"}).status_code == 201
        assert api.put(f"/api/permissions/%2F/{user}", json={
            "configure": "", "write": "", "read": ""}).status_code == 201
    try:
        browser.log_in(driver, admin_broker.admin_url, user, "pw")
        browser.open_page(driver, f"queue/%2F/{quote(q)}", "queue")
        driver.find_element(*by_css("#peek-form button[type=submit]")).click()
        browser.wait(driver, lambda d: "ACCESS_REFUSED" in browser.text_of("#flash")(d),
                     "the refusal shown")
        assert driver.find_element(*by_css("#nav")).is_displayed()
        assert not driver.find_element(*by_css("#login")).is_displayed()
        assert driver.execute_script("return sessionStorage.length") == 1  # still logged in
    finally:
        with admin_broker.api() as api:
            api.delete(f"/api/users/{user}")
