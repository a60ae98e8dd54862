"""Broker objects as RabbitMQ-management-shaped JSON (plain dicts).

Everything here reads broker state synchronously on the event loop and never
mutates it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from amqplite import __version__
from amqplite.admin.messages import death_summary, encode_payload, iso, jsonable
from amqplite.admin.nodes import EXCHANGE_TYPES, NODE
from amqplite.broker.model import CHANNEL_STATS, channel_counts
from amqplite.broker.queue import QUEUE_STATS, queue_counts
from amqplite.broker.streamlog import StreamEntry
from amqplite.sessions.kafka.report import (
    GroupLags,
    GroupReport,
    group_lags,
    group_report,
    group_reports,
    stream_ends,
)

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView
    from amqplite.broker.exchanges import Binding, Exchange
    from amqplite.broker.model import ChannelState, Consumer, Entry, Message
    from amqplite.broker.queue import Queue
    from amqplite.broker.vhost import VHost
    from amqplite.server.connection import AMQPConnection

#: the RabbitMQ release whose management API shapes this API follows
RABBITMQ_VERSION = "3.13.0"
#: seconds between samples of the counters: RabbitMQ's default
#: ``collect_statistics_interval`` (5,000 ms). Each sample walks every queue and
#: channel; once a second it was a visible part of a quiet broker's CPU.
SAMPLE_INTERVAL = 5.0
#: a rate is taken over the oldest sample at most this old (one or two intervals)
RATE_WINDOW = 2 * SAMPLE_INTERVAL


#: the overview's message_stats: RabbitMQ's name -> the core's global counter
#: (``Broker.stats``); dead_letter and expire are amqplite's own
OVERVIEW_STATS = {
    "publish": "published", "return_unroutable": "unroutable_returned",
    "drop_unroutable": "unroutable_dropped", "deliver": "delivered_consume_manual_ack",
    "deliver_no_ack": "delivered_consume_auto_ack", "get": "delivered_get_manual_ack",
    "get_no_ack": "delivered_get_auto_ack", "get_empty": "get_empty",
    "deliver_get": "delivered", "ack": "acked", "redeliver": "delivered_redelivered",
    "disk_writes": "disk_writes", "dead_letter": "dead_lettered", "expire": "expired",
}
#: ... and the ones only the shell counts (``Server.counters``)
SHELL_STATS = {"confirm": "confirmed", "disk_reads": "paged_in_messages"}
#: a queue's message_stats, in the order of the sampled tuple (deliver_get is summed)
QUEUE_FIELDS = ("publish", *QUEUE_STATS)
#: the parts of deliver_get (RabbitMQ: deliveries and get-oks in either ack mode)
_DELIVER_GET = ("deliver", "deliver_no_ack", "get", "get_no_ack")


class Rates:
    """Samples counters every SAMPLE_INTERVAL; rates are per second over the last
    one or two intervals. A sample keeps one tuple of counts per object (the
    broker, each vhost, queue and channel), so it costs a few reads per object."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, dict[str, tuple[int, ...]]]] = deque(maxlen=16)

    def sample(self, server: NodeView) -> None:
        st, c = server.broker.stats, server.counters
        counters: dict[str, tuple[int, ...]] = {
            "broker": (*(int(st.get(k, 0)) for k in OVERVIEW_STATS.values()),
                       *(int(getattr(c, k)) for k in SHELL_STATS.values()))}
        for name, counts in vhost_counts(server).items():
            counters["vh." + name] = tuple(counts)
        for vh in server.broker.vhosts.values():
            for q in vh.queues.values():
                # every enqueue takes a position, so this counts messages routed to the queue
                counters[f"q.{vh.name}.{q.id}"] = (q.next_position - 1, *queue_counts(q))
        for conn, ch in channels(server):
            counters[_channel_key(conn, ch)] = channel_counts(ch)
        self.samples.append((time.monotonic(), counters))

    def rates(self, key: str, n: int) -> tuple[float, ...]:
        """The ``n`` rates of object ``key``'s counters (zeros until two samples)."""
        if len(self.samples) < 2:
            return (0.0,) * n
        t1, last = self.samples[-1]
        base = self.samples[0]
        for s in self.samples:
            if t1 - s[0] <= RATE_WINDOW:
                base = s
                break
        t0, first = base
        a, b = first.get(key), last.get(key)
        if t1 <= t0 or a is None or b is None or len(a) != n:
            return (0.0,) * n
        return tuple(round(max(0, y - x) / (t1 - t0), 2) for x, y in zip(a, b, strict=True))


def message_stats(names: Sequence[str], counts: Sequence[int], rates: Sequence[float],
                  ) -> dict[str, Any]:
    """RabbitMQ's shape: each count and its ``<name>_details.rate``; deliver_get added
    as the sum of its parts where they are there."""
    out: dict[str, Any] = {}
    for k, v, r in zip(names, counts, rates, strict=True):
        out[k] = int(v)
        out[k + "_details"] = {"rate": r}
    if "deliver_get" not in out and all(k in out for k in _DELIVER_GET):
        out["deliver_get"] = sum(out[k] for k in _DELIVER_GET)
        out["deliver_get_details"] = {
            "rate": round(sum(out[k + "_details"]["rate"] for k in _DELIVER_GET), 2)}
    return out


def vhost_counts(server: NodeView) -> dict[str, list[int]]:
    """Each vhost's CHANNEL_STATS: its closed channels' counts plus its open ones'
    (every session's, the MQTT and STOMP fronts' included)."""
    out = {name: list(vh.closed_stats) for name, vh in server.broker.vhosts.items()}
    for sess in server.broker.sessions.values():
        acc = out.get(sess.vhost)
        if acc is None:
            continue
        for ch in sess.channels.values():
            for i, v in enumerate(channel_counts(ch)):
                acc[i] += v
    return out


def vhost_message_stats(server: NodeView, rates: Rates) -> dict[str, dict[str, Any]]:
    """vhost name -> its message_stats (as /api/vhosts has them)."""
    n = len(CHANNEL_STATS)
    return {name: message_stats(CHANNEL_STATS, counts, rates.rates("vh." + name, n))
            for name, counts in vhost_counts(server).items()}


# ------------------------------------------------------------------ overview
def queue_depth(q: Queue) -> tuple[int, int, int]:
    """(messages, ready, unacked) as queue_info reports them: a stream's entries stay
    after delivery, so its length is the log's, not the undelivered count."""
    if q.stream is not None:
        return q.stream.count, q.stream.count, q.unacked
    return q.message_count + q.unacked, q.message_count, q.unacked


def queue_totals(queues: Iterable[Queue]) -> dict[str, int]:
    """Summed depths, so a vhost's or the overview's total is what its queues add up to."""
    total = ready = unacked = 0
    for q in queues:
        m, r, u = queue_depth(q)
        total, ready, unacked = total + m, ready + r, unacked + u
    return {"messages": total, "messages_ready": ready, "messages_unacknowledged": unacked}


def overview(server: NodeView, rates: Rates, user: str | None = None,
             vhosts: set[str] | None = None) -> dict[str, Any]:
    """The broker's totals; with ``vhosts`` (a management user's), RabbitMQ's per-user
    overview: queues, exchanges and message counts of those vhosts only, connections
    and channels of ``user`` only, no listeners."""
    b = server.broker
    queues = exchanges = consumers = 0
    counted: list[Queue] = []
    for vh in b.vhosts.values():
        if vhosts is not None and vh.name not in vhosts:
            continue
        exchanges += len(vh.exchanges)
        for q in vh.queues.values():
            queues += 1
            counted.append(q)
            consumers += len(q.consumers)
    conns = [c for c in server.connections
             if vhosts is None or (c.session is not None and c.session.username == user)]
    channels = sum(len(c.session.channels) for c in conns if c.session is not None)
    # MQTT clients are connections too (their broker channels are internal, not counted)
    mqtt = [c for c in mqtt_connections(server) if c.session is not None
            and (vhosts is None or c.session.username == user)]
    if vhosts is None:  # the node's counters
        st, sc = b.stats, server.counters
        counts = [*(int(st.get(k, 0)) for k in OVERVIEW_STATS.values()),
                  *(int(getattr(sc, k)) for k in SHELL_STATS.values())]
        names: tuple[str, ...] = (*OVERVIEW_STATS, *SHELL_STATS)
        stats = message_stats(names, counts, rates.rates("broker", len(names)))
    else:  # the user's message stats: its vhosts' (what their channels counted)
        n = len(CHANNEL_STATS)
        total, rts = [0] * n, [0.0] * n
        for name, vcounts in vhost_counts(server).items():
            if name in vhosts:
                total = [a + b for a, b in zip(total, vcounts, strict=True)]
                rts = [a + b for a, b in zip(rts, rates.rates("vh." + name, n), strict=True)]
        stats = message_stats(CHANNEL_STATS, total, [round(r, 2) for r in rts])
    s = server.settings
    listeners = [{"node": NODE, "protocol": proto, "ip_address": h, "port": p}
                 for proto, ports in (("amqp", server.listen_ports), ("amqp/ssl", server.tls_ports),
                                      ("mqtt", server.mqtt.ports if server.mqtt else []),
                                      *_front_listeners(server))
                 for p in ports for h in (s.host or ["::"])]
    if server.admin_url:
        listeners.append({"node": NODE, "protocol": "https" if s.admin_tls else "http",
                          "ip_address": s.admin_host, "port": admin_port(server)})
    return {
        # what this is; tools that gate features on a RabbitMQ version read the next two
        "product_name": "amqplite",
        "product_version": __version__,
        "management_version": __version__,
        "rabbitmq_version": RABBITMQ_VERSION,
        "erlang_version": "none (amqplite is written in Python)",
        "node": NODE,
        "cluster_name": server.settings.cluster_name,
        "statistics_db_node": NODE,
        "rates_mode": "basic",
        "exchange_types": EXCHANGE_TYPES,
        "uptime": int((time.time() - server.started_at) * 1000),
        "message_stats": stats,
        "queue_totals": queue_totals(counted),
        "object_totals": {
            "connections": len(conns) + len(mqtt),
            "channels": channels,
            "exchanges": exchanges,
            "queues": queues,
            "consumers": consumers,
        },
        **({"listeners": listeners} if vhosts is None else {}),
        "contexts": contexts(server),
        # as RabbitMQ's /api/nodes reports them
        "disk_free_alarm": server.disk is not None and server.disk.alarm,
        "disk_free": server.disk.free if server.disk is not None else None,
        "disk_free_limit": server.disk.limit if server.disk is not None else None,
        **memory(server),
        "alarms": alarms(server),
    }


def memory(server: NodeView) -> dict[str, Any]:
    """Memory fields named as RabbitMQ's /api/nodes has them, plus the paging signal."""
    m = server.memory
    # retained bodies are pinned in RAM (never paged): part of mem_used, shown apart
    store = server.broker.retained
    n, size = store.totals_all()
    retained = {"mem_retained": store.memory_all(), "mem_retained_messages": n,
                "mem_retained_body_bytes": size}
    if m is None:
        return {"mem_used": None, "mem_limit": None, "mem_alarm": False, **retained}
    return {"mem_used": m.used, "mem_limit": m.limit, "mem_alarm": m.alarm,
            "mem_paging": m.paging, "mem_paging_limit": m.paging_limit,
            "mem_available": m.total, "memory_high_watermark": str(m.watermark), **retained}


def alarms(server: NodeView) -> list[dict[str, Any]]:
    """Resource alarms in effect, in RabbitMQ's health-check shape.

    A store whose commits fail (and are being retried) is a disk alarm too:
    publishers are blocked with "low on disk" either way.
    """
    node = NODE
    out: list[dict[str, Any]] = []
    if server.disk is not None and server.disk.alarm:
        out.append({"node": node, "resource": "disk",
                    "reason": f"{server.disk.free} bytes free, limit {server.disk.limit}"})
    m = server.memory
    if m is not None and m.alarm:
        out.append({"node": node, "resource": "memory",
                     "reason": f"{m.used} bytes used, limit {m.limit}"})
    p = server.persistence
    if p is not None and p.failing is not None:
        out.append({"node": node, "resource": "disk", "reason": f"store writes fail: {p.failing}"})
    return out


# --------------------------------------------------------------- connections
def _client_product(conn: AMQPConnection) -> dict[str, Any]:
    return jsonable(conn.session.client_properties) if conn.session is not None else {}


def _conn_state(conn: AMQPConnection) -> str:
    if getattr(conn, "_closing_deadline", None) is not None or not conn.alive:
        return "closing"
    return "running" if conn.session is not None else "starting"


def connection_info(conn: AMQPConnection) -> dict[str, Any]:
    s = conn.session
    try:
        # a TLS connection's socket is under its SSLStream
        transport: Any = getattr(conn.stream, "transport_stream", conn.stream)
        host, port = transport.socket.getsockname()[:2]
    except (OSError, AttributeError):
        host, port = None, None
    props = _client_product(conn)
    return {
        "name": conn.name,
        "node": NODE,
        "type": "network",
        "user": s.username if s is not None else None,
        "user_provided_name": props.get("connection_name"),
        "vhost": s.vhost if s is not None else None,
        "state": _conn_state(conn),
        "protocol": "AMQP 0-9-1",
        "ssl": False,
        "peer_host": conn.peer_host,
        "peer_port": conn.peer_port,
        "host": host,
        "port": port,
        "channels": len(s.channels) if s is not None else 0,
        "channel_max": conn.proto.channel_max,
        "frame_max": conn.proto.frame_max,
        # RabbitMQ's name for the negotiated heartbeat, in seconds
        "timeout": conn.proto.heartbeat,
        "connected_at": int(conn.connected_at * 1000),
        "recv_oct": conn.bytes_in,
        "send_oct": conn.bytes_out,
        "client_properties": props,
    }


def mqtt_connection_info(conn: Any) -> dict[str, Any]:
    """An MQTT client (server/mqtt.py) in the shape of :func:`connection_info`,
    as RabbitMQ's management API shows MQTT connections."""
    s = conn.session
    return {
        "name": conn.name,
        "node": NODE,
        "type": "network",
        "user": s.username if s is not None else None,
        "vhost": s.vhost if s is not None else None,
        "state": "running" if s is not None and conn.alive else "starting",
        "protocol": conn.protocol,
        "ssl": conn.tls,
        "peer_host": conn.peer_host,
        "peer_port": conn.peer_port,
        "channels": 0,
        "timeout": conn.timeout if hasattr(conn, "timeout") else conn.proto.keep_alive,
        "connected_at": int(conn.connected_at * 1000),
        "recv_oct": conn.bytes_in,
        "send_oct": conn.bytes_out,
        "client_properties": {"client_id": conn.client_id},
    }


def _front_listeners(server: NodeView) -> list[tuple[str, list[int]]]:
    stomp = getattr(server, "stomp", None)  # the STOMP front, when it runs
    kafka = getattr(server, "kafka", None)  # the Kafka front, when it runs
    return (([] if stomp is None else [("stomp", stomp.ports), ("stomp/ssl", stomp.tls_ports)])
            + ([] if kafka is None else [("kafka", kafka.ports), ("kafka/ssl", kafka.tls_ports)]))


def mqtt_connections(server: NodeView) -> list[Any]:
    """The MQTT, STOMP and Kafka listeners' connections (none when they are off)."""
    stomp = getattr(server, "stomp", None)  # the STOMP front: same listing shape
    kafka = getattr(server, "kafka", None)  # the Kafka front: same listing shape
    return ((list(server.mqtt.connections) if server.mqtt is not None else [])
            + (list(stomp.connections) if stomp is not None else [])
            + (list(kafka.connections) if kafka is not None else []))


def _channel_name(conn: AMQPConnection, ch: ChannelState) -> str:
    return f"{conn.name} ({ch.number})"


def channel_info(conn: AMQPConnection, ch: ChannelState, rates: Rates) -> dict[str, Any]:
    s = conn.session
    return {
        "name": _channel_name(conn, ch),
        "node": NODE,
        "number": ch.number,
        "user": s.username if s is not None else None,
        "vhost": s.vhost if s is not None else None,
        "connection_details": {"name": conn.name, "peer_host": conn.peer_host,
                               "peer_port": conn.peer_port},
        "consumer_count": len(ch.consumers),
        "messages_unacknowledged": len(ch.unacked),
        "prefetch_count": ch.prefetch,
        "global_prefetch_count": ch.global_prefetch,
        "confirm": ch.confirm,
        "transactional": ch.tx,
        "messages_uncommitted": len(ch.tx_publishes),
        "acks_uncommitted": len(ch.tx_acks),
        "state": "running" if ch.flow else "flow",
        "message_stats": message_stats(
            CHANNEL_STATS, channel_counts(ch),
            rates.rates(_channel_key(conn, ch), len(CHANNEL_STATS))),
    }


def _channel_key(conn: AMQPConnection, ch: ChannelState) -> str:
    return f"ch.{conn.name}.{ch.number}.{id(ch)}"


def channels(server: NodeView) -> Iterable[tuple[AMQPConnection, ChannelState]]:
    for conn in sorted(server.connections, key=lambda c: c.name):
        if conn.session is not None:
            for n in sorted(conn.session.channels):
                yield conn, conn.session.channels[n]


def activity_status(c: Consumer) -> str:
    """RabbitMQ's consumer activity: "up", or on a single active consumer queue
    "single_active" for the one receiving and "waiting" for the rest."""
    q = c.queue
    st = getattr(q, "stream", None)
    g = st.member_of.get(c) if st is not None else None
    if g is not None:  # a stream consumer group (amqplite's single active consumer)
        return "single_active" if g.active is c else "waiting"
    if not getattr(q, "single_active", False):
        return "up"
    return "single_active" if q.active is c else "waiting"


def consumer_info(conn: AMQPConnection, ch: ChannelState, c: Consumer) -> dict[str, Any]:
    status = activity_status(c)
    return {
        "consumer_tag": c.tag,
        "queue": {"name": c.queue.name, "vhost": c.queue.vhost},
        "channel_details": {
            "name": _channel_name(conn, ch),
            "number": ch.number,
            "connection_name": conn.name,
            "peer_host": conn.peer_host,
            "peer_port": conn.peer_port,
            "node": NODE,
            "user": conn.session.username if conn.session is not None else None,
        },
        "ack_required": not c.no_ack,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch,
        "messages_unacknowledged": c.unacked,
        "active": status != "waiting",
        "activity_status": status,
        "arguments": jsonable(c.arguments),
    }


# ------------------------------------------------------------------ exchanges
def exchange_info(vhost: str, ex: Exchange,
                  retained: tuple[int, int] | None = None) -> dict[str, Any]:
    """RabbitMQ's exchange object; a retaining type (x-lvc, x-recent-history) adds
    ``retained``: how many messages it keeps and their body bytes."""
    out = {
        "name": ex.name,
        "vhost": vhost,
        "type": ex.type_name,
        "durable": ex.durable,
        "auto_delete": ex.auto_delete,
        "internal": ex.internal,
        "arguments": jsonable(ex.arguments),
    }
    if retained is not None:
        out["retained"] = {"messages": retained[0], "bytes": retained[1]}
    return out


# --------------------------------------------------------------------- queues
def unacked_bytes(server: NodeView) -> dict[int, int]:
    """Queue id -> bytes of its messages delivered and not yet acked."""
    out: dict[int, int] = {}
    for sess in server.broker.sessions.values():
        for ch in sess.channels.values():
            for d in ch.unacked.values():
                e = d.entry
                size = e.body_size if isinstance(e, StreamEntry) else e.message.body_size
                out[d.queue.id] = out.get(d.queue.id, 0) + size
    return out


def vhost_info(vh: VHost, stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """A virtual host as RabbitMQ's /api/vhosts shows it (no tracing in amqplite: the
    firehose is off; every queue is classic unless declared otherwise), with its
    message_stats (``vhost_message_stats``) when given."""
    return {"name": vh.name, "description": vh.description, "tags": [],
            "metadata": {"description": vh.description, "tags": []},
            "tracing": False, "default_queue_type": "classic",
            **queue_totals(vh.queues.values()),
            **({"message_stats": stats} if stats is not None else {})}


def contexts(server: NodeView) -> list[dict[str, Any]]:
    """RabbitMQ's HTTP contexts (the port a string, as RabbitMQ's): clients take the node
    name from ``contexts[0].node``."""
    if not server.admin_url:
        return []
    return [{"node": NODE, "description": "amqplite Management", "path": "/",
             "ip": server.settings.admin_host, "port": str(admin_port(server)),
             "ssl_opts": []}]


def admin_port(server: NodeView) -> int:
    """The bound admin port: the setting may be 0 (any free port)."""
    return urlsplit(server.admin_url or "").port or server.settings.admin_port


def queue_info(server: NodeView, q: Queue, rates: Rates, ubytes: dict[int, int]) -> dict[str, Any]:
    pol = q.policy if hasattr(q, "policy") else None
    eff = getattr(server.broker, "effective_policy", None)
    if eff is not None:
        pol = eff(q)
    ready_bytes = q.ready.bytes
    un_bytes = ubytes.get(q.id, 0)
    stats = message_stats(QUEUE_FIELDS, (q.next_position - 1, *queue_counts(q)),
                          rates.rates(f"q.{q.vhost}.{q.id}", len(QUEUE_FIELDS)))
    qtype = "quorum" if getattr(q, "quorum", False) else "classic"
    info: dict[str, Any] = {
        "name": q.name,
        "vhost": q.vhost,
        "node": NODE,  # one process: every queue lives on this node
        "type": qtype,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "arguments": jsonable(q.arguments),
        "state": "running",
        "messages": q.message_count + q.unacked,
        "messages_ready": q.message_count,
        "messages_unacknowledged": q.unacked,
        "consumers": len(q.consumers),
        "message_bytes": ready_bytes + un_bytes,
        "message_bytes_ready": ready_bytes,
        "message_bytes_unacknowledged": un_bytes,
        # RabbitMQ's paging figures: what is held in RAM and what only on disk
        "messages_ram": q.ready.ram_count + q.unacked,
        "messages_ready_ram": q.ready.ram_count,
        "messages_unacknowledged_ram": q.unacked,
        "messages_paged_out": q.ready.disk_count,
        "message_bytes_paged_out": q.ready.disk_bytes,
        "message_bytes_ram": ready_bytes - q.ready.disk_bytes + un_bytes,
        "policy": pol.name if pol is not None else None,
        "effective_policy_definition": jsonable(pol.definition) if pol is not None else {},
        "message_stats": stats,
    }
    stream = server.broker.stream_info(q)
    if stream is not None:
        # a stream's entries stay after delivery: its length is the log's, on disk
        info.update(type="stream", messages=stream["messages"],
                    messages_ready=stream["messages"], message_bytes=stream["size_bytes"],
                    message_bytes_ready=stream["size_bytes"], stream=stream)
    if getattr(q, "single_active", False):
        info["single_active_consumer_tag"] = q.active.tag if q.active is not None else None
    return info


# ------------------------------------------------------------------- bindings
def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's binding id in URLs: the routing key, plus a hash when there are arguments."""
    if not arguments:
        return routing_key or "~"
    import hashlib
    import json

    h = hashlib.sha1(json.dumps(jsonable(arguments), sort_keys=True).encode()).hexdigest()[:10]
    return f"{routing_key}~{h}"


def binding_info(vhost: str, b: Binding) -> dict[str, Any]:
    kind, name = b.destination
    args = b.args_dict
    return {
        "source": b.source,
        "vhost": vhost,
        "destination": name,
        "destination_type": kind,
        "routing_key": b.routing_key,
        "arguments": jsonable(args),
        "properties_key": properties_key(b.routing_key, args),
    }


def default_binding(vhost: str, q: Queue) -> dict[str, Any]:
    return {"source": "", "vhost": vhost, "destination": q.name, "destination_type": "queue",
            "routing_key": q.name, "arguments": {}, "properties_key": q.name}


# ------------------------------------------------------------------- messages
PROPERTY_FIELDS = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                   "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                   "type", "user_id", "app_id", "cluster_id")


def _props(msg: Message, raw: bytes | None = None) -> Any:
    """Decoded properties (of ``raw`` when given); empty ones if they do not decode."""
    from amqplite.protocol.properties import BasicProperties, decode_properties

    try:
        return decode_properties(raw) if raw is not None else msg.properties
    except Exception:  # malformed properties never break a listing
        return BasicProperties()


def message_properties(msg: Message, raw: bytes | None = None) -> dict[str, Any]:
    p = _props(msg, raw)
    out: dict[str, Any] = {}
    for name in PROPERTY_FIELDS:
        v = getattr(p, name)
        if v is not None:
            out[name] = jsonable(v)
    return out


def message_info(msg: Message, body: bytes | None, *, redelivered: bool, encoding: str = "auto",
                 truncate: int | None = None,
                 properties_raw: bytes | None = None) -> dict[str, Any]:
    """One message as RabbitMQ's ``/get`` returns it, plus its dead-letter summary."""
    props = _props(msg, properties_raw)
    out: dict[str, Any] = {
        "payload_bytes": msg.body_size,
        "redelivered": redelivered,
        "exchange": msg.exchange,
        "routing_key": msg.routing_key,
        "message_id": msg.message_id,
        "properties": message_properties(msg, properties_raw),
    }
    if body is None:
        out["payload"], out["payload_encoding"] = None, "none"
    else:
        if truncate is not None and truncate >= 0:
            body = body[:truncate]
        out["payload"], out["payload_encoding"] = encode_payload(body, encoding)
    death = death_summary(props.headers)
    if death is not None:  # absent, not null: rabbitmqadmin's table cannot print a null
        out["death"] = death
    return out


def entry_info(e: Entry, index: int, body: bytes | None, *, encoding: str = "auto",
               truncate: int | None = None) -> dict[str, Any]:
    """A ready message seen by peek: where it sits and how often it was delivered."""
    out = message_info(e.message, body, redelivered=e.redelivered, encoding=encoding,
                       truncate=truncate)
    out["index"] = index
    out["position"] = e.position
    out["delivery_count"] = e.delivery_count
    out["expires_at"] = iso(e.expires_at) if e.expires_at is not None else None
    return out


def filter_fields(msg: Message, death: dict[str, Any] | None) -> dict[str, Any]:
    """The values a move/replay/peek filter can match against."""
    p = _props(msg)
    d = death or {}
    return {
        "reason": d.get("reason"),
        "queue": d.get("queue"),
        "origin_queue": d.get("origin_queue"),
        "exchange": d.get("exchange") if death else msg.exchange,
        "routing_key": [msg.routing_key, *d.get("routing_keys", [])],
        "message_id": msg.message_id,
        "content_type": p.content_type,
        "type": p.type,
        "app_id": p.app_id,
        "correlation_id": p.correlation_id,
    }


# ------------------------------------------------------------ Kafka consumer groups
def kafka_groups(server: NodeView, vhosts: set[str] | None = None) -> list[GroupReport]:
    """Every consumer group the node's Kafka listener coordinates (of ``vhosts`` when
    given; none when Kafka is off)."""
    kafka = getattr(server, "kafka", None)  # the Kafka front, when it runs
    if kafka is None:
        return []
    return group_reports(kafka.coordinator, stream_ends(kafka.topics), vhosts)


def kafka_group(server: NodeView, vhost: str, group_id: str) -> GroupReport | None:
    """One consumer group, None when the listener does not know it (or Kafka is off)."""
    kafka = getattr(server, "kafka", None)
    if kafka is None:
        return None
    return group_report(kafka.coordinator, stream_ends(kafka.topics), vhost, group_id)


def kafka_group_lags(server: NodeView) -> list[GroupLags]:
    """What the Prometheus gauges read of every group: states, member counts, lags."""
    kafka = getattr(server, "kafka", None)
    if kafka is None:
        return []
    return group_lags(kafka.coordinator, stream_ends(kafka.topics))


def group_info(r: GroupReport) -> dict[str, Any]:
    """A group as the API shows it."""
    return {
        "vhost": r.vhost, "name": r.group_id, "state": r.state,
        "protocol_type": r.protocol_type, "protocol": r.protocol,
        "generation": r.generation, "leader": r.leader, "lag": r.lag,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "assignment": None if m.assignment is None else [
                {"topic": t, "partitions": list(ps)} for t, ps in m.assignment],
        } for m in r.members],
        "partitions": [{
            "topic": p.topic, "partition": p.partition,
            "committed_offset": p.committed_offset, "metadata": p.metadata,
            "committed_at": p.committed_at // 1000 if p.committed_at else None,
            "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
            "lag": p.lag, "member_id": p.member_id, "client_id": p.client_id,
            "client_host": p.client_host,
        } for p in r.partitions],
    }
