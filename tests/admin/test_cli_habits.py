"""The CLI with rabbitmqadmin's habits, against a real broker: -u/-p/-V, --format
table|json|tsv, ``stream tail -n``, and ``users add`` without a terminal."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pika
import pytest
from click.testing import CliRunner

from amqplite.cli import main
from tests.admin.conftest import AdminBroker, qname


def ok(r: Any) -> str:
    assert r.returncode == 0, r.stderr
    return str(r.stdout)


def logs_in(b: AdminBroker, user: str, password: str) -> bool:
    params = pika.ConnectionParameters("127.0.0.1", b.proc.port, "/",
                                       pika.PlainCredentials(user, password))
    try:
        pika.BlockingConnection(params).close()
    except pika.exceptions.AMQPConnectionError:
        return False
    return True


def test_short_options_and_formats(admin_broker: AdminBroker, channel: Any) -> None:
    q = qname("habit")
    channel.queue_declare(q, durable=True)
    channel.basic_publish("", q, b"m")
    tsv = ok(admin_broker.cli("queues", "-u", "guest", "-p", "guest", "-V", "/",
                              "--format", "tsv")).splitlines()
    header = tsv[0].split("\t")
    assert header[0] == "Name" and "Ready" in header
    row = next(ln.split("\t") for ln in tsv[1:] if ln.split("\t")[0] == q)
    assert len(row) == len(header) and row[header.index("Ready")] == "1"
    as_json = json.loads(ok(admin_broker.cli("queues", "-u", "guest", "-p", "guest",
                                             "--format", "json")))
    assert next(x for x in as_json if x["name"] == q)["messages_ready"] == 1
    assert json.loads(ok(admin_broker.cli("queues", "--json"))) == json.loads(
        ok(admin_broker.cli("queues", "--format", "json")))  # --json: an alias
    table = ok(admin_broker.cli("queues", "--format", "table"))
    assert q in table and "\t" not in table
    # -p is the password: a wrong one is refused by the API
    r = admin_broker.cli("queues", "-u", "guest", "-p", "wrong")
    assert r.returncode == 1 and "wrong credentials for user 'guest'" in r.stderr
    # -V is the vhost: an unknown one is named in the error
    r = admin_broker.cli("queues", "-V", "no-such-vhost")
    assert r.returncode == 1 and "no vhost 'no-such-vhost'" in r.stderr
    r = admin_broker.cli("queues", "--format", "xml")
    assert r.returncode == 2 and "xml" in r.stderr


def test_every_listing_command_speaks_tsv(admin_broker: AdminBroker) -> None:
    for cmd in (["queues"], ["exchanges"], ["bindings"], ["connections"], ["consumers"],
                ["policies"], ["vhosts"], ["users"], ["permissions"]):
        out = ok(admin_broker.cli(*cmd, "--format", "tsv")).splitlines()
        assert out and "\t" in out[0], (cmd, out)
        widths = {len(ln.split("\t")) for ln in out}
        assert len(widths) == 1, (cmd, out)  # every row as wide as the header


def test_stream_tail_n_prints_the_last_n(admin_broker: AdminBroker, channel: Any) -> None:
    s = qname("tailn")
    channel.queue_declare(s, durable=True, arguments={"x-queue-type": "stream"})
    for i in range(5):
        channel.basic_publish("", s, b"e%d" % i)
    out = ok(admin_broker.cli("stream", "tail", s, "-n", "3")).splitlines()
    assert [ln.split()[0] for ln in out] == ["2", "3", "4"]
    out = ok(admin_broker.cli("stream", "tail", s, "-n", "9")).splitlines()
    assert [ln.split()[0] for ln in out] == ["0", "1", "2", "3", "4"]  # all there are
    out = ok(admin_broker.cli("stream", "tail", s)).splitlines()
    assert [ln.split()[0] for ln in out] == ["4"]
    out = ok(admin_broker.cli("stream", "tail", s, "--from", "first", "-n", "2")).splitlines()
    assert [ln.split()[0] for ln in out] == ["0", "1"]


def test_users_add_password_stdin(admin_broker: AdminBroker) -> None:
    user = f"stdin-{uuid.uuid4().hex[:6]}"
    ok(admin_broker.cli("users", "add", user, "--password-stdin", input=b"s3cret pw\n"))
    ok(admin_broker.cli("permissions", "set", user, ".*", ".*", ".*"))
    assert logs_in(admin_broker, user, "s3cret pw")
    ok(admin_broker.cli("users", "password", user, "--password-stdin", input=b"other\n"))
    assert logs_in(admin_broker, user, "other") and not logs_in(admin_broker, user,
                                                                "s3cret pw")
    r = admin_broker.cli("users", "add", user + "x", "--password-stdin", input=b"")
    assert r.returncode != 0 and b"no password" in r.stderr
    assert user + "x" not in ok(admin_broker.cli("users", "--format", "tsv"))
    ok(admin_broker.cli("users", "delete", user))


def test_users_add_prompts_twice(admin_broker: AdminBroker,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    user = f"prompt-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("AMQPLITE_ADMIN_URL", admin_broker.admin_url)
    for var in ("AMQPLITE_NEW_PASSWORD", "AMQPLITE_USER", "AMQPLITE_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    runner = CliRunner()
    r = runner.invoke(main, ["users", "add", user], input="typed\ntyped\n")
    assert r.exit_code == 0, r.output
    assert r.output.count("Password") == 1 and "Repeat for confirmation" in r.output
    assert "typed" not in r.output  # hidden input
    assert runner.invoke(main, ["permissions", "set", user, ".*", ".*", ".*"]).exit_code == 0
    assert logs_in(admin_broker, user, "typed")
    help_text = runner.invoke(main, ["users", "add", "--help"]).output
    assert "--password-stdin" in help_text and "prompt" in help_text
    runner.invoke(main, ["users", "delete", user])
