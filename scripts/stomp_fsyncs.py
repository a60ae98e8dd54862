#!/usr/bin/env python3
"""What a persistent STOMP message costs a broker, steadier than msg/s on a shared
machine: the broker's CPU per message (its process tree, from /proc) and its
fsync(2)/fdatasync(2) calls per message (``strace -c`` attached for the run).

    python scripts/stomp_fsyncs.py amqplite --window 20 --runs 3
    python scripts/stomp_fsyncs.py amqplite --tree /tmp/base --window 20   # another checkout
    python scripts/stomp_fsyncs.py rabbitmq --window 20 --runs 3

Each run is ``bench_stomp.py``'s 1 -> 1 persistent scenario (``--count`` SENDs with
a receipt each, at most ``--window`` unanswered; the subscriber acks each one).
``--strace`` counts the syncs: for amqplite the store writer process (the broker's
children), for RabbitMQ every thread of the Erlang VM, which strace slows down, so
its msg/s in that run is not comparable. Prints one line per run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_mqtt  # noqa: E402
import bench_stomp  # noqa: E402


def tree(pid: int) -> set[int]:
    """``pid`` and its children."""
    out = {pid}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                out.add(int(p))
    return out


def cpu_seconds(pids: set[int]) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def syncs(summary: str) -> int:
    """fsync + fdatasync calls in a ``strace -c`` summary."""
    n = 0
    for line in summary.splitlines():
        f = line.split()
        if len(f) >= 5 and f[-1] in ("fsync", "fdatasync"):
            n += int(f[3])
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("broker", choices=["amqplite", "rabbitmq"])
    ap.add_argument("--tree", help="amqplite from this checkout (its amqplite/)")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--strace", action="store_true", help="count fsyncs (needs strace)")
    a = ap.parse_args()
    args = argparse.Namespace(count=a.count, paced=1, rate=500.0, size=100, window=a.window,
                              timeout=120.0)
    with tempfile.TemporaryDirectory() as tmp:
        cm = (bench_mqtt.rabbitmq(Path(tmp), protocol="STOMP") if a.broker == "rabbitmq"
              else bench_stomp.amqplite_from(Path(a.tree), Path(tmp)) if a.tree
              else bench_stomp.amqplite(Path(tmp)))
        with cm as b:
            for r in range(a.runs):
                pids = tree(b.pid)
                st = None
                out = f"{tmp}/strace{r}"
                if a.strace:
                    cmd = ["strace", "-f", "-c", "-o", out, "-e", "trace=fsync,fdatasync"]
                    # amqplite: the writer process syncs (tracing the event loop stalls it)
                    for p in (pids - {b.pid} if a.broker == "amqplite" else pids):
                        for t in os.listdir(f"/proc/{p}/task"):
                            cmd += ["-p", t]
                    st = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
                    time.sleep(1.5)  # attached
                c0 = cpu_seconds(pids)
                rate, _p50, _p99, lost = asyncio.run(bench_stomp.one(b.port, True, args,
                                                                     a.window))
                c1 = cpu_seconds(pids)
                line = (f"{a.tree or a.broker} window {a.window}: {rate:,.0f} msg/s, lost "
                        f"{lost:.0f}, broker CPU {1e6 * (c1 - c0) / a.count:.1f} us/msg "
                        f"(load {os.getloadavg()[0]:.1f})")
                if st is not None:
                    st.send_signal(signal.SIGINT)
                    st.wait()
                    with open(out) as f:
                        n = syncs(f.read())
                    line += f", {n} fsyncs, {n / a.count:.3f} per msg"
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
