"""One message's history from the delivery log (SQLAlchemy, read-only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from amqplite.audit.config import DB_FILENAME
from amqplite.audit.reports import iso_us
from amqplite.storeops import LOG_FIELDS

#: Every delivery-log column, ``id`` first.
TRACE_COLUMNS = ("id", *LOG_FIELDS)


class TraceError(Exception):
    """The database cannot be read."""


def open_log(data_dir: str | Path | None = None, db_url: str | None = None) -> Engine:
    """An engine on the broker database; SQLite files are opened read-only."""
    if db_url:
        url = db_url
        if url.startswith("postgres://"):
            url = "postgresql://" + url.removeprefix("postgres://")
    else:
        path = Path(data_dir or ".").expanduser().resolve() / DB_FILENAME
        if not path.is_file():
            raise TraceError(f"broker database not found: {path}")
        url = f"sqlite:///file:{path}?mode=ro&uri=true"
    return create_engine(url)


def message_history(engine: Engine, message: str) -> list[dict[str, Any]]:
    """Every log event of ``message`` (a message id, or a broker message key), oldest first.

    Events are matched on ``message_id`` (kept across dead-lettering and replay);
    a number also matches the broker's ``message_key``. The batches are decoded
    here (``iter_log_rows``), which is faster than filtering the view in SQL.
    """
    from amqplite.store.logsql import iter_log_rows

    key = int(message) if message.isdigit() else None
    mid, mkey = TRACE_COLUMNS.index("message_id"), TRACE_COLUMNS.index("message_key")
    try:
        with engine.connect() as conn:
            rows = [dict(zip(TRACE_COLUMNS, r, strict=True)) for r in iter_log_rows(conn)
                    if r[mid] == message or (key is not None and r[mkey] == key)]
    except Exception as exc:  # sqlalchemy.exc.DBAPIError and friends
        raise TraceError(f"cannot read the delivery log: {exc.__class__.__name__}: {exc}") from None
    for row in rows:
        row["time"] = iso_us(row["ts_us"])
    return rows
