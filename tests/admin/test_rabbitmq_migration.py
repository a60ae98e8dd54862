"""A RabbitMQ 3.10.8 export imported whole (issue 36, item 1).

``data/rabbitmq-3.10.8-migration-export.json`` is ``GET /api/definitions`` of a
real RabbitMQ 3.10.8 (scripts/rabbitmq.sh), made through its management API:
users with sha256, sha512 and md5 password hashes, a vhost with limits, a topic
permission, and policies with ``alternate-exchange``, ``dead-letter-exchange``,
``queue-mode`` and ``ha-*`` keys. The rules (which key applies, which is ignored
and why, the hash formats, the limits' shape) are checked with plain calls; one
broker process shows the import working with pika.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from amqplite.broker.auth import check_password, hashing_algorithm, valid_hash
from amqplite.broker.core import Broker
from amqplite.broker.errors import ChannelError
from amqplite.broker.model import Message
from amqplite.broker.policy import check_vhost_limits, make_policy, split_definition
from tests.admin.conftest import start_admin_broker
from tests.admin.test_admin_writes import restart
from tests.broker.conftest import TRANSIENT, FakeClock, session_channel
from tests.brokerproc import wait_for

EXPORT = Path(__file__).parent / "data" / "rabbitmq-3.10.8-migration-export.json"
#: amqplite's own export after importing EXPORT: conformance/test_definitions.py
#: imports it into RabbitMQ (the way back), so it must stay what amqplite writes
OUR_EXPORT = Path(__file__).parent / "data" / "amqplite-export-of-rabbitmq-3.10.8.json"
SECTIONS = ("users", "vhosts", "permissions", "topic_permissions", "parameters",
            "policies", "queues", "exchanges", "bindings")


def sections(definitions: dict[str, Any]) -> dict[str, list[str]]:
    """The migrated objects of an export (vhost 'migrated' and its users; guest's
    salt differs per broker), each as canonical JSON, sorted, by section."""
    def ours(x: dict[str, Any]) -> bool:
        return x.get("vhost", x.get("name")) == "migrated" or x.get("name") in PASSWORDS
    return {k: sorted(json.dumps(x, sort_keys=True) for x in definitions.get(k, [])
                      if ours(x)) for k in SECTIONS}
#: the passwords the export's users were created with on RabbitMQ
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}


# ------------------------------------------------------------- the rules
def test_each_key_applied_ignored_with_reason_or_named_unknown() -> None:
    kept, notes = split_definition({
        "alternate-exchange": "ae", "dead-letter-exchange": "dlx", "message-ttl": 5,
        "federation-upstream-set": "all", "queue-mode": "lazy", "ha-mode": "all",
        "ha-promote-on-failure": "always", "consumer-timeout": 1000, "colour": "red"})
    assert kept == {"alternate-exchange": "ae", "dead-letter-exchange": "dlx",
                    "message-ttl": 5, "federation-upstream-set": "all"}
    text = "\n".join(notes)
    assert "queue-mode ignored (lazy queues: amqplite pages message bodies" in text
    assert "ha-mode ignored (classic queue mirroring" in text
    assert "ha-promote-on-failure ignored (classic queue mirroring" in text
    assert "consumer-timeout ignored (amqplite has no consumer timeout" in text
    assert "colour ignored (unknown policy key" in text
    make_policy("/", "p", ".", kept, apply_to="all")  # what is kept is valid
    with pytest.raises(ValueError, match="alternate-exchange"):
        make_policy("/", "p", ".", {"alternate-exchange": 3})


def test_rabbitmq_password_hashes_as_rabbitmq_computes_them() -> None:
    """4-byte salt + hash(salt + UTF-8 password), base64, for each algorithm; the
    export's own hashes (made by RabbitMQ) check against the passwords."""
    for algo, name in (("sha256", "rabbit_password_hashing_sha256"),
                       ("sha512", "rabbit_password_hashing_sha512"),
                       ("md5", "rabbit_password_hashing_md5")):
        salt = b"\x09\x08\x07\x06"
        h = base64.b64encode(salt + hashlib.new(algo, salt + "pässword".encode()).digest())
        stored = h.decode()
        assert valid_hash(stored, name) and hashing_algorithm(stored) == name
        assert check_password("pässword", stored) and not check_password("password", stored)
    users = {u["name"]: u for u in json.loads(EXPORT.read_text())["users"]}
    for name, pw in PASSWORDS.items():
        u = users[name]
        assert check_password(pw, u["password_hash"]), name
        assert hashing_algorithm(u["password_hash"]) == u["hashing_algorithm"]
    assert not valid_hash(users["bob"]["password_hash"], "rabbit_password_hashing_md5")


def test_vhost_limits_shape() -> None:
    assert check_vhost_limits({"max-connections": 2, "max-queues": -1}) == {
        "max-connections": 2, "max-queues": -1}
    for bad in ({"max-channels": 1}, {"max-queues": "1"}, [1]):
        with pytest.raises(ValueError):
            check_vhost_limits(bad)


def test_alternate_exchange_policy_routes_and_the_argument_wins() -> None:
    b = Broker(now=FakeClock())
    _, ch = session_channel(b)
    vh = b.vhost("/")
    for q in ("caught", "by-arg"):
        b.queue_declare(ch, q)
    b.exchange_declare(ch, "ae", "fanout")
    b.exchange_declare(ch, "ae2", "fanout")
    b.queue_bind(ch, "caught", "ae", "")
    b.queue_bind(ch, "by-arg", "ae2", "")
    b.exchange_declare(ch, "d", "direct")

    def route(ex: str) -> list[str]:
        return sorted(q.name for q in vh.route(vh.exchanges[ex], "nope",
                                               Message(1, "", "nope", TRANSIENT, b"x")).queues)
    assert route("d") == []
    b.set_policy("/", "ae", "^(d|late|arg)$", {"alternate-exchange": "ae"}, apply_to="exchanges")
    assert route("d") == ["caught"]
    b.exchange_declare(ch, "late", "direct")  # declared after the policy: it applies too
    b.exchange_declare(ch, "arg", "direct", arguments={"alternate-exchange": "ae2"})
    assert route("late") == ["caught"] and route("arg") == ["by-arg"]
    b.clear_policy("/", "ae")
    assert route("d") == [] and route("arg") == ["by-arg"]


def test_max_queues_refuses_a_new_queue_not_a_redeclare() -> None:
    b = Broker(now=FakeClock())
    _, ch = session_channel(b)
    b.queue_declare(ch, "one")
    b.parameters.put("vhost-limits", "/", "limits", {"max-queues": 1})
    b.queue_declare(ch, "one")
    with pytest.raises(ChannelError, match="queue limit in vhost '/' \\(1\\) is reached"):
        b.queue_declare(ch, "two")
    b.parameters.put("vhost-limits", "/", "limits", {"max-queues": -1})  # none
    b.queue_declare(ch, "two")


# --------------------------------------------------- one broker, end to end
def _connect(b: Any, user: str, password: str) -> pika.BlockingConnection:
    port = int(b.amqp_url.rsplit(":", 1)[1].split("/")[0])
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, "migrated", pika.PlainCredentials(user, password)))


def test_rabbitmq_3_10_export_imports_and_works(tmp_path: Path) -> None:
    b = start_admin_broker(tmp_path / "d")
    try:
        with b.api() as api:
            r = api.post("/api/definitions", content=EXPORT.read_bytes(),
                         headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            ignored = "\n".join(r.json()["ignored"])
            assert "policy 'dlx' in vhost 'migrated': ha-mode ignored (classic queue " \
                   "mirroring" in ignored
            assert "policy 'lazy' in vhost 'migrated': queue-mode ignored (lazy queues" \
                   in ignored and "the policy is not created" in ignored
            assert "queue-master-locator ignored (queue placement" in ignored
            assert r.json()["skipped"] == []
            assert api.get("/api/policies/migrated/ae").json()["definition"] == {
                "alternate-exchange": "unrouted"}
            assert api.get("/api/policies/migrated/dlx").json()["definition"] == {
                "dead-letter-exchange": "dlx", "message-ttl": 60000}
            assert api.get("/api/vhost-limits/migrated").json() == [
                {"vhost": "migrated", "value": {"max-connections": 2, "max-queues": 6}}]
            assert api.get("/api/topic-permissions/migrated/alice").json()[0]["write"] \
                == "^alice\\."
            export = api.get("/api/definitions").json()
            golden = sections(json.loads(OUR_EXPORT.read_text()))
            assert all(golden.values()) and sections(export) == golden
            limits = [p for p in export["parameters"] if p["component"] == "vhost-limits"]
            assert [(p["vhost"], p["name"], p["value"]) for p in limits] == [
                ("migrated", "limits", {"max-connections": 2, "max-queues": 6})]
            algos = {u["name"]: u["hashing_algorithm"] for u in export["users"]}
            assert algos["bob"] == "rabbit_password_hashing_sha512"
            assert algos["carol"] == "rabbit_password_hashing_md5"
            # declare policy: the import's rule, the ignored keys named in the answer
            r = api.put("/api/policies/migrated/mixed", json={
                "pattern": "^nothing$", "definition": {"max-length": 3, "ha-mode": "all",
                                                       "colour": "red"}})
            assert r.status_code == 201
            assert "ha-mode ignored" in r.json()["ignored"][0]
            assert "colour ignored (unknown" in r.json()["ignored"][0]
            assert api.get("/api/policies/migrated/mixed").json()["definition"] == {
                "max-length": 3}
        # RabbitMQ's PUT and DELETE of one limit (rabbitmqadmin, set_vhost_limits)
        with b.api() as api:
            url = "/api/vhost-limits/migrated/max-queues"
            assert api.put(url, json={"value": 7}).status_code == 204
            assert api.get("/api/vhost-limits/migrated").json()[0]["value"] == {
                "max-connections": 2, "max-queues": 7}
            assert api.put(url, json={"value": "x"}).status_code == 400
            assert api.delete(url).status_code == 204 and api.delete(url).status_code == 404
            assert api.put(url, json={"value": 6}).status_code == 204
        # the CLI prints what it ignored
        r = b.cli("policies", "set", "cli-mixed", "^nothing$",
                  '{"message-ttl": 5, "queue-mode": "lazy"}', "--vhost", "migrated")
        assert r.returncode == 0, r.stderr
        assert "ignored: policy 'cli-mixed' in vhost 'migrated': queue-mode ignored" in r.stdout
        # the migrated users log in with their RabbitMQ passwords
        conns = [_connect(b, "alice", PASSWORDS["alice"]), _connect(b, "bob", PASSWORDS["bob"])]
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            _connect(b, "bob", "wrong")
        # max-connections 2: a third is refused (carol's md5 password is right)
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as err:
            _connect(b, "carol", PASSWORDS["carol"])
        assert "connection limit (2) is reached" in str(err.value)
        conns.pop().close()

        def carol_in() -> bool:  # the broker drops the closed one after its close-ok
            try:
                conns.append(_connect(b, "carol", PASSWORDS["carol"]))
            except pika.exceptions.ProbableAccessDeniedError:
                return False
            return True
        wait_for(carol_in, 10, what="a connection slot after a close")
        ch = conns[0].channel()
        ch.confirm_delivery()
        # the AE policy: an unroutable publish to 'orders' reaches unrouted-q
        ch.basic_publish("orders", "no-such-key", b"lost?", mandatory=True)
        got = ch.basic_get("unrouted-q", auto_ack=True)
        assert got[2] == b"lost?"
        ch.basic_publish("orders", "new", b"routed")
        assert ch.basic_get("orders-q", auto_ack=True)[2] == b"routed"
        # max-queues 6: the export has 5 queues
        ch.queue_declare("sixth", durable=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as qerr:
            ch.queue_declare("seventh")
        assert qerr.value.reply_code == 406 and "queue limit" in qerr.value.reply_text
        for c in conns:
            c.close()
        restart(b)  # recovery: the policy's alternate exchange and the limits come back
        c = _connect(b, "carol", PASSWORDS["carol"])
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("orders", "no-such-key", b"after restart", mandatory=True)
        assert ch.basic_get("unrouted-q", auto_ack=True)[2] == b"after restart"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.queue_declare("seventh")
        c.close()
    finally:
        b.proc.stop()
