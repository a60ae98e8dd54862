"""The memory alarm (RabbitMQ's ``vm_memory_high_watermark``) and the paging signal.

Above the watermark, publishers are blocked (connection.blocked "low on
memory") while consumers keep draining, so the broker is not killed by the
OOM killer for a backlog its clients can work off. Below it, at
``memory_paging_ratio`` of it, queues should move bodies out of RAM: the
monitor raises :attr:`MemoryMonitor.paging` and calls ``on_paging`` for the
broker to hook into.

Memory used is the process RSS from ``/proc/self/statm``: one small read, cheap
enough to do a few times a second on the event loop. The limit is relative to
the RAM the process may use: physical RAM or the cgroup limit, whichever is
lower, since a container killed at its cgroup limit is as dead as a host out
of RAM.

glibc keeps freed heap pages mapped, so after a burst is drained the RSS would
stay at its peak (and could keep the alarm on with nothing queued). Once the
backlog has fallen a lot, the monitor calls ``malloc_trim(0)`` to hand them back.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import trio

from amqplite.config import Watermark
from amqplite.server.persistence import Persistence, log_alarm

log = logging.getLogger("amqplite.memory")

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: cgroup v1 reports "no limit" as a page-rounded LONG_MAX; anything this big is none
_NO_LIMIT = 1 << 60
#: trim once the backlog has fallen by at least this many messages, to half its peak
TRIM_MIN_DROP = 10_000
#: and never more often than this (seconds): a trim walks the whole heap
TRIM_MIN_INTERVAL = 5.0
#: seconds between looks at the backlog (for the trim), however often RSS is checked
TRIM_OBSERVE_INTERVAL = 1.0
#: ... and at least this many times the last look's own duration: the look walks
#: every queue, so at 10,000 queues (about 5 ms a walk) it was 80 % of an idle
#: broker's CPU once a second; now it stays under 0.1 % of a core however many
#: queues there are (a trim waits TRIM_MIN_INTERVAL anyway: a late look loses nothing)
TRIM_OBSERVE_DUTY = 1000


def total_memory() -> int:
    """Physical RAM of the machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cgroup_memory_limit(root: Path = CGROUP_ROOT) -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``, else v1
    ``memory.limit_in_bytes``); None when there is none or it cannot be read."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            limit = int(text)
        except ValueError:
            continue
        return None if limit <= 0 or limit >= _NO_LIMIT else limit
    return None


def available_memory(root: Path = CGROUP_ROOT) -> int:
    """RAM this process may use: physical RAM, or the cgroup limit when lower."""
    total = total_memory()
    limit = cgroup_memory_limit(root)
    return total if limit is None else min(total, limit)


_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of this process (or ``pid``), now (not the peak getrusage
    reports)."""
    with open("/proc/self/statm" if pid is None else f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


def broker_rss(store: object) -> int:
    """The broker's memory: this process plus its store-writer process, if any
    (the watermark is about what the broker as a whole takes from the machine)."""
    used = rss_bytes()
    pid = getattr(store, "writer_pid", None)
    if pid is not None:
        # between writers (a crash): count this process alone
        with contextlib.suppress(OSError, ValueError, IndexError):
            used += rss_bytes(pid)
    return used


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on another C library (musl, macOS) or when
    ``AMQPLITE_MALLOC_TRIM=0`` turns it off (to measure what it gives back)."""
    if platform.libc_ver()[0] != "glibc" or os.environ.get("AMQPLITE_MALLOC_TRIM") == "0":
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


class TrimPolicy:
    """Decides when a trim is worth it: after the backlog has fallen to half its peak
    (by at least ``min_drop`` messages), at most once per ``min_interval`` seconds."""

    def __init__(self, min_drop: int = TRIM_MIN_DROP,
                 min_interval: float = TRIM_MIN_INTERVAL) -> None:
        self.min_drop = min_drop
        self.min_interval = min_interval
        self.peak = 0
        self.due = False
        self._last = -min_interval

    def observe(self, backlog: int, now: float) -> bool:
        """Record the backlog; True when a trim should run now."""
        if backlog > self.peak:
            self.peak = backlog
        elif self.peak - backlog >= self.min_drop and backlog <= self.peak // 2:
            self.due = True
            self.peak = backlog
        if self.due and now - self._last >= self.min_interval:
            self.due = False
            self._last = now
            return True
        return False


class MemoryMonitor:
    """Measures RSS against the watermark; raises the alarm and the paging signal.

    Hook for the broker: :attr:`paging` (True while ``used`` is above
    :attr:`paging_limit`), :attr:`on_paging` (called with the new value whenever
    it changes, on the event loop), :attr:`used` and :attr:`limit` in bytes.
    """

    def __init__(self, watermark: Watermark, persistence: Persistence | None = None, *,
                 paging_ratio: float = 0.5, total: int | None = None,
                 backlog: Callable[[], int] | None = None,
                 on_paging: Callable[[bool], None] | None = None) -> None:
        self.persistence = persistence
        #: RAM the process may use (physical or cgroup), the base of a relative watermark
        self.total = available_memory() if total is None else total
        self.watermark = watermark
        #: bytes of RSS above which the alarm is on
        self.limit = watermark.limit(self.total)
        self.paging_ratio = paging_ratio
        #: last measured RSS in bytes (None until the first check)
        self.used: int | None = None
        self.alarm = False
        #: above paging_limit: queues should page bodies out of RAM
        self.paging = False
        #: called with the new :attr:`paging` value when it changes (a hook set after
        #: the first check should read :attr:`paging` once: it may already be True)
        self.on_paging = on_paging
        #: messages held by the broker (ready + unacked): falls a lot -> trim the heap
        self.backlog = backlog
        self.trim_policy = TrimPolicy()
        self._observed = -TRIM_OBSERVE_INTERVAL  # when the backlog was last looked at
        self._observe_every = TRIM_OBSERVE_INTERVAL  # grows with the look's own cost
        self._malloc_trim = _load_malloc_trim()
        self._failed = False

    def describe(self) -> str:
        """The limits in force, for the start-up log line (once the broker is up)."""
        return (f"memory high watermark {self.watermark}: {self.limit} bytes of "
                f"{self.total} available (paging at {self.paging_limit})")

    @property
    def paging_limit(self) -> int:
        """RSS above which queues should page bodies out (a ratio of the watermark)."""
        return int(self.limit * self.paging_ratio)

    def set_watermark(self, watermark: Watermark) -> None:
        """Change the watermark at run time (``set-memory-high-watermark``); the new
        verdict applies at once, so a raised limit unblocks publishers now."""
        self.watermark = watermark
        self.limit = watermark.limit(self.total)
        log.info("memory high watermark set to %s (%d bytes of %d available)",
                 watermark, self.limit, self.total)
        self.check()

    def check(self) -> None:
        """Measure now and apply the verdict."""
        try:
            used = (rss_bytes() if self.persistence is None
                    else broker_rss(self.persistence.store))
        except (OSError, ValueError, IndexError) as exc:
            if not self._failed:
                log.warning("cannot measure memory use (%s): no memory alarm", exc)
                self._failed = True
            return
        self._failed = False
        self.apply(used)

    def apply(self, used: int) -> None:
        """Set or clear the alarm and the paging signal for a measured RSS."""
        self.used = used
        alarm = used > self.limit
        log_alarm(log, self.alarm, alarm,
                  "memory resource limit alarm set: %d bytes used, limit %d; "
                  "publishers are blocked until this alarm clears",
                  "memory resource limit alarm cleared: %d bytes used, limit %d",
                  used, self.limit)
        self.alarm = alarm
        if self.persistence is not None:
            self.persistence.set_memory_alarm(alarm)
        paging = used > self.paging_limit
        if paging != self.paging:
            self.paging = paging
            if self.on_paging is not None:
                try:
                    self.on_paging(paging)
                except Exception:  # a hook's bug must not stop the alarm
                    log.exception("memory paging hook failed")

    def trim(self) -> int | None:
        """``malloc_trim(0)``: give freed heap back to the OS; RSS bytes released
        (None without glibc). Blocks for a few ms per GiB of heap: call off the loop."""
        if self._malloc_trim is None:
            return None
        before = rss_bytes()
        self._malloc_trim(0)
        return before - rss_bytes()

    async def _maybe_trim(self) -> None:
        if self.backlog is None or self._malloc_trim is None:
            return
        # the backlog is a walk over every queue: at 200 queues and four checks a
        # second it was ~2 % of the broker's CPU on a trickle of messages, and a
        # trim waits TRIM_MIN_INTERVAL anyway
        now = time.monotonic()
        if now - self._observed < self._observe_every:
            return
        self._observed = now
        backlog = self.backlog()
        self._observe_every = max(TRIM_OBSERVE_INTERVAL,
                                  (time.monotonic() - now) * TRIM_OBSERVE_DUTY)
        if not self.trim_policy.observe(backlog, now):
            return
        started = time.perf_counter()
        released = await trio.to_thread.run_sync(self.trim)
        log.info("malloc_trim after the backlog fell: %.1f MiB returned in %.0f ms",
                 (released or 0) / 2**20, (time.perf_counter() - started) * 1000)
        self.check()

    async def run(self, interval: float) -> None:
        """Check every ``interval`` seconds, on the event loop (a procfs read does
        not block); trim the heap when the backlog has fallen a lot."""
        while True:
            await trio.sleep(interval)
            self.check()
            await self._maybe_trim()
