"""CLI: ``amqplite audit run|schedule``; register with ``main.add_command(audit)``.

``amqplite trace`` is an admin command (:mod:`amqplite.admin.cli`): it asks the
running broker, like the other admin commands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from amqplite.audit.config import READERS

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
        click.option(
            "--reader",
            type=click.Choice(READERS),
            default=None,
            help="auto: SQLite on the driver (no jar), PostgreSQL over JDBC; jdbc: JDBC for SQLite too.",
        ),
        click.option("--page-rows", type=int, default=None, help="Rows per driver read [100000]."),
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
                 "jar", "top", "jdbc_partitions", "reader", "page_rows"):  # fmt: skip
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
