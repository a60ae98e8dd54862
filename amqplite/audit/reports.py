"""Report aggregates over the exported dataset (Spark), as plain dicts.

Two kinds of scope share every query (a ``scope`` column): ``"run"`` - the
rows of this run's batch (``lo < id <= hi``) - and one ``"YYYY-MM-DD"`` per UTC
day the batch touched (all rows of that day, from every batch). The whole
dataset is read because the state of a (message, queue) pair depends on its
full history; see docs/audit.md.

Per (message_key, vhost, queue) pair the *last* event (by id) decides its
state: ``routed``/``replayed``/``delivered``/``requeued``/``retained`` mean in flight (or
stuck when it entered the queue longer than the threshold ago); ``acked``,
``rejected``, ``dead_lettered``, ``expired``, ``purged`` are terminal.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from amqplite.audit.state import Batch
from amqplite.links.audit import HOP_KINDS, parse_hop_reason

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

EVENTS = (
    "published",
    "routed",
    "returned",
    "delivered",
    "acked",
    "rejected",
    "requeued",
    "dead_lettered",
    "expired",
    "purged",
    "replayed",
    # a copy handed out from the retained store (x-recent-history, x-lvc) at bind
    # or on request; its ``routed`` row follows (reason ``bind`` / ``request``)
    "retained",
)
#: what a shovel or federation link writes per message it forwards (``amqplite.links.
#: audit``), on the broker running the link: a hop, not a queue's event. Its queue is
#: the link's source queue, often on another broker, so hops are reported per link
#: and never enter a (message, queue) state: forwarding neither opens nor settles one
HOP_EVENTS = HOP_KINDS
#: stream queues' events: an entry appended, a consumer attached (at an offset), a
#: Kafka Fetch's read of a partition (its records in the reason, "records:N")
STREAM_EVENTS = ("appended", "attached", "fetched")
PAIR_EVENTS = tuple(e for e in EVENTS if e not in ("published", "returned"))
OPEN_EVENTS = ("routed", "replayed", "delivered", "requeued", "retained")
UNACKED_STATES = ("dead_lettered", "rejected", "expired", "purged", "in_flight", "stuck")
REASON_EVENTS = ("dead_lettered", "rejected", "returned", "expired", "retained")
#: the events that carry the client's protocol (a publish, a delivery, an ack)
PROTOCOL_EVENTS = ("published", "delivered", "acked")
STUCK_FIELDS = (
    "message_id",
    "message_key",
    "vhost",
    "queue",
    "exchange",
    "routing_key",
    "entered_at",
    "age_s",
    "last_event",
    "max_attempt",
    "consumer_tag",
)


def iso_us(us: int | None) -> str | None:
    """Microseconds since the epoch → ISO 8601 UTC with milliseconds."""
    if us is None:
        return None
    dt = datetime.fromtimestamp(us / 1_000_000, UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class ReportSet:
    """The run report, the daily reports, and the stuck messages of each scope."""

    run: dict[str, Any]
    daily: dict[str, dict[str, Any]] = field(default_factory=dict)
    stuck: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def stuck_rows(self, scope: str) -> list[dict[str, Any]]:
        """All stuck messages of ``scope`` (``"run"`` or a day), oldest first."""
        return self.stuck.get(scope, [])


def _empty_report(kind: str, batch: Batch, day: str | None, stuck_after_us: int) -> dict[str, Any]:
    return {
        "kind": kind,
        "run_id": batch.run_id,
        "day": day,
        "generated_at": iso_us(int(datetime.now(UTC).timestamp() * 1_000_000)),
        "as_of": iso_us(batch.as_of_us),
        "as_of_us": batch.as_of_us,
        "stuck_after_s": stuck_after_us / 1_000_000,
        "batch": {"lo": batch.lo, "hi": batch.hi, "rows": 0},
        "events": 0,
        "totals": {},
        "counts": [],
        "queues": [],
        "latency": [],
        "unacked": {"by_queue": [], "totals": dict.fromkeys(UNACKED_STATES, 0)},
        "stuck": {"count": 0, "messages": [], "truncated": False},
        "redelivered": {"count": 0, "by_queue": [], "messages": [], "truncated": False},
        "dead_letter_reasons": [],
        "retained_reasons": [],
        "top_routing_keys": [],
        "streams": [],
        "protocols": [],
        "links": [],
    }


def _day_of(ts: Column) -> Column:
    from pyspark.sql import functions as F

    return F.date_format(F.timestamp_micros(ts), "yyyy-MM-dd")


def _with_scope(df: DataFrame, id_col: Column, ts_col: Column, batch: Batch, days: list[str]) -> DataFrame:
    """Explode each row into the scopes it belongs to (``run`` and/or its day)."""
    from pyspark.sql import functions as F

    scopes = F.array_compact(
        F.array(
            F.when((id_col > batch.lo) & (id_col <= batch.hi), F.lit("run")),
            F.when(_day_of(ts_col).isin(days), _day_of(ts_col)) if days else F.lit(None),
        )
    )
    return df.withColumn("scope", F.explode(scopes))


def _pairs(ds: DataFrame, as_of_us: int, stuck_after_us: int) -> DataFrame:
    """One row per (message_key, vhost, queue) with its state and key timestamps."""
    from pyspark.sql import functions as F

    ev = F.col("event")
    ident, ts = F.col("id"), F.col("ts_us")
    routed = ev == "routed"
    acked = ev == "acked"
    redeliver = (ev == "requeued") | (F.col("attempt") > 1)
    has_tag = F.col("consumer_tag").isNotNull()
    # a stream's reads settle nothing: its queues have no per-message states
    streams = ds.where(ev.isin(*STREAM_EVENTS)).select("vhost", "queue").distinct()
    pairs = (
        ds.where(F.col("queue").isNotNull() & F.col("message_key").isNotNull() & ev.isin(*PAIR_EVENTS))
        .join(F.broadcast(streams), ["vhost", "queue"], "left_anti")
        .groupBy("message_key", "vhost", "queue")
        .agg(
            F.max_by(ev, ident).alias("last_event"),
            F.max("message_id").alias("message_id"),
            F.min(F.when(routed, ident)).alias("routed_id"),
            F.min(F.when(routed, ts)).alias("routed_ts"),
            F.max(F.when(ev.isin("routed", "replayed", "retained"), ts)).alias("entered_ts"),
            F.min(ident).alias("first_id"),
            F.min(ts).alias("first_ts"),
            F.min(F.when(acked, ident)).alias("ack_id"),
            F.min(F.when(acked, ts)).alias("ack_ts"),
            F.max("attempt").alias("max_attempt"),
            F.sum((ev == "requeued").cast("int")).alias("requeues"),
            F.min(F.when(redeliver, ident)).alias("redeliver_id"),
            F.min(F.when(redeliver, ts)).alias("redeliver_ts"),
            F.max_by(F.when(has_tag, F.col("consumer_tag")), F.when(has_tag, ident)).alias("consumer_tag"),
            F.coalesce(F.max(F.when(routed, F.col("exchange"))), F.max("exchange")).alias("exchange"),
            F.coalesce(F.max(F.when(routed, F.col("routing_key"))), F.max("routing_key")).alias(
                "routing_key"
            ),
        )
    )
    published = (
        ds.where((ev == "published") & F.col("message_key").isNotNull())
        .groupBy("message_key")
        .agg(F.min("ts_us").alias("published_ts"))
    )
    entered = F.coalesce(F.col("entered_ts"), F.col("first_ts"))
    is_open = F.col("last_event").isin(*OPEN_EVENTS)
    return (
        pairs.join(published, "message_key", "left")
        .withColumn("entered", entered)
        .withColumn("entry_id", F.coalesce(F.col("routed_id"), F.col("first_id")))
        .withColumn("entry_ts", F.coalesce(F.col("routed_ts"), F.col("first_ts")))
        .withColumn(
            "state",
            F.when(is_open & (F.lit(as_of_us) - entered > stuck_after_us), "stuck")
            .when(is_open, "in_flight")
            .otherwise(F.col("last_event")),
        )
        .withColumn("latency_us", F.col("ack_ts") - F.col("published_ts"))
    )


def compute(
    dataset: DataFrame | None,
    *,
    batch: Batch,
    stuck_after_us: int,
    top_n: int = 20,
    list_limit: int = 1000,
) -> ReportSet:
    """All report numbers for this run and for each day the batch touched."""
    run = _empty_report("run", batch, None, stuck_after_us)
    if dataset is None:
        return ReportSet(run=run)
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ds = dataset.cache()
    days: list[str] = []
    if not batch.empty:
        days = sorted(
            (d.isoformat() if isinstance(d, date) else str(d))
            for (d,) in ds.where((F.col("id") > batch.lo) & (F.col("id") <= batch.hi))
            .select("event_date")
            .distinct()
            .collect()
        )
    reports = {"run": run} | {d: _empty_report("daily", batch, d, stuck_after_us) for d in days}

    # Counts per queue and event (and reason, for the events that carry one).
    rows = _with_scope(ds, F.col("id"), F.col("ts_us"), batch, days)
    reason = F.when(F.col("event").isin(*REASON_EVENTS), F.coalesce(F.col("reason"), F.lit("")))
    counts = (
        rows.groupBy("scope", "vhost", "queue", "event", reason.alias("reason"))
        .agg(F.count("*").alias("n"), F.sum("size").alias("bytes"))
        .collect()
    )
    agg_counts: dict[str, dict[tuple[str, str | None, str], int]] = defaultdict(lambda: defaultdict(int))
    for r in counts:
        agg_counts[r.scope][(r.vhost, r.queue, r.event)] += r.n
        if r.event in ("dead_lettered", "retained"):
            section = "dead_letter_reasons" if r.event == "dead_lettered" else "retained_reasons"
            reports[r.scope][section].append(
                {"vhost": r.vhost, "queue": r.queue, "reason": r.reason, "count": r.n}
            )
    for scope, table in agg_counts.items():
        rep = reports[scope]
        rep["counts"] = [
            {"vhost": v, "queue": q, "event": e, "count": n}
            for (v, q, e), n in sorted(table.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
        ]
        totals: dict[str, int] = defaultdict(int)
        for (_, _, e), n in table.items():
            totals[e] += n
        rep["totals"] = dict(sorted(totals.items()))
        rep["events"] = sum(totals.values())
        for section in ("dead_letter_reasons", "retained_reasons"):
            rep[section].sort(key=lambda d: (-d["count"], d["vhost"], d["queue"] or "", d["reason"]))

    # Messages forwarded by each shovel and federation link (their hop rows).
    for r in (
        rows.where(F.col("event").isin(*HOP_EVENTS))
        .groupBy("scope", "vhost", "event", "reason", "consumer_tag", "queue")
        .agg(F.count("*").alias("n"), F.sum("size").alias("bytes"))
        .collect()
    ):
        kind, link, src, dest = parse_hop_reason(r.reason) or (r.event, r.consumer_tag or "", "", "")
        reports[r.scope]["links"].append(
            {"vhost": r.vhost, "kind": kind, "link": link, "queue": r.queue, "from": src,
             "to": dest, "count": r.n, "bytes": int(r.bytes or 0)})
    for rep in reports.values():
        rep["links"].sort(key=lambda d: (d["vhost"], d["kind"], d["link"], d["queue"] or "",
                                         d["from"], d["to"]))

    # Publishes, deliveries and acks by the client's protocol (amqp-0-9-1, mqtt-3.1.1,
    # mqtt-5.0...): rows from before the column existed, and the broker's own
    # events, carry none and are left out.
    for r in (
        rows.where(F.col("protocol").isNotNull() & F.col("event").isin(*PROTOCOL_EVENTS))
        .groupBy("scope", "protocol", "event")
        .agg(F.count("*").alias("n"), F.sum("size").alias("bytes"))
        .collect()
    ):
        reports[r.scope]["protocols"].append(
            {"protocol": r.protocol, "event": r.event, "count": r.n, "bytes": r.bytes or 0})
    for rep in reports.values():
        rep["protocols"].sort(key=lambda d: (d["protocol"], EVENTS.index(d["event"])))

    pairs = _pairs(ds, batch.as_of_us, stuck_after_us).cache()

    # publish → first ack latency per queue.
    lat = (
        _with_scope(
            pairs.where(F.col("latency_us").isNotNull()),
            F.col("ack_id"),
            F.col("ack_ts"),
            batch,
            days,
        )
        .groupBy("scope", "vhost", "queue")
        .agg(
            F.count("*").alias("n"),
            F.percentile_approx("latency_us", [0.5, 0.9, 0.99], 10000).alias("p"),
            F.max("latency_us").alias("max"),
            F.avg("latency_us").alias("mean"),
        )
        .collect()
    )
    for r in lat:
        p50, p90, p99 = (v / 1000 for v in r.p)
        reports[r.scope]["latency"].append(
            {
                "vhost": r.vhost,
                "queue": r.queue,
                "count": r.n,
                "p50_ms": p50,
                "p90_ms": p90,
                "p99_ms": p99,
                "max_ms": r.max / 1000,
                "mean_ms": round(r.mean / 1000, 3),
            }
        )

    # Messages routed in scope and not acked (yet), by current state.
    unacked = (
        _with_scope(
            pairs.where(F.col("state") != "acked"),
            F.col("entry_id"),
            F.col("entry_ts"),
            batch,
            days,
        )
        .groupBy("scope", "vhost", "queue", "state")
        .count()
        .collect()
    )
    by_queue: dict[str, dict[tuple[str, str], dict[str, int]]] = defaultdict(dict)
    for r in unacked:
        if r.state not in UNACKED_STATES:
            continue
        row = by_queue[r.scope].setdefault((r.vhost, r.queue), dict.fromkeys(UNACKED_STATES, 0))
        row[r.state] += r["count"]
        reports[r.scope]["unacked"]["totals"][r.state] += r["count"]

    # Stuck now: every stuck pair for the run report, those routed that day for a day.
    stuck_scopes = F.array_compact(
        F.array(
            F.lit("run"),
            F.when(_day_of(F.col("entry_ts")).isin(days), _day_of(F.col("entry_ts")))
            if days
            else F.lit(None),
        )
    )
    stuck: dict[str, list[dict[str, Any]]] = defaultdict(list)
    stuck_df = (
        pairs.where(F.col("state") == "stuck")
        .withColumn("scope", F.explode(stuck_scopes))
        .select("scope", "entered", *(c for c in STUCK_FIELDS if c not in ("entered_at", "age_s")))
        .orderBy("entered", "message_key", "queue")
    )
    for r in stuck_df.toLocalIterator():
        d = r.asDict()
        entered_us = d.pop("entered")
        d["entered_at"] = iso_us(entered_us)
        d["age_s"] = round((batch.as_of_us - entered_us) / 1_000_000, 3)
        stuck[d.pop("scope")].append({k: d[k] for k in STUCK_FIELDS})

    # Delivered more than once (max attempt > 1 or a requeue), first redelivery in scope.
    redelivered = _with_scope(
        pairs.where(F.col("redeliver_id").isNotNull()),
        F.col("redeliver_id"),
        F.col("redeliver_ts"),
        batch,
        days,
    )
    rank = Window.partitionBy("scope").orderBy(
        F.col("max_attempt").desc_nulls_last(), F.col("requeues").desc(), "message_key", "queue"
    )
    per_queue = Window.partitionBy("scope", "vhost", "queue")
    redelivered_rows = (
        redelivered.withColumn("rank", F.row_number().over(rank))
        .withColumn("queue_count", F.count("*").over(per_queue))
        .withColumn("queue_rank", F.row_number().over(per_queue.orderBy("message_key")))
        .where((F.col("rank") <= list_limit) | (F.col("queue_rank") == 1))
        .orderBy("scope", "rank")
        .collect()
    )
    redelivered_by_queue: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
    messages_by_scope: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in redelivered_rows:
        redelivered_by_queue[r.scope][(r.vhost, r.queue)] = r.queue_count
        if r.rank <= list_limit:
            messages_by_scope[r.scope].append(
                {
                    "message_id": r.message_id,
                    "message_key": r.message_key,
                    "vhost": r.vhost,
                    "queue": r.queue,
                    "max_attempt": r.max_attempt,
                    "requeues": r.requeues,
                    "state": r.state,
                }
            )

    # Top routing keys of published messages.
    key_rank = Window.partitionBy("scope").orderBy(F.col("n").desc(), "vhost", "exchange", "routing_key")
    top_keys = (
        _with_scope(ds.where(F.col("event") == "published"), F.col("id"), F.col("ts_us"), batch, days)
        .groupBy("scope", "vhost", "exchange", "routing_key")
        .agg(F.count("*").alias("n"), F.sum("size").alias("bytes"))
        .withColumn("rank", F.row_number().over(key_rank))
        .where(F.col("rank") <= top_n)
        .orderBy("scope", "rank")
        .collect()
    )
    for r in top_keys:
        reports[r.scope]["top_routing_keys"].append(
            {
                "vhost": r.vhost,
                "exchange": r.exchange,
                "routing_key": r.routing_key,
                "count": r.n,
                "bytes": int(r.bytes or 0),
            }
        )
    pairs.unpersist()

    # Per stream: entries appended (messages, body bytes), consumers attached and
    # records Kafka fetches read. A Kafka batch stored as it came is one row for its
    # records (reason "records:N"), and so is a Fetch's read of one partition.
    appended = F.col("event") == "appended"
    fetched = F.col("event") == "fetched"
    records = F.coalesce(F.regexp_extract(F.col("reason"), r"records:(\d+)", 1)
                         .try_cast("int"), F.lit(1))
    per_stream = (
        _with_scope(ds.where(F.col("event").isin(*STREAM_EVENTS)), F.col("id"), F.col("ts_us"),
                    batch, days)
        .groupBy("scope", "vhost", "queue")
        .agg(
            F.sum(F.when(appended, records)).alias("messages"),
            F.sum(F.when(appended, F.col("size"))).alias("bytes"),
            F.sum((F.col("event") == "attached").cast("int")).alias("attached"),
            F.sum(F.when(fetched, records)).alias("fetched"),
        )
        .orderBy("scope", "vhost", "queue")
        .collect()
    )
    for r in per_stream:
        reports[r.scope]["streams"].append(
            {"vhost": r.vhost, "queue": r.queue, "messages": int(r.messages or 0),
             "bytes": int(r.bytes or 0), "attached": int(r.attached or 0),
             "fetched": int(r.fetched or 0)}
        )

    for rep in reports.values():
        rep["batch"]["rows"] = run.get("events", 0)
    for scope, rep in reports.items():
        rep["latency"].sort(key=lambda d: (d["vhost"], d["queue"]))
        rep["unacked"]["by_queue"] = [
            {"vhost": v, "queue": q, **states, "total": sum(states.values())}
            for (v, q), states in sorted(by_queue[scope].items())
        ]
        rows_stuck = stuck.get(scope, [])
        rep["stuck"] = {
            "count": len(rows_stuck),
            "messages": rows_stuck[:list_limit],
            "truncated": len(rows_stuck) > list_limit,
        }
        red_q = redelivered_by_queue[scope]
        rep["redelivered"] = {
            "count": sum(red_q.values()),
            "by_queue": [{"vhost": v, "queue": q, "count": n} for (v, q), n in sorted(red_q.items())],
            "messages": messages_by_scope[scope],
            "truncated": sum(red_q.values()) > len(messages_by_scope[scope]),
        }
        rep["queues"] = _queue_summary(rep, agg_counts[scope], red_q)
    return ReportSet(run=run, daily={d: reports[d] for d in days}, stuck={k: v for k, v in stuck.items()})


def _queue_summary(
    rep: dict[str, Any],
    counts: dict[tuple[str, str | None, str], int],
    redelivered: dict[tuple[str, str], int],
) -> list[dict[str, Any]]:
    """One row per queue: what it took, delivered, redelivered, dead-lettered, …"""
    latency = {(d["vhost"], d["queue"]): d for d in rep["latency"]}
    unacked = {(d["vhost"], d["queue"]): d for d in rep["unacked"]["by_queue"]}
    # a hop row names its link's source queue, which may be another broker's
    keys = {(v, q) for (v, q, e) in counts if q is not None and e not in HOP_EVENTS}
    keys |= set(latency) | set(unacked)
    keys |= set(redelivered)
    out = []
    for v, q in sorted(keys):
        row: dict[str, Any] = {"vhost": v, "queue": q}
        for event in PAIR_EVENTS:
            row[event] = counts.get((v, q, event), 0)
        row["redelivered_messages"] = redelivered.get((v, q), 0)
        row["in_flight"] = unacked.get((v, q), {}).get("in_flight", 0)
        row["stuck"] = unacked.get((v, q), {}).get("stuck", 0)
        lat = latency.get((v, q))
        row["p50_ms"] = lat["p50_ms"] if lat else None
        row["p99_ms"] = lat["p99_ms"] if lat else None
        out.append(row)
    return out
