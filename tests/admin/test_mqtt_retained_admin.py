"""MQTT's retained messages in the admin API, the CLI and the dashboard (issue 23):
listed, shown and cleared under the MQTT exchange (amq.topic) by topic; a clear
commits before it answers, so an MQTT subscriber then gets nothing, also after
a kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.admin import browser
from tests.admin.conftest import AdminBroker, start_mqtt_admin_broker
from tests.brokerproc import wait_for
from tests.server.mqttclient import V5, V311, Client, listening, new_id

RETAINED = "/api/exchanges/%2F/amq.topic/retained"


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_mqtt_admin_broker(tmp_path_factory.mktemp("mqtt-retained-admin"))
    yield b
    b.proc.stop()


def _retain(b: AdminBroker, topic: str, payload: bytes, qos: int = 1) -> None:
    c = Client(b.mqtt_port, new_id(), V311)  # type: ignore[attr-defined]
    assert c.connect()[0] == 0
    c.c.publish(topic, payload, qos, retain=True).wait_for_publish(15)
    c.close()


def _subscriber_gets(b: AdminBroker, topic_filter: str) -> list[bytes]:
    """The retained messages a new subscription receives: every one arrives right after
    the SUBACK, so a live marker published afterwards bounds the wait."""
    c = Client(b.mqtt_port, new_id(), V5)  # type: ignore[attr-defined]
    assert c.connect()[0] == 0
    c.subscribe(topic_filter, 1)
    marker = topic_filter.replace("#", "marker").replace("+", "marker")
    c.publish(marker, b"--marker--", 1)
    got = []
    while True:
        m = c.get()
        if m.payload == b"--marker--" and not m.retain:
            break
        got.append(m.payload)
    c.close()
    return got


def test_api_lists_shows_and_clears_by_topic(mb: AdminBroker) -> None:
    base = new_id()
    _retain(mb, f"{base}/kitchen/temp", b"21.5")
    _retain(mb, f"{base}/hall/temp", b"19", qos=0)
    with mb.api() as api:
        rows = [r for r in api.get(RETAINED).json() if r["key"].startswith(base)]
        assert {(r["topic"], r["routing_key"], r["payload"], r["stored"]) for r in rows} == {
            (f"{base}/kitchen/temp", f"{base}.kitchen.temp", "21.5", True),
            (f"{base}/hall/temp", f"{base}.hall.temp", "19", False)}
        one = api.get(f"{RETAINED}/{base}%2Fkitchen%2Ftemp").json()
        assert [r["payload"] for r in one] == ["21.5"]
        assert api.get(f"{RETAINED}/{base}%2Fnone").status_code == 404
        ex = api.get("/api/exchanges/%2F/amq.topic").json()
        assert ex["retained"]["messages"] >= 2
        # another topic exchange keeps nothing
        assert api.get("/api/exchanges/%2F/amq.direct/retained").status_code == 400
        r = api.delete(f"{RETAINED}/{base}%2Fkitchen%2Ftemp")
        assert r.status_code == 200 and r.json() == {"removed": 1}
        assert api.get(f"{RETAINED}/{base}%2Fkitchen%2Ftemp").status_code == 404
    assert _subscriber_gets(mb, f"{base}/#") == [b"19"]


def test_clear_is_durable(tmp_path: Path) -> None:
    """Cleared through the API, then kill -9: the stored message does not come back."""
    b = start_mqtt_admin_broker(tmp_path / "data")
    try:
        base = new_id()
        _retain(b, f"{base}/a", b"kept")
        _retain(b, f"{base}/b", b"cleared")
        with b.api() as api:
            assert api.delete(f"{RETAINED}/{base}%2Fb").json() == {"removed": 1}
        b.proc.kill()
        b.proc.start()
        wait_for(lambda: listening(b.mqtt_port), 30, what="MQTT after the restart")  # type: ignore[attr-defined]
        assert _subscriber_gets(b, f"{base}/+") == [b"kept"]
        with b.api() as api:
            assert api.delete(RETAINED).json()["removed"] >= 1
        b.proc.kill()
        b.proc.start()
        wait_for(lambda: listening(b.mqtt_port), 30, what="MQTT after the restart")  # type: ignore[attr-defined]
        assert _subscriber_gets(b, f"{base}/+") == []
    finally:
        b.proc.stop()


def _cli(b: AdminBroker, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMQPLITE_ADMIN_URL=b.admin_url, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "amqplite", "retained", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_cli_shows_topics_and_clears(mb: AdminBroker) -> None:
    base = new_id()
    topic = f"{base}/door"
    _retain(mb, topic, b"open")
    out = _cli(mb, "list", "amq.topic")
    assert out.returncode == 0, out.stderr
    assert "MQTT retained messages (exchange amq.topic)" in out.stdout
    assert "Topic" in out.stdout and topic in out.stdout and f"{base}.door" in out.stdout
    shown = _cli(mb, "show", "amq.topic", topic)
    assert f"topic '{topic}', routing key '{base}.door'" in shown.stdout
    assert "body (text): open" in shown.stdout
    data = json.loads(_cli(mb, "list", "amq.topic", topic, "--json").stdout)
    assert [m["topic"] for m in data] == [topic]
    cleared = _cli(mb, "clear", "amq.topic", topic)
    assert "Cleared 1 retained message of exchange 'amq.topic'" in cleared.stdout
    assert _subscriber_gets(mb, f"{base}/#") == []


@pytest.fixture
def dash(mb: AdminBroker) -> Iterator[Any]:
    why = browser.missing()
    if why is not None:
        pytest.skip(why)
    d = browser.make_driver()
    browser.log_in(d, mb.admin_url)
    yield d
    assert browser.console_errors(d) == []
    d.quit()


def test_dashboard_shows_and_clears_mqtt_topics(dash: Any, mb: AdminBroker) -> None:
    from selenium.webdriver.common.by import By

    base = new_id()
    _retain(mb, f"{base}/lamp", b"on")
    _retain(mb, f"{base}/fan", b"off")
    browser.open_page(dash, "exchange/%2F/amq.topic", "exchange")
    row = f'#retained tr[data-key="{base}/lamp"]'
    browser.wait(dash, lambda d: "on" in browser.text_of(row)(d), "the lamp's retained row")
    assert "MQTT retained messages" in browser.text_of("#retained")(dash)
    assert "Topic" in browser.text_of("#retained thead")(dash)
    dash.find_element(By.CSS_SELECTOR, f"{row} button.clear-topic").click()  # arms
    dash.find_element(By.CSS_SELECTOR, f"{row} button.clear-topic").click()  # confirms
    browser.wait(dash, lambda d: not d.find_elements(By.CSS_SELECTOR, row), "the row to go",
                 timeout=20)
    assert _subscriber_gets(mb, f"{base}/+") == [b"off"]
