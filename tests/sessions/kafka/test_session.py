"""The Kafka session's rules with plain calls (issue 37): requests encoded and decoded
by the codec, a pure broker with a real SQLite store (topic_node.Node), and the
shell's part done by hand: Confirms handed to the session, store reads run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqplite.protocol.kafka import records as rb
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.messages import (
    SUPPORTED,
    ApiKey,
    Request,
    decode_request,
    decode_response,
    encode_request,
)
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.session import KafkaSession
from amqplite.sessions.kafka.steps import AfterCommit, AfterConfirm, Close, FetchWait, GroupWait, Reads
from tests.sessions.kafka.topic_node import Node

PORT = 19092


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with Node(tmp_path / "k.db") as n:
        yield n


def session(node: Node, anonymous: str | None = "guest") -> KafkaSession:
    return KafkaSession(node.b, node.topics, GroupCoordinator(), conn_id=1,
                        peer="127.0.0.1:5000", peer_host="127.0.0.1",
                        advertised=("127.0.0.1", PORT),
                        authenticate=lambda n, p: n if (n, p) == ("guest", "guest") else None,
                        anonymous=anonymous)


def request(key: int, version: int, body: dict, corr: int = 7) -> Request:
    return decode_request(encode_request(key, version, corr, "test", body)[4:])


def answer(key: int, version: int, data: Any) -> dict:
    assert isinstance(data, bytes)
    return decode_response(key, version, data[4:])[1]


def batch(values: list[bytes], **kw: Any) -> bytes:
    return rb.encode_batch([rb.Record(i, i, b"k%d" % i, v) for i, v in enumerate(values)],
                           base_timestamp=1_700_000_000_000, **kw)


def produce(s: KafkaSession, values: list[bytes], acks: int = -1, topic: str = "t",
            **kw: Any) -> Any:
    return s.handle(request(ApiKey.PRODUCE, 9, {
        "acks": acks, "timeout_ms": 1000, "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": batch(values, **kw)}]}]}), 0.0)


def test_api_versions_answer_from_supported_before_a_login(node: Node) -> None:
    s = session(node, anonymous=None)
    body = answer(ApiKey.API_VERSIONS, 3, s.handle(request(ApiKey.API_VERSIONS, 3, {}), 0.0))
    assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]} \
        == {int(k): v for k, v in SUPPORTED.items()}
    with pytest.raises(Close):
        s.handle(request(ApiKey.METADATA, 9, {"topics": None}), 0.0)


def test_metadata_advertises_this_node_and_auto_creates(node: Node) -> None:
    s = session(node)
    body = answer(ApiKey.METADATA, 9, s.handle(request(ApiKey.METADATA, 9, {
        "topics": [{"name": "fresh"}], "allow_auto_topic_creation": True}), 0.0))
    assert body["brokers"] == [{"node_id": 0, "host": "127.0.0.1", "port": PORT, "rack": None}]
    [topic] = body["topics"]
    assert (topic["name"], topic["error_code"], len(topic["partitions"])) == ("fresh", 0, 1)
    assert s.session is not None and s.session.protocol == "Kafka"


def test_produce_acks(node: Node) -> None:
    s = session(node)
    step = produce(s, [b"a", b"b", b"c"])
    assert isinstance(step, AfterConfirm) and step.seq == 1  # the batch stored whole
    node.shell.settle()
    assert not s.confirmed(1)
    s.send_confirm(s.ch, 1, True, False)  # type: ignore[arg-type]
    assert s.confirmed(1)
    part = answer(ApiKey.PRODUCE, 9, step.build())["responses"][0]["partition_responses"][0]
    assert (part["error_code"], part["base_offset"]) == (0, 0)
    assert produce(s, [b"d"], acks=0) is None  # no response at all
    part = answer(ApiKey.PRODUCE, 9, produce(s, [b"e"], acks=1))[
        "responses"][0]["partition_responses"][0]
    assert (part["error_code"], part["base_offset"]) == (0, 4)
    nacked = produce(s, [b"f"])
    assert isinstance(nacked, AfterConfirm)
    s.send_confirm(s.ch, nacked.seq, False, True)  # type: ignore[arg-type]
    part = answer(ApiKey.PRODUCE, 9, nacked.build())["responses"][0]["partition_responses"][0]
    assert part["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR


def test_produce_refusals(node: Node) -> None:
    s = session(node)
    step = s.handle(request(ApiKey.PRODUCE, 9, {
        "transactional_id": "tx", "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch([b"x"])}]}]}), 0.0)
    part = answer(ApiKey.PRODUCE, 9, step)["responses"][0]["partition_responses"][0]
    assert part["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    bad = bytearray(batch([b"x"]))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    step = s.handle(request(ApiKey.PRODUCE, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": bytes(bad)}]}]}), 0.0)
    part = answer(ApiKey.PRODUCE, 9, step)["responses"][0]["partition_responses"][0]
    assert part["error_code"] == ErrorCode.CORRUPT_MESSAGE


def run_reads(node: Node, step: Any) -> Any:
    while isinstance(step, Reads):
        step = step.resume([node.store.fetch_stream(q, lo, n) for q, lo, n in step.reads])
    return step


def test_fetch_waits_then_serves_one_batch(node: Node) -> None:
    s = session(node)
    produce(s, [b"x"])
    node.shell.settle()
    step = s.handle(request(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
        "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 20}]}]}), 10.0)
    assert isinstance(step, FetchWait) and step.deadline == 10.5
    assert not s.fetch_ready(s.fetch_plan(step))  # at the high watermark: a long poll
    assert s.wait_targets(s.fetch_plan(step)) == [("/", "t", 0)]
    produce(s, [b"y", b"z"])
    node.shell.settle()
    plan = s.fetch_plan(step)
    assert s.fetch_ready(plan)
    body = answer(ApiKey.FETCH, 11, run_reads(node, s.fetch_reads(step, plan)))
    part = body["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 3
    [got] = rb.split_batches(part["records"])
    decoded = rb.decode_batch(got)
    assert decoded.base_offset == 1
    assert [r.value for r in decoded.records or []] == [b"y", b"z"]


def test_fetch_waits_for_min_bytes_and_is_logged(node: Node) -> None:
    """``min_bytes`` holds the answer until about that much lies past the fetch offset;
    a partition answered with records is one ``fetched`` row of the delivery log."""
    s = session(node)
    produce(s, [b"x" * 100])
    node.shell.settle()
    step = s.handle(request(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1000, "max_bytes": 1 << 20,
        "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}), 0.0)
    assert isinstance(step, FetchWait)
    assert s.fetch_ready(s.fetch_plan(step), 1)
    assert not s.fetch_ready(s.fetch_plan(step), 1000)  # one record of ~170 bytes
    for _ in range(6):
        produce(s, [b"x" * 100])
    node.shell.settle()
    plan = s.fetch_plan(step)
    assert s.fetch_ready(plan, 1000)
    node.shell.log.clear()
    body = answer(ApiKey.FETCH, 11, run_reads(node, s.fetch_reads(step, plan)))
    assert len(rb.split_batches(body["responses"][0]["partitions"][0]["records"])) == 7
    node.shell.settle()
    [row] = [r for r in node.shell.log if r[1] == "fetched"]
    assert (row[2], row[5], row[8], row[12]) == ("/", "t", "test", "Kafka")
    assert row[11].startswith("offset:0-6 records:7 bytes:")


def test_list_offsets_after_the_commit(node: Node) -> None:
    s = session(node)
    produce(s, [b"a", b"b"])
    node.shell.settle()
    step = s.handle(request(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}), 0.0)
    assert isinstance(step, AfterCommit)
    body = answer(ApiKey.LIST_OFFSETS, 5, run_reads(node, step.build()))
    assert body["topics"][0]["partitions"][0]["offset"] == 2


def test_sasl_plain(node: Node) -> None:
    s = session(node, anonymous=None)
    body = answer(ApiKey.SASL_HANDSHAKE, 1, s.handle(
        request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}), 0.0))
    assert (body["error_code"], body["mechanisms"]) == (
        ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["PLAIN"])
    s.handle(request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0.0)
    body = answer(ApiKey.SASL_AUTHENTICATE, 1, s.handle(request(
        ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00/:guest\x00guest"}), 0.0))
    assert body["error_code"] == 0 and not s.closing
    assert s.session is not None and (s.session.username, s.session.vhost) == ("guest", "/")
    other = session(node, anonymous=None)
    other.handle(request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0.0)
    body = answer(ApiKey.SASL_AUTHENTICATE, 1, other.handle(request(
        ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00guest\x00wrong"}), 0.0))
    assert body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED and other.closing


def test_a_lone_member_joins_at_once(node: Node) -> None:
    s = session(node)
    step = s.handle(request(ApiKey.JOIN_GROUP, 3, {
        "group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}]}), 0.0)
    assert isinstance(step, GroupWait) and step.handle == (1, 7)
    replies = [r for a in s.take_answers() for r in a.replies]
    assert [r.handle for r in replies] == [(1, 7)]
    body = answer(ApiKey.JOIN_GROUP, 3, step.build(replies[0].answer))
    assert body["error_code"] == 0 and body["leader"] == body["member_id"]
    coord = answer(ApiKey.FIND_COORDINATOR, 2, s.handle(request(
        ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": 0}), 0.0))
    assert (coord["error_code"], coord["port"]) == (0, PORT)


def test_an_empty_batch_moves_a_consumer_past_empty_offsets() -> None:
    got = rb.decode_batch(rb.encode_empty_batch(5, 9))
    assert (got.base_offset, got.last_offset, got.record_count, got.records) == (5, 9, 0, [])


def test_a_fetch_reads_on_past_one_store_read(node: Node) -> None:
    """2,500 records, more than one store read brings: one Fetch answers with all of
    them when max_bytes has room, and with fewer when it has not."""
    s = session(node)
    for n in range(0, 2500, 100):  # batches of 100, each stored as it came
        produce(s, [b"v%d" % i for i in range(n, n + 100)])
    node.shell.settle()

    def fetch(max_bytes: int) -> list[int]:
        step = s.handle(request(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": max_bytes}]}]}),
            0.0)
        assert isinstance(step, FetchWait)
        body = answer(ApiKey.FETCH, 11, run_reads(node, s.fetch_reads(step, s.fetch_plan(step))))
        data = body["responses"][0]["partitions"][0]["records"]
        return [b.base_offset + r.offset_delta for raw in rb.split_batches(data)
                for b in [rb.decode_batch(raw)] for r in b.records or []]
    assert fetch(1 << 20) == list(range(2500))
    assert 0 < len(fetch(10_000)) < 1000


def test_confirms_in_any_order_and_a_nack_only_fails_its_own_produce(node: Node) -> None:
    s = session(node)
    a, b = produce(s, [b"a"]), produce(s, [b"b"])
    assert isinstance(a, AfterConfirm) and isinstance(b, AfterConfirm)
    assert (a.seq, b.seq) == (1, 2)
    s.send_confirm(s.ch, 2, False, True)  # type: ignore[arg-type]  # b nacked first
    assert not s.confirmed(2)
    s.send_confirm(s.ch, 1, False, False)  # type: ignore[arg-type]
    assert s.confirmed(2)

    def error(step: AfterConfirm) -> int:
        return answer(ApiKey.PRODUCE, 9, step.build())[
            "responses"][0]["partition_responses"][0]["error_code"]
    assert (error(a), error(b)) == (0, ErrorCode.KAFKA_STORAGE_ERROR)
