"""Kafka topics on streams (issue 37), with plain calls: a pure broker, a real SQLite
store every Fetch reads, the topic commands as the Kafka shell will call them."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from amqplite.broker import superstream as ss
from amqplite.broker.effects import Confirm
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.kafka import records as rb
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.mapping import Record
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.session import encode_fetched
from amqplite.sessions.kafka.topics import Fetched, FetchRead, StoredBatch, Topics
from amqplite.storeops import DeleteKafkaOffsets
from tests.broker.conftest import PERSISTENT
from tests.sessions.kafka.topic_node import Node

OK = ErrorCode.NONE


# ------------------------------------------------------------------- the model
def test_one_partition_is_a_stream_and_more_a_super_stream(node: Node) -> None:
    t = node.topics
    assert t.create_topic(node.ch, "orders").error == OK
    assert t.create_topic(node.ch, "clicks", 3).error == OK
    node.shell.settle()
    vh = node.b.vhost("/")
    q = vh.queues["orders"]
    assert q.stream is not None and q.durable and q.arguments["x-queue-type"] == "stream"
    ex = vh.exchanges["clicks"]
    assert ex.type_name == "direct" and ex.durable
    assert ex.arguments[ss.SUPER_STREAM_ARG] is True
    bound = sorted((b.args_dict[ss.PARTITION_ORDER_ARG], b.destination[1], b.routing_key)
                   for b in ex.bindings)
    assert bound == [(0, "clicks-0", "0"), (1, "clicks-1", "1"), (2, "clicks-2", "2")]
    assert all(vh.queues[f"clicks-{i}"].stream is not None for i in range(3))
    # partition streams are not topics of their own
    assert t.describe("/") == {"orders": ["orders"],
                               "clicks": ["clicks-0", "clicks-1", "clicks-2"]}
    assert t.create_topic(node.ch, "orders").error == ErrorCode.TOPIC_ALREADY_EXISTS
    assert t.create_topic(node.ch, "clicks", 1).error == ErrorCode.TOPIC_ALREADY_EXISTS
    assert t.describe("nope") == {}


def test_amqp_declared_streams_and_super_streams_are_topics(node: Node) -> None:
    b, ch = node.b, node.channel(confirm=False)
    b.queue_declare(ch, "plain", durable=True, arguments={"x-queue-type": "stream"})
    b.queue_declare(ch, "classic", durable=True)
    b.exchange_declare(ch, "regions", "direct", durable=True,
                       arguments={ss.SUPER_STREAM_ARG: True})
    for name, key, order in reversed(ss.layout("regions", routing_keys=["amer", "emea"])):
        b.queue_declare(ch, name, durable=True, arguments={"x-queue-type": "stream"})
        b.queue_bind(ch, name, "regions", key, {ss.PARTITION_ORDER_ARG: order})
    assert node.topics.describe("/") == {"plain": ["plain"],
                                         "regions": ["regions-amer", "regions-emea"]}
    info = node.topics.metadata(node.ch, ["regions", "classic"], allow_auto_create=False)
    assert info["regions"].partitions == ("regions-amer", "regions-emea")
    assert info["classic"].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # a topic over a name a classic queue holds cannot be made
    assert node.topics.create_topic(node.ch, "classic").error == ErrorCode.TOPIC_ALREADY_EXISTS
    # a super stream shadows a plain stream of its name
    b.exchange_declare(ch, "plain", "direct", durable=True,
                       arguments={ss.SUPER_STREAM_ARG: True})
    b.queue_declare(ch, "plain-0", durable=True, arguments={"x-queue-type": "stream"})
    b.queue_bind(ch, "plain-0", "plain", "0", {ss.PARTITION_ORDER_ARG: 0})
    assert node.topics.describe("/")["plain"] == ["plain-0"]


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "tab\tname", "é", "x" * 250])
def test_illegal_topic_names(node: Node, name: str) -> None:
    got = node.topics.create_topic(node.ch, name)
    assert got.error == ErrorCode.INVALID_TOPIC_EXCEPTION and got.message


def test_kafkas_checks_of_a_create(node: Node) -> None:
    t, ch = node.topics, node.ch
    assert t.create_topic(ch, "x" * 249).error == OK
    assert t.create_topic(ch, "a", 0).error == ErrorCode.INVALID_PARTITIONS
    assert t.create_topic(ch, "a", -2).error == ErrorCode.INVALID_PARTITIONS
    assert t.create_topic(ch, "a", 1001).error == ErrorCode.INVALID_PARTITIONS
    assert t.create_topic(ch, "y" * 249, 1000).error == OK, "y...y-999 is a queue name"
    assert t.create_topic(ch, "a", 1, 3).error == ErrorCode.INVALID_REPLICATION_FACTOR
    assert t.create_topic(ch, "a", 1, 1).error == OK
    for configs in ({"min.insync.replicas": "2"}, {"retention.ms": "soon"},
                    {"retention.bytes": "-5"}, {"cleanup.policy": "compact"},
                    {"segment.bytes": "1"}):
        assert t.create_topic(ch, "b", configs=configs).error == ErrorCode.INVALID_CONFIG
    assert t.create_topic(ch, "b", validate_only=True).error == OK
    assert "b" not in node.b.vhost("/").queues, "validate_only creates nothing"


def test_retention_configs_become_stream_arguments(node: Node) -> None:
    t = node.topics
    assert t.create_topic(node.ch, "r", 2, configs={
        "retention.ms": "1500", "retention.bytes": "1000000", "segment.bytes": "4096",
        "cleanup.policy": "delete"}).error == OK
    assert t.create_topic(node.ch, "forever", configs={"retention.ms": "-1",
                                                       "retention.bytes": None}).error == OK
    vh = node.b.vhost("/")
    for name in ("r-0", "r-1"):
        a = vh.queues[name].arguments
        assert (a["x-max-age"], a["x-max-length-bytes"],
                a["x-stream-max-segment-size-bytes"]) == ("2s", 1_000_000, 4096)
    assert vh.queues["r-0"].max_age == 2
    assert "x-max-age" not in vh.queues["forever"].arguments


@pytest.mark.parametrize(("configs", "error"), [
    ({"compression.type": "lz4", "delete.retention.ms": "900", "min.insync.replicas": "1",
      "flush.messages": "1"}, OK),
    ({"compression.type": "brotli"}, ErrorCode.INVALID_CONFIG),
    ({"min.insync.replicas": "2"}, ErrorCode.INVALID_CONFIG),
    ({"flush.ms": "soon"}, ErrorCode.INVALID_CONFIG),
    ({"dummy.doesntexist": "x"}, ErrorCode.INVALID_CONFIG),
    ({"cleanup.policy": "compact"}, ErrorCode.INVALID_CONFIG),
])
def test_moot_configs_are_taken_and_unknown_ones_refused(node: Node, configs: dict[str, str],
                                                        error: ErrorCode) -> None:
    got = node.topics.create_topic(node.ch, "c", configs=configs)
    assert got.error == error
    assert (got.message is None) == (error == OK)
    assert ("c" in node.b.vhost("/").queues) == (error == OK)


def test_num_partitions_is_the_default(tmp_path: Path) -> None:
    with Node(tmp_path / "k.db", num_partitions=4) as n:
        assert n.topics.create_topic(n.ch, "t").error == OK
        assert len(n.topics.partitions("/", "t") or []) == 4


# ---------------------------------------------------------------- auto-create
def test_metadata_and_produce_create_unknown_topics(node: Node) -> None:
    info = node.topics.metadata(node.ch, ["made", "bad/name"])
    assert info["made"].error == OK and info["made"].partitions == ("made",)
    assert info["bad/name"].error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert node.produce("by-produce", [b"v"]).error == OK
    assert node.values("by-produce") == [b"v"]
    assert set(node.topics.metadata(node.ch, None)) == {"made", "by-produce"}
    info = node.topics.metadata(node.ch, ["other"], allow_auto_create=False)
    assert info["other"].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_auto_create_off(tmp_path: Path) -> None:
    with Node(tmp_path / "k.db", auto_create=False) as n:
        assert n.topics.metadata(n.ch, ["t"])["t"].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert n.produce("t", [b"v"]).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "t" not in n.b.vhost("/").queues


# ---------------------------------------------------------------- permissions
def test_amqp_permissions_decide(tmp_path: Path) -> None:
    with Node(tmp_path / "k.db", access_control=True) as n:
        b = n.b
        b.put_user("reader", "", "", persist=False)
        b.set_permissions("reader", "/", "^$", "^$", ".*", persist=False)
        b.put_user("writer", "", "", persist=False)
        b.set_permissions("writer", "/", "^$", "^t$", "^$", persist=False)
        r, w = n.channel("reader"), n.channel("writer")
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert n.topics.create_topic(r, "t").error == denied
        assert n.topics.create_topic(r, "s", 2).error == denied
        assert n.topics.metadata(r, ["t"])["t"].error == denied
        assert n.topics.create_topic(n.ch, "t").error == OK
        assert n.produce("t", [b"v"], ch=r).error == denied
        assert n.produce("t", [b"v"], ch=w).error == OK
        assert isinstance(n.fetch("t", 0, ch=w), FetchRead)
        assert n.fetch("t", 0, ch=w).error == denied  # type: ignore[union-attr]
        assert isinstance(n.fetch("t", 0, ch=r), Fetched)
        assert n.topics.list_offset(w, "t", 0, -1).error == denied  # type: ignore[union-attr]
        assert n.topics.delete_topic(w, "t").error == denied
        assert n.topics.delete_topic(n.ch, "t").error == OK


# --------------------------------------------------------------------- delete
def test_delete_takes_the_streams_and_the_committed_offsets(tmp_path: Path) -> None:
    c = GroupCoordinator()
    with Node(tmp_path / "k.db", coordinator=c) as n:
        t = n.topics
        assert t.create_topic(n.ch, "gone", 2).error == OK
        _errors, rows = c.commit_offsets(0, "/", "g", -1, "", [("gone", 0, 3, "")])
        n.b.kafka_offsets_write("/", "g", rows)
        n.shell.settle()
        assert t.delete_topic(n.ch, "gone").error == OK
        out = n.b.take_outcome()
        assert DeleteKafkaOffsets("/", None, "gone") in out.store_ops
        n.shell.store.submit(out.store_ops)
        n.shell.store.flush()
        vh = n.b.vhost("/")
        assert "gone" not in vh.exchanges and not {"gone-0", "gone-1"} & set(vh.queues)
        assert c.fetch_offsets("/", "g", [("gone", 0)])[0].offset == -1
        assert t.delete_topic(n.ch, "gone").error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -------------------------------------------------------------- produce/fetch
def test_produce_appends_and_fetch_reads_them_back_from_disk(node: Node) -> None:
    node.topics.create_topic(node.ch, "t")
    p = node.produce("t", [b"a", b"b", b"c"])
    assert (p.error, p.base_offset, p.log_start_offset) == (OK, 0, 0)
    assert node.produce("t", [b"d"]).base_offset == 3
    got = node.fetch("t", 0)
    assert isinstance(got, Fetched)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got.records] == [
        (0, b"k0", b"a", 1_700_000_000_000), (1, b"k1", b"b", 1_700_000_000_001),
        (2, b"k2", b"c", 1_700_000_000_002), (3, b"k0", b"d", 1_700_000_000_000)]
    assert (got.high_watermark, got.log_start_offset) == (4, 0)
    assert node.values("t", 2) == [b"c", b"d"]
    assert node.shell.store.fetch_stream(node.b.vhost("/").queues["t"].id, 0, 10), "on disk"


def test_fetch_bounds(node: Node) -> None:
    node.topics.create_topic(node.ch, "t")
    node.produce("t", [b"x" * 100 for _ in range(10)])
    at_end = node.fetch("t", 10)
    assert isinstance(at_end, FetchRead) and at_end.error == OK and not at_end.read
    assert at_end.high_watermark == 10
    beyond = node.fetch("t", 11)
    assert isinstance(beyond, FetchRead) and beyond.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert node.fetch("t", -1).error == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[union-attr]
    one = node.fetch("t", 0, max_bytes=1)
    assert isinstance(one, Fetched) and [r.offset for r in one.records] == [0], \
        "at least one record, whatever max_bytes"
    some = node.fetch("t", 0, max_bytes=450)
    assert isinstance(some, Fetched) and 1 < len(some.records) < 10
    assert some.next_offset == len(some.records)
    # offsets whose commit failed are a gap: the answer moves the client past them
    read = node.topics.fetch(node.ch, "t", 0, 10, 1 << 20)
    assert not read.read
    gap = Topics.fetched(attrs.evolve(read, lo=10, hi=12), [])
    assert (gap.records, gap.next_offset) == ([], 13)
    assert node.fetch("t", 0, partition=1).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[union-attr]
    assert node.fetch("nope", 0).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[union-attr]


def test_a_stored_batch_is_fetched_whole_and_rebased(node: Node) -> None:
    """A produced batch is stored as it came: Fetch returns it (from any offset inside
    it) with its base offset patched, beside AMQP entries converted as before."""
    node.topics.create_topic(node.ch, "t")
    node.produce("t", [b"a"])  # record by record: offset 0
    raw = rb.encode_batch([rb.Record(i, i, b"k", b"b%d" % i) for i in range(4)],
                          base_timestamp=1_700_000_000_000)
    p = node.topics.produce_batch(node.ch, "t", 0, raw, rb.decode_batch(raw))
    node.shell.settle()
    assert (p.error, p.base_offset) == (OK, 1)
    node.produce("t", [b"c"])
    got = node.fetch("t", 2)  # inside the batch
    assert isinstance(got, Fetched)
    [batch, last] = got.records
    assert isinstance(batch, StoredBatch) and (batch.offset, batch.count) == (1, 4)
    assert (got.next_offset, last.offset) == (6, 5)
    data = encode_fetched(got.records)
    offsets = [(b.base_offset + r.offset_delta, r.value) for one in rb.split_batches(data)
               for b in [rb.decode_batch(one)] for r in b.records or []]
    assert offsets == [*((1 + i, b"b%d" % i) for i in range(4)), (5, b"c")]
    assert node.values("t", 0)[0] == b"a"
    # ListOffsets by time finds the batch (append times): the asked offset at the least
    assert node.list_offset("t", 0).offset == 0


def test_partitions_are_separate_logs(node: Node) -> None:
    node.topics.create_topic(node.ch, "p", 3)
    node.produce("p", [b"zero"], partition=0)
    node.produce("p", [b"two", b"two again"], partition=2)
    assert node.values("p", partition=0) == [b"zero"]
    assert node.values("p", partition=1) == []
    assert node.values("p", partition=2) == [b"two", b"two again"]
    assert node.produce("p", [b"x"], partition=3).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_acks_all_answer_waits_for_the_confirm_of_its_last_record(node: Node) -> None:
    node.topics.create_topic(node.ch, "t")
    node.shell.settle()
    recs = [Record(i, 1000, None, b"v%d" % i) for i in range(3)]
    p = node.topics.produce(node.ch, "t", 0, recs)
    assert p.seq == 3
    confirms = [e for e in node.b.take_outcome().effects if isinstance(e, Confirm)]
    assert [(c.upto, c.after_commit) for c in confirms] == [(3, True)]
    plain = node.channel(confirm=False)
    assert node.topics.produce(plain, "t", 0, recs).seq is None


def test_retention_moves_the_log_start(node: Node) -> None:
    node.topics.create_topic(node.ch, "r", configs={"retention.bytes": "300",
                                                   "segment.bytes": "200"})
    p = None
    for i in range(20):
        p = node.produce("r", [b"%02d" % i + b"x" * 60])
        node.clock.t += 1
    assert p is not None and p.log_start_offset > 0
    first = node.list_offset("r", -2).offset
    assert first == p.log_start_offset
    assert node.fetch("r", first - 1).error == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[union-attr]
    got = node.fetch("r", first)
    assert isinstance(got, Fetched) and got.records[0].offset == first


# ---------------------------------------------------------------- idempotence
def test_a_retried_batch_gets_its_first_offset_back(node: Node) -> None:
    err, pid, epoch = node.topics.init_producer_id()
    assert err == OK and epoch == 0 and pid > 0
    _e, pid2, _ = node.topics.init_producer_id()
    assert pid2 == pid + 1
    assert node.topics.init_producer_id("txn")[0] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    node.topics.create_topic(node.ch, "t")

    def send(seq: int, n: int = 2, ep: int = 0) -> tuple[ErrorCode, int]:
        p = node.produce("t", [b"s%d" % (seq + i) for i in range(n)], producer_id=pid,
                         producer_epoch=ep, base_sequence=seq)
        return p.error, p.base_offset

    assert send(0) == (OK, 0)
    assert send(2) == (OK, 2)
    assert send(0) == (OK, 0), "an exact retry: its original offset, nothing appended"
    assert send(2) == (OK, 2)
    assert send(5)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "a gap"
    assert send(1)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "not a batch it sent"
    for seq in range(4, 14, 2):
        assert send(seq)[0] == OK
    assert send(0)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "only five batches are kept"
    assert send(2)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(4) == (OK, 4), "the oldest of the five kept"
    assert send(14, ep=1)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "a new epoch starts at 0"
    assert send(0, ep=1) == (OK, 14)
    assert send(2, ep=0)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert node.values("t") == [b"s%d" % i for i in range(14)] + [b"s0", b"s1"]
    # another partition, another sequence; a producer it never saw starts anywhere
    assert node.produce("t2", [b"x"], producer_id=pid, producer_epoch=0,
                        base_sequence=77).base_offset == 0


def test_a_batch_whose_commit_failed_is_appended_on_its_retry(node: Node) -> None:
    _e, pid, _ep = node.topics.init_producer_id()
    node.topics.create_topic(node.ch, "t")
    p = node.produce("t", [b"lost"], producer_id=pid, producer_epoch=0, base_sequence=0)
    assert p.queue_id == node.b.vhost("/").queues["t"].id
    node.topics.produce_failed(p, pid)  # its Confirm was a nack
    again = node.produce("t", [b"lost"], producer_id=pid, producer_epoch=0, base_sequence=0)
    assert (again.error, again.base_offset) == (OK, 1), "appended, not a duplicate"


# -------------------------------------------------------------- ListOffsets
def test_list_offsets(node: Node) -> None:
    node.topics.create_topic(node.ch, "t")
    assert node.list_offset("t", -3).offset == -1, "empty: no max timestamp"
    t0 = int(node.clock.t * 1000)
    for i in range(5):  # record times (CreateTime) as the clock
        node.produce("t", [b"a%d" % i, b"b%d" % i], ts=int(node.clock.t * 1000))
        node.clock.t += 10
    assert node.list_offset("t", -2).offset == 0
    assert node.list_offset("t", -1).offset == 10
    top = node.list_offset("t", -3)
    assert (top.offset, top.timestamp) == (9, t0 + 40_000)
    at = node.list_offset("t", t0 + 15_000)
    assert (at.offset, at.timestamp) == (4, t0 + 20_000)
    assert node.list_offset("t", t0 + 20_000).offset == 4
    assert node.list_offset("t", 0).offset == 0
    assert node.list_offset("t", t0 + 40_001).offset == -1, "nothing that late"


def test_list_offsets_by_time_reads_the_records_own_times(node: Node) -> None:
    """Kafka's default message.timestamp.type is CreateTime: offsetsForTimes finds the
    first record the producer stamped at or after the time, inside a stored batch
    too (librdkafka's test 0054 stamps 1234 and 999999999999 in one batch)."""
    node.topics.create_topic(node.ch, "t")
    recs = [Record(0, 1234, None, b"old"), Record(1, 999_999_999_999, None, b"new")]
    assert node.topics.produce(node.ch, "t", 0, recs).error == OK
    node.shell.settle()
    assert node.list_offset("t", 1234).offset == 0
    assert (node.list_offset("t", 999_999_999_999).offset,
            node.list_offset("t", 999_999_999_999).timestamp) == (1, 999_999_999_999)
    assert node.list_offset("t", 1_000_000_000_000).offset == -1
    # an AMQP publish carries its time in the timestamp property (seconds)
    b, ch = node.b, node.channel(confirm=False)
    b.basic_publish(ch, "", "t", encode_properties(BasicProperties(timestamp=1_500_000_000)),
                    b"amq")
    node.shell.settle()
    assert node.list_offset("t", 1_000_000_000_000).offset == 2


def test_list_offsets_by_time_scans_past_one_read(node: Node) -> None:
    node.topics.create_topic(node.ch, "t")
    t0 = int(node.clock.t * 1000)
    node.produce("t", [b"old"] * 30, ts=t0)
    node.clock.t += 5
    node.produce("t", [b"new"], ts=t0 + 5000)
    node.shell.settle()
    scan = node.topics.list_offset(node.ch, "t", 0, t0 + 1)
    assert not isinstance(scan, Fetched)
    scan = Topics.scanned(scan, [])  # type: ignore[arg-type]
    assert scan.offset == -1  # type: ignore[union-attr]
    assert node.list_offset("t", t0 + 1).offset == 30


# --------------------------------------------------------------- long polling
def test_wait_append_wakes_once_on_kafka_and_amqp_appends(node: Node) -> None:
    node.topics.create_topic(node.ch, "t")
    woken: list[str] = []
    cancel = node.topics.wait_append("/", "t", 0, lambda: woken.append("a"))
    assert cancel is not None
    node.topics.wait_append("/", "t", 0, lambda: woken.append("b"))
    node.produce("t", [b"1", b"2"])
    assert woken == ["a", "b"], "each waiter once"
    st = node.b.vhost("/").queues["t"].stream
    assert st is not None and st.on_append is None, "no waiter: appends pay nothing"
    node.topics.wait_append("/", "t", 0, lambda: woken.append("c"))
    node.b.basic_publish(node.channel(confirm=False), "", "t", PERSISTENT, b"amqp")
    assert woken[-1] == "c"
    cancel2 = node.topics.wait_append("/", "t", 0, lambda: woken.append("d"))
    assert cancel2 is not None
    cancel2()
    cancel()  # already fired: harmless
    node.produce("t", [b"3"])
    assert woken == ["a", "b", "c"] and st.on_append is None
    assert node.topics.wait_append("/", "t", 1, lambda: None) is None


# ------------------------------------------------------------ both protocols
def test_amqp_publishes_read_as_records(node: Node) -> None:
    b = node.b
    ch = node.channel(confirm=False)
    node.topics.create_topic(node.ch, "t")
    node.topics.create_topic(node.ch, "s", 2)
    props = encode_properties(BasicProperties(
        delivery_mode=2, timestamp=1_700_000_123,
        headers=FieldTable({"trace": "abc", "n": 7, "raw": b"\x00\xff", "none": None})))
    b.basic_publish(ch, "", "t", props, b"via default")
    b.basic_publish(ch, "s", "1", PERSISTENT, b"via super stream")
    got = node.fetch("t", 0)
    assert isinstance(got, Fetched)
    r = got.records[0]
    assert (r.key, r.value, r.timestamp) == (None, b"via default", 1_700_000_123_000)
    assert r.headers == [("trace", b"abc"), ("n", b"7"), ("raw", b"\x00\xff"), ("none", None)]
    got = node.fetch("s", 0, partition=1)
    assert isinstance(got, Fetched)
    r = got.records[0]
    assert (r.key, r.value, r.headers) == (b"1", b"via super stream", [])
    assert r.timestamp == int(node.clock.t * 1000), "no timestamp property: the append time"


def test_kafka_records_read_by_an_amqp_stream_consumer(node: Node) -> None:
    node.topics.create_topic(node.ch, "t")
    recs = [Record(0, 1_700_000_000_250, b"user-1", b"v", [("h", b"1"), ("h", b"2")]),
            Record(1, 1_700_000_001_000, None, None)]
    node.topics.produce(node.ch, "t", 0, recs)
    node.shell.settle()
    ch = node.channel(confirm=False)
    node.b.basic_qos(ch, 0, 10, False)
    node.b.basic_consume(ch, "t", "c", arguments={"x-stream-offset": "first"})
    node.b.start_consumer(ch, "c")
    node.shell.settle()
    first, second = (d.message for d in node.shell.deliveries)
    p = decode_properties(first.properties_raw)
    assert (first.exchange, first.routing_key, first.body) == ("", "user-1", b"v")
    assert p.timestamp == 1_700_000_000 and p.delivery_mode == 2
    assert p.headers is not None
    assert (p.headers["x-kafka-key"], p.headers["x-kafka-timestamp"], p.headers["h"],
            p.headers["x-stream-offset"]) == ("user-1", 1_700_000_000_250, ["1", "2"], 0)
    p2 = decode_properties(second.properties_raw)
    assert second.body == b"" and p2.headers is not None
    assert p2.headers["x-kafka-value-null"] is True and "x-kafka-key" not in p2.headers
    got = node.fetch("t", 0)
    assert isinstance(got, Fetched)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in got.records] == [
        (b"user-1", b"v", 1_700_000_000_250, [("h", b"1"), ("h", b"2")]),
        (None, None, 1_700_000_001_000, [])]


def test_records_survive_a_restart(tmp_path: Path) -> None:
    from tests.broker.test_spill import _reopen

    with Node(tmp_path / "k.db") as n:
        n.topics.create_topic(n.ch, "t", 2)
        n.produce("t", [b"a", b"b"], partition=1)
    store, b = _reopen(tmp_path / "k.db")
    store.start()
    try:
        t = Topics(b)
        s = b.open_session("guest", "/")
        ch = b.open_channel(s, 1)
        assert t.describe("/") == {"t": ["t-0", "t-1"]}
        r = t.fetch(ch, "t", 1, 0, 1 << 20)
        assert r.read and r.high_watermark == 2
        got = t.fetched(r, store.fetch_stream(r.queue_id, r.lo, r.limit))
        assert [(x.offset, x.value) for x in got.records] == [(0, b"a"), (1, b"b")]
        assert t.produce(ch, "t", 1, [Record(0, 5, None, b"c")]).base_offset == 2
    finally:
        store.close(timeout=10)
