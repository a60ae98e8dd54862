"""``amqplite vhosts|users|permissions|definitions`` against a real broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pika
import pytest

from tests.admin.conftest import AdminBroker


def run(b: AdminBroker, *args: str, **kw: object) -> str:
    r = b.cli(*args, **kw)  # type: ignore[arg-type]
    assert r.returncode == 0, r.stderr
    return str(r.stdout)


def test_vhosts_users_permissions_round(admin_broker: AdminBroker) -> None:
    tag = uuid.uuid4().hex[:6]
    vh, user = f"cli-vh-{tag}", f"cli-user-{tag}"
    assert "added" in run(admin_broker, "vhosts", "add", vh, "--description", "from cli")
    listed = json.loads(run(admin_broker, "vhosts", "--json"))
    assert {"name": vh, "description": "from cli"}.items() <= next(
        v for v in listed if v["name"] == vh).items()
    run(admin_broker, "users", "add", user, "--tags", "management",
        env={"AMQPLITE_NEW_PASSWORD": "pw1"})
    assert user in run(admin_broker, "users")
    run(admin_broker, "permissions", "set", user, "^cli-", "^cli-", "^cli-", "--vhost", vh)
    perms = json.loads(run(admin_broker, "permissions", "--vhost", vh, "--json"))
    assert {(p["user"], p["read"]) for p in perms} >= {(user, "^cli-"), ("guest", ".*")}
    assert "^cli-" in run(admin_broker, "permissions", "--of", user)
    params = pika.ConnectionParameters("127.0.0.1", admin_broker.proc.port, vh,
                                       pika.PlainCredentials(user, "pw1"))
    with pika.BlockingConnection(params) as c:
        c.channel().queue_declare("cli-q")
    run(admin_broker, "users", "password", user, env={"AMQPLITE_NEW_PASSWORD": "pw2"})
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(params)
    run(admin_broker, "permissions", "clear", user, "--vhost", vh)
    run(admin_broker, "users", "delete", user)
    run(admin_broker, "vhosts", "delete", vh)
    assert vh not in run(admin_broker, "vhosts")
    r = admin_broker.cli("vhosts", "delete", vh)
    assert r.returncode != 0 and "no vhost" in r.stderr


def test_definitions_export_import(admin_broker: AdminBroker, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    f = tmp_path / "defs.json"
    run(admin_broker, "vhosts", "add", f"defs-{tag}")
    out = run(admin_broker, "definitions", "export", str(f))
    assert "Exported to" in out
    data = json.loads(f.read_text())
    assert any(v["name"] == f"defs-{tag}" for v in data["vhosts"])
    assert all(u["hashing_algorithm"] == "rabbit_password_hashing_sha256"
               for u in data["users"])
    run(admin_broker, "vhosts", "delete", f"defs-{tag}")
    assert "Imported" in run(admin_broker, "definitions", "import", str(f))
    assert f"defs-{tag}" in run(admin_broker, "vhosts")
    run(admin_broker, "vhosts", "delete", f"defs-{tag}")
    bad = tmp_path / "bad.json"
    bad.write_text('{"users": [{"name": "x", "password_hash": "abc", '
                   '"hashing_algorithm": "rabbit_password_hashing_whirlpool"}]}')
    r = admin_broker.cli("definitions", "import", str(bad))
    assert r.returncode != 0 and "hashing_algorithm" in r.stderr
    # md5 is RabbitMQ's (old exports), but this hash is not one
    bad.write_text('{"users": [{"name": "x", "password_hash": "abc", '
                   '"hashing_algorithm": "rabbit_password_hashing_md5"}]}')
    r = admin_broker.cli("definitions", "import", str(bad))
    assert r.returncode != 0 and "password_hash is not base64(salt + md5)" in r.stderr


def test_topic_permissions_set_list_clear(admin_broker: AdminBroker) -> None:
    """``permissions set-topic`` / ``list-topic`` / ``clear-topic`` through the real CLI,
    and the permission refuses a publish as set."""
    tag = uuid.uuid4().hex[:6]
    user = f"cli-tp-{tag}"
    run(admin_broker, "users", "add", user, env={"AMQPLITE_NEW_PASSWORD": "pw"})
    run(admin_broker, "permissions", "set", user, ".*", ".*", ".*")
    assert "set" in run(admin_broker, "permissions", "set-topic", user, "amq.topic",
                        "^{username}\\.", "^r")
    run(admin_broker, "permissions", "set-topic", user, "amq.match", "", "")
    listed = json.loads(run(admin_broker, "permissions", "list-topic", "--of", user,
                            "--json"))
    assert [(p["exchange"], p["write"], p["read"]) for p in listed] == [
        ("amq.match", "", ""), ("amq.topic", "^{username}\\.", "^r")]
    table = run(admin_broker, "permissions", "list-topic")
    assert user in table and "^{username}\\." in table
    params = pika.ConnectionParameters("127.0.0.1", admin_broker.proc.port, "/",
                                       pika.PlainCredentials(user, "pw"))
    with pika.BlockingConnection(params) as c:
        ch = c.channel()
        ch.basic_publish("amq.topic", f"{user}.ok", b"m")
        ch.basic_publish("amq.topic", "other.key", b"m")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.basic_qos(prefetch_count=0)
        assert exc.value.reply_code == 403
    run(admin_broker, "permissions", "clear-topic", user, "amq.topic")
    listed = json.loads(run(admin_broker, "permissions", "list-topic", "--of", user,
                            "--json"))
    assert [p["exchange"] for p in listed] == ["amq.match"]
    run(admin_broker, "permissions", "clear-topic", user)
    assert json.loads(run(admin_broker, "permissions", "list-topic", "--of", user,
                          "--json")) == []
    r = admin_broker.cli("permissions", "set-topic", user, "amq.topic", "(", "")
    assert r.returncode != 0 and "write" in r.stderr
    run(admin_broker, "users", "delete", user)
