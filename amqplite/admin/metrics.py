"""Prometheus metrics, named as RabbitMQ's ``rabbitmq_prometheus`` plugin names them.

Dashboards and alerts written for RabbitMQ keep working where a concept
matches; what only amqplite has (its store) is ``amqplite_*``. A scrape takes
a :class:`Snapshot` of broker state on the event loop (plain attribute reads,
O(queues)), then renders it in a worker thread through a custom collector, so
formatting tens of thousands of samples never stalls message traffic.

``/metrics`` is aggregated, as RabbitMQ serves it by default (queue metrics
summed, no per-queue labels); ``/metrics/per-object`` labels queue metrics
with ``vhost`` and ``queue``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from amqplite import __version__
from amqplite.admin.nodes import CLUSTER_NAME, NODE
from amqplite.server.counters import DEAD_LETTER_REASONS, Histogram

if TYPE_CHECKING:
    from amqplite.server.app import Server

__all__ = ["CONTENT_TYPE", "Snapshot", "render", "snapshot"]

#: the text format every Prometheus 2.x parses
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
PROTOCOL = "amqp091"
QUEUE_TYPE = "rabbit_classic_queue"

#: (metric name, help) of the per-queue gauges
QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers"),
    ("rabbitmq_queue_messages_unacked",
     "Messages delivered to consumers but not yet acknowledged"),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages"),
    ("rabbitmq_queue_consumers", "Consumers on a queue"),
)

#: broker-core stats key -> (RabbitMQ global counter, help)
BROKER_COUNTERS = {
    "delivered": ("rabbitmq_global_messages_delivered",
                  "Messages delivered to consumers (basic.deliver and basic.get-ok)"),
    "acknowledged": ("rabbitmq_global_messages_acknowledged",
                     "Messages acknowledged by consumers"),
}


@attrs.define
class Snapshot:
    """Everything one scrape reports, copied off live state."""

    #: (vhost, queue, (ready, unacked, messages, consumers)) as QUEUE_GAUGES lists them
    queues: list[tuple[str, str, tuple[int, int, int, int]]]
    connections: int
    channels: int
    consumers: int
    broker_stats: dict[str, int]
    received: int
    received_confirm: int
    routed: int
    unroutable_returned: int
    unroutable_dropped: int
    confirmed: int
    dead_lettered: dict[tuple[str, str], int]
    page_ins: int
    paged_in_messages: int
    commit_seconds: tuple[list[tuple[float, int]], float]
    group_size: tuple[list[tuple[float, int]], float]
    store_commits: int
    backlog_ops: int
    backlog_batches: int
    store_failing: bool
    disk_free: int | None
    disk_limit: int | None
    disk_alarm: bool
    #: /api/shovels rows (name, vhost, state, forwarded...) of the links supervisor
    shovels: list[dict[str, Any]] = attrs.field(factory=list)


def _hist(h: Histogram) -> tuple[list[tuple[float, int]], float]:
    return h.cumulative(), h.sum


def snapshot(server: Server) -> Snapshot:
    """Read broker, store and shell state now (call on the event loop)."""
    b = server.broker
    queues = []
    consumers = 0
    for vh in b.vhosts.values():
        for q in vh.queues.values():
            ready, unacked, cons = q.message_count, q.unacked, len(q.consumers)
            consumers += cons
            queues.append((vh.name, q.name, (ready, unacked, ready + unacked, cons)))
    conns = list(server.connections)
    c = server.counters
    p = server.persistence
    disk = server.disk
    return Snapshot(
        queues=queues,
        connections=len(conns),
        channels=sum(len(x.session.channels) for x in conns if x.session is not None),
        consumers=consumers,
        broker_stats={"delivered": int(b.stats.get("delivered", 0)),
                      "acknowledged": int(b.stats.get("acked", 0)),
                      "requeued": int(b.stats.get("redelivered", 0)),
                      "expired": int(b.stats.get("expired", 0))},
        received=int(b.stats["published"]), received_confirm=int(b.stats["received_confirm"]),
        routed=int(b.stats["routed"]), unroutable_returned=int(b.stats["unroutable_returned"]),
        unroutable_dropped=int(b.stats["unroutable_dropped"]),
        confirmed=c.confirmed, dead_lettered=dict(b.dead_letters),
        page_ins=c.page_ins, paged_in_messages=c.paged_in_messages,
        commit_seconds=_hist(c.commit_seconds), group_size=_hist(c.group_size),
        store_commits=server.store.groups if server.store is not None else 0,
        backlog_ops=p.inflight_ops if p is not None else 0,
        backlog_batches=p.inflight if p is not None else 0,
        store_failing=p is not None and p.failing is not None,
        disk_free=disk.free if disk is not None else None,
        disk_limit=disk.limit if disk is not None else None,
        disk_alarm=disk is not None and disk.alarm,
        shovels=links.shovels() if (links := server.extensions.get("links")) else [],
    )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float, labels: dict[str, str]) -> CounterMetricFamily:
    m = CounterMetricFamily(name, doc, labels=list(labels))
    m.add_metric(list(labels.values()), value)
    return m


def _histogram(name: str, doc: str, data: tuple[list[tuple[float, int]], float],
               ) -> HistogramMetricFamily:
    buckets, total = data
    return HistogramMetricFamily(
        name, doc, buckets=[(floatToGoString(le), n) for le, n in buckets], sum_value=total)


class SnapshotCollector(Collector):
    """Yields the metric families of one snapshot (a custom Collector: no live state)."""

    def __init__(self, snap: Snapshot, per_object: bool) -> None:
        self.snap = snap
        self.per_object = per_object

    def collect(self) -> Iterator[Metric]:
        s = self.snap
        yield from self._queues()
        yield _gauge("rabbitmq_queues", "Queues available", len(s.queues))
        yield _gauge("rabbitmq_connections", "Connections currently open", s.connections)
        yield _gauge("rabbitmq_channels", "Channels currently open", s.channels)
        yield _gauge("rabbitmq_consumers", "Consumers currently connected", s.consumers)
        yield from self._globals()
        yield from self._node()
        yield from self._store()
        yield from self._links()

    def _links(self) -> Iterator[Metric]:
        """Shovels by state (always), and messages forwarded per shovel (few: one row
        each, whatever ``per_object``)."""
        rows = self.snap.shovels
        states = GaugeMetricFamily("amqplite_shovels", "Shovels by state", labels=["state"])
        for st in ("starting", "running", "terminated"):
            states.add_metric([st], sum(1 for r in rows if r["state"] == st))
        yield states
        fwd = CounterMetricFamily("amqplite_shovel_forwarded_messages",
                                  "Messages a shovel forwarded since it (re)started",
                                  labels=["vhost", "shovel"])
        for r in rows:
            fwd.add_metric([r["vhost"], r["name"]], r["forwarded"])
        yield fwd

    def _queues(self) -> Iterator[Metric]:
        rows = self.snap.queues
        for i, (name, doc) in enumerate(QUEUE_GAUGES):
            if not self.per_object:
                yield _gauge(name, doc, sum(r[2][i] for r in rows))
                continue
            m = GaugeMetricFamily(name, doc, labels=["vhost", "queue"])
            for r in rows:
                m.add_metric([r[0], r[1]], r[2][i])
            yield m

    def _globals(self) -> Iterator[Metric]:
        s = self.snap
        proto = {"protocol": PROTOCOL}
        for name, doc, value in (
            ("rabbitmq_global_messages_received", "Messages received from publishers",
             s.received),
            ("rabbitmq_global_messages_received_confirm",
             "Messages received from publishers expecting confirmations", s.received_confirm),
            ("rabbitmq_global_messages_routed", "Messages routed to one or more queues",
             s.routed),
            ("rabbitmq_global_messages_unroutable_returned",
             "Unroutable messages returned to publishers (mandatory)", s.unroutable_returned),
            ("rabbitmq_global_messages_unroutable_dropped",
             "Unroutable messages dropped (not mandatory)", s.unroutable_dropped),
            ("rabbitmq_global_messages_confirmed", "Messages confirmed to publishers",
             s.confirmed),
        ):
            yield _counter(name, doc, value, proto)
        for key, (name, doc) in BROKER_COUNTERS.items():
            yield _counter(name, doc, s.broker_stats[key], proto)
        for reason in DEAD_LETTER_REASONS:
            m = CounterMetricFamily(
                f"rabbitmq_global_messages_dead_lettered_{reason}",
                f"Messages dead-lettered with reason {reason} (disabled: no dead-letter "
                "exchange took them)", labels=["queue_type", "dead_letter_strategy"])
            for strategy in ("at_most_once", "disabled"):
                m.add_metric([QUEUE_TYPE, strategy], s.dead_lettered.get((reason, strategy), 0))
            yield m
        yield _counter("amqplite_messages_requeued", "Deliveries returned to their queue "
                       "(nack, reject, recover, channel close)", s.broker_stats["requeued"], {})
        yield _counter("amqplite_messages_expired", "Messages that reached their TTL",
                       s.broker_stats["expired"], {})

    def _node(self) -> Iterator[Metric]:
        s = self.snap
        info = GaugeMetricFamily("rabbitmq_identity_info", "Node and cluster names",
                                 labels=["rabbitmq_node", "rabbitmq_cluster"])
        info.add_metric([NODE, CLUSTER_NAME], 1)
        yield info
        build = GaugeMetricFamily("amqplite_build_info", "amqplite version",
                                  labels=["version"])
        build.add_metric([__version__], 1)
        yield build
        if s.disk_free is not None:
            yield _gauge("rabbitmq_disk_space_available_bytes",
                         "Disk space available to the data directory", s.disk_free)
        if s.disk_limit is not None:
            yield _gauge("rabbitmq_disk_space_available_limit_bytes",
                         "Free disk space below which publishers are blocked", s.disk_limit)
        yield _gauge("rabbitmq_alarms_free_disk_space_watermark",
                     "1 while the disk alarm is in effect", int(s.disk_alarm))

    def _store(self) -> Iterator[Metric]:
        s = self.snap
        yield _histogram("amqplite_store_commit_seconds",
                         "Seconds from handing a batch to the store writer to its commit",
                         s.commit_seconds)
        yield _histogram("amqplite_store_group_commit_size",
                         "Batches folded into one store transaction (group commit)",
                         s.group_size)
        yield _counter("amqplite_store_commits", "Store transactions committed (or failed)",
                       s.store_commits, {})
        yield _gauge("amqplite_store_writer_backlog_ops",
                     "Store operations handed to the writer and not yet committed",
                     s.backlog_ops)
        yield _gauge("amqplite_store_writer_backlog_batches",
                     "Batches handed to the writer and not yet committed", s.backlog_batches)
        yield _gauge("amqplite_store_failing",
                     "1 while store writes fail and are being retried", int(s.store_failing))
        yield _counter("amqplite_store_page_ins", "Reads of paged-out message bodies",
                       s.page_ins, {})
        yield _counter("amqplite_store_paged_in_messages",
                       "Message bodies read back from the store", s.paged_in_messages, {})


def render(snap: Snapshot, per_object: bool) -> bytes:
    """The text exposition of ``snap`` plus this process's own metrics.

    Thread-safe: it reads only the snapshot and /proc.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap, per_object))
    ProcessCollector(namespace="rabbitmq", registry=registry)
    return generate_latest(registry)
