"""Make a demo broker data dir with a realistic delivery log, for the audit job.

    python scripts/audit_demo.py /tmp/demo --messages 20000
    amqplite audit run --data-dir /tmp/demo --out /tmp/demo-audit   # or: --run

Traffic over the last two days (UTC): a few queues with different consumer
speeds, fan-out, requeues, rejects into a dead-letter queue, TTL expiry, a
stuck consumer and some unroutable returns.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event

from amqplite.store.logsql import create_views, insert_log_rows
from amqplite.store.schema import metadata

MS = 1_000
QUEUES = {  # queue: (routing key, median latency ms, redelivery %, reject %, ttl %)
    "orders": ("order.created", 40, 2, 1, 0),
    "payments": ("payment.captured", 250, 5, 3, 0),
    "emails": ("email.send", 1200, 1, 0, 2),
    "audit-trail": ("#", 15, 0, 0, 0),
}


def generate(data_dir: Path, messages: int, seed: int = 7) -> int:
    """Write the demo log; returns the number of rows."""
    rng = random.Random(seed)
    data_dir.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{data_dir / 'amqplite.db'}")

    @event.listens_for(engine, "connect")
    def _wal(conn: Any, _rec: Any) -> None:
        conn.execute("PRAGMA journal_mode=WAL")

    metadata.create_all(engine)
    with engine.begin() as conn:
        create_views(conn)
    now = time.time_ns() // 1000
    start = now - 2 * 86_400_000_000
    rows: list[dict[str, Any]] = []
    for key in range(1, messages + 1):
        t = start + int((now - start - 3_600_000_000) * key / messages)
        queue = rng.choice(["orders", "orders", "payments", "emails"])
        rk, median, redeliver, reject, ttl = QUEUES[queue]
        base = {"vhost": "/", "exchange": "events", "routing_key": rk, "message_id": f"msg-{key}",
                "message_key": key, "consumer_tag": None, "attempt": None,
                "size": rng.randint(200, 4000), "reason": None}  # fmt: skip
        if rng.random() < 0.002:
            rows.append({**base, "ts_us": t, "event": "published", "queue": None})
            rows.append({**base, "ts_us": t, "event": "returned", "queue": None,
                         "reason": "NO_ROUTE", "routing_key": "nowhere"})  # fmt: skip
            continue
        targets = [queue, "audit-trail"] if queue == "orders" else [queue]
        rows.append({**base, "ts_us": t, "event": "published", "queue": None})
        for q in targets:
            rk, median, redeliver, reject, ttl = QUEUES[q]
            rows.append({**base, "ts_us": t, "event": "routed", "queue": q})
            tag = f"ctag-{q}-{rng.randint(1, 3)}"
            lat = int(rng.lognormvariate(0, 0.8) * median * MS)
            pct = rng.random() * 100
            if q == "payments" and key % 997 == 0:  # a stuck consumer
                rows.append({**base, "ts_us": t + MS, "event": "delivered", "queue": q,
                             "consumer_tag": "ctag-payments-stuck", "attempt": 1})  # fmt: skip
                continue
            if pct < ttl:
                rows.append({**base, "ts_us": t + 60_000 * MS, "event": "expired", "queue": q,
                             "reason": "ttl"})  # fmt: skip
                continue
            attempt = 1
            if pct < ttl + redeliver:
                rows.append({**base, "ts_us": t + lat // 2, "event": "requeued", "queue": q,
                             "consumer_tag": tag, "attempt": 1})  # fmt: skip
                attempt = 2
            if pct > 100 - reject:
                rows.append({**base, "ts_us": t + lat, "event": "rejected", "queue": q,
                             "consumer_tag": tag, "attempt": attempt, "reason": "rejected"})  # fmt: skip
                rows.append({**base, "ts_us": t + lat, "event": "dead_lettered", "queue": q,
                             "exchange": "dlx", "reason": "rejected"})  # fmt: skip
                rows.append({**base, "ts_us": t + lat, "event": "routed", "queue": f"{q}.dlq",
                             "exchange": "dlx"})  # fmt: skip
                continue
            rows.append({**base, "ts_us": t + lat, "event": "acked", "queue": q,
                         "consumer_tag": tag, "attempt": attempt})  # fmt: skip
    rows.sort(key=lambda r: r["ts_us"])
    with engine.begin() as conn:
        for i in range(0, len(rows), 5000):
            insert_log_rows(conn, rows[i : i + 5000])
    return len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--run", action="store_true", help="then run the audit into DATA_DIR-audit")
    ns = parser.parse_args()
    n = generate(ns.data_dir, ns.messages)
    print(f"wrote {n} log rows to {ns.data_dir / 'amqplite.db'}")
    if ns.run:
        from amqplite.audit.job import main as job_main

        out = ns.data_dir.with_name(ns.data_dir.name + "-audit")
        return job_main(["--data-dir", str(ns.data_dir), "--out", str(out)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
