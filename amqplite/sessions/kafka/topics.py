"""Kafka topics as amqplite streams: the commands the Kafka shell calls.

The mapping (docs/kafka.md): in a vhost, topic T is either a plain stream
named T (one partition) or a super stream T (RabbitMQ's layout: a direct
exchange with ``x-super-stream`` and one stream per partition bound with
``x-stream-partition-order``), its partitions the streams in that order. A
Kafka offset is the stream offset, the log start offset the stream's first,
the high watermark its next. An AMQP-declared stream is a one-partition topic;
a super stream's partition streams are not topics of their own (a client
listing topics sees T, not T-0, T-1...), and a super stream shadows a plain
stream of its name.

Every call takes the broker channel of the Kafka connection's session (user
and vhost; in confirm mode when produces wait for the commit); AMQP's own
permissions decide: configure on the streams (and the exchange) to create or
delete a topic, write on a partition's stream to produce, read to fetch or
list offsets; a refusal is TOPIC_AUTHORIZATION_FAILED. Writes go through
broker commands, so they reach the store with the broker's outcome: the shell
answers CreateTopics/DeleteTopics after ``Server.committed()`` and an
``acks=all`` Produce once the channel's confirms cover ``Produced.seq``.

Reads are pulls through the store, as ``amqplite stream tail`` does: the
broker keeps no stream entries in memory (an append's record is joined in the
writer process), so ``fetch`` answers at once only when there is nothing to
read, and otherwise returns a ``FetchRead`` naming the store read; the shell
runs it with ``Persistence.read("fetch_stream", ...)``, which is ordered
after every submission so far, so only committed records reach a consumer
and the high watermark it is told is committed too, and hands the chunks to
``fetched``. ``wait_append`` wakes a long-polling Fetch when its stream grows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from amqplite.broker import superstream as ss
from amqplite.broker.core import Broker
from amqplite.broker.model import ChannelState
from amqplite.broker.queue import Queue
from amqplite.broker.streamlog import READ_BATCH, StreamLog
from amqplite.broker.vhost import VHost
from amqplite.protocol import streamrecord
from amqplite.protocol.kafka import stored
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.mapping import LogRecord, Record, from_amqp, to_amqp
from amqplite.protocol.kafka.records import RecordBatch
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.producers import Producers

#: Kafka's topic names: these characters, at most 249 of them, not "." or ".."
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
#: most partitions one topic may have: each is a stream, all created in one call (the
#: event loop's), so a request for a million must not stall the broker; with it a
#: partition's name (249 characters, "-", 3 digits) stays a shortstr
MAX_PARTITIONS = 1000
#: ListOffsets' special timestamps
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -2, -1, -3, -4
#: topic configs CreateTopics takes, and the stream argument each sets
CONFIG_ARGS = {"retention.ms": "x-max-age", "retention.bytes": "x-max-length-bytes",
               "segment.bytes": "x-stream-max-segment-size-bytes"}
#: Kafka topic configs taken and not applied, because on one node storing every
#: batch as produced and committing before each ack they change nothing a client
#: can see (compaction-only, flush, replication and index tuning); CreateTopics
#: accepts them so that a team's topic scripts run unchanged. Value: the values
#: allowed, or None for any integer.
MOOT_CONFIGS: dict[str, frozenset[str] | None] = {
    "compression.type": frozenset({"producer", "uncompressed", "gzip", "snappy", "lz4",
                                   "zstd"}),
    "min.insync.replicas": frozenset({"1"}),
    "unclean.leader.election.enable": frozenset({"true", "false"}),
    "preallocate": frozenset({"true", "false"}),
    "message.downconversion.enable": frozenset({"true", "false"}),
    "delete.retention.ms": None, "min.compaction.lag.ms": None,
    "max.compaction.lag.ms": None, "flush.ms": None, "flush.messages": None,
    "index.interval.bytes": None, "segment.index.bytes": None, "segment.jitter.ms": None,
    "file.delete.delay.ms": None,
}
#: the one broker of this cluster: every partition's leader and only replica
NODE_ID = 0


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or None."""
    if name in (".", ".."):
        return f"topic name '{name}' is illegal: it cannot be '.' or '..'"
    if not _LEGAL.match(name):
        if not name or len(name) > 249:
            return f"topic name must be 1 to 249 characters long, not {len(name)}"
        return (f"topic name '{name}' is illegal: it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


def stream_arguments(configs: Mapping[str, str | None]) -> tuple[dict[str, Any], str | None]:
    """The stream arguments for a topic's configs, or why a config is refused."""
    args: dict[str, Any] = {"x-queue-type": "stream"}
    for name, value in configs.items():
        if name == "cleanup.policy" and value in (None, "delete"):
            continue  # the only policy a stream has
        if name in MOOT_CONFIGS:
            why = _moot_config_error(name, value)
            if why is not None:
                return args, why
            continue
        if name not in CONFIG_ARGS:
            return args, (f"config '{name}' is not supported (only "
                          f"{', '.join(sorted(CONFIG_ARGS))}, cleanup.policy=delete and "
                          "the settings docs/kafka.md lists as taken without effect)")
        if value is None:
            continue  # the default
        try:
            n = int(value)
        except ValueError:
            return args, f"config '{name}' must be an integer, not '{value}'"
        if name == "segment.bytes":
            if n < 14:  # Kafka's minimum
                return args, "config 'segment.bytes' must be at least 14"
            args[CONFIG_ARGS[name]] = n
        elif n < -1:
            return args, f"config '{name}' must be -1 (unlimited) or more, not {n}"
        elif n >= 0:
            # x-max-age counts seconds: a partial second rounds up, so a record is
            # never removed sooner than asked
            args[CONFIG_ARGS[name]] = (f"{math.ceil(n / 1000)}s" if name == "retention.ms"
                                       else n)
    return args, None


def _moot_config_error(name: str, value: str | None) -> str | None:
    """Why a value of a config in ``MOOT_CONFIGS`` is not one Kafka takes, or None."""
    allowed = MOOT_CONFIGS[name]
    if value is None:
        return None
    if allowed is not None:
        if value.lower() in allowed:
            return None
        return f"config '{name}' must be one of {', '.join(sorted(allowed))}, not '{value}'"
    try:
        int(value)
    except ValueError:
        return f"config '{name}' must be an integer, not '{value}'"
    return None


@attrs.frozen
class Answer:
    """A topic command's outcome: Kafka's error code and a message for the client."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


@attrs.frozen
class TopicInfo:
    """A topic in Metadata: its error, and its partitions' stream names in order."""

    error: ErrorCode
    partitions: tuple[str, ...] = ()


@attrs.frozen
class Produced:
    """A partition's Produce answer. ``seq``: the channel's confirm sequence of its
    last record (an ``acks=all`` answer waits until a Confirm covers it); None when
    nothing was appended or the channel is not in confirm mode."""

    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    seq: int | None = None
    message: str | None = None
    #: the partition's stream (for ``produce_failed``)
    queue_id: int | None = None


@attrs.frozen
class FetchRead:
    """What a Fetch of one partition needs: ``read`` false when the answer is already
    whole (an error, or nothing from ``lo`` yet); else the shell reads
    ``fetch_stream(queue_id, lo, limit)`` and calls ``Topics.fetched``."""

    error: ErrorCode
    queue_id: int = 0
    lo: int = 0
    #: the last offset to serve (the high watermark minus one when the read was planned)
    hi: int = -1
    limit: int = 0
    max_bytes: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    #: the partition's stream (what the delivery log names)
    queue: str = ""
    #: about how many bytes lie from ``lo`` to the high watermark (the stream's average
    #: entry size times the entries): what Fetch's ``min_bytes`` is held against
    available: int = 0

    @property
    def read(self) -> bool:
        return self.error == ErrorCode.NONE and self.lo <= self.hi


@attrs.frozen
class StoredBatch:
    """A batch a Kafka producer sent, as stored (``kafka.stored``): Fetch serves it
    rebased to ``offset``, its records' offsets ``offset`` .. ``offset + count - 1``."""

    offset: int
    count: int
    data: memoryview

    @property
    def size(self) -> int:
        return len(self.data)


@attrs.frozen
class Fetched:
    """What a Fetch returns for one partition, in offset order: records converted
    from AMQP entries, and stored batches as they came."""

    records: list[LogRecord | StoredBatch]
    high_watermark: int
    log_start_offset: int
    #: where the client's next Fetch goes on: after the last record, or past the
    #: high watermark when nothing up to it was found (the offsets of a failed commit:
    #: the shell answers with an empty batch ending there, or the client asks forever)
    next_offset: int = -1


@attrs.frozen
class OffsetAnswer:
    """ListOffsets for one partition: the offset and its timestamp (ms; -1 none)."""

    error: ErrorCode
    offset: int = -1
    timestamp: int = -1


@attrs.frozen
class OffsetScan:
    """ListOffsets by time needs the store: read ``fetch_stream(queue_id, lo, limit)``
    and call ``Topics.scanned`` (which may ask for the next read)."""

    queue_id: int
    lo: int
    hi: int
    ts_us: int
    limit: int = READ_BATCH


class Topics:
    """The topic commands of the Kafka front over one broker.

    ``producers`` holds idempotent producers' ids and sequences; ``coordinator``,
    when given, loses a deleted topic's committed offsets; ``auto_create`` and
    ``num_partitions`` are Kafka's auto.create.topics.enable and num.partitions
    (``kafka_auto_create_topics``, ``kafka_num_partitions``).
    """

    def __init__(self, broker: Broker, *, producers: Producers | None = None,
                 coordinator: GroupCoordinator | None = None, auto_create: bool = True,
                 num_partitions: int = 1) -> None:
        self.broker = broker
        self.producers = producers if producers is not None else Producers(broker.now())
        self.coordinator = coordinator
        self.auto_create = auto_create
        self.num_partitions = num_partitions
        #: one-shot callbacks waiting for an append, per stream
        self._waiters: dict[StreamLog, list[Callable[[], None]]] = {}

    # ------------------------------------------------------------ the model
    @staticmethod
    def _super_partitions(vh: VHost, ex: Any) -> list[Queue]:
        parts: list[tuple[int, str]] = []
        for b in ex.bindings:
            kind, dst = b.destination
            order = b.args_dict.get(ss.PARTITION_ORDER_ARG)
            if kind == "queue" and isinstance(order, int) and not isinstance(order, bool):
                parts.append((order, dst))
        out = []
        for _, name in sorted(parts):
            q = vh.queues.get(name)
            if q is not None and q.stream is not None:
                out.append(q)
        return out

    def partitions(self, vhost: str, topic: str) -> list[Queue] | None:
        """The streams of ``topic``'s partitions in order, or None: no such topic."""
        vh = self.broker.vhosts.get(vhost)
        if vh is None:
            return None
        ex = vh.exchanges.get(topic)
        if ex is not None and ex.arguments.get(ss.SUPER_STREAM_ARG) is True:
            return self._super_partitions(vh, ex)
        q = vh.queues.get(topic)
        return [q] if q is not None and q.stream is not None else None

    def describe(self, vhost: str) -> dict[str, list[str]]:
        """Every topic of ``vhost``: name -> its partitions' stream names in order."""
        vh = self.broker.vhosts.get(vhost)
        if vh is None:
            return {}
        out: dict[str, list[str]] = {}
        inside: set[str] = set()
        for ex in vh.exchanges.values():
            if ex.arguments.get(ss.SUPER_STREAM_ARG) is True:
                parts = [q.name for q in self._super_partitions(vh, ex)]
                out[ex.name] = parts
                inside.update(parts)
        for q in vh.queues.values():
            if q.stream is not None and q.name not in inside and q.name not in out:
                out[q.name] = [q.name]
        return out

    def _may(self, ch: ChannelState, perm: str, kind: str, name: str) -> bool:
        s = ch.session
        return s.internal or self.broker.may(s.username, s.vhost, perm, kind, name)

    def _refused(self, ch: ChannelState, wanted: Sequence[tuple[str, str, str]],
                 ) -> Answer | None:
        """TOPIC_AUTHORIZATION_FAILED naming the first (permission, kind, name) the
        channel's user lacks, or None."""
        for perm, kind, res in wanted:
            if not self._may(ch, perm, kind, res):
                return Answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                              f"{perm} access to {kind} '{res}' in vhost "
                              f"'{ch.session.vhost}' refused for user '{ch.session.username}'")
        return None

    def _partition(self, ch: ChannelState, topic: str, partition: int, perm: str,
                   ) -> tuple[ErrorCode, Queue | None]:
        parts = self.partitions(ch.session.vhost, topic)
        if parts is None or not 0 <= partition < len(parts):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        q = parts[partition]
        if not self._may(ch, perm, "queue", q.name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        return ErrorCode.NONE, q

    # ---------------------------------------------------- create and delete
    def create_topic(self, ch: ChannelState, name: str, partitions: int = -1,
                     replication_factor: int = -1, configs: Mapping[str, str | None] | None = None,
                     *, validate_only: bool = False) -> Answer:
        """CreateTopics for one topic (-1 partitions: ``num_partitions``): a durable
        stream, or a super stream of that many partition streams."""
        why = topic_name_error(name)
        if why is not None:
            return Answer(ErrorCode.INVALID_TOPIC_EXCEPTION, why)
        if partitions == -1:
            partitions = self.num_partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            return Answer(ErrorCode.INVALID_PARTITIONS, "number of partitions must be from 1 "
                          f"to {MAX_PARTITIONS}, not {partitions}")
        if replication_factor not in (-1, 1):
            return Answer(ErrorCode.INVALID_REPLICATION_FACTOR,
                          "replication factor must be 1 (or -1, the default): amqplite is "
                          f"one node, not {replication_factor}")
        args, why = stream_arguments(configs or {})
        if why is not None:
            return Answer(ErrorCode.INVALID_CONFIG, why)
        vh = self.broker.vhosts[ch.session.vhost]
        if self.partitions(vh.name, name) is not None:
            return Answer(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
        layout = ([(name, "", 0)] if partitions == 1 else ss.layout(name, partitions))
        if partitions > 1 and name in vh.exchanges:
            return Answer(ErrorCode.TOPIC_ALREADY_EXISTS,
                          f"an exchange named '{name}' exists in vhost '{vh.name}'")
        for qname, _, _ in layout:
            if qname in vh.queues:
                return Answer(ErrorCode.TOPIC_ALREADY_EXISTS,
                              f"a queue named '{qname}' exists in vhost '{vh.name}'")
        wanted = [("configure", "queue", q) for q, _, _ in layout]
        if partitions > 1:  # queue.bind: write on the queue, read on the exchange
            wanted += [("configure", "exchange", name), ("read", "exchange", name)]
            wanted += [("write", "queue", q) for q, _, _ in layout]
        refused = self._refused(ch, wanted)
        if refused is not None or validate_only:
            return refused or Answer()
        b = self.broker
        if partitions == 1:
            b.queue_declare(ch, name, durable=True, arguments=args)
            return Answer()
        b.exchange_declare(ch, name, "direct", durable=True,
                           arguments={ss.SUPER_STREAM_ARG: True})
        for qname, key, order in layout:
            b.queue_declare(ch, qname, durable=True, arguments=dict(args))
            b.queue_bind(ch, qname, name, key, {ss.PARTITION_ORDER_ARG: order})
        return Answer()

    def add_partitions(self, ch: ChannelState, name: str, count: int, *,
                       validate_only: bool = False) -> Answer:
        """CreatePartitions for one topic: grow it to ``count`` partitions. A super
        stream gains streams ``<name>-<n>``; a one-partition topic (a plain stream)
        becomes a super stream of the same name whose partition 0 is that stream, so
        its records and offsets stay where they are (Kafka keeps partition 0 too)."""
        vh = self.broker.vhosts[ch.session.vhost]
        parts = self.partitions(vh.name, name)
        if parts is None:
            return Answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic '{name}'")
        have = len(parts)
        if count <= have:
            return Answer(ErrorCode.INVALID_PARTITIONS, f"topic '{name}' has {have} "
                          f"partitions; the new count must be larger, not {count}")
        if count > MAX_PARTITIONS:
            return Answer(ErrorCode.INVALID_PARTITIONS, "number of partitions must be at "
                          f"most {MAX_PARTITIONS}, not {count}")
        is_super = name in vh.exchanges and vh.exchanges[name].arguments.get(
            ss.SUPER_STREAM_ARG) is True
        if not is_super and name in vh.exchanges:
            return Answer(ErrorCode.INVALID_PARTITIONS,
                          f"an exchange named '{name}' exists in vhost '{vh.name}'")
        added = ss.layout(name, count)[have:]
        for qname, _, _ in added:
            if qname in vh.queues:
                return Answer(ErrorCode.INVALID_PARTITIONS,
                              f"a queue named '{qname}' exists in vhost '{vh.name}'")
        wanted = [("configure", "queue", q) for q, _, _ in added]
        wanted += [("write", "queue", q) for q, _, _ in added] + [("read", "exchange", name)]
        if not is_super:
            wanted += [("configure", "exchange", name), ("write", "queue", name)]
        refused = self._refused(ch, wanted)
        if refused is not None or validate_only:
            return refused or Answer()
        b = self.broker
        args = dict(parts[0].arguments)
        if not is_super:
            b.exchange_declare(ch, name, "direct", durable=True,
                               arguments={ss.SUPER_STREAM_ARG: True})
            b.queue_bind(ch, name, name, "0", {ss.PARTITION_ORDER_ARG: 0})
        for qname, key, order in added:
            b.queue_declare(ch, qname, durable=True, arguments=dict(args))
            b.queue_bind(ch, qname, name, key, {ss.PARTITION_ORDER_ARG: order})
        return Answer()

    def delete_topic(self, ch: ChannelState, name: str) -> Answer:
        """DeleteTopics for one topic: its streams (and super stream exchange), the
        producers' state on them, and every group's committed offsets of it."""
        vh = self.broker.vhosts[ch.session.vhost]
        parts = self.partitions(vh.name, name)
        if parts is None:
            return Answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic '{name}'")
        is_super = len(parts) != 1 or parts[0].name != name
        wanted = [("queue", q.name) for q in parts] + ([("exchange", name)] if is_super else [])
        for kind, res in wanted:
            if not self._may(ch, "configure", kind, res):
                return Answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                              f"configure access to {kind} '{res}' in vhost '{vh.name}' "
                              f"refused for user '{ch.session.username}'")
        for q in parts:
            self.producers.forget_queue(q.id)
            self.broker.queue_delete(ch, q.name)
        if is_super:
            self.broker.exchange_delete(ch, name)
        if self.coordinator is not None and self.coordinator.delete_topic(vh.name, name):
            self.broker.kafka_offsets_delete(vh.name, topic=name)
        return Answer()

    def metadata(self, ch: ChannelState, topics: Sequence[str] | None,
                 allow_auto_create: bool = True) -> dict[str, TopicInfo]:
        """Metadata's topics: every topic of the vhost (``topics`` None), or those
        named, an unknown one created when auto-creation is on and allowed."""
        vhost = ch.session.vhost
        if topics is None:
            return {t: TopicInfo(ErrorCode.NONE, tuple(p))
                    for t, p in sorted(self.describe(vhost).items())}
        out: dict[str, TopicInfo] = {}
        for t in topics:
            parts = self.partitions(vhost, t)
            if parts is None and allow_auto_create and self.auto_create:
                made = self.create_topic(ch, t)
                if made.error != ErrorCode.NONE:
                    out[t] = TopicInfo(made.error if made.error in (
                        ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                parts = self.partitions(vhost, t)
            out[t] = (TopicInfo(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) if parts is None
                      else TopicInfo(ErrorCode.NONE, tuple(q.name for q in parts)))
        return out

    # -------------------------------------------------------------- produce
    def init_producer_id(self, transactional_id: str | None = None,
                         ) -> tuple[ErrorCode, int, int]:
        """InitProducerId: (error, producer id, epoch); see ``producers``."""
        return self.producers.init_producer_id(transactional_id)

    def _produce_target(self, ch: ChannelState, topic: str, partition: int, n: int,
                        producer_id: int, producer_epoch: int, base_sequence: int,
                        ) -> Produced | Queue:
        """The partition's stream a batch of ``n`` records goes to (created when
        auto-creation is on), or the answer when it is not appended (an error, or an
        idempotent producer's duplicate)."""
        if (self.auto_create and self.partitions(ch.session.vhost, topic) is None
                and topic_name_error(topic) is None):
            made = self.create_topic(ch, topic)
            if made.error != ErrorCode.NONE:
                return Produced(made.error, message=made.message)
        error, q = self._partition(ch, topic, partition, "write")
        if q is None:
            return Produced(error)
        st = q.stream
        assert st is not None
        error, dup = self.producers.check(q.id, producer_id, producer_epoch, base_sequence, n)
        if error != ErrorCode.NONE:
            return Produced(error, log_start_offset=st.first_offset)
        if dup is not None:
            return Produced(ErrorCode.NONE, dup, st.first_offset)
        return q

    def _produced(self, ch: ChannelState, q: Queue, base: int, n: int, producer_id: int,
                  producer_epoch: int, base_sequence: int) -> Produced:
        st = q.stream
        assert st is not None
        self.producers.appended(q.id, producer_id, producer_epoch, base_sequence, n, base,
                                self.broker.now())
        cs = ch.confirms
        seq = cs.next_seq - 1 if ch.confirm and cs is not None else None
        return Produced(ErrorCode.NONE, base, st.first_offset, seq, queue_id=q.id)

    def produce_batch(self, ch: ChannelState, topic: str, partition: int, raw: bytes | memoryview,
                      batch: RecordBatch) -> Produced:
        """Append a produced batch as it came (``stored.storable`` holds for it): one
        stream record spanning its records' offsets, served to Fetch rebased and
        expanded for AMQP readers (``kafka.stored``)."""
        n = batch.record_count
        q = self._produce_target(ch, topic, partition, n, batch.producer_id,
                                 batch.producer_epoch, batch.base_sequence)
        if not isinstance(q, Queue):
            return q
        base = self.broker.stream_publish_batch(ch, q, raw, n)
        return self._produced(ch, q, base, n, batch.producer_id, batch.producer_epoch,
                              batch.base_sequence)

    def produce(self, ch: ChannelState, topic: str, partition: int, records: Sequence[Record],
                *, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1) -> Produced:
        """Append one batch's records to a partition's stream, one by one, as AMQP
        messages (``mapping.to_amqp``) through the broker's stream append: for a batch
        that cannot be stored as it came (``produce_batch``)."""
        if not records:
            return Produced(ErrorCode.INVALID_RECORD, message="a batch holds no record")
        n = len(records)
        q = self._produce_target(ch, topic, partition, n, producer_id, producer_epoch,
                                 base_sequence)
        if not isinstance(q, Queue):
            return q
        st = q.stream
        assert st is not None
        try:  # all converted before any is appended: a batch goes in whole or not at all
            entries = [(*to_amqp(r), r.value or b"") for r in records]
        except ValueError as exc:  # a header name over 255 bytes: no AMQP table holds it
            return Produced(ErrorCode.INVALID_RECORD, log_start_offset=st.first_offset,
                            message=str(exc))
        publish = self.broker.stream_publish
        base = st.next_offset
        for rk, props, body in entries:
            publish(ch, q, rk, props, body)
        return self._produced(ch, q, base, n, producer_id, producer_epoch, base_sequence)

    def produce_failed(self, produced: Produced, producer_id: int) -> None:
        """The commit of an idempotent batch failed (its Confirm was a nack): forget the
        producer's state on that partition, so the client's retry of the batch is
        appended instead of being answered as a duplicate of records that are not
        there."""
        if producer_id >= 0 and produced.queue_id is not None:
            self.producers.forget(produced.queue_id, producer_id)

    # ---------------------------------------------------------------- fetch
    def fetch(self, ch: ChannelState, topic: str, partition: int, offset: int,
              max_bytes: int) -> FetchRead:
        """Plan a Fetch of one partition from ``offset``: OFFSET_OUT_OF_RANGE below
        the log start or past the high watermark; at the high watermark nothing to
        read (the shell may wait with ``wait_append``)."""
        error, q = self._partition(ch, topic, partition, "read")
        if q is None:
            return FetchRead(error)
        st = q.stream
        assert st is not None
        first, hw = st.first_offset, st.next_offset
        if offset < first or offset > hw:
            return FetchRead(ErrorCode.OFFSET_OUT_OF_RANGE, q.id, high_watermark=hw,
                             log_start_offset=first)
        avg = st.bytes // st.count if st.count > 0 and st.bytes > 0 else 1
        limit = max(1, min(READ_BATCH, max(1, max_bytes) // max(1, avg) + 1))
        return FetchRead(ErrorCode.NONE, q.id, offset, hw - 1, limit, max_bytes, hw, first,
                         q.name, (hw - offset) * avg)

    @staticmethod
    def fetched(read: FetchRead, chunks: Sequence[tuple[int, int, bytes]]) -> Fetched:
        """The records of ``chunks`` (``Store.fetch_stream``'s answer to ``read``) from
        its offset up to its high watermark, within ``max_bytes``: at least one
        record whatever its size, as Kafka answers (KIP-74). A stored batch comes
        whole, even when ``read.lo`` lies inside it (the client skips the records
        below its offset, as with Kafka's own batches)."""
        out: list[LogRecord | StoredBatch] = []
        total = 0
        nxt = read.hi + 1
        head = streamrecord.HEAD.unpack_from
        for off, data, at in streamrecord.entries(chunks, read.lo):
            if off > read.hi:
                break
            r: LogRecord | StoredBatch
            ts, _key, rl, pl, _bl = head(data, at)
            if rl == streamrecord.BATCH:
                r = StoredBatch(off, pl, stored.batch_bytes(data, at))
                end = off + pl
            else:
                ts, _key, exchange, rk, props, body = streamrecord.decode(data, at)
                r = from_amqp(off, ts, exchange, rk, props, body)
                end = off + 1
            size = r.size
            if out and total + size > read.max_bytes:
                break
            out.append(r)
            total += size
            nxt = end
        if not out:
            nxt = read.hi + 1
        return Fetched(out, read.high_watermark, read.log_start_offset, nxt)

    def wait_append(self, vhost: str, topic: str, partition: int,
                    wake: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``wake`` once, at the next append to the partition's stream (from
        inside the broker command that appends: it must only set a flag or an
        event). Returns the call that cancels the wait, or None: no such partition."""
        parts = self.partitions(vhost, topic)
        if parts is None or not 0 <= partition < len(parts):
            return None
        st = parts[partition].stream
        assert st is not None
        waiting = self._waiters.get(st)
        if waiting is None:
            waiting = self._waiters[st] = []
            st.on_append = lambda: self._wake(st)
        waiting.append(wake)

        def cancel() -> None:
            w = self._waiters.get(st)
            if w is not None and wake in w:
                w.remove(wake)
                if not w:
                    del self._waiters[st]
                    st.on_append = None
        return cancel

    def _wake(self, st: StreamLog) -> None:
        st.on_append = None
        for wake in self._waiters.pop(st, ()):
            wake()

    # ---------------------------------------------------------- ListOffsets
    def list_offset(self, ch: ChannelState, topic: str, partition: int,
                    timestamp: int) -> OffsetAnswer | OffsetScan:
        """ListOffsets for one partition: earliest (-2), latest (-1), max timestamp
        (-3), or the first offset whose record time (CreateTime, as Kafka's default
        ``message.timestamp.type``) is at or after ``timestamp`` (ms): that one
        needs store reads (an ``OffsetScan``), which start at the first segment
        appended at or after the time (segments index append times; a record
        stamped later than it was appended can be missed). The latest
        offset counts appends not committed yet: the shell answers after
        ``Server.committed()``, as for a Fetch's high watermark."""
        error, q = self._partition(ch, topic, partition, "read")
        if q is None:
            return OffsetAnswer(error)
        st = q.stream
        assert st is not None
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return OffsetAnswer(ErrorCode.NONE, st.first_offset)
        if timestamp == LATEST:
            return OffsetAnswer(ErrorCode.NONE, st.next_offset)
        if timestamp == MAX_TIMESTAMP:
            if st.count <= 0:
                return OffsetAnswer(ErrorCode.NONE)
            return OffsetAnswer(ErrorCode.NONE, st.next_offset - 1,
                                st.segments[-1].last_ts // 1000)
        if timestamp < 0:
            return OffsetAnswer(ErrorCode.INVALID_REQUEST)
        ts_us = timestamp * 1000
        first = st.first_offset
        for s in st.segments:
            if s.last >= max(s.first, first) and s.last_ts >= ts_us:
                return OffsetScan(q.id, max(s.first, first), st.next_offset - 1, ts_us)
        return OffsetAnswer(ErrorCode.NONE)

    @staticmethod
    def scanned(scan: OffsetScan, chunks: Sequence[tuple[int, int, bytes]],
                ) -> OffsetAnswer | OffsetScan:
        """The first record of ``chunks`` whose timestamp (Kafka's CreateTime, as
        Fetch serves it) is at or after the scan's time, or the next read when these
        chunks end before it (-1: no such record)."""
        last = scan.lo - 1
        target = scan.ts_us // 1000
        for off, ts in stored.record_times(chunks, scan.lo, target):
            if off > scan.hi:
                break
            if ts >= target:
                return OffsetAnswer(ErrorCode.NONE, off, ts)
            last = off
        if chunks and last >= scan.lo and last < scan.hi:
            return attrs.evolve(scan, lo=last + 1)
        return OffsetAnswer(ErrorCode.NONE)
