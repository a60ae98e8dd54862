"""Build a broker-shaped delivery log in a real SQLite file, for audit tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, select

from amqplite.store.logsql import create_views, insert_log_rows, max_log_id
from amqplite.store.schema import delivery_log, metadata

US = 1_000_000
MS = 1_000


def ts(text: str) -> int:
    """``"2024-03-01T10:00:00"`` (UTC) → integer microseconds."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * US


class LogDB:
    """``<data_dir>/amqplite.db`` with the store's schema (WAL), plus event helpers."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "amqplite.db"
        self.engine = create_engine(f"sqlite:///{self.path}")

        @event.listens_for(self.engine, "connect")
        def _wal(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")

        metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            create_views(conn)
        self._keys = itertools.count(1)
        self.rows: list[dict[str, Any]] = []

    def add(self, rows: list[dict[str, Any]], first_id: int | None = None) -> None:
        """Append events (one transaction) as the broker's writer stores them, ids
        from ``first_id`` (default: after the last one; a higher one leaves a gap)."""
        with self.engine.begin() as conn:
            insert_log_rows(conn, rows, first_id)
        self.rows.extend(rows)

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(delivery_log)).scalar_one())

    def max_id(self) -> int:
        with self.engine.connect() as conn:
            return max_log_id(conn)

    def message(
        self,
        t0: int,
        queues: list[str],
        *,
        exchange: str = "amq.direct",
        routing_key: str = "rk",
        message_id: str | None = None,
        size: int = 100,
        vhost: str = "/",
    ) -> tuple[int, str, list[dict[str, Any]]]:
        """Rows for one publish at ``t0``: ``published`` + one ``routed`` per queue.
        Without ``message_id`` the rows store "" as the broker does (readers show
        ``amq-KEY``, the id returned)."""
        key = next(self._keys)
        mid = message_id or f"amq-{key}"
        base = {
            "vhost": vhost,
            "exchange": exchange,
            "routing_key": routing_key,
            "message_id": message_id or "",
            "message_key": key,
            "consumer_tag": None,
            "attempt": None,
            "size": size,
            "reason": None,
        }
        rows = [{**base, "ts_us": t0, "event": "published", "queue": None}]
        rows += [{**base, "ts_us": t0, "event": "routed", "queue": q} for q in queues]
        return key, mid, rows

    @staticmethod
    def ev(
        template: dict[str, Any],
        event_name: str,
        t: int,
        queue: str | None,
        *,
        attempt: int | None = None,
        consumer_tag: str | None = None,
        reason: str | None = None,
        exchange: str | None = None,
    ) -> dict[str, Any]:
        """A follow-up row for the message of ``template``."""
        return {
            **template,
            "event": event_name,
            "ts_us": t,
            "queue": queue,
            "attempt": attempt,
            "consumer_tag": consumer_tag,
            "reason": reason,
            "exchange": exchange if exchange is not None else template["exchange"],
        }
