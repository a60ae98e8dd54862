"""The audit job against a real SparkSession and a real SQLite delivery log."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from amqplite.audit import sqlite_read
from amqplite.audit.config import AuditConfig, sqlite_target
from amqplite.audit.job import Hooks, run_audit
from amqplite.audit.state import StateStore
from tests.audit.logdb import MS, US, LogDB, ts

pytestmark = pytest.mark.spark

T0 = ts("2024-03-01T10:00:00")
AS_OF = ts("2024-03-01T13:00:00")  # stuck threshold 1 h: anything entered before 12:00


class Crash(Exception):
    pass


def build_day1(db: LogDB) -> dict[str, Any]:
    """A day of realistic traffic; returns what the test did, for assertions."""
    rows: list[dict[str, Any]] = []
    ev = db.ev
    # orders: 100 messages, publish→ack latencies 1..100 ms, full-level delivered rows.
    for i in range(100):
        t = T0 + i * US
        _, _, r = db.message(t, ["orders"], routing_key="order.created", size=200)
        rows += r
        rows.append(ev(r[0], "delivered", t + 500, "orders", attempt=1, consumer_tag="c1"))
        rows.append(ev(r[0], "acked", t + (i + 1) * MS, "orders", attempt=1, consumer_tag="c1"))
    # fan: 10 messages to two queues. a acks all in 5 ms; b acks 5 (20 ms),
    # dead-letters 2 into dlq (they sit there, stuck), keeps 3 in flight (recent).
    for i in range(10):
        t = T0 + 200 * US + i * US if i < 7 else AS_OF - 600 * US + i * US
        _, _, r = db.message(t, ["audit-a", "audit-b"], exchange="fan", routing_key="")
        rows += r
        rows.append(ev(r[0], "acked", t + 5 * MS, "audit-a", attempt=1, consumer_tag="ca"))
        if i < 5:
            rows.append(ev(r[0], "acked", t + 20 * MS, "audit-b", attempt=1, consumer_tag="cb"))
        elif i < 7:
            rows.append(ev(r[0], "rejected", t + 7 * MS, "audit-b", attempt=1, reason="rejected"))
            rows.append(ev(r[0], "dead_lettered", t + 7 * MS, "audit-b", reason="rejected", exchange="dlx"))
            rows.append(ev(r[0], "routed", t + 7 * MS, "dlq", exchange="dlx"))
    # work: 5 messages delivered, requeued, redelivered, acked (30 ms after publish).
    for i in range(5):
        t = T0 + 300 * US + i * US
        _, _, r = db.message(t, ["work"], routing_key="job")
        rows += r
        rows.append(ev(r[0], "delivered", t + 1 * MS, "work", attempt=1, consumer_tag="w"))
        rows.append(ev(r[0], "requeued", t + 2 * MS, "work", attempt=1, consumer_tag="w"))
        rows.append(ev(r[0], "delivered", t + 3 * MS, "work", attempt=2, consumer_tag="w"))
        rows.append(ev(r[0], "acked", t + 30 * MS, "work", attempt=2, consumer_tag="w"))
    # ttl: 2 messages expire.
    for i in range(2):
        t = T0 + 400 * US + i * US
        _, _, r = db.message(t, ["ttl"], routing_key="t")
        rows += r
        rows.append(ev(r[0], "expired", t + 1000 * MS, "ttl", reason="ttl"))
    # slow: 3 messages delivered long ago, never acked → stuck.
    slow_ids = []
    for i in range(3):
        t = T0 + 500 * US + i * US
        _, mid, r = db.message(t, ["slow"], routing_key="s", message_id=f"slow-{i}")
        slow_ids.append(mid)
        rows += r
        rows.append(ev(r[0], "delivered", t + 1 * MS, "slow", attempt=1, consumer_tag="ctag-slow"))
    # one unroutable mandatory publish.
    _, _, r = db.message(T0 + 600 * US, [], exchange="amq.direct", routing_key="nowhere")
    rows += r
    rows.append(ev(r[0], "returned", T0 + 600 * US, None, reason="NO_ROUTE"))
    db.add(rows)
    return {"rows": len(rows), "slow_ids": slow_ids}


def config_for(tmp_path: Path, out: str = "out", **kw: Any) -> AuditConfig:
    """The default reader, with pages small enough that day 1 (498 rows) takes three."""
    kw.setdefault("page_rows", 200)
    return AuditConfig(db=sqlite_target(tmp_path / "data" / "amqplite.db"), out=tmp_path / out, **kw)


def raw_rows(spark: Any, cfg: AuditConfig) -> tuple[int, int]:
    """(rows, distinct ids) in the Parquet files, without the reader's dedupe."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(cfg.dataset_path)
    r = df.agg(F.count("*").alias("n"), F.countDistinct("id").alias("d")).collect()[0]
    return int(r.n), int(r.d)


def by_queue(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["queue"]: d for d in items}


def test_counts_latency_stuck_and_rerun(spark: Any, tmp_path: Path) -> None:
    db = LogDB(tmp_path / "data")
    did = build_day1(db)
    cfg = config_for(tmp_path)

    res = run_audit(cfg, spark=spark, now_us=AS_OF)
    assert (res.lo, res.hi, res.rows, res.resumed) == (0, did["rows"], did["rows"], False)
    assert StateStore(cfg.out).watermark() == did["rows"]
    assert raw_rows(spark, cfg) == (did["rows"], did["rows"])
    day = cfg.out / "log" / "event_date=2024-03-01"
    assert (day / "queue=orders" / f"batch={res.hi}").is_dir()
    assert (day / "queue=__HIVE_DEFAULT_PARTITION__").is_dir()  # published/returned rows

    rep = json.loads((res.report_dir / "report.json").read_text())
    t = rep["totals"]
    assert t["published"] == 100 + 10 + 5 + 2 + 3 + 1
    assert t["routed"] == 100 + 20 + 2 + 5 + 2 + 3
    assert (t["acked"], t["requeued"], t["dead_lettered"], t["expired"], t["returned"]) == (
        100 + 15 + 5,
        5,
        2,
        2,
        1,
    )
    q = by_queue(rep["queues"])
    assert (q["orders"]["routed"], q["orders"]["delivered"], q["orders"]["acked"]) == (
        100,
        100,
        100,
    )
    assert (q["work"]["delivered"], q["work"]["redelivered_messages"]) == (10, 5)
    assert (q["audit-b"]["dead_lettered"], q["audit-b"]["in_flight"]) == (2, 3)

    lat = by_queue(rep["latency"])
    assert (lat["orders"]["count"], lat["orders"]["p50_ms"], lat["orders"]["p90_ms"]) == (
        100,
        50,
        90,
    )
    assert (lat["orders"]["p99_ms"], lat["orders"]["max_ms"]) == (99, 100)
    assert lat["audit-a"]["p50_ms"] == lat["audit-a"]["p99_ms"] == 5
    assert (lat["audit-b"]["count"], lat["audit-b"]["p50_ms"]) == (5, 20)
    assert lat["work"]["p90_ms"] == 30
    assert "dlq" not in lat and "slow" not in lat

    un = by_queue(rep["unacked"]["by_queue"])
    assert un["audit-b"]["dead_lettered"] == 2 and un["audit-b"]["in_flight"] == 3
    assert un["dlq"]["stuck"] == 2 and un["slow"]["stuck"] == 3 and un["ttl"]["expired"] == 2
    assert "orders" not in un
    stuck = rep["stuck"]
    assert stuck["count"] == 5
    assert [m["message_id"] for m in stuck["messages"] if m["queue"] == "slow"] == did["slow_ids"]
    slow0 = next(m for m in stuck["messages"] if m["message_id"] == "slow-0")
    assert slow0["consumer_tag"] == "ctag-slow" and slow0["last_event"] == "delivered"
    assert slow0["age_s"] == pytest.approx((AS_OF - T0 - 500 * US) / US)

    assert rep["redelivered"]["count"] == 5
    assert {m["queue"] for m in rep["redelivered"]["messages"]} == {"work"}
    assert rep["dead_letter_reasons"] == [
        {"vhost": "/", "queue": "audit-b", "reason": "rejected", "count": 2}
    ]
    top = rep["top_routing_keys"][0]
    assert (top["routing_key"], top["count"], top["bytes"]) == ("order.created", 100, 20000)

    with open(res.report_dir / "stuck.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == 5 and {r["queue"] for r in csv_rows} == {"slow", "dlq"}
    html = (res.report_dir / "report.html").read_text()
    assert "<svg" in html and "<script" not in html and "orders" in html
    daily = cfg.out / "reports" / "daily" / "2024-03-01"
    assert [p.parent for p in res.daily_dirs] == [daily.parent]
    assert json.loads((daily / "report.json").read_text())["totals"] == t
    assert (cfg.out / "reports" / "index.html").exists()

    # A re-run with nothing new: no duplicates, watermark unchanged, stuck still listed.
    again = run_audit(cfg, spark=spark, now_us=AS_OF + 60 * US)
    assert (again.lo, again.hi, again.rows) == (did["rows"], did["rows"], 0)
    assert raw_rows(spark, cfg) == (did["rows"], did["rows"])
    rep2 = json.loads((again.report_dir / "report.json").read_text())
    assert rep2["totals"] == {} and rep2["stuck"]["count"] == 5 and again.daily_dirs == []

    # Next day: the in-flight audit-b messages get acked, one new message.
    ev = db.ev
    t1 = ts("2024-03-02T09:00:00")
    late_b = [
        r
        for r in db.rows
        if r["event"] == "routed" and r["queue"] == "audit-b" and r["ts_us"] > AS_OF - 700 * US
    ]
    assert len(late_b) == 3
    new = [ev(tmpl, "acked", t1, "audit-b", attempt=1) for tmpl in late_b]
    _, _, r = db.message(t1, ["orders"], routing_key="order.created")
    new += [*r, ev(r[0], "acked", t1 + 7 * MS, "orders", attempt=1)]
    db.add(new)
    third = run_audit(cfg, spark=spark, now_us=t1 + 60 * US)
    assert (third.rows, third.hi) == (6, did["rows"] + 6)
    assert raw_rows(spark, cfg) == (did["rows"] + 6, did["rows"] + 6)
    rep3 = json.loads((third.report_dir / "report.json").read_text())
    assert rep3["totals"] == {"acked": 4, "published": 1, "routed": 1}
    assert by_queue(rep3["latency"])["orders"]["p50_ms"] == 7
    day2 = json.loads((cfg.out / "reports/daily/2024-03-02/report.json").read_text())
    assert day2["totals"] == rep3["totals"]
    # audit-b's in-flight messages are acked now: only the old stuck ones remain.
    assert rep3["stuck"]["count"] == 5
    assert [r["run_id"] for r in StateStore(cfg.out).runs()] == [res.run_id, third.run_id]


def test_crash_after_write_then_rerun_is_exactly_once(spark: Any, tmp_path: Path) -> None:
    db = LogDB(tmp_path / "data")
    did = build_day1(db)
    cfg = config_for(tmp_path)

    def crash(_batch: Any) -> None:
        raise Crash("killed after the Parquet write")

    with pytest.raises(Crash):
        run_audit(cfg, spark=spark, now_us=AS_OF, hooks=Hooks(after_write=crash))
    state = StateStore(cfg.out)
    assert state.watermark() == 0 and state.pending_file.exists()
    assert raw_rows(spark, cfg) == (did["rows"], did["rows"])  # written, not committed

    # Rows arriving after the crash are not part of the redone batch.
    _, _, r = db.message(AS_OF + US, ["orders"])
    db.add(r)
    redo = run_audit(cfg, spark=spark, now_us=AS_OF + 120 * US)
    assert redo.resumed and (redo.lo, redo.hi, redo.rows) == (0, did["rows"], did["rows"])
    assert raw_rows(spark, cfg) == (did["rows"], did["rows"])
    assert state.watermark() == did["rows"] and not state.pending_file.exists()

    nxt = run_audit(cfg, spark=spark, now_us=AS_OF + 180 * US)
    assert (nxt.resumed, nxt.rows) == (False, 2)
    assert raw_rows(spark, cfg) == (did["rows"] + 2, did["rows"] + 2)


def test_empty_log(spark: Any, tmp_path: Path) -> None:
    LogDB(tmp_path / "data")
    cfg = config_for(tmp_path)
    res = run_audit(cfg, spark=spark, now_us=AS_OF)
    assert (res.lo, res.hi, res.rows, res.daily_dirs) == (0, 0, 0, [])
    rep = json.loads((res.report_dir / "report.json").read_text())
    assert rep["totals"] == {} and rep["stuck"]["count"] == 0 and rep["queues"] == []
    assert "no data" in (res.report_dir / "report.html").read_text()
    assert not (cfg.out / "log").exists()
    assert StateStore(cfg.out).watermark() == 0


def test_rows_arriving_during_export_go_to_next_run(spark: Any, tmp_path: Path) -> None:
    db = LogDB(tmp_path / "data")
    did = build_day1(db)
    cfg = config_for(tmp_path, jdbc_partitions=2)
    late: list[dict[str, Any]] = []

    def insert_rows(batch: Any) -> None:
        assert batch.hi == did["rows"]
        _, _, r = db.message(AS_OF + US, ["orders", "work"])
        late.extend(r)
        db.add(r)

    first = run_audit(cfg, spark=spark, now_us=AS_OF, hooks=Hooks(after_batch_fixed=insert_rows))
    assert (first.hi, first.rows) == (did["rows"], did["rows"])
    assert db.max_id() == did["rows"] + 3
    second = run_audit(cfg, spark=spark, now_us=AS_OF + 60 * US)
    assert (second.lo, second.hi, second.rows) == (did["rows"], did["rows"] + 3, 3)
    assert raw_rows(spark, cfg) == (did["rows"] + 3, did["rows"] + 3)
    rep = json.loads((second.report_dir / "report.json").read_text())
    assert rep["totals"] == {"published": 1, "routed": 2}


def exported(spark: Any, cfg: AuditConfig, run: Any) -> dict[str, Any]:
    """What a run left behind, comparable across readers: rows, schema, files, report."""
    df = spark.read.parquet(cfg.dataset_path)
    log = Path(cfg.dataset_path)
    report = json.loads((run.report_dir / "report.json").read_text())
    for volatile in ("dataset", "generated_at"):
        report.pop(volatile)
    return {
        "rows": [r.asDict() for r in df.orderBy("id").collect()],
        "schema": df.schema.simpleString(),
        "partitions": sorted(str(p.parent.relative_to(log)) for p in log.rglob("*.parquet")),
        "hidden": sorted(str(p.relative_to(log)) for p in log.iterdir() if p.name.startswith("_")),
        "report": report,
    }


def test_python_reader_matches_jdbc(
    spark: Any, tmp_path: Path, jdbc_missing: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[str] = []
    real_delete = sqlite_read._delete
    monkeypatch.setattr(sqlite_read, "_delete", lambda s, p: deleted.append(p) or real_delete(s, p))
    db = LogDB(tmp_path / "data")
    did = build_day1(db)
    readers = {"python": config_for(tmp_path, "out-py", page_rows=64)}
    if not jdbc_missing:
        readers["jdbc"] = config_for(tmp_path, "out-jdbc", reader="jdbc")
    first = {k: run_audit(cfg, spark=spark, now_us=AS_OF) for k, cfg in readers.items()}
    # Rows added between runs: the next batch starts at the watermark, across a page edge.
    _, _, r = db.message(ts("2024-03-02T09:00:00"), ["orders", "work", "slow"])
    db.add(r)
    second = {k: run_audit(cfg, spark=spark, now_us=AS_OF + US) for k, cfg in readers.items()}

    py = readers["python"]
    assert (first["python"].rows, second["python"].rows) == (did["rows"], 4)
    assert deleted == [f"{py.dataset_path}/_staging"]  # 498 rows: staged; 4 rows: one page
    out = exported(spark, py, second["python"])
    assert [row["id"] for row in out["rows"]] == list(range(1, did["rows"] + 5))
    assert out["hidden"] == []  # the staging directory is gone
    assert out["schema"] == (
        "struct<id:bigint,ts_us:bigint,event:string,vhost:string,exchange:string,routing_key:string,"
        "message_id:string,message_key:bigint,consumer_tag:string,attempt:int,size:int,reason:string,"
        "protocol:string,event_date:date,queue:string,batch:int>"
    )
    if jdbc_missing:
        pytest.skip(f"JDBC half: {jdbc_missing}")
    for run in (first, second):
        assert run["python"].as_dict().keys() == run["jdbc"].as_dict().keys()
        assert (run["python"].lo, run["python"].hi, run["python"].rows) == (
            run["jdbc"].lo, run["jdbc"].hi, run["jdbc"].rows)  # fmt: skip
    assert out == exported(spark, readers["jdbc"], second["jdbc"])
    first_py = json.loads((first["python"].report_dir / "report.json").read_text())
    first_jdbc = json.loads((first["jdbc"].report_dir / "report.json").read_text())
    assert first_py["totals"] == first_jdbc["totals"] and first_py["queues"] == first_jdbc["queues"]


def test_cli_runs_without_the_jdbc_jar(spark: Any, tmp_path: Path) -> None:
    """``pip install 'amqplite[audit]'`` and Java are enough: no sqlite-jdbc jar anywhere."""
    db = LogDB(tmp_path / "data")
    _, _, r = db.message(T0, ["orders"])
    db.add([*r, db.ev(r[0], "acked", T0 + 3 * MS, "orders", attempt=1)])
    env = {**os.environ, "AMQPLITE_SQLITE_JDBC_JAR": str(tmp_path / "missing.jar")}
    cmd = [sys.executable, "-m", "amqplite", "audit", "run", "--data-dir", str(tmp_path / "data"),
           "--out", str(tmp_path / "out"), "--master", "local[1]", "--json",
           "--conf", "spark.sql.shuffle.partitions=1", "--conf", "spark.ui.enabled=false"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["rows"], summary["watermark"]) == (3, 3)
    report = json.loads((Path(summary["report_dir"]) / "report.json").read_text())
    assert report["totals"] == {"published": 1, "routed": 1, "acked": 1}


def test_streams_report_volume_and_are_never_stuck(spark: Any, tmp_path: Path) -> None:
    """Stream entries are appended, read by any number of consumers, never settled: the
    report counts messages and bytes per stream and lists none of them as stuck."""
    db = LogDB(tmp_path / "data")
    rows: list[dict[str, Any]] = []
    for i in range(7):
        _, _, r = db.message(T0 + i * US, [], routing_key="events", size=1000 + i)
        rows += r
        rows.append(db.ev(r[0], "appended", T0 + i * US, "events", reason=f"offset:{i}"))
        rows.append(db.ev(r[0], "acked", T0 + i * US + MS, "events", consumer_tag="reader",
                          attempt=1))
    _, _, r = db.message(T0, [], routing_key="audit-log", size=50)
    rows += [*r, db.ev(r[0], "appended", T0, "audit-log", reason="offset:0")]
    # a Kafka batch stored as it came: one row for its three records
    _, _, r = db.message(T0, [], routing_key="", size=300)
    rows += [*r, db.ev(r[0], "appended", T0, "audit-log", reason="offset:1-3 records:3")]
    for tag in ("reader", "replay"):
        rows.append({**r[0], "event": "attached", "queue": "events", "message_id": None,
                     "message_key": None, "size": None, "consumer_tag": tag,
                     "reason": "offset:0 spec=first", "ts_us": T0})
    # two Kafka fetches of the batch's partition: 3 records, then 2 of them again
    for reason in ("offset:1-3 records:3 bytes:400", "offset:2-3 records:2 bytes:300"):
        rows.append({**r[0], "event": "fetched", "queue": "audit-log", "message_id": None,
                     "message_key": None, "size": None, "consumer_tag": "rdkafka",
                     "reason": reason, "ts_us": T0 + MS})
    db.add(rows)
    res = run_audit(config_for(tmp_path), spark=spark, now_us=AS_OF)
    rep = json.loads((res.report_dir / "report.json").read_text())
    assert rep["streams"] == [
        {"vhost": "/", "queue": "audit-log", "messages": 4, "bytes": 350, "attached": 0,
         "fetched": 5},
        {"vhost": "/", "queue": "events", "messages": 7, "bytes": sum(1000 + i for i in range(7)),
         "attached": 2, "fetched": 0},
    ]
    assert rep["stuck"]["count"] == 0 and rep["unacked"]["by_queue"] == []
    assert rep["latency"] == []
    html = (res.report_dir / "report.html").read_text()
    assert "<h2>Streams</h2>" in html and "audit-log" in html
    assert "records fetched (Kafka)" in html


def test_retained_deliveries_are_counted(spark: Any, tmp_path: Path) -> None:
    """Copies handed out by a retaining exchange (event ``retained``, then ``routed``)
    count per queue and per reason, and settle like any entry."""
    db = LogDB(tmp_path / "data")
    _, _, pub = db.message(T0, [], exchange="hist", routing_key="k")
    rows: list[dict[str, Any]] = list(pub)
    for i, (queue, why) in enumerate([("late", "bind"), ("late", "bind"), ("asker", "request")]):
        _, _, r = db.message(T0 + (i + 1) * US, [queue], exchange="hist", routing_key="k")
        copy = r[1]  # the copy has no published row: its retained row comes first
        t = copy["ts_us"]
        rows += [db.ev(copy, "retained", t, queue, reason=why), copy]
        if queue == "late":
            rows.append(db.ev(copy, "acked", t + MS, queue, attempt=1, consumer_tag="c"))
    db.add(rows)
    res = run_audit(config_for(tmp_path), spark=spark, now_us=AS_OF)
    rep = json.loads((res.report_dir / "report.json").read_text())
    assert rep["totals"]["retained"] == 3 and rep["totals"]["routed"] == 3
    queues = by_queue(rep["queues"])
    assert (queues["late"]["retained"], queues["asker"]["retained"]) == (2, 1)
    assert rep["retained_reasons"] == [
        {"vhost": "/", "queue": "late", "reason": "bind", "count": 2},
        {"vhost": "/", "queue": "asker", "reason": "request", "count": 1},
    ]
    # the unacked copy entered at T0 (hours before AS_OF): stuck, not lost
    assert rep["stuck"]["count"] == 1
    html = (res.report_dir / "report.html").read_text()
    assert "Retained deliveries" in html
