"""Run the audit job every night at HH:MM, each run in a fresh Python process.

A fresh process per run releases the JVM's memory between nights and keeps a
crashed run from taking the scheduler down; a failed run is logged and the
next night's run resumes it (see :mod:`amqplite.audit.state`).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from datetime import time as dtime


def parse_at(text: str) -> dtime:
    """``"02:00"`` → ``time(2, 0)``."""
    try:
        hh, mm = text.strip().split(":")
        return dtime(int(hh), int(mm))
    except ValueError:
        raise ValueError(f"not a time of day: {text!r} (use HH:MM, e.g. 02:00)") from None


def next_run(at: dtime, now: datetime, *, utc: bool = False) -> datetime:
    """The first ``at`` strictly after ``now`` (aware), in UTC or local time."""
    if utc:
        now = now.astimezone(UTC)
        day = now.date()
        candidate = datetime.combine(day, at, tzinfo=UTC)
        if candidate <= now:
            candidate = datetime.combine(day + timedelta(days=1), at, tzinfo=UTC)
        return candidate
    local_now = now.astimezone()
    day = local_now.date()
    # A naive datetime's .astimezone() reads it as local time, DST included.
    candidate = datetime.combine(day, at).astimezone()
    if candidate <= local_now:
        candidate = datetime.combine(day + timedelta(days=1), at).astimezone()
    return candidate


def job_command(job_args: list[str]) -> list[str]:
    """The command line of one run: ``python -m amqplite.audit.job ARGS``."""
    return [sys.executable, "-m", "amqplite.audit.job", *job_args]


def run_forever(
    job_args: list[str],
    at: dtime,
    *,
    utc: bool = False,
    run_now: bool = False,
    max_runs: int | None = None,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    run: Callable[[list[str]], int] = lambda cmd: subprocess.call(cmd),
) -> None:
    """Sleep until the next ``at``, run the job, repeat (``max_runs`` for tests)."""
    runs = 0
    pending_now = run_now
    while max_runs is None or runs < max_runs:
        if not pending_now:
            target = next_run(at, now(), utc=utc)
            log(f"next audit run at {target.isoformat(timespec='minutes')}")
            # Sleep in short steps so a clock change or a suspend is noticed.
            while (left := (target - now()).total_seconds()) > 0:
                sleep(min(left, 60.0))
        pending_now = False
        started = time.monotonic()
        code = run(job_command(job_args))
        took = time.monotonic() - started
        if code == 0:
            log(f"audit run finished in {took:.0f} s")
        else:
            log(f"audit run failed with exit code {code} after {took:.0f} s; retried next night")
        runs += 1
