"""CLI: ``amqplite audit run|schedule`` and ``amqplite trace MESSAGE_ID``.

Register with ``main.add_command(audit)`` and ``main.add_command(trace)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

_F = Callable[..., Any]


def _job_options(f: _F) -> _F:
    """The options of one job run, shared by ``run`` and ``schedule``."""
    options = [
        click.option("--data-dir", type=click.Path(file_okay=False), help="Broker data directory."),
        click.option("--db-url", help="Database URL instead: sqlite:///… or postgresql://…"),
        click.option("--out", required=True, type=click.Path(file_okay=False), help="Output dir."),
        click.option("--dataset", help="Parquet location if not OUT/log (e.g. s3a://…)."),
        click.option("--master", default=None, help="Spark master [default: local[*]]."),
        click.option("--stuck-after", default="1h", show_default=True, help="Stuck threshold."),
        click.option("--settle-lag", default=None, help="Skip rows younger than this [pg: 30s]."),
        click.option("--jar", default=None, help="JDBC driver jar (else env / Debian path)."),
        click.option("--top", default=20, show_default=True, help="Routing keys to list."),
        click.option("--jdbc-partitions", default=1, show_default=True, help="Parallel reads."),
        click.option("--conf", "conf", multiple=True, help="Extra Spark conf key=value."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _job_argv(opts: dict[str, Any]) -> list[str]:
    if bool(opts.get("data_dir")) == bool(opts.get("db_url")):
        raise click.UsageError("give exactly one of --data-dir and --db-url")
    argv: list[str] = []
    for name in ("data_dir", "db_url", "out", "dataset", "master", "stuck_after", "settle_lag",
                 "jar", "top", "jdbc_partitions"):  # fmt: skip
        value = opts.get(name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    for item in opts.get("conf") or ():
        argv += ["--conf", item]
    return argv


@click.group("audit")
def audit() -> None:
    """Delivery-log audit: export to Parquet and report (PySpark)."""


@audit.command("run")
@_job_options
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@click.pass_context
def audit_run(ctx: click.Context, as_json: bool, **opts: Any) -> None:
    """Export log rows after the watermark, write reports, commit the watermark.

    Reports land in OUT/reports/<run-id>/ and OUT/reports/daily/<YYYY-MM-DD>/.
    """
    from amqplite.audit.job import main as job_main

    argv = _job_argv(opts) + (["--json"] if as_json else [])
    ctx.exit(job_main(argv))


@audit.command("schedule")
@_job_options
@click.option("--at", "at", default="02:00", show_default=True, help="Time of day, HH:MM.")
@click.option("--utc", is_flag=True, help="--at is UTC (default: local time).")
@click.option("--run-now", is_flag=True, help="Also run once immediately.")
def audit_schedule(at: str, utc: bool, run_now: bool, **opts: Any) -> None:
    """Run the audit job every day at --at (a long-running loop; Ctrl-C stops it)."""
    from amqplite.audit.schedule import parse_at, run_forever

    try:
        when = parse_at(at)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--at") from None
    argv = _job_argv(opts)

    def log(msg: str) -> None:
        click.echo(f"amqplite audit schedule: {msg}", err=True)

    try:
        run_forever(argv, when, utc=utc, run_now=run_now, log=log)
    except KeyboardInterrupt:
        log("stopped")


@click.command("trace")
@click.argument("message_id")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Broker data directory.")
@click.option("--db-url", help="Database URL instead of --data-dir (SQLAlchemy form).")
@click.option("--json", "as_json", is_flag=True, help="Print rows as JSON.")
def trace(message_id: str, data_dir: str | None, db_url: str | None, as_json: bool) -> None:
    """Print the whole history of MESSAGE_ID from the delivery log.

    MESSAGE_ID is the message-id property (or amq-<key> for messages without
    one); a number also matches the broker's internal message key.
    """
    from amqplite.audit.trace import TraceError, message_history, open_log

    try:
        rows = message_history(open_log(data_dir, db_url), message_id)
    except TraceError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        raise click.ClickException(f"no delivery-log rows for message {message_id!r}")
    from rich.console import Console
    from rich.table import Table

    keys = sorted({r["message_key"] for r in rows if r["message_key"] is not None})
    title = f"message {message_id}" + (f" (key {', '.join(map(str, keys))})" if keys else "")
    table = Table(title=title)
    for col in ("time (UTC)", "event", "queue", "exchange", "routing key", "consumer",
                "attempt", "reason"):  # fmt: skip
        fixed = col in ("time (UTC)", "event", "attempt")
        table.add_column(
            col,
            justify="right" if col == "attempt" else "left",
            no_wrap=fixed,
            overflow="fold",
        )
    for r in rows:
        table.add_row(
            r["time"].replace("T", " ").rstrip("Z"),
            r["event"],
            r["queue"] or "",
            r["exchange"] or "(default)",
            r["routing_key"] or "",
            r["consumer_tag"] or "",
            "" if r["attempt"] is None else str(r["attempt"]),
            r["reason"] or "",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # piped: do not wrap for an 80-column default
    console.print(table)
