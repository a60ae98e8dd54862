"""Where the event loop's CPU goes, by stage, in a broker under real load.

Runs an ordinary broker in this process (the same settings ``amqplite serve``
takes, as ``key=value``) and every ``--every`` seconds prints the main
thread's CPU split: the trio run loop (scheduler, epoll) against task steps,
the steps per task, and the time inside the stages of the AMQP path (parse,
handling the frames, ``Server.interpret``, the direct socket writes). Point
a load generator at it, e.g.::

    .venv/bin/python scripts/stage_profile.py --port 25812 --data-dir /tmp/sp
    .venv/bin/python scripts/bench.py amqp://guest:guest@127.0.0.1:25812/ \\
        --scenario idle200 --runs 1 --idle-seconds 30

Why not py-spy alone: a sampling profiler on a loaded 2-core machine credits
the line after a syscall with the syscall's time, and a flat profile spread
over sixty functions says little. CPU time (``thread_time``) read at the
stage boundaries adds a few percent of overhead but no such bias. The
stages nest (``interpret`` holds ``apply``, which holds ``flush``, which
holds ``os.write``); figures are % of one core and µs per call.
"""

from __future__ import annotations

import argparse
import collections
import functools
import inspect
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

from amqplite.broker import publish as broker_publish
from amqplite.config import load_settings
from amqplite.main import serve
from amqplite.protocol import connection as proto_connection
from amqplite.server import app, connection, interpreter

_cpu = time.thread_time_ns
_spent: collections.Counter[str] = collections.Counter()
_calls: collections.Counter[str] = collections.Counter()


def _timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):  # time the whole await
        @functools.wraps(fn)
        async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
            start = _cpu()
            try:
                return await fn(*args, **kwargs)
            finally:
                _spent[label] += _cpu() - start
                _calls[label] += 1
        return wrapped_async

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        start = _cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[label] += _cpu() - start
            _calls[label] += 1
    return wrapped


def _instrument_stages() -> None:
    for owner, name, label in (
        (proto_connection.ServerConnection, "receive_data", "parse (receive_data)"),
        (connection.AMQPConnection, "_handle_events", "handle frames (_handle_events)"),
        (broker_publish.Publisher, "basic_publish", "  basic_publish"),
        (app.Server, "interpret", "interpret"),
        (interpreter.Interpreter, "apply", "  apply (deliveries encoded)"),
        (connection.AMQPConnection, "flush", "    flush"),
    ):
        setattr(owner, name, _timed(label, getattr(owner, name)))
    # the module's own os.write/os.read: the direct socket writes and reads
    shim = type(sys)("os_shim")
    shim.__dict__.update(os.__dict__)
    shim.write = _timed("      os.write (kernel)", os.write)  # type: ignore[attr-defined]
    shim.read = _timed("os.read (kernel)", os.read)  # type: ignore[attr-defined]
    connection.os = shim  # type: ignore[attr-defined]


class _Steps(trio.abc.Instrument):
    """CPU inside task steps, per task; the rest of the thread's CPU is trio's loop."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        self.steps: collections.Counter[str] = collections.Counter()
        self._at = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._at = _cpu()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        name = task.name.rsplit(".", 1)[-1][:40]
        self.cpu[name] += _cpu() - self._at
        self.steps[name] += 1


def _report(steps: _Steps, every: float) -> None:
    """Print and reset every ``every`` seconds, from a thread of its own."""
    while True:
        t0, c0 = time.monotonic(), _cpu_main()
        _spent.clear()
        _calls.clear()
        steps.cpu.clear()
        steps.steps.clear()
        time.sleep(every)
        secs = time.monotonic() - t0
        total = _cpu_main() - c0

        pct = functools.partial(_pct, secs=secs)

        in_steps = sum(steps.cpu.values())
        print(f"\n{time.strftime('%H:%M:%S')} main thread {pct(total)} of a core, "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"  trio loop (scheduler, epoll)   {pct(total - in_steps)}")
        for name, ns in steps.cpu.most_common(6):
            n = steps.steps[name]
            print(f"  steps of {name:<22}{pct(ns)}  {n / secs:8.1f}/s  {ns / n / 1e3:7.1f} µs")
        for label, ns in sorted(_spent.items(), key=lambda kv: _ORDER.get(kv[0], 99)):
            n = _calls[label]
            print(f"  {label:<31}{pct(ns)}  {n / secs:8.1f}/s  {ns / n / 1e3:7.1f} µs",
                  flush=True)


def _pct(ns: float, secs: float) -> str:
    return f"{ns / secs / 1e7:6.2f} %"


_ORDER = {"os.read (kernel)": 0, "parse (receive_data)": 1,
          "handle frames (_handle_events)": 2, "  basic_publish": 3, "interpret": 4,
          "  apply (deliveries encoded)": 5, "    flush": 6, "      os.write (kernel)": 7}
_main_thread_id = 0


def _cpu_main() -> int:
    """The main thread's CPU time, read from another thread."""
    return time.clock_gettime_ns(time.pthread_getcpuclockid(_main_thread_id))


def main() -> int:
    global _main_thread_id
    import threading

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=25812)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--every", type=float, default=10.0, help="seconds per report")
    parser.add_argument("setting", nargs="*", help="more settings as key=value "
                        "(e.g. delivery_log=off)")
    args = parser.parse_args()
    overrides: dict[str, Any] = {"port": args.port, "data_dir": args.data_dir,
                                 "admin_port": 0, "mqtt_port": 0,
                                 "stomp_port": 0, "kafka_port": 0}
    for kv in args.setting:
        key, _, value = kv.partition("=")
        overrides[key] = value
    settings = load_settings(None, overrides=overrides)
    _instrument_stages()
    steps = _Steps()
    _main_thread_id = threading.main_thread().ident or 0
    threading.Thread(target=_report, args=(steps, args.every), daemon=True).start()
    trio.run(serve, settings, instruments=[steps])
    return 0


if __name__ == "__main__":
    sys.exit(main())
