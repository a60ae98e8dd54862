"""Patterns users write (listing filters, policies, permissions) run in linear time.

``^(a|a)*$`` against ``"a"*27 + "!"`` takes a backtracking engine 14-18 s, and
the broker runs it on its event loop: every connection of every vhost would
stall. Each test runs the pathological case in a thread while the main thread
keeps doing AMQP round trips on another connection, and checks the longest
gap between two round trips; a stalled loop shows up as that gap.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from tests.admin.conftest import AdminBroker, qname, start_admin_broker
from tests.admin.test_api import is_error
from tests.brokerproc import wait_for

EVIL = "^(a|a)*$"
#: far below the 14 s the old engine spent, far above a round trip on a loaded machine
MAX_GAP = 3.0


def _longest_gap_during(admin_broker: AdminBroker, action: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``action`` in a thread; meanwhile do publish/get round trips; return
    (action's result, longest time one round trip took, first one included)."""
    conn = admin_broker.connect()
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                out["result"] = action()
            except BaseException as exc:  # re-raised in the test thread
                out["error"] = exc

        t = threading.Thread(target=run)
        t.start()
        gap = 0.0
        deadline = time.monotonic() + 60
        while True:
            start = time.monotonic()
            ch.basic_publish("", q, b"ping")
            got = None
            while got is None:
                got = ch.basic_get(q, auto_ack=True)[0]
            gap = max(gap, time.monotonic() - start)
            if not t.is_alive() or time.monotonic() > deadline:
                break
        t.join(60)
        if "error" in out:
            raise out["error"]
        return out.get("result"), gap
    finally:
        conn.close()


@pytest.fixture
def evil_queue(admin_broker: AdminBroker) -> Any:
    name = "a" * 27 + "!"
    conn = admin_broker.connect()
    conn.channel().queue_declare(name)
    yield name
    conn.channel().queue_delete(name)
    conn.close()


def test_listing_regex_is_linear(admin_broker: AdminBroker, api: httpx.Client,
                                 evil_queue: str) -> None:
    def listing() -> httpx.Response:
        return api.get("/api/queues/%2F", params={"page": 1, "name": EVIL, "use_regex": "true"})

    r, gap = _longest_gap_during(admin_broker, listing)
    print(f"longest AMQP round trip during the listing: {gap * 1000:.0f} ms")
    assert r.status_code == 200
    assert evil_queue not in [q["name"] for q in r.json()["items"]]
    assert gap < MAX_GAP


def test_policy_pattern_is_linear(admin_broker: AdminBroker, api: httpx.Client,
                                  evil_queue: str) -> None:
    url = f"/api/policies/%2F/evil-{uuid.uuid4().hex[:6]}"

    def put() -> httpx.Response:
        return api.put(url, json={"pattern": EVIL, "definition": {"max-length": 1000}})

    try:
        r, gap = _longest_gap_during(admin_broker, put)
        print(f"longest AMQP round trip while the policy applied: {gap * 1000:.0f} ms")
        assert r.status_code == 201
        assert api.get(f"/api/queues/%2F/{evil_queue}").json().get("policy") in (None, "")
        assert gap < MAX_GAP
    finally:
        api.delete(url)


def test_permission_pattern_is_linear(admin_broker: AdminBroker, api: httpx.Client) -> None:
    user = f"tenant-{uuid.uuid4().hex[:6]}"
    assert api.put(f"/api/users/{user}", json={"password": "pw", "tags": ""}).status_code == 201
    try:
        assert api.put(f"/api/permissions/%2F/{user}", json={
            "configure": EVIL, "write": ".*", "read": ".*"}).status_code == 201
        params = pika.URLParameters(admin_broker.amqp_url)
        params.credentials = pika.PlainCredentials(user, "pw")

        def declare() -> int:
            conn = pika.BlockingConnection(params)
            try:
                conn.channel().queue_declare("a" * 27 + "!")
            except pika.exceptions.ChannelClosedByBroker as exc:
                return int(exc.reply_code)
            finally:
                if conn.is_open:
                    conn.close()
            return 200

        code, gap = _longest_gap_during(admin_broker, declare)
        print(f"longest AMQP round trip during the permission check: {gap * 1000:.0f} ms")
        assert code == 403
        assert gap < MAX_GAP
    finally:
        api.delete(f"/api/users/{user}")


@pytest.mark.parametrize("pattern", ["(?=a)b", "(a)\\1", "("])
def test_patterns_re2_refuses_get_400(api: httpx.Client, pattern: str) -> None:
    """Look-around and back-references have no linear-time match: refused where defined."""
    pol = f"/api/policies/%2F/bad-{uuid.uuid4().hex[:6]}"
    why = is_error(api.put(pol, json={"pattern": pattern, "definition": {"max-length": 1}}), 400)
    assert "pattern" in why["reason"] and pattern in why["reason"]
    assert api.get(pol).status_code == 404
    r = api.put("/api/permissions/%2F/guest", json={"configure": ".*", "write": pattern,
                                                    "read": ".*"})
    assert "regular expression" in is_error(r, 400)["reason"]
    assert api.get("/api/permissions/%2F/guest").json()["write"] == ".*"
    r = api.get("/api/queues", params={"page": 1, "name": pattern, "use_regex": "true"})
    assert "name" in is_error(r, 400)["reason"]


def test_listing_regex_stays_case_insensitive(api: httpx.Client, admin_broker: AdminBroker) -> None:
    name = qname("CaseQ")
    conn = admin_broker.connect()
    try:
        conn.channel().queue_declare(name, exclusive=True)
        r = api.get("/api/queues/%2F", params={"page": 1, "name": f"^{name.lower()}$",
                                               "use_regex": "true"}).json()
        assert [q["name"] for q in r["items"]] == [name]
    finally:
        conn.close()


def test_stored_pattern_re2_refuses_does_not_stop_a_start(tmp_path: Path) -> None:
    """A row written by an older version (Python's re took look-arounds) comes back
    matching nothing, logged; the broker starts and the rest works."""
    data = tmp_path / "d"
    b = start_admin_broker(data)
    try:
        with b.api() as api:
            assert api.put("/api/users/old", json={"password": "pw", "tags": ""}).status_code == 201
            assert api.put("/api/permissions/%2F/old", json={
                "configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
            assert api.put("/api/policies/%2F/old", json={
                "pattern": "^lim", "definition": {"max-length": 1}}).status_code == 201
    finally:
        b.proc.stop()
    with sqlite3.connect(data / "amqplite.db", timeout=10) as db:
        db.execute("UPDATE policies SET pattern = '^(?=lim)' WHERE name = 'old'")
        db.execute("UPDATE permissions SET configure = '(?!x)' WHERE user = 'old'")
    b = start_admin_broker(data)
    try:
        with b.api() as api:
            assert api.get("/api/policies/%2F/old").json()["pattern"] == "^(?=lim)"
            conn = b.connect()
            ch = conn.channel()
            ch.queue_declare("lim-q", exclusive=True)
            for _ in range(3):
                ch.basic_publish("", "lim-q", b"x")
            assert wait_for(lambda: ch.queue_declare("lim-q", passive=True)
                            .method.message_count == 3, 10, what="3 messages, no limit")
            conn.close()
            params = pika.URLParameters(b.amqp_url)
            params.credentials = pika.PlainCredentials("old", "pw")
            conn = pika.BlockingConnection(params)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
                conn.channel().queue_declare("mine")
            assert exc.value.reply_code == 403
            conn.close()
        assert "does not compile" in b.proc.log()
    finally:
        b.proc.stop()
