"""Random requests into one Kafka session (plain calls, hypothesis): valid requests
of every API with bytes flipped or cut, so fields take any value (negative
partitions and offsets, huge sizes, corrupt batches, odd strings). What decodes is
handled without an exception: an answer, a step the shell can finish, or ``Close``
(the connection closes); what does not decode is the shell's to close."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqplite.protocol.kafka import records as rb
from amqplite.protocol.kafka.messages import (
    ApiKey,
    UnsupportedRequest,
    decode_request,
    encode_request,
)
from amqplite.protocol.kafka.primitives import CodecError
from amqplite.sessions.kafka.steps import AfterCommit, AfterConfirm, Close, FetchWait
from tests.sessions.kafka.test_session import run_reads, session
from tests.sessions.kafka.topic_node import Node

BATCH = rb.encode_batch([rb.Record(0, 0, b"k", b"v", [("h", b"x")])], base_timestamp=1)
PARTS = [{"partition_index": 0, "committed_offset": 1, "committed_metadata": "m"}]
REQUESTS: list[tuple[int, int, dict]] = [
    (ApiKey.METADATA, 9, {"topics": [{"name": "t"}], "allow_auto_topic_creation": True}),
    (ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}]}),
    (ApiKey.PRODUCE, 3, {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}]}),
    (ApiKey.FETCH, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 9999,
                        "topics": [{"topic": "t", "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 99}]}]}),
    (ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": 5}]}]}),
    (ApiKey.INIT_PRODUCER_ID, 2, {"transactional_id": None, "transaction_timeout_ms": 1}),
    (ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": 0}),
    (ApiKey.JOIN_GROUP, 5, {"group_id": "g", "session_timeout_ms": 10_000,
                            "rebalance_timeout_ms": 10_000, "member_id": "",
                            "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"m"}]}),
    (ApiKey.SYNC_GROUP, 3, {"group_id": "g", "generation_id": 1, "member_id": "m",
                            "assignments": [{"member_id": "m", "assignment": b"a"}]}),
    (ApiKey.HEARTBEAT, 3, {"group_id": "g", "generation_id": 1, "member_id": "m"}),
    (ApiKey.LEAVE_GROUP, 3, {"group_id": "g", "members": [{"member_id": "m"}]}),
    (ApiKey.OFFSET_COMMIT, 7, {"group_id": "g", "generation_id_or_member_epoch": -1,
                               "member_id": "", "topics": [{"name": "t", "partitions": PARTS}]}),
    (ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": None}),
    (ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "g", "topics": None}]}),
    (ApiKey.DESCRIBE_GROUPS, 4, {"groups": ["g"]}),
    (ApiKey.LIST_GROUPS, 4, {"states_filter": ["Stable"]}),
    (ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g", "h"]}),
    (ApiKey.CREATE_TOPICS, 5, {"topics": [{"name": "c", "num_partitions": 2,
                                           "replication_factor": 1, "assignments": [],
                                           "configs": [{"name": "retention.ms",
                                                        "value": "1000"}]}]}),
    (ApiKey.DELETE_TOPICS, 4, {"topic_names": ["c"], "timeout_ms": 1}),
    (ApiKey.DESCRIBE_CONFIGS, 3, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None}]}),
    (ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
    (ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00guest\x00guest"}),
    (ApiKey.API_VERSIONS, 3, {"client_software_name": "f", "client_software_version": "1"}),
]
FRAMES = [encode_request(k, v, 1, "fuzz", b)[4:] for k, v, b in REQUESTS]


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    with tempfile.TemporaryDirectory() as d, Node(Path(d) / "k.db") as n:
        yield n


def finish(node: Node, step: Any) -> None:
    """What the shell does with a step, done at once."""
    if isinstance(step, AfterCommit):
        step = step.build()
    if isinstance(step, AfterConfirm):
        step = step.build()
    if isinstance(step, FetchWait):
        raise AssertionError("finish a FetchWait with its session")
    run_reads(node, step)


mutation = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(FRAMES) - 1), mutation,
                          st.integers(0, 10_000) | st.none()), max_size=8))
def test_mutated_requests_never_raise(node: Node, script: list[Any]) -> None:
    s = session(node)
    for index, flips, cut in script:
        frame = bytearray(FRAMES[index])
        for at, value in flips:
            frame[at % len(frame)] = value
        if cut is not None:
            frame = frame[:cut % (len(frame) + 1)]
        try:
            req = decode_request(bytes(frame))
        except (CodecError, UnsupportedRequest):
            continue  # the shell closes the connection
        try:
            step = s.handle(req, 0.0)
        except Close:
            break
        node.shell.settle()
        if isinstance(step, FetchWait):
            step = s.fetch_reads(step, s.fetch_plan(step))
        finish(node, step)
        s.take_answers()
        if s.closing:
            break
    s.close()
    node.shell.settle()
