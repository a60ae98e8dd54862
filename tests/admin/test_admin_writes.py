"""Admin writes tell the truth (issue 22, items 2, 3 and 12).

A value the store cannot hold is refused with a 400 naming the field before
anything changes; a definitions import applies all of its document or none
of it; a write whose commit fails answers 500 and leaves nothing behind, in
memory or after a restart.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for

DATA = Path(__file__).parent / "data"


def uid() -> str:
    return uuid.uuid4().hex[:8]


def refused(r: httpx.Response, field: str) -> None:
    """A 400 in RabbitMQ's error shape whose reason names ``field``."""
    assert r.status_code == 400, (r.status_code, r.text)
    body = r.json()
    assert body["error"] == "bad_request"
    assert body["reason"].startswith(field), (field, body["reason"])


def absent(api: httpx.Client, *paths: str) -> None:
    for p in paths:
        assert api.get(p).status_code == 404, p


def post_raw(api: httpx.Client, text: str, url: str = "/api/definitions") -> httpx.Response:
    """The body as written: ``json=`` could not carry a lone surrogate or 1e400."""
    return api.post(url, content=text.encode(), headers={"content-type": "application/json"})


def restart(b: AdminBroker) -> None:
    b.proc.stop()
    b.proc.start()

    def answers() -> bool:
        try:
            return httpx.get(b.admin_url + "/api/openapi.json", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False
    wait_for(answers, 30, what="admin API after restart")


# ------------------------------------------------------------------ item 12
def _bad_documents(tag: str) -> list[tuple[str, str, str]]:
    """(case, JSON text with a good vhost, user and queue before the bad item, field)."""
    vh, user, q = f"v-{tag}", f"u-{tag}", f"q-{tag}"
    head = (f'"vhosts": [{{"name": "{vh}"}}], '
            f'"users": [{{"name": "{user}", "password": "pw", "tags": "management"}}], ')
    good_q = f'{{"name": "{q}", "vhost": "/", "durable": true, "arguments": {{}}}}'

    def doc(rest: str) -> str:
        return "{" + head + rest + "}"
    nested = '{"a": ' * 900 + "1" + "}" * 900
    return [
        ("priority-above-2^63", doc(f'"queues": [{good_q}], "policies": [{{"vhost": "/", '
                                    f'"name": "p-{tag}", "pattern": "^x", "definition": '
                                    f'{{"max-length": 1}}, "priority": {2**64}}}]'),
         "policies[0].priority"),
        ("priority-1e400", doc(f'"queues": [{good_q}], "policies": [{{"vhost": "/", "name": '
                               f'"p-{tag}", "pattern": "^x", "definition": {{"max-length": '
                               '1}, "priority": 1e400}]'),
         "policies[0].priority"),
        ("lone-surrogate-name", doc(f'"queues": [{good_q}, {{"name": "s-{tag}\\ud800", '
                                    '"vhost": "/", "durable": true}]'),
         "queues[1].name"),
        ("user-tags-numbers", "{" + f'"users": [{{"name": "{user}", "password": "pw", '
         '"tags": [1, 2]}], ' + f'"queues": [{good_q}]' + "}", "users[0].tags[0]"),
        ("arguments-900-deep", doc(f'"queues": [{good_q}, {{"name": "d-{tag}", "vhost": "/", '
                                   f'"arguments": {{"x-deep": {nested}}}}}]'),
         "queues[1].arguments.x-deep"),
        ("name-null", doc(f'"queues": [{good_q}, {{"name": null, "vhost": "/"}}]'),
         "queues[1].name"),
        ("durable-string", doc(f'"queues": [{good_q}, {{"name": "f-{tag}", "vhost": "/", '
                               '"durable": "false"}]'),
         "queues[1].durable"),
        ("vhost-object", doc(f'"queues": [{good_q}, {{"name": "o-{tag}", '
                             '"vhost": {"a": 1}}]'),
         "queues[1].vhost"),
        ("name-256-bytes", doc(f'"queues": [{good_q}, {{"name": "{"n" * 256}", "vhost": "/"}}]'),
         "queues[1].name"),
    ]


CASES = [c[0] for c in _bad_documents("x")]


@pytest.mark.parametrize("case", CASES)
def test_import_refuses_what_the_store_cannot_hold(api: httpx.Client, case: str) -> None:
    """Each trigger of items 2 and 12 is a 400 naming the field, and nothing of the
    document exists afterwards (not the vhost, user or queue listed before it)."""
    tag = uid()
    _, text, field = next(c for c in _bad_documents(tag) if c[0] == case)
    refused(post_raw(api, text), field)
    absent(api, f"/api/vhosts/v-{tag}", f"/api/users/u-{tag}", f"/api/queues/%2F/q-{tag}",
           f"/api/policies/%2F/p-{tag}", "/api/queues/%2F/None")


def test_put_refuses_what_the_store_cannot_hold(api: httpx.Client) -> None:
    """PUT endpoints: the same checks, and booleans as strings as RabbitMQ takes them."""
    tag = uid()
    pol = f"/api/policies/%2F/p-{tag}"
    refused(api.put(pol, json={"pattern": "^x", "definition": {"max-length": 1},
                               "priority": 2**64}), "priority")
    refused(api.put(pol, json={"pattern": "^x", "definition": {"max-length": 1},
                               "priority": "3"}), "priority")  # RabbitMQ refuses it too
    absent(api, pol)
    refused(api.put(f"/api/queues/%2F/{'n' * 256}", json={}), "name")
    refused(api.put(f"/api/queues/%2F/a-{tag}", content=b'{"arguments": {"x-a": "\\ud800"}}',
                    headers={"content-type": "application/json"}), "arguments.x-a")
    refused(api.put(f"/api/queues/%2F/y-{tag}", json={"durable": "yes"}), "durable")
    absent(api, f"/api/queues/%2F/a-{tag}", f"/api/queues/%2F/y-{tag}")
    refused(api.put(f"/api/users/u-{tag}", json={"password": "x", "tags": [1]}), "tags[0]")
    absent(api, f"/api/users/u-{tag}")
    # rabbitmqadmin sends booleans as strings; RabbitMQ reads "false" as false
    assert api.put(f"/api/queues/%2F/s-{tag}", json={"durable": "false"}).status_code == 201
    assert api.get(f"/api/queues/%2F/s-{tag}").json()["durable"] is False
    assert api.delete(f"/api/queues/%2F/s-{tag}").status_code == 204


# ---------------------------------------------------------------- items 2, 3
def test_rabbitmq_ha_export_imports_whole(tmp_path: Path) -> None:
    """An export of RabbitMQ 3.10.8 with ha-mode/queue-mode policies, a topic permission
    and a vhost limit: everything it can mean here is imported (the topic permission
    and the vhost limit too, and survive a restart); the rest is named in the answer, none of it
    silently dropped."""
    b = start_admin_broker(tmp_path / "d")
    try:
        with b.api() as api:
            r = post_raw(api, (DATA / "rabbitmq-3.10-ha-export.json").read_text())
            assert r.status_code == 200, r.text
            report = r.json()
            ignored, skipped = "\n".join(report["ignored"]), "\n".join(report["skipped"])
            assert ("policy 'orders-dlx' in vhost 'legacy': ha-mode ignored (classic queue "
                    "mirroring: one node has no mirrors); ha-params ignored") in ignored
            assert "policy 'ha-all'" in ignored and "queue-mode" in ignored
            assert "not created" in ignored  # ha-all holds nothing else
            assert "queue 'orders' in vhost 'legacy': x-queue-mode" in ignored
            assert "topic_permissions" not in skipped and "vhost-limits" not in skipped
        restart(b)
        with b.api() as api:
            assert api.get("/api/users/ops").json()["tags"] == ["monitoring"]
            assert api.get("/api/vhost-limits/legacy").json() == [
                {"vhost": "legacy", "value": {"max-connections": 100}}]
            assert api.get("/api/topic-permissions/legacy/ops").json() == [
                {"user": "ops", "vhost": "legacy", "exchange": "amq.topic",
                 "write": "^ops\\.", "read": ".*"}]
            assert api.get("/api/permissions/legacy/ops").json()["configure"] == "^ops-"
            q = api.get("/api/queues/legacy/orders").json()
            assert q["arguments"] == {"x-queue-mode": "lazy"}
            assert q["policy"] == "orders-dlx"
            assert q["effective_policy_definition"] == {"dead-letter-exchange": "dlx",
                                                        "message-ttl": 60000}
            assert api.get("/api/policies/legacy/ha-all").status_code == 404
            binds = api.get("/api/bindings/legacy/e/orders-x/q/orders").json()
            assert [x["routing_key"] for x in binds] == ["order.#"]
    finally:
        b.proc.stop()


def test_import_refused_half_way_leaves_nothing(tmp_path: Path) -> None:
    """A refusal only the broker can see (a queue that exists with other properties)
    comes after a vhost, a user, an exchange and a policy were applied: all of them
    are undone, in memory and in the store."""
    b = start_admin_broker(tmp_path / "d")
    try:
        with b.api() as api:
            assert api.put("/api/queues/%2F/existing", json={"durable": False}).status_code == 201
            doc = {"vhosts": [{"name": "half"}],
                   "users": [{"name": "half-user", "password": "pw", "tags": []}],
                   "permissions": [{"user": "half-user", "vhost": "half", "configure": ".*",
                                    "write": ".*", "read": ".*"}],
                   "policies": [{"vhost": "/", "name": "half-pol", "pattern": "^half",
                                 "definition": {"max-length": 1}}],
                   "exchanges": [{"name": "half-x", "vhost": "/", "type": "fanout"}],
                   "queues": [{"name": "half-q", "vhost": "/", "durable": True},
                              {"name": "existing", "vhost": "/", "durable": True}]}
            r = api.post("/api/definitions", json=doc)
            refused(r, "queues[1]")
            assert "durable" in r.json()["reason"]
            gone = ("/api/vhosts/half", "/api/users/half-user", "/api/policies/%2F/half-pol",
                    "/api/exchanges/%2F/half-x", "/api/queues/%2F/half-q")
            absent(api, *gone)
        restart(b)
        with b.api() as api:
            absent(api, *gone)
    finally:
        b.proc.stop()


def _refuse(db: Path, table: str, name: str, what: str = "INSERT") -> None:
    """A trigger in the real database file: the broker's commit that inserts (or
    deletes) that row fails (a constraint error, which the writer does not retry),
    as a schema the store cannot satisfy would make it."""
    row = "OLD" if what == "DELETE" else "NEW"
    con = sqlite3.connect(db, timeout=30)
    try:
        con.execute(f"CREATE TRIGGER refuse_{what}_{name.replace('-', '_')} BEFORE {what} "
                    f"ON {table} WHEN {row}.name = '{name}' "
                    "BEGIN SELECT RAISE(ABORT, 'refused by test'); END")
        con.commit()
    finally:
        con.close()


def test_failed_commit_answers_500_and_changes_nothing(tmp_path: Path) -> None:
    """The write's own commit fails: the API says so (never 204), and memory is put back,
    so what the API shows is what a restart finds."""
    b = start_admin_broker(tmp_path / "d")
    try:
        db = b.proc.data_dir / "amqplite.db"
        _refuse(db, "queues", "doomed")
        _refuse(db, "policies", "doomed-pol")
        with b.api() as api:
            # deletes that cannot commit: the user (with its permission) and the
            # policy stay, in memory as in the store
            assert api.put("/api/users/kept", json={"password": "pw"}).status_code == 201
            assert api.put("/api/permissions/%2F/kept", json={"read": ".*"}).status_code == 201
            kept_pol = "/api/policies/%2F/kept-pol"
            assert api.put(kept_pol, json={"pattern": "^k", "definition": {"max-length": 1}}
                           ).status_code == 201
            _refuse(db, "users", "kept", "DELETE")
            _refuse(db, "policies", "kept-pol", "DELETE")
            assert api.delete("/api/users/kept").status_code == 500
            assert api.delete(kept_pol).status_code == 500
            assert api.get("/api/permissions/%2F/kept").json()["read"] == ".*"
            assert api.get(kept_pol).status_code == 200
            doc = {"vhosts": [{"name": "doomed-vh"}],
                   "users": [{"name": "doomed-user", "password": "pw", "tags": []}],
                   "exchanges": [{"name": "doomed-x", "vhost": "/", "type": "direct"}],
                   "queues": [{"name": "doomed", "vhost": "/", "durable": True}]}
            r = api.post("/api/definitions", json=doc)
            assert r.status_code == 500, r.text
            assert "nothing was changed" in r.json()["reason"]
            gone = ["/api/vhosts/doomed-vh", "/api/users/doomed-user",
                    "/api/exchanges/%2F/doomed-x", "/api/queues/%2F/doomed"]
            absent(api, *gone)
            assert api.put("/api/queues/%2F/doomed", json={"durable": True}).status_code == 500
            absent(api, "/api/queues/%2F/doomed")
            pol = "/api/policies/%2F/doomed-pol"
            assert api.put(pol, json={"pattern": "^d", "definition": {"max-length": 1}}
                           ).status_code == 500
            absent(api, pol)
            # other writes go on
            assert api.put("/api/queues/%2F/fine", json={"durable": True}).status_code == 201
        restart(b)
        with b.api() as api:
            absent(api, *gone, pol)
            assert api.get("/api/queues/%2F/fine").status_code == 200
            assert api.get("/api/permissions/%2F/kept").json()["read"] == ".*"
            assert api.get(kept_pol).status_code == 200
    finally:
        b.proc.stop()


def test_confirmed_messages_into_an_imported_queue_survive_restart(tmp_path: Path) -> None:
    """Item 2's scenario: the import with an unstorable policy is refused up front (the
    queue never lives only in memory); imported without it, 50 confirmed messages are
    there after a restart."""
    b = start_admin_broker(tmp_path / "d")
    doc: dict[str, Any] = {
        "queues": [{"name": "imported", "vhost": "/", "durable": True, "arguments": {}}],
        "policies": [{"vhost": "/", "name": "big", "pattern": "^nothing",
                      "definition": {"max-length": 5}, "priority": 2**64}]}
    try:
        with b.api() as api:
            refused(api.post("/api/definitions", content=json.dumps(doc).encode(),
                             headers={"content-type": "application/json"}),
                    "policies[0].priority")
            absent(api, "/api/queues/%2F/imported")
            doc["policies"] = []
            assert api.post("/api/definitions", json=doc).status_code == 204
        c = b.connect()
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("", "imported", f"m{i}".encode(),
                             pika.BasicProperties(delivery_mode=2), mandatory=True)
        c.close()
        restart(b)
        with b.api() as api:
            assert api.get("/api/queues/%2F/imported").json()["messages_ready"] == 50
    finally:
        b.proc.stop()


def test_cli_import_names_what_was_ignored(admin_broker: AdminBroker, tmp_path: Path) -> None:
    """``amqplite definitions import`` prints what the broker ignored; a one-vhost import
    is all or nothing too."""
    vh = f"cli-{uid()}"
    doc = {"vhosts": [{"name": vh}],
           "policies": [{"vhost": vh, "name": "ha", "pattern": ".*",
                         "definition": {"ha-mode": "all", "max-length": 3}}]}
    f = tmp_path / "defs.json"
    f.write_text(json.dumps(doc))
    r = admin_broker.cli("definitions", "import", str(f))
    assert r.returncode == 0, r.stderr
    assert f"ignored: policies[0]: policy 'ha' in vhost '{vh}': ha-mode" in r.stdout
    with admin_broker.api() as api:
        assert api.get(f"/api/policies/{vh}/ha").json()["definition"] == {"max-length": 3}
        r2 = api.post(f"/api/definitions/{vh}", json={"queues": [
            {"name": "fine"}, {"name": "bad", "durable": "no"}]})
        refused(r2, "queues[1].durable")
        absent(api, f"/api/queues/{vh}/fine", f"/api/queues/{vh}/bad")
        assert api.delete(f"/api/vhosts/{vh}").status_code == 204
