"""The disk-free alarm: RabbitMQ's ``disk_free_limit``.

A full disk makes every commit fail; before that happens, publishers are
blocked (connection.blocked "low on disk") while consumers keep draining, so
the space comes back instead of running out. One ``statvfs`` a second is
cheap; the verdict goes to :class:`Persistence`, which alone decides whether
publishers may go on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import trio

from amqplite.server.persistence import Persistence, log_alarm

log = logging.getLogger("amqplite.disk")


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Space an unprivileged writer may use (f_bavail: root's reserve excluded)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class DiskMonitor:
    def __init__(self, path: Path, limit: int, persistence: Persistence) -> None:
        self.path = path
        self.limit = limit
        self.persistence = persistence
        #: last measured free bytes (None until the first check)
        self.free: int | None = None
        self.alarm = False
        self._failed = False

    def check(self) -> None:
        """Measure now, on the calling thread (used once at start-up)."""
        try:
            free = free_bytes(self.path)
        except OSError as exc:
            self._cannot_check(exc)
            return
        self.apply(free)

    def _cannot_check(self, exc: OSError) -> None:
        """Keep the last verdict; say so once."""
        if not self._failed:
            log.warning("cannot check free disk space of %s: %s", self.path, exc)
            self._failed = True

    def apply(self, free: int) -> None:
        """Set or clear the alarm for a measured amount of free space."""
        self._failed = False
        self.free = free
        alarm = free < self.limit
        log_alarm(log, self.alarm, alarm,
                  "free disk space is insufficient: %d bytes free, limit %d; "
                  "publishers are blocked until this alarm clears",
                  "disk free space alarm cleared: %d bytes free, limit %d", free, self.limit)
        self.alarm = alarm
        self.persistence.set_disk_alarm(alarm)

    async def run(self, interval: float) -> None:
        """Check every ``interval`` seconds, off the event loop: a hung network file
        system must stall this task, not every connection."""
        while True:
            await trio.sleep(interval)
            try:
                free = await trio.to_thread.run_sync(free_bytes, self.path,
                                                     abandon_on_cancel=True)
            except OSError as exc:
                self._cannot_check(exc)
                continue
            self.apply(free)
