"""Audit pieces that need neither Java nor pyspark: trace, config, schedule, render."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from pathlib import Path

import pytest
from click.testing import CliRunner

from amqplite.admin.cli import trace
from amqplite.audit import render
from amqplite.audit.cli import audit
from amqplite.audit.config import AuditConfig, parse_duration, resolve_db, sqlite_target
from amqplite.audit.reports import _empty_report
from amqplite.audit.schedule import next_run, run_forever
from amqplite.audit.state import Batch
from tests.audit.logdb import MS, LogDB, ts

T0 = ts("2024-03-01T10:00:00")


def make_history(tmp_path: Path) -> LogDB:
    db = LogDB(tmp_path)
    ev = db.ev
    _, _, r = db.message(T0, ["orders"], exchange="shop", routing_key="order.new", message_id="m-1")
    r += [
        ev(r[0], "delivered", T0 + 1 * MS, "orders", attempt=1, consumer_tag="ctag-1"),
        ev(
            r[0],
            "rejected",
            T0 + 2 * MS,
            "orders",
            attempt=1,
            consumer_tag="ctag-1",
            reason="rejected",
        ),
        ev(r[0], "dead_lettered", T0 + 2 * MS, "orders", reason="rejected", exchange="dlx"),
        ev(r[0], "routed", T0 + 2 * MS, "orders.dlq", exchange="dlx"),
        ev(r[0], "replayed", T0 + 60_000 * MS, "orders", exchange="shop"),
        ev(r[0], "acked", T0 + 61_000 * MS, "orders", attempt=2, consumer_tag="ctag-2"),
    ]
    _, _, other = db.message(T0, ["orders"], message_id="m-2")
    db.add(r + other)
    return db


def test_trace_prints_whole_history(tmp_path: Path) -> None:
    make_history(tmp_path)
    result = CliRunner().invoke(trace, ["m-1", "--data-dir", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("published", "dead_lettered", "orders.dlq", "replayed", "ctag-2", "rejected",
                 "2024-03-01 10:00:00.000", "order.new"):  # fmt: skip
        assert text in out
    assert "m-2" not in out
    lines = [ln for ln in out.splitlines() if "2024-03-01" in ln]
    assert len(lines) == 8


def test_trace_json_and_key_lookup(tmp_path: Path) -> None:
    make_history(tmp_path)
    runner = CliRunner()
    result = runner.invoke(trace, ["m-1", "--data-dir", str(tmp_path), "--json"])
    rows = json.loads(result.output)
    assert [r["event"] for r in rows] == [
        "published", "routed", "delivered", "rejected", "dead_lettered", "routed", "replayed",
        "acked",
    ]  # fmt: skip
    assert rows[-1]["attempt"] == 2 and rows[0]["time"] == "2024-03-01T10:00:00.000Z"
    by_key = json.loads(runner.invoke(trace, ["1", "--data-dir", str(tmp_path), "--json"]).output)
    assert [r["id"] for r in by_key] == [r["id"] for r in rows]


def test_trace_errors_are_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(trace, ["m-1", "--data-dir", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "broker database not found" in missing.output
    assert "Traceback" not in missing.output
    make_history(tmp_path)
    unknown = runner.invoke(trace, ["zzz", "--data-dir", str(tmp_path)])
    assert unknown.exit_code == 1 and "no delivery-log rows" in unknown.output


def test_trace_does_not_write(tmp_path: Path) -> None:
    db = make_history(tmp_path)
    db.engine.dispose()
    before = db.path.stat().st_mtime_ns
    CliRunner().invoke(trace, ["m-1", "--data-dir", str(tmp_path)])
    assert db.path.stat().st_mtime_ns == before


def test_resolve_db_urls(tmp_path: Path) -> None:
    s = resolve_db(data_dir=tmp_path)
    assert s.kind == "sqlite" and s.jdbc_url == f"jdbc:sqlite:{tmp_path}/amqplite.db"
    assert s.properties["open_mode"] == "1" and s.driver == "org.sqlite.JDBC"
    assert resolve_db(db_url=f"sqlite:///{tmp_path}/x.db").jdbc_url.endswith("/x.db")
    pg = resolve_db(db_url="postgresql+psycopg://aud:s%40cret@db.example:5433/broker")
    assert pg.jdbc_url == "jdbc:postgresql://db.example:5433/broker"
    assert pg.properties == {"user": "aud", "password": "s@cret"}
    assert "cret" not in pg.display and pg.driver == "org.postgresql.Driver"
    with pytest.raises(ValueError):
        resolve_db(db_url="mysql://x/y")
    assert parse_duration("90") == 90 and parse_duration("30m") == 1800
    assert parse_duration("1h") == 3600 and parse_duration("1.5d") == 129600
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_reader_choice(tmp_path: Path) -> None:
    lite, pg = sqlite_target(tmp_path / "x.db"), resolve_db(db_url="postgresql://h/db")
    assert not AuditConfig(db=lite, out=tmp_path).uses_jdbc
    assert AuditConfig(db=lite, out=tmp_path, reader="jdbc").uses_jdbc
    assert AuditConfig(db=pg, out=tmp_path).uses_jdbc
    for bad in ({"db": pg, "reader": "python"}, {"db": lite, "reader": "odbc"},
                {"db": lite, "page_rows": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            AuditConfig(out=tmp_path, **bad)  # type: ignore[arg-type]


def _run_cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    code = "from amqplite.audit.cli import audit; audit()"
    return subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "run",
            "--data-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_missing_java_or_jar_is_one_clear_line(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    LogDB(tmp_path)
    no_java = _run_cli(tmp_path, {"PATH": "/nonexistent", "HOME": str(tmp_path)})
    assert no_java.returncode == 2
    assert no_java.stderr.strip().count("\n") == 0, no_java.stderr
    assert "openjdk-17-jre-headless" in no_java.stderr
    env = {"PATH": "/usr/bin:/bin", "AMQPLITE_SQLITE_JDBC_JAR": str(tmp_path / "none.jar")}
    no_jar = _run_cli(tmp_path, env, "--reader", "jdbc")  # the default reader needs no jar
    assert no_jar.returncode == 2 and "libxerial-sqlite-jdbc-java" in no_jar.stderr
    assert "Traceback" not in no_jar.stderr
    usage = CliRunner().invoke(audit, ["run", "--out", str(tmp_path)])
    assert usage.exit_code == 2 and "--data-dir" in usage.output


def test_import_does_not_load_pyspark() -> None:
    code = (
        "import sys, amqplite.audit.cli, amqplite.audit.job, amqplite.audit.render;"
        "print('pyspark' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_next_run() -> None:
    now = datetime(2024, 3, 1, 1, 59, tzinfo=UTC)
    assert next_run(dtime(2, 0), now, utc=True) == datetime(2024, 3, 1, 2, 0, tzinfo=UTC)
    now = datetime(2024, 3, 1, 2, 0, tzinfo=UTC)
    assert next_run(dtime(2, 0), now, utc=True) == datetime(2024, 3, 2, 2, 0, tzinfo=UTC)
    local = next_run(dtime(2, 0), now)
    assert local > now and (local.hour, local.minute) == (2, 0)


def test_run_forever_sleeps_then_runs() -> None:
    clock = [datetime(2024, 3, 1, 1, 0, tzinfo=UTC)]
    commands: list[list[str]] = []
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += timedelta(seconds=s)

    run_forever(
        ["--data-dir", "d", "--out", "o"],
        dtime(2, 0),
        utc=True,
        max_runs=2,
        log=lambda m: None,
        sleep=sleep,
        now=lambda: clock[0],
        run=lambda cmd: commands.append(cmd) or 0,
    )
    assert len(commands) == 2 and commands[0][1:3] == ["-m", "amqplite.audit.job"]
    assert sum(slept) == pytest.approx(3600 + 86400) and max(slept) <= 60


def test_render_empty_and_full_report() -> None:
    batch = Batch(run_id="20240301T020000Z-7", lo=0, hi=7, as_of_us=T0)
    rep = _empty_report("run", batch, None, 3_600_000_000)
    html = render.render_html(rep)
    assert "no data" in html and "<script" not in html
    rep["queues"] = [
        {"vhost": "/", "queue": "q<1>", **dict.fromkeys(
            ["routed", "delivered", "acked", "rejected", "requeued", "dead_lettered", "expired",
             "purged", "replayed"], 3), "redelivered_messages": 1, "in_flight": 0, "stuck": 0,
         "p50_ms": 1.0, "p99_ms": 2.0},
    ]  # fmt: skip
    rep["latency"] = [
        {"vhost": "v", "queue": "q", "count": 3, "p50_ms": 1.0, "p90_ms": 1.5, "p99_ms": 2.0,
         "max_ms": 2.0, "mean_ms": 1.2},
    ]  # fmt: skip
    html = render.render_html(rep)
    assert "q&lt;1&gt;" in html and "q<1>" not in html and "v:q" in html
    assert html.count("<svg") == 3
