"""The audit batch job: delivery log → Parquet → reports, exactly once.

Run it with ``amqplite audit run`` or, on a cluster, with
``spark-submit .../amqplite/audit/job.py --db-url ... --out ...`` (this module's
:func:`main`). pyspark is imported inside functions only.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Started as a file (``spark-submit .../amqplite/audit/job.py``): drop this
    # directory from sys.path (its module names, e.g. ``trace``, would shadow
    # others) and make the package importable instead.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(_here)))

import argparse
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqplite.audit.config import (
    READER_ENV,
    READERS,
    AuditConfig,
    AuditSetupError,
    DbTarget,
    parse_duration,
    preflight,
    resolve_db,
    under_spark_submit,
)
from amqplite.audit.state import AuditBusyError, Batch, StateStore
from amqplite.storeops import EXPORTED_KEY, LOG_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The Spark SQL type each ``delivery_log`` column is pinned to (SQLite's BIGINT
#: arrives through JDBC as decimal(20,0)).
_SPARK_TYPES = {
    "id": "bigint",
    "ts_us": "bigint",
    "event": "string",
    "vhost": "string",
    "exchange": "string",
    "routing_key": "string",
    "queue": "string",
    "message_id": "string",
    "message_key": "bigint",
    "consumer_tag": "string",
    "attempt": "int",
    "size": "int",
    "reason": "string",
    "protocol": "string",
}
#: Columns of ``delivery_log`` in table order, each with its Spark SQL type.
LOG_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (name, _SPARK_TYPES[name]) for name in ("id", *LOG_FIELDS)
)
#: Partition columns of the Parquet dataset, outermost first.
PARTITION_COLUMNS = ("event_date", "queue", "batch")

DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.parquet.compression.codec": "zstd",
}


class AuditStateError(Exception):
    """The state in OUT does not match the database (e.g. a replaced database)."""


@dataclass
class Hooks:
    """Test seams: called at fixed points of a run (may raise to simulate a crash)."""

    after_batch_fixed: Callable[[Batch], None] | None = None
    after_write: Callable[[Batch], None] | None = None
    after_reports: Callable[[Batch], None] | None = None


@dataclass
class RunResult:
    """What one run did."""

    run_id: str
    lo: int
    hi: int
    rows: int
    resumed: bool
    report_dir: Path
    daily_dirs: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "lo": self.lo,
            "hi": self.hi,
            "watermark": self.hi,
            "rows": self.rows,
            "resumed": self.resumed,
            "report_dir": str(self.report_dir),
            "daily_dirs": [str(p) for p in self.daily_dirs],
            "seconds": round(self.seconds, 3),
        }


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _log4j2() -> str:
    """A log4j2 config that keeps the JVM quiet (errors only) on stderr."""
    path = Path(tempfile.gettempdir()) / f"amqplite-audit-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        os.replace(tmp, path)
    return str(path)


def build_session(
    *,
    master: str | None = "local[*]",
    jars: list[str] | tuple[str, ...] = (),
    conf: dict[str, str] | None = None,
    app_name: str = "amqplite-audit",
) -> SparkSession:
    """A SparkSession with the JDBC jars and the settings the job relies on."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    settings = dict(DEFAULT_SPARK_CONF)
    if master and master.startswith("local"):
        # The report queries shuffle little data; 200 partitions cost minutes locally.
        settings["spark.sql.shuffle.partitions"] = str(max(2, 2 * (os.cpu_count() or 1)))
    if not under_spark_submit() and "spark.driver.extraJavaOptions" not in (conf or {}):
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{_log4j2()}"
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _jdbc_reader(spark: SparkSession, db: DbTarget, query: str) -> Any:
    reader = (
        spark.read.format("jdbc")
        .option("url", db.jdbc_url)
        .option("driver", db.driver)
        .option("dbtable", f"({query}) AS t")
    )
    for key, value in db.properties.items():
        reader = reader.option(key, value)
    return reader


def fix_high_id(spark: SparkSession, config: AuditConfig, now_us: int) -> int | None:
    """Highest log id to export now (``None`` for an empty log).

    With a settle lag (PostgreSQL), rows younger than the lag are left for the
    next run so a transaction that took its id earlier but commits later is
    not skipped.
    """
    lag_us = int((config.settle_lag_s or 0) * 1_000_000)
    where = f" WHERE last_ts_us <= {now_us - lag_us}" if lag_us > 0 else ""
    query = f"SELECT MAX(last_id) AS hi FROM log_batches{where}"
    path = config.db.sqlite_path
    if path is not None:
        # Read-only sqlite3 on the driver: no Spark job, and sqlite-jdbc fails on
        # MAX() over an empty table ("column -1 out of bounds").
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            value = conn.execute(query).fetchone()[0]
        finally:
            conn.close()
    else:
        value = _jdbc_reader(spark, config.db, query).load().collect()[0][0]
    return None if value is None else int(value)


def read_log_batch(spark: SparkSession, config: AuditConfig, lo: int, hi: int) -> DataFrame:
    """Events ``lo < id <= hi`` over JDBC, with pinned types and the partition columns.

    The log is stored as batch rows (``amqplite.store.logbatch``): JDBC reads
    the batches that overlap the range, and Spark explodes their JSON events
    (parsed as strings, then cast) into one row per event, whatever the
    database, so no SQL here depends on its JSON functions.
    """
    from pyspark.sql import functions as F

    query = ("SELECT first_id, events FROM log_batches "
             f"WHERE last_id > {lo} AND first_id <= {hi}")
    reader = _jdbc_reader(spark, config.db, query)
    if config.jdbc_partitions > 1 and hi - lo > config.jdbc_partitions:
        reader = (
            reader.option("partitionColumn", "first_id")
            .option("lowerBound", str(lo + 1))
            .option("upperBound", str(hi + 1))
            .option("numPartitions", str(config.jdbc_partitions))
        )
    batches = reader.load()
    exploded = batches.select(
        F.col("first_id").cast("bigint").alias("first_id"),
        F.posexplode(F.from_json(F.col("events"), "array<array<string>>")).alias("n", "e"),
    )
    e = F.col("e")
    names = [name for name, _kind in LOG_COLUMNS[1:]]
    mid, key = e.getItem(names.index("message_id")), e.getItem(names.index("message_key"))
    # a row stores "" for the broker-assigned id: written out as amq-KEY (with_message_ids)
    full_mid = F.when((mid == "") & key.isNotNull(), F.concat(F.lit("amq-"), key)).otherwise(mid)
    events = exploded.select(
        (F.col("first_id") + F.col("n")).alias("id"),
        *((full_mid if name == "message_id" else e.getItem(i)).alias(name)
          for i, name in enumerate(names)),
    ).where((F.col("id") > lo) & (F.col("id") <= hi))
    return with_partition_columns(events, hi)


def with_partition_columns(df: DataFrame, hi: int) -> DataFrame:
    """The log columns cast to :data:`LOG_COLUMNS` types, plus ``event_date`` and ``batch``."""
    from pyspark.sql import functions as F

    return df.select(
        *(F.col(name).cast(kind).alias(name) for name, kind in LOG_COLUMNS),
        F.to_date(F.timestamp_micros(F.col("ts_us").cast("bigint"))).alias("event_date"),
        F.lit(hi).cast("bigint").alias("batch"),
    )


def export_batch(spark: SparkSession, config: AuditConfig, lo: int, hi: int) -> None:
    """Write the rows ``lo < id <= hi`` to the dataset, read over JDBC or on the driver."""
    if config.uses_jdbc:
        write_batch(read_log_batch(spark, config, lo, hi), config.dataset_path)
        return
    from amqplite.audit import sqlite_read

    path = config.db.sqlite_path
    assert path is not None  # uses_jdbc is False only for SQLite
    pages = config.page_rows
    with sqlite_read.read_log_batch(spark, path, LOG_COLUMNS, lo, hi, config.dataset_path, pages) as df:
        write_batch(with_partition_columns(df, hi), config.dataset_path)


def dataset_schema() -> Any:
    """Schema of the Parquet dataset, partition columns included (no type inference)."""
    from pyspark.sql import types as T

    kinds = {"bigint": T.LongType(), "int": T.IntegerType(), "string": T.StringType()}
    fields = [T.StructField(n, kinds[k], n != "id") for n, k in LOG_COLUMNS if n != "queue"]
    fields += [
        T.StructField("event_date", T.DateType()),
        T.StructField("queue", T.StringType()),
        T.StructField("batch", T.LongType()),
    ]
    return T.StructType(fields)


def read_dataset(spark: SparkSession, path: str) -> DataFrame | None:
    """The exported rows (deduplicated by id), or ``None`` before the first export."""
    from pyspark.errors import AnalysisException

    if "://" not in path and not Path(path).exists():
        return None
    try:
        df = spark.read.schema(dataset_schema()).parquet(path)
    except AnalysisException:
        return None
    # Partitions keyed by batch make a redo replace its own files; dedupe by id
    # is the belt to those braces (e.g. after OUT/_state was deleted by hand).
    return df.dropDuplicates(["id"])


def write_batch(df: DataFrame, path: str) -> None:
    """Write one batch; dynamic overwrite replaces only this batch's partitions."""
    (
        df.write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy(*PARTITION_COLUMNS)
        .parquet(path)
    )


def _run_id(as_of_us: int, hi: int) -> str:
    stamp = datetime.fromtimestamp(as_of_us / 1e6, UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{hi}"


def run_audit(
    config: AuditConfig,
    *,
    spark: SparkSession | None = None,
    now_us: int | None = None,
    hooks: Hooks | None = None,
) -> RunResult:
    """Export the rows after the watermark, write reports, commit the watermark last.

    ``spark`` reuses a session (tests); otherwise one is built from ``config``.
    ``now_us`` fixes the wall clock (the "as of" time of the stuck report).
    """
    from amqplite.audit import render, reports

    hooks = hooks or Hooks()
    started = time.monotonic()
    state = StateStore(config.out)
    with state.lock():
        if spark is None:
            jars = [config.db.jar] if config.uses_jdbc and not under_spark_submit() else []
            spark = build_session(master=config.master, jars=jars, conf=config.spark_conf)
        spark.conf.set("spark.sql.session.timeZone", "UTC")

        batch = state.pending()
        resumed = batch is not None
        if batch is None:
            as_of_us = now_us if now_us is not None else time.time_ns() // 1000
            lo = state.watermark()
            hi = fix_high_id(spark, config, as_of_us)
            hi = lo if hi is None else hi
            if hi < lo:
                raise AuditStateError(
                    f"the log's highest id ({hi}) is below the watermark ({lo}) in "
                    f"{state.watermark_file}: was the database replaced? Use a new OUT "
                    "directory (or delete OUT/_state and OUT/log to re-export everything)."
                )
            batch = Batch(run_id=_run_id(as_of_us, hi), lo=lo, hi=hi, as_of_us=as_of_us)
            if not batch.empty:
                state.begin(batch)
        if hooks.after_batch_fixed:
            hooks.after_batch_fixed(batch)

        if not batch.empty:
            export_batch(spark, config, batch.lo, batch.hi)
        if hooks.after_write:
            hooks.after_write(batch)

        dataset = read_dataset(spark, config.dataset_path)
        result = reports.compute(
            dataset,
            batch=batch,
            stuck_after_us=int(config.stuck_after_s * 1_000_000),
            top_n=config.top_n,
            list_limit=config.list_limit,
        )
        meta = {"source": config.db.display, "dataset": config.dataset_path}
        report_root = config.out / "reports"
        run_dir = render.write_report_dir(
            report_root / batch.run_id, result.run, result.stuck_rows("run"), meta
        )
        daily_dirs = [
            render.write_report_dir(report_root / "daily" / day, report, result.stuck_rows(day), meta)
            for day, report in sorted(result.daily.items())
        ]
        render.write_index(report_root)
        if hooks.after_reports:
            hooks.after_reports(batch)

        rows = int(result.run["batch"]["rows"])
        seconds = time.monotonic() - started
        if not batch.empty:
            state.commit(batch, {"rows": rows, "seconds": round(seconds, 3)})
            publish_watermark(config.db, batch.hi)
        if dataset is not None:
            dataset.unpersist()
        return RunResult(
            run_id=batch.run_id,
            lo=batch.lo,
            hi=batch.hi,
            rows=rows,
            resumed=resumed,
            report_dir=run_dir,
            daily_dirs=daily_dirs,
            seconds=seconds,
        )




def publish_watermark(db: DbTarget, hi: int) -> None:
    """Tell the broker which log rows are safely exported, so retention may prune them.

    Best effort and after the job's own commit: if it fails, the export stands
    and the broker simply keeps the rows a little longer.
    """
    url = f"sqlite:///{db.sqlite_path}" if db.sqlite_path is not None else db.sqlalchemy_url
    if not url:
        return
    try:
        from sqlalchemy import create_engine, delete, insert

        from amqplite.store.schema import meta

        engine = create_engine(url, connect_args={"timeout": 30} if db.sqlite_path else {})
        try:
            with engine.begin() as conn:
                conn.execute(delete(meta).where(meta.c.key == EXPORTED_KEY))
                conn.execute(insert(meta).values(key=EXPORTED_KEY, value=str(hi)))
        finally:
            engine.dispose()
    except Exception as exc:  # the export itself succeeded
        print(f"amqplite audit: warning: could not record the watermark in the broker "
              f"database ({exc}); log retention waits for the next run", file=sys.stderr)


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's command-line options (shared by ``main`` and the scheduler)."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--data-dir", help="broker data directory (reads DIR/amqplite.db)")
    src.add_argument("--db-url", help="sqlite:///path or postgresql://user:pw@host/db")
    parser.add_argument("--out", required=True, help="output directory (dataset, state, reports)")
    parser.add_argument("--dataset", help="Parquet location if not OUT/log (e.g. s3a://...)")
    parser.add_argument("--master", help="Spark master (default: local[*], or spark-submit's)")
    parser.add_argument("--stuck-after", default="1h", help="in-flight age that counts as stuck")
    parser.add_argument("--settle-lag", help="leave rows younger than this (PostgreSQL: 30s)")
    parser.add_argument("--jar", help="JDBC driver jar (default from env / Debian path)")
    parser.add_argument("--top", type=int, default=20, help="how many routing keys to list")
    parser.add_argument("--jdbc-partitions", type=int, default=1)
    parser.add_argument(
        "--reader",
        choices=READERS,
        default=os.environ.get(READER_ENV, "auto"),
        help="auto: SQLite on the driver (no jar), PostgreSQL over JDBC; jdbc: always JDBC",
    )
    parser.add_argument("--page-rows", type=int, default=100_000, help="rows per page (python reader)")
    parser.add_argument("--conf", action="append", default=[], help="extra Spark conf k=v")
    parser.add_argument("--json", action="store_true", help="print the run summary as JSON")


def config_from_args(ns: argparse.Namespace) -> AuditConfig:
    """Build an :class:`AuditConfig` from parsed :func:`add_job_arguments` options."""
    db = resolve_db(data_dir=ns.data_dir, db_url=ns.db_url, jar=ns.jar)
    conf = dict(item.split("=", 1) for item in ns.conf)
    return AuditConfig(
        db=db,
        out=Path(ns.out),
        dataset=ns.dataset,
        master=ns.master or (None if under_spark_submit() else "local[*]"),
        stuck_after_s=parse_duration(ns.stuck_after),
        settle_lag_s=parse_duration(ns.settle_lag) if ns.settle_lag else None,
        top_n=ns.top,
        jdbc_partitions=ns.jdbc_partitions,
        spark_conf=conf,
        reader=ns.reader,
        page_rows=ns.page_rows,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``spark-submit job.py ...`` and ``python -m amqplite.audit.job``."""
    parser = argparse.ArgumentParser(prog="amqplite-audit", description=__doc__)
    add_job_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        config = config_from_args(ns)
        preflight(config.db, check_jvm=not under_spark_submit(), jdbc=config.uses_jdbc)
        result = run_audit(config)
    except (AuditSetupError, AuditBusyError, AuditStateError, ValueError) as exc:
        print(f"amqplite: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        what = (
            f"exported {result.rows} rows (ids {result.lo + 1}..{result.hi})"
            if result.hi > result.lo
            else "no new rows"
        )
        print(
            f"run {result.run_id}: {what}, watermark {result.hi}"
            f"{' (resumed a crashed run)' if result.resumed else ''}; "
            f"report {result.report_dir / 'report.html'}"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover - spark-submit entry
    sys.exit(main())
