"""The memory monitor's parts: cgroup limits, the alarm and paging verdicts, the trim policy.

The live behaviour (a real broker blocking a real publisher) is in test_memory_alarm.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from amqplite.broker.core import Broker
from amqplite.config import Watermark
from amqplite.server.memory import (
    TRIM_OBSERVE_DUTY,
    TRIM_OBSERVE_INTERVAL,
    MemoryMonitor,
    TrimPolicy,
    available_memory,
    cgroup_memory_limit,
    rss_bytes,
    total_memory,
)
from amqplite.server.persistence import Persistence
from amqplite.store.writer import ProcessStore


def test_cgroup_v2_limit(tmp_path: Path) -> None:
    assert cgroup_memory_limit(tmp_path) is None  # no cgroup files: no limit
    (tmp_path / "memory.max").write_text("268435456\n")
    assert cgroup_memory_limit(tmp_path) == 256 * 2**20
    assert available_memory(tmp_path) == min(total_memory(), 256 * 2**20)
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroup_memory_limit(tmp_path) is None
    assert available_memory(tmp_path) == total_memory()


def test_cgroup_v1_limit(tmp_path: Path) -> None:
    v1 = tmp_path / "memory"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text("536870912\n")
    assert cgroup_memory_limit(tmp_path) == 512 * 2**20
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "unlimited"
    assert cgroup_memory_limit(tmp_path) is None
    (v1 / "memory.limit_in_bytes").write_text("garbage\n")
    assert cgroup_memory_limit(tmp_path) is None


def test_cgroup_limit_above_ram_does_not_raise_it(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text(f"{total_memory() * 4}\n")
    assert available_memory(tmp_path) == total_memory()


def test_rss_is_measured() -> None:
    used = rss_bytes()
    assert 1 << 20 < used < total_memory()


@pytest.fixture
def persistence(tmp_path: Path) -> Persistence:
    return Persistence(ProcessStore(f"sqlite:///{tmp_path / 'm.db'}"), Broker())


def test_alarm_and_paging_follow_the_watermark(persistence: Persistence) -> None:
    changes: list[bool] = []
    m = MemoryMonitor(Watermark(relative=0.5), persistence, paging_ratio=0.5, total=1000,
                      on_paging=changes.append)
    assert (m.limit, m.paging_limit) == (500, 250)
    m.apply(200)
    assert (m.alarm, m.paging, changes, persistence.has_capacity) == (False, False, [], True)
    m.apply(300)
    assert (m.alarm, m.paging, changes, persistence.has_capacity) == (False, True, [True], True)
    m.apply(501)
    assert (m.alarm, m.paging, changes) == (True, True, [True])
    assert not persistence.has_capacity and persistence.block_reason == "low on memory"
    m.set_watermark(Watermark(absolute=10**12))  # raised at run time: clears at once
    assert not m.alarm and persistence.has_capacity and m.used is not None
    assert changes == [True, False]
    m.set_watermark(Watermark(relative=0.0))  # RabbitMQ's 0: every publisher is blocked
    assert m.alarm and not persistence.has_capacity


def test_a_failing_paging_hook_does_not_stop_the_alarm(persistence: Persistence) -> None:
    m = MemoryMonitor(Watermark(absolute=100), persistence, total=1000)

    def broken(_on: bool) -> None:
        raise RuntimeError("hook bug")

    m.on_paging = broken
    m.apply(150)
    assert m.alarm and m.paging and not persistence.has_capacity


def test_memory_and_disk_alarms_combine(persistence: Persistence) -> None:
    p = persistence
    epoch = p.alarm_epoch
    p.set_memory_alarm(True)
    assert not p.has_capacity and p.block_reason == "low on memory"
    p.set_disk_alarm(True)
    assert p.block_reason == "low on memory & disk" and p.alarm_epoch == epoch + 1
    p.set_memory_alarm(False)
    assert not p.has_capacity and p.block_reason == "low on disk"
    p.set_disk_alarm(False)
    assert p.has_capacity and (p.disk_alarm, p.memory_alarm) == (False, False)


def test_trim_after_the_backlog_halves_at_most_once_per_interval() -> None:
    t = TrimPolicy(min_drop=1000, min_interval=5.0)
    assert not t.observe(0, 100.0)
    assert not t.observe(10_000, 100.1)  # growing
    assert not t.observe(6_000, 100.2)  # fell, but not to half
    assert t.observe(4_000, 100.3)  # halved: trim once
    assert not t.observe(4_000, 100.4)
    assert not t.observe(3_500, 100.5)  # a small drop is not worth a trim
    assert not t.observe(10, 101.0)  # halved again, but too soon after the last trim
    assert t.observe(10, 105.4)  # the deferred trim runs once the interval has passed
    assert not t.observe(0, 200.0)  # 10 -> 0 is below min_drop


def test_trim_returns_what_it_released() -> None:
    m = MemoryMonitor(Watermark(relative=0.4), None, total=10**9)
    released = m.trim()
    if released is None:
        pytest.skip("malloc_trim needs glibc")
    assert isinstance(released, int)


async def test_the_backlog_is_walked_at_most_once_per_observe_interval() -> None:
    """The backlog sums every queue: checked with RSS four times a second, it cost
    ~2 % of the broker's CPU at 200 queues. The trim looks at it once a second."""
    walks: list[int] = []

    def backlog() -> int:
        walks.append(1)
        return 0

    m = MemoryMonitor(Watermark(relative=0.4), None, total=10**9, backlog=backlog)
    if m._malloc_trim is None:
        pytest.skip("the trim (and its look at the backlog) needs glibc")
    for _ in range(5):  # as MemoryMonitor.run does every memory_check_interval
        await m._maybe_trim()
    assert len(walks) == 1
    m._observed -= TRIM_OBSERVE_INTERVAL  # a second later
    await m._maybe_trim()
    assert len(walks) == 2


async def test_a_slow_backlog_walk_is_looked_at_less_often() -> None:
    """At 10,000 queues the walk took ~5 ms: once a second it was most of an idle
    broker's CPU. A look that took d seconds waits TRIM_OBSERVE_DUTY * d for the next."""
    walks: list[int] = []

    def slow_backlog() -> int:  # a walk over many queues: at least 3 ms of work
        walks.append(1)
        end = time.monotonic() + 0.003
        while time.monotonic() < end:
            pass
        return 0

    m = MemoryMonitor(Watermark(relative=0.4), None, total=10**9, backlog=slow_backlog)
    if m._malloc_trim is None:
        pytest.skip("the trim (and its look at the backlog) needs glibc")
    await m._maybe_trim()
    assert len(walks) == 1
    # the next look waits the walk's measured time (>= 3 ms; more on a busy machine)
    # times the duty, at least the interval
    wait = m._observe_every
    assert wait >= max(0.003 * TRIM_OBSERVE_DUTY, TRIM_OBSERVE_INTERVAL)
    m._observed -= wait - 0.5  # half a second short of it: still too soon
    await m._maybe_trim()
    assert len(walks) == 1
    m._observed -= 1.0  # past the walk's own share
    await m._maybe_trim()
    assert len(walks) == 2
