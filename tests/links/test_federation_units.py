"""The pure parts of exchange federation: parameter and policy validation, which
upstreams a policy names, the x-federation-upstream exchange type in the broker
core, and the core's binding observer. No sockets, no event loop."""

from __future__ import annotations

from typing import Any

import pytest

from amqplite.broker.core import Broker
from amqplite.broker.exchanges import Binding
from amqplite.broker.policy import make_policy
from amqplite.links.federation import _thaw, queue_name
from amqplite.links.federation_config import (
    parse_upstream,
    parse_upstream_set,
    upstreams_for,
)
from amqplite.protocol.errors import ChannelError
from amqplite.protocol.properties import BasicProperties, encode_properties
from tests.broker.conftest import FakeClock, session_channel


@pytest.mark.parametrize(("value", "field"), [
    ({"uri": "amqp://h", "max-hopz": 1}, "max-hopz"),
    ({}, "uri"),
    ({"uri": "ftp://h"}, "uri"),
    ({"uri": ["amqp://h", 3]}, "uri"),
    ({"uri": "amqp://h", "max-hops": 0}, "max-hops"),
    ({"uri": "amqp://h", "prefetch-count": "10"}, "prefetch-count"),
    ({"uri": "amqp://h", "ack-mode": "maybe"}, "ack-mode"),
    ({"uri": "amqp://h", "trust-user-id": "yes"}, "trust-user-id"),
    ({"uri": "amqp://h", "message-ttl": -1}, "message-ttl"),
    ({"uri": "amqp://h", "resource-cleanup-mode": "always"}, "resource-cleanup-mode"),
])
def test_upstream_refusals_name_the_field(value: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        parse_upstream(value)


def test_upstream_accepts_rabbitmqs_fields() -> None:
    value = {"uri": ["amqp://a", "amqps://b?verify=verify_none"], "exchange": "x",
             "max-hops": 2, "prefetch-count": 10, "reconnect-delay": 0.5, "expires": 1000,
             "message-ttl": 0, "trust-user-id": True, "ack-mode": "no-ack", "queue": "q",
             "consumer-tag": "c", "ha-policy": "all", "bind-nowait": False,
             "channel-use-mode": "single", "resource-cleanup-mode": "never"}
    assert parse_upstream(value) == value
    with pytest.raises(ValueError, match=r"^\[0\]\.upstream: is required"):
        parse_upstream_set([{"max-hops": 2}])
    with pytest.raises(ValueError, match=r"^\[1\]\.uri: unknown"):
        parse_upstream_set([{"upstream": "a"}, {"upstream": "b", "uri": "amqp://"}])
    with pytest.raises(ValueError, match="list"):
        parse_upstream_set({"upstream": "a"})


def test_which_upstreams_a_policy_names() -> None:
    params = {"a": {"uri": "amqp://a"}, "b": {"uri": "amqp://b", "max-hops": 3},
              "c-1": {"uri": "amqp://c"}}
    sets = {"s": [{"upstream": "b", "max-hops": 2}, {"upstream": "missing"}]}
    names = [u.name for u in upstreams_for({"federation-upstream-set": "all"}, params, sets)]
    assert names == ["a", "b", "c-1"]
    (b,) = upstreams_for({"federation-upstream-set": "s"}, params, sets)
    assert b.name == "b" and b.max_hops == 2 and b.uris == ("amqp://b",)  # the set wins
    assert [u.name for u in upstreams_for({"federation-upstream": "a"}, params, sets)] == ["a"]
    assert upstreams_for({"federation-upstream": "zz"}, params, sets) == []
    pat = upstreams_for({"federation-upstream-pattern": "^c-"}, params, sets)
    assert [u.name for u in pat] == ["c-1"]
    assert upstreams_for({"message-ttl": 5}, params, sets) == []


def test_policy_validation_of_federation_keys() -> None:
    pol = make_policy("/", "p", "^x", {"federation-upstream-set": "all"}, apply_to="exchanges")
    assert pol.matches_exchange("x1") and not pol.matches_queue("x1")
    with pytest.raises(ValueError, match="together"):
        make_policy("/", "p", ".", {"federation-upstream": "a",
                                    "federation-upstream-set": "all"})
    with pytest.raises(ValueError, match="not a valid federation-upstream name"):
        make_policy("/", "p", ".", {"federation-upstream-set": 3})


def test_upstream_queue_names_follow_rabbitmq() -> None:
    assert queue_name("x", "/", "n", "/", "x") == "federation: x -> n"
    assert queue_name("x", "/", "n", "/", "y") == "federation: x -> n:y"
    assert queue_name("x", "up", "n", "/", "y") == "federation: x -> n:/:y"


def test_bound_from_arguments_thaw_back_to_tables() -> None:
    b = Binding("x", ("queue", "q"), "k", (("x-bound-from", (
        (("cluster-name", "n"), ("hops", 1)),)),))
    (args,) = [_thaw(v) for _, v in b.arguments]
    assert args == [{"cluster-name": "n", "hops": 1}]


def _props(hops: list[dict[str, Any]] | None) -> bytes:
    headers = None if hops is None else {"x-received-from": hops}
    return encode_properties(BasicProperties(headers=headers))


def test_x_federation_upstream_routes_with_a_hop_limit() -> None:
    broker = Broker(now=FakeClock())
    _, ch = session_channel(broker)
    with pytest.raises(ChannelError) as exc:
        broker.exchange_declare(ch, "u", "x-federation-upstream")
    assert "x-max-hops missing" in str(exc.value)
    _, ch = session_channel(broker, 2)
    broker.exchange_declare(ch, "u", "x-federation-upstream", internal=True, arguments={
        "x-max-hops": 2, "x-downstream-name": "down", "x-downstream-vhost": "/"})
    broker.queue_declare(ch, "q")
    broker.queue_bind(ch, "q", "u", "")
    broker.exchange_declare(ch, "x", "direct")
    broker.exchange_bind(ch, "u", "x", "k")
    one = {"cluster-name": "up", "vhost": "/", "exchange": "x"}
    assert broker.basic_publish(ch, "x", "k", _props(None), b"").routed
    assert broker.basic_publish(ch, "x", "k", _props([one]), b"").routed
    assert not broker.basic_publish(ch, "x", "k", _props([one, one]), b"").routed  # hops
    seen = {"cluster-name": "down", "vhost": "/", "exchange": "x"}
    assert not broker.basic_publish(ch, "x", "k", _props([seen]), b"").routed  # a loop
    assert not broker.basic_publish(ch, "x", "other", _props(None), b"").routed


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def binding_changed(self, vhost: str, binding: Binding, added: bool) -> None:
        self.events.append(("+" if added else "-", (binding.source, binding.routing_key)))

    def exchanges_changed(self, vhost: str) -> None:
        self.events.append(("exchanges", vhost))


def test_the_core_tells_observers_of_binding_and_exchange_changes() -> None:
    broker = Broker(now=FakeClock())
    rec = Recorder()
    broker.topology.watch(rec)
    _, ch = session_channel(broker)
    broker.exchange_declare(ch, "x", "direct")
    broker.queue_declare(ch, "q")
    broker.queue_bind(ch, "q", "x", "k")
    broker.queue_bind(ch, "q", "x", "k")  # already there: nothing new
    broker.queue_bind(ch, "q", "x", "k", unbind=True)
    broker.queue_bind(ch, "q", "x", "k2")
    broker.delete_queue(broker.vhosts["/"], broker.vhosts["/"].queues["q"])
    broker.set_policy("/", "p", "^x", {"federation-upstream-set": "all"}, apply_to="exchanges")
    broker.exchange_delete(ch, "x")
    assert rec.events == [("exchanges", "/"), ("+", ("x", "k")), ("-", ("x", "k")),
                          ("+", ("x", "k2")), ("-", ("x", "k2")), ("exchanges", "/"),
                          ("exchanges", "/")]
    assert broker.exchange_policy("/", "x") is not None
    broker.topology.unwatch(rec)
    broker.queue_declare(ch, "q2")
    assert len(rec.events) == 7
