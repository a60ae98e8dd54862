"""The dashboard's Shovels and Federation pages in a real headless Chromium
against a real broker (a shovel from one queue of it to another, through its
own AMQP listener). Skipped, like test_dashboard, without a browser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.admin import browser
from tests.admin.conftest import AdminBroker, qname
from tests.admin.test_dashboard import by_css, driver  # noqa: F401 (the module's browser)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def dash(driver: Any, admin_broker: AdminBroker) -> Iterator[Any]:  # noqa: F811
    browser.log_in(driver, admin_broker.admin_url)
    yield driver
    # the Federation page asks /api/federation-links, 404 on a broker without it
    assert [e for e in browser.console_errors(driver) if "federation-links" not in e] == []


def publish(broker: AdminBroker, queue: str, n: int) -> None:
    conn = broker.connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def test_shovel_added_restarted_and_deleted_on_the_shovels_page(
        dash: Any, admin_broker: AdminBroker) -> None:
    name, src, dst = qname("dash-shovel"), qname("dash-src"), qname("dash-dst")
    browser.open_page(dash, "shovels", "shovels")
    browser.fill(dash, "#shovel-form", {"name": name, "src-queue": src,
                                        "dest-uri": admin_broker.amqp_url, "dest-queue": dst,
                                        "ack-mode": "on-confirm", "src-prefetch-count": "10"})
    row = f'tr[data-shovel="{name}"]'
    browser.wait(dash, lambda d: d.find_element(*by_css(row)).get_attribute("data-state")
                 == "running", "the shovel to run", timeout=40)
    text = browser.text_of(row)(dash)
    assert "guest:guest" not in text and "guest:***" in text and f"queue {dst}" in text
    with admin_broker.api() as api:
        value = api.get(f"/api/parameters/shovel/%2F/{name}").json()["value"]
    assert value["src-queue"] == src and value["src-prefetch-count"] == 10
    assert "src-exchange" not in value  # empty fields are not sent
    publish(admin_broker, src, 5)
    browser.wait(dash, lambda d: browser.text_of(f"{row} td.forwarded")(d) == "5",
                 "5 forwarded", timeout=40)
    # a restart starts the shovel afresh: its count starts again from 0
    dash.find_element(*by_css(f"{row} button.restart")).click()
    browser.wait(dash, lambda d: browser.text_of(f"{row} td.forwarded")(d) == "0",
                 "the restarted shovel", timeout=40)
    browser.wait(dash, lambda d: d.find_element(*by_css(row)).get_attribute("data-state")
                 == "running", "the shovel to run again", timeout=40)
    browser.click_twice(dash, f"{row} button.delete")
    browser.wait(dash, lambda d: not d.find_elements(*by_css(row)), "the shovel to go")
    with admin_broker.api() as api:
        assert api.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404
        assert api.get(f"/api/queues/%2F/{dst}").json()["messages"] == 5


def test_a_refused_shovel_says_why(dash: Any) -> None:
    browser.open_page(dash, "shovels", "shovels")
    browser.fill(dash, "#shovel-form", {"name": qname("bad"), "src-uri": "http://nowhere",
                                        "src-queue": "q", "dest-uri": "amqp://",
                                        "dest-queue": "d"})
    browser.wait(dash, lambda d: "src-uri" in browser.text_of("#flash.error")(d),
                 "the refusal naming the field")
    browser.console_errors(dash)  # the 400 answer


def test_federation_page_lists_upstreams_and_survives_a_missing_status_api(
        dash: Any, admin_broker: AdminBroker) -> None:
    """Without /api/federation-links (federation not on this broker) the page says
    so; upstream parameters, where the broker takes them, are listed."""
    browser.open_page(dash, "federation", "federation")
    assert dash.find_element(*by_css("#upstream-form"))
    with admin_broker.api() as api:
        has_links = api.get("/api/federation-links").status_code == 200
    if has_links:
        assert not dash.find_elements(*by_css("#federation-unavailable"))
    else:
        assert "not available" in browser.text_of("#federation-unavailable")(dash)
    assert "No upstreams." in browser.text_of("#upstreams")(dash)
