#!/usr/bin/env python3
"""Take the dashboard screenshots in docs/images/ (PNG).

Starts a throwaway broker, gives it some queues, a stream, bindings, a policy, dead
letters, users, vhosts and live traffic, then photographs the main pages in headless
Chromium with the same selenium setup as tests/admin/test_dashboard.py.

    .venv/bin/python scripts/screenshots.py [--out docs/images] [--seconds 30]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pika  # noqa: E402

from tests.admin import browser  # noqa: E402
from tests.admin.conftest import AdminBroker, start_admin_broker  # noqa: E402

TRACED = "order-1042"


def setup(b: AdminBroker) -> None:
    """Objects and messages that make the pages worth looking at."""
    conn = b.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("orders", "topic", durable=True)
    ch.queue_declare("orders.dlq", durable=True)
    ch.queue_declare("orders.work", durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"})
    for q, key in (("orders.created", "order.created"), ("orders.shipped", "order.shipped"),
                   ("billing", "order.#"), ("orders.work", "order.created")):
        if q != "orders.work":
            ch.queue_declare(q, durable=True)
        ch.queue_bind(q, "orders", key)
    # a deep queue: past the body window its messages live only on disk (paged out)
    ch.queue_declare("archive", durable=True)
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(1500):
        ch.basic_publish("", "archive", b"archived event %d" % i, persistent)
    # poison messages: rejected from orders.work, so they wait in orders.dlq
    for i in range(5):
        mid = TRACED if i == 0 else f"order-{1043 + i}"
        ch.basic_publish("orders", "order.created", b'{"order": %d, "total": "12.50"}' % (1042 + i),
                         pika.BasicProperties(delivery_mode=2, message_id=mid,
                                              content_type="application/json"))
    for _ in range(5):
        method, _, _ = ch.basic_get("orders.work")
        assert method is not None
        ch.basic_reject(method.delivery_tag, requeue=False)
    # a stream: its page reads entries from an offset
    ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    for i in range(40):
        ch.basic_publish("", "events", b'{"event": "login", "user": %d}' % i,
                         pika.BasicProperties(message_id=f"evt-{i}", timestamp=1764115200 + i))
    conn.close()
    with b.api() as api:
        for vh in ("staging", "reports"):
            api.put(f"/api/vhosts/{vh}", json={"description": f"{vh} apps"}).raise_for_status()
        for user, tags in (("ops-alice", "administrator"), ("grafana", "monitoring"),
                           ("billing-app", "")):
            api.put(f"/api/users/{user}", json={"password": "not-shown",
                                                "tags": tags}).raise_for_status()
        for vh, user, perms in (("/", "billing-app", ("^billing", "^billing", ".*")),
                                ("staging", "billing-app", (".*", ".*", ".*")),
                                ("reports", "grafana", ("", "", ".*"))):
            api.put(f"/api/permissions/{quote(vh, safe='')}/{user}", json=dict(
                zip(("configure", "write", "read"), perms, strict=True))).raise_for_status()
        api.put("/api/policies/%2F/billing-ttl", json={
            "pattern": "^billing$", "definition": {"message-ttl": 3600000},
            "apply-to": "queues"}).raise_for_status()
        # one dead letter goes back and forth, so its trace tells a story
        api.post("/api/queues/%2F/orders.dlq/replay", json={"limit": 1}).raise_for_status()


def traffic(b: AdminBroker, stop: threading.Event) -> None:
    """Publish at a varying rate while a consumer works on orders.created."""
    pub = b.connect()
    ch = pub.channel()
    t0 = time.monotonic()
    keys = ("order.created", "order.shipped", "order.created", "order.paid")
    n = 0
    while not stop.is_set():
        rate = 60 + 40 * math.sin((time.monotonic() - t0) / 5)
        for _ in range(max(1, int(rate / 10))):
            ch.basic_publish("orders", keys[n % len(keys)], b'{"order": %d}' % n)
            n += 1
        pub.sleep(0.1)
    pub.close()


def consumer(b: AdminBroker, stop: threading.Event) -> None:
    conn = b.connect()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=20)
    ch.basic_consume("orders.created", lambda c, m, p, body: c.basic_ack(m.delivery_tag))
    ch.basic_consume("billing", lambda c, m, p, body: c.basic_ack(m.delivery_tag))
    while not stop.is_set():
        conn.process_data_events(time_limit=0.2)
    conn.close()


def charted(driver: Any, points: int) -> None:
    """Wait until the page's first chart has ``points`` samples (one a second)."""
    browser.wait(driver, lambda d: int(d.find_element(
        "css selector", "figure.chart").get_attribute("data-points") or 0) >= points,
        "the charts", timeout=points + 30)


def shoot(driver: Any, path: Path) -> None:
    """The whole page: the window grows to the document's height first."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(int(height) + 20, 700), 2400))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    ap.add_argument("--seconds", type=int, default=30, help="traffic before the overview shot")
    args = ap.parse_args()
    why = browser.missing()
    if why is not None:
        sys.exit(why)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # a small body window, so the deep queue shows paged-out messages
        b = start_admin_broker(Path(tmp), env={"AMQPLITE_BODY_WINDOW": "200"})
        stop = threading.Event()
        driver = None
        threads = [threading.Thread(target=f, args=(b, stop), daemon=True)
                   for f in (traffic, consumer)]
        try:
            setup(b)
            for t in threads:
                t.start()
            driver = browser.make_driver()
            browser.log_in(driver, b.admin_url)
            # reload once a second, so the charts fill within --seconds
            driver.get(b.admin_url + "/?refresh=1#/")
            charted(driver, args.seconds)
            shoot(driver, args.out / "dashboard-overview.png")
            browser.open_page(driver, "queues", "queues")
            shoot(driver, args.out / "dashboard-queues.png")
            browser.open_page(driver, "queue/%2F/orders.dlq", "queue")
            charted(driver, 10)
            driver.find_element("css selector", "#peek-form button").click()
            browser.wait(driver, lambda d: TRACED[:6] in browser.text_of("#messages")(d),
                         "the peeked dead letters")
            shoot(driver, args.out / "dashboard-queue.png")
            browser.open_page(driver, f"trace/{TRACED}", "trace")
            shoot(driver, args.out / "dashboard-trace.png")
            browser.open_page(driver, "queue/%2F/events", "queue")
            browser.wait(driver, lambda d: d.find_elements("css selector", "#entries td.offset"),
                         "the stream entries")
            shoot(driver, args.out / "dashboard-stream.png")
            for page in ("users", "vhosts", "permissions", "policies"):
                browser.open_page(driver, page, page)
                shoot(driver, args.out / f"dashboard-{page}.png")
            errors = browser.console_errors(driver)
            if errors:
                sys.exit(f"the dashboard logged errors: {errors}")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)
            if driver is not None:
                driver.quit()
            b.proc.stop()


if __name__ == "__main__":
    main()
