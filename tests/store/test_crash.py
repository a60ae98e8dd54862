"""SIGKILL mid-publish: every id reported committed is there after restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from amqplite.store import Store

CHILD = r"""
import sys
from amqplite.store import Store
from amqplite.storeops import PutEntry, PutMessage, PutQueue, LogEvent, DeleteEntry

store = Store(sys.argv[1], durability="fsync")
store.create()
store.start()
store.submit([PutQueue(1, "/", "q")])
store.flush(30)
print("ready", flush=True)

def committed(mid):
    def callback(error):
        if error is None:
            sys.stdout.write(f"{mid}\n")
            sys.stdout.flush()
    return callback

mid = 0
while True:
    mid += 1
    ops = [PutMessage(mid, "", "q", b"", b"x" * 100), PutEntry(1, mid, mid),
           LogEvent(mid, "published", "/", "", "q", message_key=mid)]
    if mid % 5 == 0:
        ops.append(DeleteEntry(1, mid - 2, mid - 2))  # some acks of older messages
    store.submit(ops, committed(mid))
    if mid % 50 == 0:
        store.flush(30)  # keep the pending list bounded
"""


def test_committed_ids_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    url = f"sqlite:///{path}"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    reported: list[int] = []
    try:
        assert proc.stdout.readline().strip() == "ready"
        while len(reported) < 2_000:
            assert time.monotonic() < deadline, "child too slow"
            line = proc.stdout.readline()
            assert line, "child exited"
            reported.append(int(line))
    finally:
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=10)
    # Lines already written before the kill are committed too.
    reported += [int(x) for x in rest.split() if x.strip().isdigit()]
    acked = {m - 2 for m in reported if m % 5 == 0}

    store = Store(url)
    rec = store.load(body_window=10**7)  # every entry in RAM, none left spilled
    stored = {e.message_id for e in rec.entries.get(1, [])}
    missing = [m for m in reported if m not in acked and m not in stored]
    assert not missing
    logged = {r["message_key"] for r in store.read_delivery_log(limit=10**9)}
    assert set(reported) <= logged
    assert rec.max_message_id >= max(reported)
    store.close()
