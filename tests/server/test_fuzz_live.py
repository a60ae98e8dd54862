"""Mutated frames against the live broker: every bad input ends in a proper close.

Each case opens a raw socket, sends a valid handshake plus a mutated session
(tests/protocol/fuzz_harness.py), and reads until the broker closes or a
short deadline passes. Meanwhile a healthy pika client on its own connection
must keep working, and the broker log must stay free of tracebacks.
"""

from __future__ import annotations

import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pika

from tests.brokerproc import BrokerProcess
from tests.protocol.fuzz_harness import check_output, one_case, send_then_read
from tests.server.conftest import connect

CASES = 200
BATCH = 20
SEED = 20261123
READ_DEADLINE = 1.5
TIME_BUDGET = 120.0


def run_case(port: int, chunks: list[bytes]) -> str:
    """Send one case: 'closed' (EOF or reset) or 'open' (silent at the deadline), with the
    reply codes of the closes the broker sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        outcome, data = send_then_read(s, chunks, READ_DEADLINE)
    codes = check_output(data, partial=outcome == "open")
    return f"{outcome}:{','.join(map(str, sorted(set(codes)))) or '-'}"


def test_mutated_frames_never_hurt_the_broker(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    healthy = connect(b)
    ch = healthy.channel()
    ch.queue_declare("canary", durable=True)
    ch.confirm_delivery()
    try:
        rng = random.Random(SEED)
        cases = [one_case(rng) for _ in range(CASES)]
        outcomes: dict[str, int] = {}
        t0 = time.monotonic()
        # a batch's connections at once: the cases left open wait out READ_DEADLINE together
        with ThreadPoolExecutor(BATCH) as pool:
            for start in range(0, CASES, BATCH):
                for o in pool.map(lambda c: run_case(b.port, c), cases[start:start + BATCH]):
                    outcomes[o] = outcomes.get(o, 0) + 1
                # the healthy client keeps working between every batch
                ch.basic_publish("", "canary", b"alive-%d" % start,
                                 pika.BasicProperties(delivery_mode=2))
                got = ch.basic_get("canary", auto_ack=True)
                assert got[2] == b"alive-%d" % start
                if time.monotonic() - t0 > TIME_BUDGET:
                    break
        print(f"live fuzz outcomes: {outcomes} in {time.monotonic() - t0:.1f}s")
        assert sum(outcomes.values()) >= 100, outcomes
        assert any(k.startswith("closed:5") for k in outcomes), outcomes
        assert b.proc is not None and b.proc.poll() is None, "the broker died"
        log = b.log_path.read_text(errors="replace")
        assert "Traceback" not in log, log[-3000:]
        assert "crashed" not in log and "internal error" not in log
    finally:
        if healthy.is_open:
            healthy.close()
        b.stop()
