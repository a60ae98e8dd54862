"""Paging of the driver-side SQLite reader (pyarrow only, no Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqplite.audit.job import LOG_COLUMNS
from tests.audit.logdb import US, LogDB, ts

pa = pytest.importorskip("pyarrow")
from amqplite.audit.sqlite_read import arrow_schema, iter_log_pages  # noqa: E402

T0 = ts("2024-03-01T10:00:00")


def _log(tmp_path: Path, messages: int) -> LogDB:
    """``messages`` publishes to one queue: 2 rows each, nullable columns mixed."""
    db = LogDB(tmp_path / "data")
    rows: list[dict[str, Any]] = []
    for i in range(messages):
        rows += db.message(T0 + i * US, ["q"], message_id=None if i % 2 else f"m-{i}")[2]
    if rows:
        db.add(rows)
    return db


def _ids(pages: list[Any]) -> list[int]:
    return [i for p in pages for i in p.column("id").to_pylist()]


@pytest.mark.parametrize(("rows", "page_rows"), [(0, 4), (3, 4), (4, 4), (5, 4), (9, 4), (10, 100)])
def test_pages_are_bounded_ordered_and_complete(tmp_path: Path, rows: int, page_rows: int) -> None:
    db = _log(tmp_path, (rows + 1) // 2)
    hi = db.max_id()
    pages = list(iter_log_pages(db.path, LOG_COLUMNS, 0, hi, page_rows))
    assert _ids(pages) == list(range(1, hi + 1))
    assert all(0 < p.num_rows <= page_rows for p in pages)
    assert len(pages) == -(-hi // page_rows)  # no trailing empty page at an exact multiple
    assert all(p.schema.equals(arrow_schema(LOG_COLUMNS)) for p in pages)


def test_range_from_the_watermark_skips_gaps_and_keeps_values(tmp_path: Path) -> None:
    db = _log(tmp_path, 0)
    rows: list[dict[str, Any]] = []
    for i in range(10):
        rows += db.message(T0 + i * US, ["q"], message_id=None if i % 2 else f"m-{i}")[2]
    db.add(rows[:7])  # ids 1..7, then 13..20: as if retention pruned a batch of 8..12
    db.add(rows[12:], first_id=13)
    db.rows[7:7] = rows[7:12]  # keep db.rows indexable by id - 1
    pages = list(iter_log_pages(db.path, LOG_COLUMNS, 5, 17, 3))
    assert _ids(pages) == [6, 7, 13, 14, 15, 16, 17]
    assert [p.num_rows for p in pages] == [3, 3, 1]
    got = pa.concat_tables(pages).to_pylist()
    # stored "" ids (the broker's own) read as amq-KEY
    want = {i + 1: {**r, "message_id": r["message_id"] or f"amq-{r['message_key']}"}
            for i, r in enumerate(db.rows)}
    # a row written without a protocol reads back with None
    assert got == [{"id": r["id"], **{n: want[r["id"]].get(n) for n, _ in LOG_COLUMNS[1:]}}
                   for r in got]
    assert "m-6" in {r["message_id"] for r in got}
    assert any(r["message_id"].startswith("amq-") for r in got)
    assert got[0]["queue"] == "q" and got[0]["attempt"] is None
    assert list(iter_log_pages(db.path, LOG_COLUMNS, 17, 17, 3)) == []
