"""The ``$SYS/broker/...`` tree's content as plain functions: names and formats as
mosquitto(8) "BROKER STATUS" gives them, Mosquitto's decayed load averages, what a
tick sends, and the subscription table's index of ``$`` filters."""

from __future__ import annotations

import math

import attrs
import pytest

from amqplite.protocol.mqtt.subscriptions import SubOptions, SubscriptionTable
from amqplite.sessions.mqtt.systree import (
    Figures,
    Loads,
    changed,
    counters,
    is_sys,
    matching,
    tree,
)

F = Figures(version="amqplite version 1.2.3", uptime=42, connected=3, disconnected=2,
            maximum=7, received=100, sent=250, bytes_received=4096, bytes_sent=8192,
            connections=9, subscriptions=11, retained=4, stored=17)


def test_tree_names_and_formats() -> None:
    t = tree(F, Loads())
    assert t["$SYS/broker/version"] == "amqplite version 1.2.3"
    assert t["$SYS/broker/uptime"] == "42 seconds"
    assert t["$SYS/broker/clients/connected"] == "3"
    assert t["$SYS/broker/clients/disconnected"] == "2"
    assert t["$SYS/broker/clients/total"] == "5"
    assert t["$SYS/broker/clients/maximum"] == "7"
    assert t["$SYS/broker/messages/received"] == "100"
    assert t["$SYS/broker/messages/sent"] == "250"
    assert t["$SYS/broker/publish/messages/received"] == "100"
    assert t["$SYS/broker/bytes/received"] == "4096"
    assert t["$SYS/broker/bytes/sent"] == "8192"
    assert t["$SYS/broker/subscriptions/count"] == "11"
    assert t["$SYS/broker/retained messages/count"] == "4"
    assert t["$SYS/broker/store/messages/count"] == "17"
    for what in ("messages/received", "messages/sent", "bytes/received", "bytes/sent",
                 "publish/received", "publish/sent", "connections"):
        for window in ("1min", "5min", "15min"):
            assert t[f"$SYS/broker/load/{what}/{window}"] == "0.00"
    assert all(k.startswith("$SYS/broker/") for k in t)


def test_loads_are_decayed_per_minute_rates() -> None:
    """120 messages in 60 s is 120 a minute; after one step each window holds
    rate * (1 - exp(-dt/T)), as Mosquitto's calc_load; a steady rate converges."""
    loads = Loads()
    loads.update(counters(F), 1000.0)
    assert loads.rates["messages/received"] == [0.0, 0.0, 0.0]  # the first sample: a base
    loads.update(counters(attrs.evolve(F, received=F.received + 120)), 1060.0)
    got = loads.rates["messages/received"]
    for avg, span in zip(got, (60.0, 300.0, 900.0), strict=True):
        assert avg == pytest.approx(120 * (1 - math.exp(-60 / span)))
    t = tree(F, loads)
    assert t["$SYS/broker/load/messages/received/1min"] == f"{got[0]:.2f}" == "75.85"
    assert t["$SYS/broker/load/publish/received/1min"] == "75.85"
    assert t["$SYS/broker/load/messages/sent/1min"] == "0.00"
    n, now = F.received + 120, 1060.0
    for _ in range(200):
        n, now = n + 10, now + 5.0  # 120 a minute, sampled every 5 s
        loads.update(counters(attrs.evolve(F, received=n)), now)
    assert loads.rates["messages/received"][0] == pytest.approx(120.0, rel=1e-3)
    loads.update(counters(attrs.evolve(F, received=n + 5)), now)  # no time passed
    assert loads.rates["messages/received"][0] == pytest.approx(120.0, rel=1e-3)


def test_a_tick_sends_what_moved() -> None:
    old = tree(F, Loads())
    new = tree(attrs.evolve(F, uptime=43, connected=4), Loads())
    assert changed(old, new) == {"$SYS/broker/uptime": "43 seconds",
                                 "$SYS/broker/clients/connected": "4",
                                 "$SYS/broker/clients/total": "6"}
    assert changed({}, new) == new


def test_matching_keeps_sys_from_leading_wildcards() -> None:
    t = tree(F, Loads())
    assert len(matching(t, ["$SYS/#"])) == len(t)
    assert matching(t, ["$SYS/broker/clients/+"]) == [
        (k, v) for k, v in t.items() if k.startswith("$SYS/broker/clients/")]
    assert matching(t, ["#", "+/broker/#", "+/+/version"]) == []  # [MQTT-4.7.2-1]
    assert matching(t, ["$SYS/broker/version"]) == [("$SYS/broker/version", F.version)]


def test_is_sys() -> None:
    assert is_sys("$SYS") and is_sys("$SYS/broker/version")
    assert not is_sys("$SYSTEM/x") and not is_sys("a/$SYS") and not is_sys("$share/g/t")


def test_subscription_table_indexes_dollar_filters() -> None:
    table = SubscriptionTable()
    table.set("q1", "a/#", SubOptions())
    table.set("q1", "$SYS/broker/#", SubOptions())
    table.set("q0", "$SYS/broker/uptime", SubOptions())
    assert table.dollar == {("q1", "$SYS/broker/#"), ("q0", "$SYS/broker/uptime")}
    table.remove("q1", "$SYS/broker/#")
    assert table.dollar == {("q0", "$SYS/broker/uptime")}
    table.drop_queue("q0")
    assert table.dollar == set()
    table.load("q1", [("$SYS/#", SubOptions(1))])
    assert table.dollar == {("q1", "$SYS/#")}
