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

import platform
import resource
import time
from collections.abc import Iterator
from importlib.metadata import version
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
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from amqplite import __version__
from amqplite.admin.nodes import CLUSTER_NAME, NODE
from amqplite.admin.views import RABBITMQ_VERSION, kafka_group_lags
from amqplite.broker.base import MESSAGE_SIZE_BUCKETS
from amqplite.broker.model import CHANNEL_STATS, channel_counts
from amqplite.server.counters import DEAD_LETTER_REASONS, Histogram

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView
    from amqplite.sessions.kafka.report import GroupLags

__all__ = ["CONTENT_TYPE", "Snapshot", "render", "snapshot"]

#: the text format every Prometheus 2.x parses
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
PROTOCOL = "amqp091"
PROMETHEUS_CLIENT_VERSION = version("prometheus_client")
QUEUE_TYPE = "rabbit_classic_queue"

#: (metric name, help) of the per-queue gauges
QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers"),
    ("rabbitmq_queue_messages_unacked",
     "Messages delivered to consumers but not yet acknowledged"),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages"),
    ("rabbitmq_queue_consumers", "Consumers on a queue"),
    ("rabbitmq_queue_messages_ready_bytes", "Body bytes of messages ready to be delivered"),
)

#: broker-core stats key -> (RabbitMQ global counter, help)
BROKER_COUNTERS = {
    "delivered": ("rabbitmq_global_messages_delivered",
                  "Messages delivered to consumers (basic.deliver and basic.get-ok)"),
    "acked": ("rabbitmq_global_messages_acknowledged", "Messages acknowledged by consumers"),
    "delivered_consume_auto_ack": ("rabbitmq_global_messages_delivered_consume_auto_ack",
                                   "Messages delivered to consumers in automatic ack mode"),
    "delivered_consume_manual_ack": ("rabbitmq_global_messages_delivered_consume_manual_ack",
                                     "Messages delivered to consumers in manual ack mode"),
    "delivered_get_auto_ack": ("rabbitmq_global_messages_delivered_get_auto_ack",
                               "Messages fetched with basic.get in automatic ack mode"),
    "delivered_get_manual_ack": ("rabbitmq_global_messages_delivered_get_manual_ack",
                                 "Messages fetched with basic.get in manual ack mode"),
    "get_empty": ("rabbitmq_global_messages_get_empty",
                  "basic.get operations on an empty queue"),
    "delivered_redelivered": ("rabbitmq_global_messages_redelivered",
                              "Messages redelivered to consumers (redelivered flag set)"),
}

#: RabbitMQ's per-channel message counters (channel_queue_metrics and
#: channel_exchange_metrics) -> (the CHANNEL_STATS name that feeds them, help); /metrics
#: sums them over the open channels, as RabbitMQ's aggregated endpoint does
CHANNEL_COUNTERS = {
    "rabbitmq_channel_messages_confirmed_total": (
        "confirm", "Messages published into an exchange and confirmed on the channel"),
    "rabbitmq_channel_messages_unroutable_returned_total": (
        "return_unroutable", "Messages published as mandatory into an exchange and returned "
        "to the publisher as unroutable"),
    "rabbitmq_channel_messages_unroutable_dropped_total": (
        "drop_unroutable", "Messages published as non-mandatory into an exchange and dropped "
        "as unroutable"),
    "rabbitmq_channel_get_ack_total": (
        "get", "Messages fetched with basic.get in manual acknowledgement mode"),
    "rabbitmq_channel_get_total": (
        "get_no_ack", "Messages fetched with basic.get in automatic acknowledgement mode"),
    "rabbitmq_channel_messages_delivered_ack_total": (
        "deliver", "Messages delivered to consumers in manual acknowledgement mode"),
    "rabbitmq_channel_messages_delivered_total": (
        "deliver_no_ack", "Messages delivered to consumers in automatic acknowledgement mode"),
    "rabbitmq_channel_messages_redelivered_total": (
        "redeliver", "Messages redelivered to consumers"),
    "rabbitmq_channel_messages_acked_total": (
        "ack", "Messages acknowledged by consumers"),
    "rabbitmq_channel_get_empty_total": (
        "get_empty", "Times basic.get fetched no message"),
}

#: broker-core stats key -> (RabbitMQ queue/channel lifecycle counter, help); no labels
CHURN_COUNTERS = {
    "queues_declared": ("rabbitmq_queues_declared", "Queues declared"),
    "queues_created": ("rabbitmq_queues_created", "Queues created"),
    "queues_deleted": ("rabbitmq_queues_deleted", "Queues deleted"),
    "channels_opened": ("rabbitmq_channels_opened", "Channels opened"),
    "channels_closed": ("rabbitmq_channels_closed", "Channels closed"),
}
#: Counters attribute -> (RabbitMQ connection lifecycle counter, help)
SHELL_COUNTERS = {
    "connections_opened": ("rabbitmq_connections_opened", "Connections opened"),
    "connections_closed": ("rabbitmq_connections_closed",
                           "Connections closed or terminated"),
}
#: Counters attribute -> (RabbitMQ auth counter, help); labelled with the protocol
AUTH_COUNTERS = {
    "auth_succeeded": ("rabbitmq_auth_attempts_succeeded", "Successful authentication "
                       "attempts"),
    "auth_failed": ("rabbitmq_auth_attempts_failed", "Failed authentication attempts"),
}


@attrs.define
class Snapshot:
    """Everything one scrape reports, copied off live state."""

    #: (vhost, queue, values in QUEUE_GAUGES order)
    queues: list[tuple[str, str, tuple[int, ...]]]
    connections: int
    channels: int
    consumers: int
    #: channels that have published at least once (RabbitMQ's "publishers")
    publishers: int
    broker_stats: dict[str, int]
    shell_stats: dict[str, int]
    #: published body sizes: (cumulative buckets, sum)
    message_sizes: tuple[list[tuple[float, int]], float]
    uptime: float
    started_at: float
    #: name -> (help, value) of gauges summed over open channels and connections, as
    #: RabbitMQ's aggregated endpoint sums its per-channel and per-connection metrics
    channel_sums: dict[str, tuple[str, int]]
    memory_limit: int | None
    memory_alarm: bool
    max_sockets: int
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
    #: /api/federation-links rows (exchange, upstream, status, forwarded...)
    federation_links: list[dict[str, Any]] = attrs.field(factory=list)
    #: the ``cluster_name`` setting
    cluster_name: str = CLUSTER_NAME
    #: MQTT's share (server/mqtt/accounting.py): connected clients, PUBLISH received
    #: and deliveries, each by protocol label (mqtt310 / mqtt311 / mqtt50)
    mqtt: MQTTFigures = attrs.field(factory=lambda: MQTTFigures())
    #: STOMP clients logged in (server/stomp/), by protocol ("STOMP 1.2")
    stomp: dict[str, int] = attrs.field(factory=dict)
    #: Kafka clients logged in (server/kafka/)
    kafka: int = 0
    #: the Kafka listener's consumer groups, what the gauges read of them
    #: (sessions/kafka/report.py)
    kafka_groups: list[GroupLags] = attrs.field(factory=list)


@attrs.define
class MQTTFigures:
    """MQTT's part of a snapshot; the core's totals include it."""

    connections: dict[str, int] = attrs.field(factory=dict)
    received: dict[str, int] = attrs.field(factory=dict)
    delivered: dict[str, int] = attrs.field(factory=dict)
    opened: int = 0
    closed: int = 0
    refused_at_limit: int = 0


def _mqtt_figures(server: NodeView) -> MQTTFigures:
    listener = server.mqtt
    if listener is None:
        return MQTTFigures()
    from amqplite.server.mqtt.accounting import PROTOCOL_LABELS, label

    conns = dict.fromkeys(PROTOCOL_LABELS.values(), 0)
    for c in listener.clients.values():
        conns[label(c.proto.version)] += 1
    st = listener.stats
    return MQTTFigures(conns, dict(st.received), dict(st.delivered), st.opened, st.closed,
                       st.refused_at_limit)


def _fd_limit() -> int:
    """Descriptors this process may open: the most client sockets it could hold."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 0


def _hist(h: Histogram) -> tuple[list[tuple[float, int]], float]:
    return h.cumulative(), h.sum


def snapshot(server: NodeView) -> Snapshot:
    """Read broker, store and shell state now (call on the event loop)."""
    b = server.broker
    queues: list[tuple[str, str, tuple[int, ...]]] = []
    consumers = 0
    for vh in b.vhosts.values():
        for q in vh.queues.values():
            ready, unacked, cons = q.message_count, q.unacked, len(q.consumers)
            consumers += cons
            queues.append((vh.name, q.name, (ready, unacked, ready + unacked, cons,
                                             q.ready.bytes)))
    conns = list(server.connections)
    channels = [ch for x in conns if x.session is not None for ch in x.session.channels.values()]
    ch_totals = [sum(col) for col in zip(*map(channel_counts, channels), strict=True)] \
        or [0] * len(CHANNEL_STATS)
    c = server.counters
    mqtt = _mqtt_figures(server)
    stomp: dict[str, int] = {}
    if (stomp_listener := getattr(server, "stomp", None)) is not None:  # the STOMP front
        for sc in stomp_listener.clients:
            stomp[sc.protocol] = stomp.get(sc.protocol, 0) + 1
    kafka_listener = getattr(server, "kafka", None)  # the Kafka front
    kafka = 0 if kafka_listener is None else len(kafka_listener.clients)
    n = 0
    sizes: list[tuple[float, int]] = []
    b.fold_sizes()
    for bound, count in zip((*MESSAGE_SIZE_BUCKETS, float("inf")), b.message_sizes,
                            strict=True):
        n += count
        sizes.append((bound, n))
    p = server.persistence
    disk = server.disk
    return Snapshot(
        queues=queues,
        connections=len(conns) + sum(mqtt.connections.values()) + sum(stomp.values()) + kafka,
        channels=len(channels),
        consumers=consumers,
        publishers=sum(1 for ch in channels if ch.publishes),
        broker_stats={k: int(v) for k, v in b.stats.items()},
        shell_stats={k: getattr(c, k) for k in (*SHELL_COUNTERS, *AUTH_COUNTERS)}
        | {"connections_opened": c.connections_opened + mqtt.opened,
           "connections_closed": c.connections_closed + mqtt.closed},
        message_sizes=(sizes, float(b.message_bytes)),
        uptime=time.time() - server.started_at,
        channel_sums={
            "rabbitmq_connection_channels": ("Channels on a connection", len(channels)),
            "rabbitmq_channel_messages_unacked": (
                "Delivered but not yet acknowledged messages",
                sum(len(ch.unacked) for ch in channels)),
            "rabbitmq_channel_prefetch": ("Total limit of unacknowledged messages for all "
                                          "consumers on a channel (basic.qos global)",
                                          sum(ch.global_prefetch for ch in channels)),
            "rabbitmq_consumer_prefetch": (
                "Limit of unacknowledged messages for each consumer",
                sum(c.prefetch for ch in channels for c in ch.consumers.values())),
            "rabbitmq_channel_messages_published_total": (
                "Messages published into a channel", sum(ch.publishes for ch in channels)),
            **{name: (doc, ch_totals[CHANNEL_STATS.index(field)])
               for name, (field, doc) in CHANNEL_COUNTERS.items()},
            "rabbitmq_connection_incoming_bytes_total": (
                "Bytes received on a connection", sum(x.bytes_in for x in conns)),
            "rabbitmq_connection_outgoing_bytes_total": (
                "Bytes sent on a connection", sum(x.bytes_out for x in conns)),
        },
        started_at=server.started_at,
        memory_limit=server.memory.limit if server.memory is not None else None,
        memory_alarm=server.memory is not None and server.memory.alarm,
        max_sockets=server.settings.max_connections or _fd_limit(),
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
        shovels=links.shovels() if (links := server.links) else [],
        federation_links=links.federation.links() if links and links.federation else [],
        cluster_name=server.settings.cluster_name,
        mqtt=mqtt,
        stomp=stomp,
        kafka=kafka,
        kafka_groups=kafka_group_lags(server),
    )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float, labels: dict[str, str]) -> CounterMetricFamily:
    m = CounterMetricFamily(name, doc, labels=list(labels))
    m.add_metric(list(labels.values()), value)
    return m


def _by_protocol(name: str, doc: str, total: float, mqtt: dict[str, int]) -> CounterMetricFamily:
    """A global counter split by ``protocol`` as rabbitmq_prometheus splits it: MQTT's
    share under its labels, the rest of the core's ``total`` under amqp091."""
    m = CounterMetricFamily(name, doc, labels=["protocol"])
    m.add_metric([PROTOCOL], total - sum(mqtt.values()))
    for proto, n in sorted(mqtt.items()):
        m.add_metric([proto], n)
    return m


def _histogram(name: str, doc: str, data: tuple[list[tuple[float, int]], float],
               labels: dict[str, str] | None = None) -> HistogramMetricFamily:
    buckets, total = data
    if not labels:
        return HistogramMetricFamily(
            name, doc, buckets=[(floatToGoString(le), n) for le, n in buckets],
            sum_value=total)
    m = HistogramMetricFamily(name, doc, labels=list(labels))
    m.add_metric(list(labels.values()), [(floatToGoString(le), n) for le, n in buckets],
                 total)
    return m


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
        yield _gauge("rabbitmq_channel_consumers", "Consumers on a channel", s.consumers)
        yield _gauge("rabbitmq_global_consumers", "Consumers currently connected",
                     s.consumers)
        yield _gauge("rabbitmq_global_publishers", "Publishers currently connected",
                     s.publishers)
        mqtt = GaugeMetricFamily("amqplite_mqtt_connections",
                                 "MQTT clients connected (CONNECT accepted), by protocol "
                                 "version; rabbitmq_connections counts them too",
                                 labels=["protocol"])
        for proto, n in sorted(s.mqtt.connections.items()):
            mqtt.add_metric([proto], n)
        yield mqtt
        yield _counter("amqplite_mqtt_connections_refused_limit",
                       "MQTT CONNECTs refused because max_connections was reached",
                       s.mqtt.refused_at_limit, {})
        stomp = GaugeMetricFamily("amqplite_stomp_connections",
                                  "STOMP clients logged in, by protocol version; "
                                  "rabbitmq_connections counts them too", labels=["protocol"])
        for proto, n in sorted(s.stomp.items()):
            stomp.add_metric([proto], n)
        yield stomp
        yield _gauge("amqplite_kafka_connections",
                     "Kafka clients logged in; rabbitmq_connections counts them too", s.kafka)
        yield from self._kafka_groups()
        yield from self._globals()
        yield from self._node()
        yield from self._store()
        yield from self._links()

    def _links(self) -> Iterator[Metric]:
        """Shovels and federation links by state (always), and messages forwarded per
        link (few: one row each, whatever ``per_object``)."""
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
        rows = self.snap.federation_links
        fstates = GaugeMetricFamily("amqplite_federation_links",
                                    "Exchange federation links by status", labels=["state"])
        for st in ("starting", "running", "error"):
            fstates.add_metric([st], sum(1 for r in rows if r["status"] == st))
        yield fstates
        ffwd = CounterMetricFamily("amqplite_federation_forwarded_messages",
                                   "Messages a federation link forwarded since it (re)started",
                                   labels=["vhost", "exchange", "upstream"])
        for r in rows:
            ffwd.add_metric([r["vhost"], r["exchange"], r["upstream"]], r["forwarded"])
        yield ffwd

    def _kafka_groups(self) -> Iterator[Metric]:
        """Consumer groups by state, their members and lag per topic under kafka_exporter's
        names (its Grafana dashboards read them; ``vhost`` added); per partition on the
        per-object page, as queues are."""
        groups = self.snap.kafka_groups
        states = GaugeMetricFamily("amqplite_kafka_consumer_groups",
                                   "Kafka consumer groups by state", labels=["state"])
        for st in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable"):
            states.add_metric([st], sum(1 for g in groups if g.state == st))
        yield states
        members = GaugeMetricFamily("kafka_consumergroup_members",
                                    "Members of a Kafka consumer group",
                                    labels=["vhost", "consumergroup"])
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum",
                                    "A consumer group's lag on a topic: log end offset minus "
                                    "committed offset, summed over the partitions it committed",
                                    labels=["vhost", "consumergroup", "topic"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "A consumer group's lag on one partition",
                                labels=["vhost", "consumergroup", "topic", "partition"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "A consumer group's committed offset on one partition",
                                    labels=["vhost", "consumergroup", "topic", "partition"])
        per_object = self.per_object
        for g in groups:
            members.add_metric([g.vhost, g.group_id], g.members)
            per_topic: dict[str, int] = {}
            for topic, p, offset, behind in g.lags:
                per_topic[topic] = per_topic.get(topic, 0) + behind
                if per_object:
                    labels = [g.vhost, g.group_id, topic, str(p)]
                    lag.add_metric(labels, behind)
                    current.add_metric(labels, offset)
            for topic, n in sorted(per_topic.items()):
                lag_sum.add_metric([g.vhost, g.group_id, topic], n)
        yield members
        yield lag_sum
        if self.per_object:
            yield lag
            yield current

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
        yield _by_protocol("rabbitmq_global_messages_received",
                           "Messages received from publishers", s.received, s.mqtt.received)
        yield _by_protocol("rabbitmq_global_messages_delivered",
                           "Messages delivered to consumers (basic.deliver and basic.get-ok; "
                           "MQTT: PUBLISH to subscribers)", s.broker_stats["delivered"],
                           s.mqtt.delivered)
        for name, doc, value in (
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
            if key != "delivered":  # split by protocol above
                yield _counter(name, doc, s.broker_stats[key], proto)
        for key, (name, doc) in CHURN_COUNTERS.items():
            yield _counter(name, doc, s.broker_stats[key], {})
        for key, (name, doc) in SHELL_COUNTERS.items():
            yield _counter(name, doc, s.shell_stats[key], {})
        for key, (name, doc) in AUTH_COUNTERS.items():
            yield _counter(name, doc, s.shell_stats[key], proto)
        yield _counter("rabbitmq_auth_attempts", "Authentication attempts",
                       sum(s.shell_stats[k] for k in AUTH_COUNTERS), proto)
        yield _histogram("rabbitmq_message_size_bytes", "Size of published message bodies",
                         s.message_sizes, {"protocol": PROTOCOL})
        for reason in DEAD_LETTER_REASONS:
            m = CounterMetricFamily(
                f"rabbitmq_global_messages_dead_lettered_{reason}",
                f"Messages dead-lettered with reason {reason} (disabled: no dead-letter "
                "exchange took them)", labels=["queue_type", "dead_letter_strategy"])
            for strategy in ("at_most_once", "disabled"):
                m.add_metric([QUEUE_TYPE, strategy], s.dead_lettered.get((reason, strategy), 0))
            yield m
        yield _counter("amqplite_messages_requeued", "Deliveries returned to their queue "
                       "(nack, reject, recover, channel close)", s.broker_stats["redelivered"], {})
        yield _counter("amqplite_messages_expired", "Messages that reached their TTL",
                       s.broker_stats["expired"], {})

    def _node(self) -> Iterator[Metric]:
        s = self.snap
        info = GaugeMetricFamily(
            "rabbitmq_identity_info", "Node and cluster names (dashboards join on them)",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id",
                    "rabbitmq_endpoint"])
        info.add_metric([NODE, s.cluster_name, s.cluster_name,
                         "per-object" if self.per_object else "aggregated"], 1)
        yield info
        rabbit = GaugeMetricFamily(
            "rabbitmq_build_info", "Versions: the RabbitMQ API level amqplite follows, "
            "amqplite's own, and the Python runtime in erlang_version's place",
            labels=["rabbitmq_version", "product_name", "product_version",
                    "prometheus_plugin_version", "prometheus_client_version",
                    "erlang_version"])
        rabbit.add_metric([RABBITMQ_VERSION, "amqplite", __version__, __version__,
                           PROMETHEUS_CLIENT_VERSION,
                           f"Python {platform.python_version()}"], 1)
        yield rabbit
        build = GaugeMetricFamily("amqplite_build_info", "amqplite version",
                                  labels=["version"])
        build.add_metric([__version__], 1)
        yield build
        for name, (doc, v) in s.channel_sums.items():
            if name.endswith("_total"):
                yield _counter(name[:-len("_total")], doc, v, {})
            else:
                yield _gauge(name, doc, v)
        yield _gauge("process_start_time_seconds",
                     "Start time of the process since the Unix epoch", s.started_at)
        yield _gauge("rabbitmq_erlang_uptime_seconds",
                     "Seconds since the broker process started", s.uptime)
        optional: tuple[tuple[str, str, float | None], ...] = (  # None: no monitor here
            ("rabbitmq_resident_memory_limit_bytes",
             "Memory use above which publishers are blocked", s.memory_limit),
            ("rabbitmq_alarms_memory_used_watermark", "1 while the memory alarm is in effect",
             int(s.memory_alarm)),
            ("rabbitmq_process_open_tcp_sockets", "Open client TCP connections",
             s.connections),
            ("rabbitmq_process_max_tcp_sockets",
             "Client TCP connections allowed (max_connections, else the fd limit)",
             s.max_sockets),
            ("rabbitmq_disk_space_available_bytes",
             "Disk space available to the data directory", s.disk_free),
            ("rabbitmq_disk_space_available_limit_bytes",
             "Free disk space below which publishers are blocked", s.disk_limit),
            ("rabbitmq_alarms_free_disk_space_watermark", "1 while the disk alarm is in effect",
             int(s.disk_alarm)),
        )
        for name, doc, reading in optional:
            if reading is not None:
                yield _gauge(name, doc, reading)

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
    # the runtime's own figures, in place of RabbitMQ's erlang_vm_* families
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    return generate_latest(registry)
