"""The CLI with rabbitmqadmin's habits (issue 36): options before or after the command,
-f table|json|tsv|csv, declare/delete/list with key=value arguments, added vs updated,
no trailing blanks. The real ``amqplite`` command against a real broker."""

from __future__ import annotations

import csv
import io
import json
import uuid
from typing import Any
from urllib.parse import urlsplit

import pika
import pytest

from tests.admin.conftest import AdminBroker, qname


def ok(r: Any) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return str(r.stdout)


def fails(r: Any, *texts: str) -> str:
    """Non-zero exit and one line on stderr that names the problem."""
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amqplite: "), r.stderr
    assert all(t in lines[0] for t in texts), r.stderr
    return lines[0]


def names(out: str) -> list[str]:
    return [x["name"] for x in json.loads(out)]


def test_connection_options_before_or_after_the_command(admin_broker: AdminBroker,
                                                        channel: Any) -> None:
    q = qname("where")
    channel.queue_declare(q)
    before = ok(admin_broker.cli("-u", "guest", "-p", "guest", "-V", "/", "-f", "json",
                                 "queues"))
    after = ok(admin_broker.cli("queues", "-u", "guest", "-p", "guest", "-V", "/",
                                "-f", "json"))
    assert q in names(before) and q in names(after)
    # before the command they are really used: a wrong password or vhost is refused
    fails(admin_broker.cli("-p", "wrong", "queues"), "wrong credentials")
    fails(admin_broker.cli("-V", "no-such-vhost", "queues"), "no-such-vhost")
    # after the command wins over before
    assert q in names(ok(admin_broker.cli("-p", "wrong", "queues", "-p", "guest",
                                          "--format", "json")))
    # -H/-P and --admin-url before the command, with the environment's URL unusable
    url = urlsplit(admin_broker.admin_url)
    bad = {"AMQPLITE_ADMIN_URL": "http://127.0.0.1:9"}
    assert q in names(ok(admin_broker.cli("-H", str(url.hostname), "-P", str(url.port),
                                          "-f", "json", "queues", env=bad)))
    assert q in names(ok(admin_broker.cli("--admin-url", admin_broker.admin_url,
                                          "queues", "-f", "json", env=bad)))
    fails(admin_broker.cli("queues", env=bad), "cannot reach")
    top = ok(admin_broker.cli("--help"))
    assert all(o in top for o in ("-u, --user", "-V, --vhost", "-H, --host", "-P, --port",
                                  "-f, --format", "--admin-url"))
    assert "-f, --format [table|json|tsv|csv]" in ok(admin_broker.cli("queues", "--help"))


LISTINGS = (["queues"], ["exchanges"], ["bindings"], ["connections"], ["consumers"],
            ["policies"], ["vhosts"], ["users"], ["permissions"], ["list", "queues"],
            ["list", "exchanges"], ["list", "users"], ["list", "permissions"])


def test_every_listing_in_every_format(admin_broker: AdminBroker, channel: Any) -> None:
    channel.queue_declare(qname("fmt"))
    for cmd in LISTINGS:
        as_json = json.loads(ok(admin_broker.cli(*cmd, "-f", "json")))
        assert isinstance(as_json, list), cmd
        rows = list(csv.reader(io.StringIO(ok(admin_broker.cli(*cmd, "--format", "csv")))))
        tsv = [ln.split("\t") for ln in ok(admin_broker.cli(*cmd, "-f", "tsv")).splitlines()]
        assert rows[0] == tsv[0] and rows[0] and len(rows) == len(tsv), cmd  # a header
        assert {len(r) for r in rows} == {len(rows[0])}, cmd
        table = ok(admin_broker.cli(*cmd, "-f", "table"))
        assert all(ln == ln.rstrip() for ln in table.splitlines()), (cmd, table)
    # json is the API's own JSON
    with admin_broker.api() as api:
        mine = {x["name"] for x in api.get("/api/exchanges/%2F").json()}
    assert {x["name"] for x in json.loads(ok(admin_broker.cli("exchanges", "-f",
                                                              "json")))} == mine


def test_declare_list_delete_with_key_value_arguments(admin_broker: AdminBroker) -> None:
    q, x, v = qname("vq"), qname("vx"), f"vh-{uuid.uuid4().hex[:6]}"
    user, pol = f"u-{uuid.uuid4().hex[:6]}", qname("pol")
    assert "Added queue" in ok(admin_broker.cli("declare", "queue", f"name={q}",
                                                "durable=true"))
    assert "already exists" in ok(admin_broker.cli("declare", "queue", f"name={q}"))
    ok(admin_broker.cli("declare", "exchange", f"name={x}", "type=topic"))
    ok(admin_broker.cli("declare", "binding", f"source={x}", f"destination={q}",
                        "routing_key=k.#", "destination_type=queue"))
    assert "already exists" in ok(admin_broker.cli(
        "declare", "binding", f"source={x}", f"destination={q}", "routing_key=k.#"))
    ok(admin_broker.cli("declare", "policy", f"name={pol}", f"pattern=^{q}$",
                        "apply-to=queues", 'definition={"max-length":10}'))
    assert "Updated policy" in ok(admin_broker.cli(
        "declare", "policy", f"name={pol}", f"pattern=^{q}$", 'definition={"max-length":5}',
        "priority=3"))
    ok(admin_broker.cli("declare", "vhost", f"name={v}"))
    ok(admin_broker.cli("declare", "user", f"name={user}", "password=pw1",
                        "tags=administrator"))
    ok(admin_broker.cli("declare", "permission", f"vhost={v}", f"user={user}",
                        "configure=.*", "write=.*", "read=.*"))
    with admin_broker.api() as api:
        assert api.get(f"/api/queues/%2F/{q}").json()["durable"] is True
        assert api.get(f"/api/exchanges/%2F/{x}").json()["type"] == "topic"
        binding = api.get(f"/api/bindings/%2F/e/{x}/q/{q}").json()
        assert [b["routing_key"] for b in binding] == ["k.#"]
        policy = api.get(f"/api/policies/%2F/{pol}").json()
        assert policy["definition"] == {"max-length": 5} and policy["priority"] == 3
        assert api.get(f"/api/users/{user}").json()["tags"] == ["administrator"]
        assert api.get(f"/api/permissions/{v}/{user}").json()["write"] == ".*"
    # the migrated user logs in to the new vhost with its password
    pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", admin_broker.proc.port, v, pika.PlainCredentials(user, "pw1"))).close()
    # list, as rabbitmqadmin: default columns, chosen fields, -V narrows
    head = ok(admin_broker.cli("list", "queues", "-f", "tsv")).splitlines()
    assert head[0] == "name\tmessages" and f"{q}\t0" in head
    rows = ok(admin_broker.cli("-V", "/", "list", "bindings", "source", "routing_key",
                               "-f", "tsv")).splitlines()
    assert f"{x}\tk.#" in rows
    assert ok(admin_broker.cli("-V", v, "list", "queues", "-f", "tsv")).splitlines() == [
        "name\tmessages"]
    fields = json.loads(ok(admin_broker.cli("list", "policies", "name", "definition",
                                            "-f", "json")))
    assert {"name": pol, "definition": {"max-length": 5}} in fields
    # delete, as rabbitmqadmin
    ok(admin_broker.cli("delete", "binding", f"source={x}", "destination_type=queue",
                        f"destination={q}", "routing_key=k.#"))
    for args in (["policy", f"name={pol}"], ["permission", f"vhost={v}", f"user={user}"],
                 ["user", f"name={user}"], ["vhost", f"name={v}"], ["exchange", f"name={x}"],
                 ["queue", f"name={q}"]):
        assert "Deleted" in ok(admin_broker.cli("delete", *args))
    with admin_broker.api() as api:
        assert api.get(f"/api/queues/%2F/{q}").status_code == 404
        assert api.get(f"/api/vhosts/{v}").status_code == 404


@pytest.mark.parametrize(("args", "texts"), [
    (["declare", "queue", "name=q1", "durabel=true"], ["unknown argument 'durabel'"]),
    (["declare", "queue", "durable=true"], ["mandatory argument 'name' missing"]),
    (["declare", "queue", "name=q1", "durable=maybe"], ["durable='maybe'", "boolean"]),
    (["declare", "user", "name=u1", "tags="], ["'password' or 'password_hash'"]),
    (["declare", "policy", "name=p", "pattern=.", "definition={"], ["definition",
                                                                     "not valid JSON"]),
    (["declare", "binding", "source=a", "destination=b", "destination_type=topic"],
     ["destination_type='topic'"]),
    (["declare", "queue", "q1", "q2"], ["'q1' is not of the form key=value"]),
    (["delete", "permission", "vhost=/"], ["mandatory argument 'user' missing"]),
])
def test_bad_arguments_one_line(admin_broker: AdminBroker, args: list[str],
                                texts: list[str]) -> None:
    fails(admin_broker.cli(*args), *texts)


def test_added_and_updated_told_apart(admin_broker: AdminBroker) -> None:
    v, user = f"vd-{uuid.uuid4().hex[:6]}", f"ud-{uuid.uuid4().hex[:6]}"
    assert f"Vhost '{v}' added." in ok(admin_broker.cli("vhosts", "add", v,
                                                        "--description", "kept"))
    assert f"Vhost '{v}' updated." in ok(admin_broker.cli("vhosts", "add", v))
    ok(admin_broker.cli("declare", "vhost", f"name={v}"))

    def description() -> str:
        return str(next(x for x in json.loads(ok(admin_broker.cli("vhosts", "-f", "json")))
                        if x["name"] == v)["description"])

    assert description() == "kept"  # neither emptied it
    ok(admin_broker.cli("vhosts", "add", v, "--description", "new"))
    assert description() == "new"
    pw = {"AMQPLITE_NEW_PASSWORD": "pw"}
    assert "added" in ok(admin_broker.cli("users", "add", user, env=pw))
    assert "updated" in ok(admin_broker.cli("users", "add", user, env=pw))
    assert json.loads(ok(admin_broker.cli("declare", "user", f"name={user}", "password=p",
                                          "tags=", "-f", "json")))["result"] == "updated"
    ok(admin_broker.cli("users", "delete", user))
    ok(admin_broker.cli("vhosts", "delete", v))


def test_parameter_vhost_limit_and_topic_permission(admin_broker: AdminBroker) -> None:
    """rabbitmqadmin's declare/delete parameter and vhost_limit, and list parameters,
    vhost_limits and nodes; topic_permission in the same style."""
    vh = f"cli-lim-{uuid.uuid4().hex[:6]}"
    ok(admin_broker.cli("declare", "vhost", f"name={vh}"))
    try:
        out = ok(admin_broker.cli("declare", "vhost_limit", f"vhost={vh}",
                                  "name=max-queues", "value=3"))
        assert out.strip() == f"Added vhost_limit max-queues of vhost {vh}."
        out = ok(admin_broker.cli("declare", "vhost_limit", f"vhost={vh}",
                                  "name=max-queues", "value=4"))
        assert out.startswith("Updated vhost_limit")
        fails(admin_broker.cli("declare", "vhost_limit", f"vhost={vh}", "name=max-queues",
                               "value=four"), "value is not valid JSON")
        rows = json.loads(ok(admin_broker.cli("-V", vh, "-f", "json", "list", "vhost_limits")))
        assert rows == [{"vhost": vh, "value": {"max-queues": 4}}]
        ok(admin_broker.cli("delete", "vhost_limit", f"vhost={vh}", "name=max-queues"))
        assert json.loads(ok(admin_broker.cli("-V", vh, "-f", "json", "list",
                                              "vhost_limits"))) == []

        shovel = {"src-uri": "amqp://", "src-queue": "cli-src", "dest-uri": "amqp://",
                  "dest-queue": "cli-dst"}
        out = ok(admin_broker.cli("-V", vh, "declare", "parameter", "component=shovel",
                                  "name=mover", f"value={json.dumps(shovel)}"))
        assert out.strip() == f"Added parameter shovel 'mover' in vhost {vh}."
        listed = json.loads(ok(admin_broker.cli("-f", "json", "list", "parameters")))
        assert any(p["name"] == "mover" and p["vhost"] == vh and p["component"] == "shovel"
                   for p in listed)
        ok(admin_broker.cli("-V", vh, "delete", "parameter", "component=shovel", "name=mover"))
        listed = json.loads(ok(admin_broker.cli("-f", "json", "list", "parameters")))
        assert not any(p["name"] == "mover" and p["vhost"] == vh for p in listed)

        out = ok(admin_broker.cli("declare", "topic_permission", f"vhost={vh}", "user=guest",
                                  "exchange=amq.topic", "write=^a\\.", "read=.*"))
        assert out.startswith("Added topic_permission of 'guest' on exchange 'amq.topic'")
        tp = json.loads(ok(admin_broker.cli("-f", "json", "list", "topic_permissions")))
        assert {"user": "guest", "vhost": vh, "exchange": "amq.topic", "write": "^a\\.",
                "read": ".*"} in tp
        ok(admin_broker.cli("delete", "topic_permission", f"vhost={vh}", "user=guest",
                            "exchange=amq.topic"))
        tp = json.loads(ok(admin_broker.cli("-f", "json", "list", "topic_permissions")))
        assert not [t for t in tp if t["vhost"] == vh]
        nodes = json.loads(ok(admin_broker.cli("-f", "json", "list", "nodes", "name",
                                               "running")))
        assert len(nodes) == 1 and nodes[0]["running"] is True and "@" in nodes[0]["name"]
    finally:
        admin_broker.cli("delete", "vhost", f"name={vh}")
