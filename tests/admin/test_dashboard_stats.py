"""The dashboard's ack, redeliver and get figures in headless Chromium (see test_dashboard.py)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pika
import pytest

from tests.admin import browser
from tests.admin.conftest import AdminBroker, qname
from tests.admin.test_dashboard import by_css as css
from tests.admin.test_dashboard import dash, driver  # noqa: F401 (its browser, logged in)
from tests.brokerproc import wait_for

pytestmark = pytest.mark.timeout(120)
RATE = re.compile(r"^\d+\.\d/s$")


def test_channels_page_shows_ack_redeliver_and_get(dash: Any,  # noqa: F811
                                                   admin_broker: AdminBroker) -> None:
    app, q = qname("dash-stats"), qname("dash-stats-q")
    params = pika.URLParameters(admin_broker.amqp_url)
    params.client_properties = {"connection_name": app}
    amqp = pika.BlockingConnection(params)
    try:
        ch = amqp.channel()
        ch.confirm_delivery()
        ch.queue_declare(q, auto_delete=False)
        for body in (b"a", b"b", b"c"):
            ch.basic_publish("", q, body)
        first, _, _ = ch.basic_get(q)
        ch.basic_nack(first.delivery_tag, requeue=True)  # back, redelivered
        for _ in range(3):
            method, _, _ = ch.basic_get(q)
            ch.basic_ack(method.delivery_tag)
        with admin_broker.api() as api:
            def channel() -> str | None:
                for c in api.get("/api/connections").json():
                    if c["client_properties"].get("connection_name") == app:
                        (chan,) = api.get(f"/api/connections/{quote(c['name'], safe='')}"
                                          "/channels").json()
                        if chan["message_stats"]["ack"] == 3:
                            return str(chan["name"])
                return None
            name = wait_for(lambda: (amqp.process_data_events(0), channel())[1], 20,
                            what="the channel's three acks")
        browser.open_page(dash, "channels", "channels")
        row = f'tr[data-channel="{name}"]'
        browser.wait(dash, lambda d: d.find_elements(*css(row)), "the channel's row")
        for col in ("ack", "redeliver", "get"):
            cell = browser.text_of(f"{row} td.{col}")(dash)
            assert RATE.match(cell), f"{col} column shows {cell!r}"
        dash.find_element(*css(f"{row} a")).click()
        browser.wait(dash, lambda d: d.find_element(*css("#main")).get_attribute("data-loaded")
                     == "channel", "the channel page")
        assert browser.text_of("#ch-ack")(dash).startswith("3 (")
        assert browser.text_of("#ch-redeliver")(dash).startswith("1 (")
        assert browser.text_of("#ch-get")(dash).startswith("4 (")
        browser.open_page(dash, f"queue/%2F/{quote(q, safe='')}", "queue")
        assert browser.text_of("#q-ack")(dash).startswith("3 (")
        assert browser.text_of("#q-redeliver")(dash).startswith("1 (")
        assert browser.text_of("#q-get")(dash).startswith("4 (")
    finally:
        ch.queue_delete(q)
        amqp.close()
