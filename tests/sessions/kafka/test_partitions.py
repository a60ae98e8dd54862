"""CreatePartitions and manual replica assignments (issue 37), with plain calls on
the topic model over a pure broker and a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqplite.broker import superstream as ss
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.sessions.kafka.admin import _assigned_partitions
from amqplite.sessions.kafka.topics import NODE_ID
from tests.sessions.kafka.topic_node import Node

OK = ErrorCode.NONE


def test_a_super_stream_gains_partitions_in_rabbitmqs_layout(node: Node) -> None:
    t = node.topics
    assert t.create_topic(node.ch, "clicks", 2).error == OK
    node.produce("clicks", [b"one"], partition=1)
    assert t.add_partitions(node.ch, "clicks", 4).error == OK
    node.shell.settle()
    assert t.describe("/")["clicks"] == [f"clicks-{i}" for i in range(4)]
    ex = node.b.vhost("/").exchanges["clicks"]
    assert sorted((b.args_dict[ss.PARTITION_ORDER_ARG], b.destination[1], b.routing_key)
                  for b in ex.bindings) == [(i, f"clicks-{i}", str(i)) for i in range(4)]
    assert node.values("clicks", partition=1) == [b"one"]
    assert node.produce("clicks", [b"new"], partition=3).error == OK
    assert node.values("clicks", partition=3) == [b"new"]


def test_a_one_partition_topic_keeps_its_stream_as_partition_zero(node: Node) -> None:
    t = node.topics
    assert t.create_topic(node.ch, "orders", 1, configs={"retention.ms": "60000"}).error == OK
    node.produce("orders", [b"a", b"b"])
    assert t.add_partitions(node.ch, "orders", 3).error == OK
    node.shell.settle()
    assert t.describe("/") == {"orders": ["orders", "orders-1", "orders-2"]}
    assert node.values("orders") == [b"a", b"b"], "records and offsets stay put"
    assert node.produce("orders", [b"c"]).base_offset == 2
    vh = node.b.vhost("/")
    assert vh.queues["orders-2"].arguments["x-max-age"] == vh.queues["orders"].arguments[
        "x-max-age"], "new partitions take the topic's retention"
    # and it can grow again, now as a super stream
    assert t.add_partitions(node.ch, "orders", 4).error == OK
    assert len(t.partitions("/", "orders") or []) == 4
    # deleting it takes every stream and the exchange
    assert t.delete_topic(node.ch, "orders").error == OK
    node.shell.settle()
    assert not [q for q in vh.queues if q.startswith("orders")] and "orders" not in vh.exchanges


@pytest.mark.parametrize(("count", "error"), [(2, ErrorCode.INVALID_PARTITIONS),
                                              (1, ErrorCode.INVALID_PARTITIONS),
                                              (100_000, ErrorCode.INVALID_PARTITIONS)])
def test_kafkas_checks_of_a_grow(node: Node, count: int, error: ErrorCode) -> None:
    node.topics.create_topic(node.ch, "t", 2)
    got = node.topics.add_partitions(node.ch, "t", count)
    assert got.error == error and got.message


def test_grow_refusals_change_nothing(node: Node) -> None:
    t, b = node.topics, node.b
    assert t.add_partitions(node.ch, "nope", 3).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    t.create_topic(node.ch, "t", 2)
    b.queue_declare(node.channel(confirm=False), "t-2", durable=True)
    assert t.add_partitions(node.ch, "t", 3).error == ErrorCode.INVALID_PARTITIONS
    assert t.add_partitions(node.ch, "t", 4, validate_only=True).error == \
        ErrorCode.INVALID_PARTITIONS
    assert len(t.partitions("/", "t") or []) == 2
    t.create_topic(node.ch, "u", 1)
    assert t.add_partitions(node.ch, "u", 2, validate_only=True).error == OK
    assert t.partitions("/", "u") == [b.vhost("/").queues["u"]], "validate_only made nothing"


def test_growing_needs_configure_on_the_new_streams(tmp_path: Path) -> None:
    with Node(tmp_path / "k.db", access_control=True) as n:
        n.b.put_user("small", "", "", persist=False)
        n.b.set_permissions("small", "/", "^t$", ".*", ".*", persist=False)
        assert n.topics.create_topic(n.ch, "t").error == OK
        got = n.topics.add_partitions(n.channel("small"), "t", 2)
        assert got.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert "configure access to queue 't-1'" in (got.message or "")
        assert n.topics.add_partitions(n.ch, "t", 2).error == OK


def _topic(assignments: list[tuple[int, list[int]]], n: int = -1, rf: int = -1) -> dict[str, Any]:
    return {"num_partitions": n, "replication_factor": rf,
            "assignments": [{"partition_index": p, "broker_ids": ids} for p, ids in assignments]}


def test_manual_assignments_on_the_one_node() -> None:
    assert _assigned_partitions(_topic([(1, [NODE_ID]), (0, [NODE_ID])])) == (
        2, OK, None)
    _, error, why = _assigned_partitions(_topic([(0, [NODE_ID]), (2, [NODE_ID])]))
    assert error == ErrorCode.INVALID_REPLICA_ASSIGNMENT and why
    _, error, why = _assigned_partitions(_topic([(0, [NODE_ID, 7])]))
    assert error == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "one node" in (why or "")
    _, error, _ = _assigned_partitions(_topic([(0, [NODE_ID])], n=1))
    assert error == ErrorCode.INVALID_REQUEST
