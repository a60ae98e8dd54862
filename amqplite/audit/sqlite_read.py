"""Read a SQLite delivery log on the driver, page by page, without a JDBC jar.

Python's sqlite3 reads the log's batch rows and yields pages of at most
``page_rows`` events; each page goes to Spark as a pyarrow table with the
job's column types. An export of one page is handed over as it is; a longer
one is first staged as Parquet
next to the dataset (``DATASET/_staging/batch=HI``, hidden from readers by its
``_`` prefix) and read back, so neither Python nor the JVM ever holds more than
a page or two. pyarrow and pyspark are imported inside functions only.

``columns`` is :data:`amqplite.audit.job.LOG_COLUMNS` (passed in: the job
imports this module, not the other way round).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


Columns = tuple[tuple[str, str], ...]


def arrow_schema(columns: Columns) -> pa.Schema:
    """``(name, Spark SQL type)`` pairs as an Arrow schema (``id`` not null, like the table)."""
    import pyarrow as pa

    kinds = {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string()}
    return pa.schema([pa.field(n, kinds[k], nullable=n != "id") for n, k in columns])


def iter_log_pages(path: Path, columns: Columns, lo: int, hi: int, page_rows: int) -> Iterator[pa.Table]:
    """Events ``lo < id <= hi`` in id order, as tables of at most ``page_rows`` rows.

    The log is stored as batches of events (``amqplite.store.logbatch``); each
    read takes the next few batches (keyset on ``last_id``) in a short read of
    its own (no transaction spans the export), so the broker's WAL can
    checkpoint between them. Yields nothing for no rows.
    """
    import orjson
    import pyarrow as pa

    from amqplite.store.logbatch import with_message_ids

    schema = arrow_schema(columns)
    width = len(columns)
    query = ("SELECT first_id, last_id, events FROM log_batches "
             "WHERE last_id > ? AND first_id <= ? ORDER BY first_id LIMIT ?")
    per_read = max(1, page_rows // 1000 + 1)  # batches hold up to 1,000 events
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, isolation_level=None)
    page: list[tuple[Any, ...]] = []

    def table(rows: list[tuple[Any, ...]]) -> pa.Table:
        values = zip(*rows, strict=True)
        return pa.Table.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(values, schema, strict=True)],
            schema=schema,
        )

    try:
        last = lo
        while last < hi:
            batches = conn.execute(query, (last, hi, per_read)).fetchall()
            for first, _last, text in batches:
                for i, event in enumerate(with_message_ids(orjson.loads(text))):
                    eid = first + i
                    if lo < eid <= hi:
                        page.append((eid, *event[: width - 1]))
                        if len(page) == page_rows:
                            yield table(page)
                            page = []
            if len(batches) < per_read:
                break
            last = batches[-1][1]
        if page:
            yield table(page)
    finally:
        conn.close()


def _delete(spark: SparkSession, path: str) -> None:
    """Remove ``path`` recursively through Hadoop, so s3a:// and hdfs:// work too."""
    jvm: Any = spark._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    hpath.getFileSystem(spark._jsc.hadoopConfiguration()).delete(hpath, True)


@contextmanager
def read_log_batch(
    spark: SparkSession, path: Path, columns: Columns, lo: int, hi: int, dataset: str, page_rows: int
) -> Iterator[DataFrame]:
    """The rows ``lo < id <= hi`` as a DataFrame with ``columns``' names and types.

    A context manager: the staging Parquet (batches of more than one page) is
    deleted on exit, after the caller has written the batch, crash or not.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(arrow_schema(columns))
    pages = iter_log_pages(path, columns, lo, hi, page_rows)
    first = next(pages, None)
    second = next(pages, None) if first is not None else None
    if second is None:  # one page (or none): straight in, no staging
        only = first if first is not None else arrow_schema(columns).empty_table()
        yield spark.createDataFrame(only, schema)
        return
    root = f"{dataset.rstrip('/')}/_staging"  # one run at a time: the lock in OUT/_state
    staging = f"{root}/batch={hi}"
    try:
        for n, page in enumerate(chain((first, second), pages)):
            # "overwrite" first: a redone batch starts from a clean staging dir.
            spark.createDataFrame(page, schema).write.mode("append" if n else "overwrite").parquet(staging)
        del first, second
        yield spark.read.schema(schema).parquet(staging)
    finally:
        _delete(spark, root)
