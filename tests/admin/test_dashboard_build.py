"""The dashboard as an operator runs the broker from it (issue 36), in a real headless
Chromium against a broker process with an MQTT listener: who is connected by
protocol and client id, closing a connection, declaring and deleting queues and
exchanges, and pages that show a user only what its tags allow."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest

from tests.admin import browser
from tests.admin.conftest import MONITOR, AdminBroker, qname, start_mqtt_admin_broker
from tests.admin.test_dashboard import by_css as css
from tests.admin.test_dashboard import driver  # noqa: F401 (the module's browser)
from tests.brokerproc import wait_for
from tests.server.mqttclient import V5, V311, Client, new_id

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_mqtt_admin_broker(tmp_path_factory.mktemp("dashboard-build"))
    yield b
    b.proc.stop()


@pytest.fixture
def dash(driver: Any, mb: AdminBroker) -> Iterator[Any]:  # noqa: F811
    """Logged in as the administrator; the test fails if the page logged an error."""
    browser.log_in(driver, mb.admin_url)
    yield driver
    assert browser.console_errors(driver) == []


def _connection_of(mb: AdminBroker, client: str) -> str:
    """The name of the connection whose client id or connection name is ``client``."""
    def find() -> str | None:
        with mb.api() as api:
            for c in api.get("/api/connections").json():
                cp = c["client_properties"]
                if client in (cp.get("client_id"), cp.get("connection_name")):
                    return str(c["name"])
        return None
    return str(wait_for(find, 20, what=f"the connection of {client}"))


def test_connections_show_protocol_and_client_and_close_from_the_page(
        dash: Any, mb: AdminBroker) -> None:
    mqtt_id, mqtt5_id, amqp_name = new_id(), new_id(), qname("dash-app")
    m3 = Client(mb.mqtt_port, mqtt_id, V311)  # type: ignore[attr-defined]
    m5 = Client(mb.mqtt_port, mqtt5_id, V5)  # type: ignore[attr-defined]
    assert m3.connect()[0] == 0 and m5.connect()[0] == 0
    params = pika.URLParameters(mb.amqp_url)
    params.client_properties = {"connection_name": amqp_name}
    amqp = pika.BlockingConnection(params)
    try:
        names = {k: _connection_of(mb, k) for k in (mqtt_id, mqtt5_id, amqp_name)}
        browser.open_page(dash, "connections", "connections")
        row = {k: f'tr[data-connection="{n}"]' for k, n in names.items()}
        browser.wait(dash, lambda d: all(d.find_elements(*css(r)) for r in row.values()),
                     "the three connections")
        assert browser.text_of(f"{row[mqtt_id]} td.protocol")(dash) == "MQTT 3.1.1"
        assert browser.text_of(f"{row[mqtt_id]} td.client")(dash) == mqtt_id
        assert browser.text_of(f"{row[mqtt5_id]} td.protocol")(dash) == "MQTT 5.0"
        assert browser.text_of(f"{row[amqp_name]} td.protocol")(dash) == "AMQP 0-9-1"
        assert browser.text_of(f"{row[amqp_name]} td.client")(dash) == amqp_name

        browser.click_twice(dash, f"{row[mqtt_id]} button.close")
        browser.wait(dash, lambda d: not d.find_elements(*css(row[mqtt_id])), "the row to go")
        assert m3.disconnected.wait(15), "the MQTT client was not disconnected"
        with mb.api() as api:
            assert api.get(f"/api/connections/{quote(names[mqtt_id], safe='')}").status_code == 404
        assert dash.find_elements(*css(row[amqp_name]))  # the others stay
    finally:
        m3.c.loop_stop()
        m5.close()
        if amqp.is_open:
            amqp.close()


def test_queue_declared_and_deleted_through_the_page(dash: Any, mb: AdminBroker) -> None:
    q = qname("dash-made")
    browser.open_page(dash, "queues", "queues")
    browser.fill(dash, "#queue-form", {"name": q, "arguments": "x-max-length=5\nx-note=kept"})
    row = f'tr[data-queue="{q}"]'
    browser.wait(dash, lambda d: d.find_elements(*css(row)), "the new queue")
    with mb.api() as api:
        got = api.get(f"/api/queues/%2F/{q}").json()
    assert got["durable"] is True and got["arguments"] == {"x-max-length": 5, "x-note": "kept"}
    browser.click_twice(dash, f"{row} button.delete")
    browser.wait(dash, lambda d: not d.find_elements(*css(row)), "the queue to go")
    with mb.api() as api:
        assert api.get(f"/api/queues/%2F/{q}").status_code == 404


def test_bad_arguments_are_refused_before_sending(dash: Any, mb: AdminBroker) -> None:
    q = qname("dash-badargs")
    browser.open_page(dash, "queues", "queues")
    browser.fill(dash, "#queue-form", {"name": q, "arguments": "no equals sign"})
    browser.wait(dash, lambda d: "not key=value" in browser.text_of("#flash")(d), "the refusal")
    with mb.api() as api:
        assert api.get(f"/api/queues/%2F/{q}").status_code == 404


def test_exchange_declared_and_deleted_through_the_page(dash: Any, mb: AdminBroker) -> None:
    x = qname("dash-x")
    browser.open_page(dash, "exchanges", "exchanges")
    browser.fill(dash, "#exchange-form", {"name": x, "type": "fanout",
                                          "arguments": '{"alternate-exchange": "amq.fanout"}'})
    row = f'tr[data-exchange="{x}"]'
    browser.wait(dash, lambda d: "fanout" in browser.text_of(row)(d), "the new exchange")
    with mb.api() as api:
        got = api.get(f"/api/exchanges/%2F/{x}").json()
    assert got["type"] == "fanout" and got["durable"] is True
    assert got["arguments"] == {"alternate-exchange": "amq.fanout"}
    # the built-in exchanges offer no delete
    assert not dash.find_elements(*css('tr[data-exchange="amq.topic"] button.delete'))
    browser.click_twice(dash, f"{row} button.delete")
    browser.wait(dash, lambda d: not d.find_elements(*css(row)), "the exchange to go")
    with mb.api() as api:
        assert api.get(f"/api/exchanges/%2F/{x}").status_code == 404


def test_a_monitoring_user_sees_no_forms_it_may_not_use(driver: Any,  # noqa: F811
                                                         mb: AdminBroker) -> None:
    """A monitoring user with only a read permission: the API lets any management
    tag write as itself (RabbitMQ's rule), so it gets get and purge, but no declare,
    delete, bind, publish, close (not its connection), policy or link forms, and no
    "not an administrator" flash."""
    q, x = qname("dash-mon"), qname("dash-mon-x")
    with mb.api() as api:
        assert api.put("/api/permissions/%2F/monitor", json={
            "configure": "", "write": "", "read": ".*"}).status_code in (201, 204)
        assert api.put(f"/api/queues/%2F/{q}", json={"durable": True}).status_code == 201
        assert api.put(f"/api/exchanges/%2F/{x}", json={"type": "x-lvc"}).status_code == 201
        assert api.post(f"/api/exchanges/%2F/{x}/publish", json={
            "routing_key": "eur", "payload": "1.08", "payload_encoding": "string",
            "properties": {}}).status_code == 200
    m = Client(mb.mqtt_port, new_id(), V311)  # type: ignore[attr-defined]
    assert m.connect()[0] == 0
    try:
        browser.log_in(driver, mb.admin_url, *MONITOR)
        forbidden = ("#queue-form", "#exchange-form", "#policy-form", "#shovel-form",
                     "#upstream-form", "#publish-form", "#bind-form", "#move-form",
                     "#replay-form", "#clear-retained", "button.close",
                     "button.delete", "button.edit", "button.restart")
        pages = [("connections", "connections"), ("channels", "channels"),
                 ("exchanges", "exchanges"), ("queues", "queues"), ("bindings", "bindings"),
                 ("policies", "policies"), ("shovels", "shovels"), ("federation", "federation"),
                 (f"queue/%2F/{quote(q)}", "queue"), (f"exchange/%2F/{quote(x)}", "exchange"),
                 ("nodes", "nodes"), ("", "overview")]
        for page, loaded in pages:
            browser.open_page(driver, page, loaded)
            shown = [f for f in forbidden if driver.find_elements(*css(f))]
            assert shown == [], (page, shown)
        # what it may do, it still can: peek, and see the MQTT client
        browser.open_page(driver, "connections", "connections")
        assert browser.wait(driver, lambda d: browser.text_of('tr[data-protocol="MQTT 3.1.1"]')(d),
                            "the MQTT client")
        browser.open_page(driver, f"queue/%2F/{quote(q)}", "queue")
        assert driver.find_elements(*css("#peek-form"))
        assert driver.find_elements(*css("#get-form")) and driver.find_elements(*css("#purge"))
        flash = driver.find_element(*css("#flash"))
        assert not (flash.is_displayed() and "error" in (flash.get_attribute("class") or ""))
        assert browser.console_errors(driver) == []
    finally:
        m.close()
        with mb.api() as api:
            api.delete(f"/api/queues/%2F/{q}")
            api.delete(f"/api/exchanges/%2F/{x}")
            api.delete("/api/permissions/%2F/monitor")


def test_one_retained_message_is_singular(dash: Any, mb: AdminBroker) -> None:
    x = qname("dash-one")
    with mb.api() as api:
        assert api.put(f"/api/exchanges/%2F/{x}", json={"type": "x-lvc"}).status_code == 201
        assert api.post(f"/api/exchanges/%2F/{x}/publish", json={
            "routing_key": "eur", "payload": "1.08", "payload_encoding": "string",
            "properties": {}}).status_code == 200
    try:
        browser.open_page(dash, f"exchange/%2F/{quote(x)}", "exchange")
        text = browser.wait(dash, lambda d: browser.text_of("#x-retained")(d), "the count")
        assert text.startswith("1 message,"), text
    finally:
        with mb.api() as api:
            api.delete(f"/api/exchanges/%2F/{x}")


def test_user_permissions_are_not_under_the_topic_permissions_heading(dash: Any) -> None:
    browser.open_page(dash, "permissions", "permissions")
    browser.wait(dash, lambda d: d.find_elements(*css("#topic-permissions-note")), "the page")
    # the user permissions' table (its Configure column) comes before the topic
    # section's heading and is not inside that section
    before, inside = dash.execute_script("""
        const th = [...document.querySelectorAll('#main th')].find(t => t.textContent === 'Configure');
        const h2 = [...document.querySelectorAll('#main h2')]
            .find(h => h.textContent === 'Topic permissions');
        const table = th.closest('table');
        return [!!(table.compareDocumentPosition(h2) & Node.DOCUMENT_POSITION_FOLLOWING),
                h2.closest('section').contains(table)];""")
    assert before and not inside


def test_bind_and_unbind_on_the_queue_and_exchange_pages(dash: Any, mb: AdminBroker) -> None:
    q, x = qname("dash-bq"), qname("dash-bx")
    with mb.api() as api:
        assert api.put(f"/api/queues/%2F/{q}", json={"durable": True}).status_code == 201
        assert api.put(f"/api/exchanges/%2F/{x}", json={"type": "headers"}).status_code == 201
    pair = f"/api/bindings/%2F/e/{x}/q/{q}"
    try:
        browser.open_page(dash, f"queue/%2F/{quote(q)}", "queue")
        browser.fill(dash, "#bind-form", {"source": x, "routing_key": "k1",
                                          "arguments": "x-match=any\nregion=eu"})
        row = f'tr[data-source="{x}"][data-key="k1"]'
        browser.wait(dash, lambda d: d.find_elements(*css(row)), "the new binding")
        with mb.api() as api:
            got = api.get(pair).json()
        assert [(b["routing_key"], b["arguments"]) for b in got] == [
            ("k1", {"x-match": "any", "region": "eu"})]
        # the default exchange's binding has no unbind
        assert not dash.find_elements(*css('tr[data-source=""] button.unbind'))
        browser.click_twice(dash, f"{row} button.unbind")
        browser.wait(dash, lambda d: not d.find_elements(*css(row)), "the binding to go")
        with mb.api() as api:
            assert api.get(pair).json() == []

        browser.open_page(dash, f"exchange/%2F/{quote(x)}", "exchange")
        browser.fill(dash, "#bind-form", {"type": "queue", "destination": q, "routing_key": "k2"})
        row = f'tr[data-destination="{q}"][data-key="k2"]'
        browser.wait(dash, lambda d: d.find_elements(*css(row)), "the binding from the exchange")
        with mb.api() as api:
            assert [b["routing_key"] for b in api.get(pair).json()] == ["k2"]
        browser.click_twice(dash, f"{row} button.unbind")
        browser.wait(dash, lambda d: not d.find_elements(*css(row)), "the binding to go")
        with mb.api() as api:
            assert api.get(pair).json() == []
    finally:
        with mb.api() as api:
            api.delete(f"/api/queues/%2F/{q}")
            api.delete(f"/api/exchanges/%2F/{x}")


def test_federation_links_show_forwarded_and_restart(dash: Any, mb: AdminBroker) -> None:
    """A link from this broker to itself (upstream exchange ``up``, federated ``down``):
    the Links table counts what it forwarded, and Restart reconnects it."""
    up, down, q, name = qname("dash-up"), qname("dash-down"), qname("dash-fq"), qname("dash-u")
    with mb.api() as api:
        for x in (up, down):
            assert api.put(f"/api/exchanges/%2F/{x}", json={"type": "fanout"}).status_code == 201
        assert api.put(f"/api/queues/%2F/{q}", json={"durable": True}).status_code == 201
        assert api.post(f"/api/bindings/%2F/e/{down}/q/{q}", json={}).status_code == 201
        assert api.put(f"/api/parameters/federation-upstream/%2F/{name}", json={"value": {
            "uri": mb.amqp_url, "exchange": up}}).status_code in (201, 204)
        assert api.put(f"/api/policies/%2F/{name}", json={
            "pattern": f"^{down}$", "apply-to": "exchanges",
            "definition": {"federation-upstream": name}}).status_code in (201, 204)

        def link() -> dict[str, Any] | None:
            rows = [r for r in api.get("/api/federation-links").json() if r["exchange"] == down]
            return rows[0] if rows and rows[0]["status"] == "running" else None
        wait_for(link, 30, what="the federation link to run")
        assert api.post(f"/api/exchanges/%2F/{up}/publish", json={
            "routing_key": "", "payload": "over", "payload_encoding": "string",
            "properties": {}}).status_code == 200
        wait_for(lambda: api.get(f"/api/queues/%2F/{q}").json()["messages"] == 1, 30,
                 what="the forwarded message")
    try:
        browser.open_page(dash, "federation", "federation")
        row = f'#federation-links tr[data-exchange="{down}"]'
        browser.wait(dash, lambda d: browser.text_of(f"{row} td.forwarded")(d) == "1",
                     "the forwarded count")
        dash.find_element(*css(f"{row} button.restart")).click()
        browser.wait(dash, lambda d: "restarted" in browser.text_of("#flash")(d), "the restart")
        # a restarted link counts from zero again
        browser.wait(dash, lambda d: browser.text_of(f"{row} td.forwarded")(d) == "0",
                     "the count to restart")
    finally:
        with mb.api() as api:
            api.delete(f"/api/policies/%2F/{name}")
            api.delete(f"/api/parameters/federation-upstream/%2F/{name}")
            for x in (up, down):
                api.delete(f"/api/exchanges/%2F/{x}")
            api.delete(f"/api/queues/%2F/{q}")


def test_connection_page_shows_its_channels_and_closes_it(dash: Any, mb: AdminBroker) -> None:
    app = qname("dash-detail")
    params = pika.URLParameters(mb.amqp_url)
    params.client_properties = {"connection_name": app}
    amqp = pika.BlockingConnection(params)
    amqp.channel().basic_qos(prefetch_count=7)
    try:
        name = _connection_of(mb, app)
        browser.open_page(dash, "connections", "connections")
        link = f'tr[data-connection="{name}"] a'
        browser.wait(dash, lambda d: d.find_elements(*css(link)), "the connection's link")
        dash.find_element(*css(link)).click()
        browser.wait(dash, lambda d: d.find_element(*css("#main")).get_attribute("data-loaded")
                     == "connection", "the connection page")
        assert browser.text_of("#c-protocol")(dash) == "AMQP 0-9-1"
        assert browser.text_of("#c-client")(dash) == app
        browser.wait(dash, lambda d: "7" in browser.text_of("#connection-channels tbody")(d),
                     "its channel")
        browser.click_twice(dash, "#close-connection")
        browser.wait(dash, lambda d: d.find_element(*css("#main")).get_attribute("data-loaded")
                     == "connections", "back on the list")
        with mb.api() as api:  # closing: the broker waits for pika's Close-Ok
            r = api.get(f"/api/connections/{quote(name, safe='')}")
            assert r.status_code == 404 or r.json()["state"] == "closing"
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            amqp.process_data_events(5)
    finally:
        if amqp.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                amqp.close()


def test_node_page(dash: Any, mb: AdminBroker) -> None:
    browser.open_page(dash, "nodes", "nodes")
    with mb.api() as api:
        node = api.get("/api/nodes").json()[0]
    assert browser.text_of("#n-name")(dash) == node["name"]
    assert " of " in browser.text_of("#n-memory")(dash)


def test_channel_page_shows_its_consumers(dash: Any, mb: AdminBroker) -> None:
    q = qname("dash-chq")
    amqp = pika.BlockingConnection(pika.URLParameters(mb.amqp_url))
    try:
        ch = amqp.channel()
        ch.queue_declare(q, auto_delete=True)
        ch.basic_qos(prefetch_count=3)
        ch.confirm_delivery()
        tag = ch.basic_consume(q, lambda *_a: None)
        amqp.process_data_events(0)
        with mb.api() as api:
            name = wait_for(lambda: next((c["channel_details"]["name"] for c in
                                          api.get("/api/consumers").json()
                                          if c["consumer_tag"] == tag), None),
                            20, what="the consumer")
        browser.open_page(dash, "channels", "channels")
        link = f'tr[data-channel="{name}"] a'
        browser.wait(dash, lambda d: d.find_elements(*css(link)), "the channel's link")
        dash.find_element(*css(link)).click()
        browser.wait(dash, lambda d: tag in browser.text_of("#channel-consumers")(d),
                     "its consumer")
        assert browser.text_of("#ch-prefetch")(dash) == "3"
        assert browser.text_of("#ch-mode")(dash) == "confirm"
    finally:
        amqp.close()
