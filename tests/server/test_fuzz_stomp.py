"""STOMP fuzzed against the live broker, over TCP and over WebSockets (/ws):
random and mutated frames after a (mostly valid) CONNECT, floods before it, huge
headers, lying content-lengths, missing NULs, bad escapes, ACKs of unknown ids.

Every case ends in an ERROR and a close, a quiet close, or silence, and what the
broker wrote always parses as server frames with nothing after an ERROR; never a
crash (no WebSocket close 1011, no traceback in the log). Between batches a
long-lived stomp.py client, a fresh one and a pika client on AMQP keep working.
Bounded: a fixed seed, CASES cases, TIME_BUDGET seconds per transport."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from amqplite.protocol.stomp.frames import SERVER_COMMANDS, FrameParser
from tests.brokerproc import BrokerProcess
from tests.protocol.fuzz_harness import run_batches, send_then_read
from tests.server.conftest import connect as amqp_connect
from tests.server.stompclient import connect, stomp_broker, stomp_port
from tests.server.test_fuzz_ws import INTERNAL_ERROR, _frames, _mutate
from tests.server.test_fuzz_ws import run_case as run_ws_case

CASES = 240
WS_CASES = 144
SEED = 20261128
READ_DEADLINE = 1.0
TIME_BUDGET = 90.0
BATCH = 24

COMMANDS = ["SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT",
            "DISCONNECT", "CONNECT", "STOMP", "MESSAGE", "send", "", "X" * 40, "SEN\x00D"]
DESTINATIONS = ["/queue/fz", "/topic/fz.#", "/topic/fz.*.x", "/exchange/amq.direct/fz",
                "/exchange/nosuch", "/amq/queue/nosuch", "/temp-queue/t", "/reply-queue/zz",
                "/queue/", "", "/bogus/x", "/queue/" + "q" * 300, "/queue/%zz", "/topic/é"]
NAMES = ["destination", "id", "ack", "receipt", "transaction", "subscription", "message-id",
         "content-length", "content-type", "persistent", "reply-to", "prefetch-count",
         "x-queue-type", "x-stream-offset", "durable", "auto-delete", "selector", "requeue",
         "expiration", "priority", "heart-beat", "host", "login", "x-custom", "a\\tb", ""]


def _value(rng: random.Random, name: str) -> str:
    if name in ("destination", "reply-to"):
        return rng.choice(DESTINATIONS)
    return rng.choice(["", "1", "-1", "true", "false", "client", "client-individual", "auto",
                       "stream", "first", "offset=3", "99999999999999999999", "t1", "s1",
                       "a\\cb", "bad\\escape", "é", "x" * rng.choice([1, 200, 120_000]),
                       "1000,1000", "0,50", f"T_s1@@session-x@@{rng.randint(1, 9)}"])


def _frame(rng: random.Random) -> bytes:
    command = rng.choice(COMMANDS)
    headers = [(n, _value(rng, n)) for n in rng.sample(NAMES, rng.randint(0, 6))]
    body = rng.randbytes(rng.choice([0, 0, 5, 300, 5000]))
    if rng.random() < 0.3:  # a content-length that is right, short, long or absurd
        n = rng.choice([len(body), len(body) + 3, max(0, len(body) - 2), 1 << 40])
        headers.append(("content-length", str(n)))
    eol = "\r\n" if rng.random() < 0.2 else "\n"
    head = command + eol + "".join(f"{k}:{v}{eol}" for k, v in headers) + eol
    end = rng.choice([b"\x00", b"\x00", b"\x00\n", b""])  # sometimes no NUL at all
    return head.encode() + body + end


def _connect_frame(rng: random.Random) -> bytes:
    version = rng.choice(["1.2", "1.2", "1.1", "1.0", "1.0,1.1,1.2", "2.0"])
    beat = rng.choice(["", "", "heart-beat:0,0\n", "heart-beat:100,100\n", "heart-beat:x\n"])
    login = "guest" if rng.random() < 0.85 else "nobody"
    return (f"CONNECT\naccept-version:{version}\nhost:/\nlogin:{login}\npasscode:guest\n"
            f"{beat}\n").encode() + b"\x00"


def _stream(rng: random.Random) -> bytes:
    """A CONNECT (most of the time valid) and some frames, some of them mutated; or a
    flood before any CONNECT."""
    if rng.random() < 0.1:
        return rng.choice([b"\n" * 70_000, rng.randbytes(70_000), b"junk\x00", b"SEND\n" * 20_000])
    parts = [_connect_frame(rng) if rng.random() < 0.85 else _frame(rng)]
    for _ in range(rng.randint(0, 8)):
        f = _frame(rng)
        parts.append(_mutate(rng, f) if rng.random() < 0.3 else f)
    return b"".join(parts)


def _check_output(data: bytes, outcome: str) -> str:
    """What the broker wrote parses as server frames, nothing after an ERROR that
    closed (a frame refused after login gets an ERROR and the connection goes on,
    as in RabbitMQ); the case's kind: 'error', 'quiet' (closed without ERROR) or
    'open'."""
    parser = FrameParser()  # no version: nothing unescaped, every frame read as it is
    frames = parser.feed(data)
    assert not parser.in_frame or outcome == "open", data[-300:]
    assert all(f.command in SERVER_COMMANDS for f in frames), [f.command for f in frames]
    commands = [f.command for f in frames]
    if "ERROR" in commands:
        return "error" if outcome == "closed" else "error-open"
    return "quiet" if outcome == "closed" else "open"


def run_case(port: int, data: bytes) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        outcome, out = send_then_read(s, [data], READ_DEADLINE)
    return _check_output(out, outcome)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with stomp_broker(tmp_path_factory.mktemp("stomp-fuzz")) as b:
        yield b


class Healthy:
    """A long-lived stomp.py client on a canary queue, a fresh one per check and an
    AMQP client: all keep working while the fuzz runs."""

    def __init__(self, b: BrokerProcess) -> None:
        self.b = b
        self.stomp, self.rec = connect(b)
        self.stomp.subscribe("/queue/fuzz-canary", id="canary")
        self.amqp = amqp_connect(b)
        self.ch = self.amqp.channel()
        self.ch.queue_declare("fuzz-amqp-canary", durable=True)
        self.ch.confirm_delivery()

    def check(self, n: int) -> None:
        self.stomp.send("/queue/fuzz-canary", f"alive-{n}", receipt=f"r{n}")
        got: list[Any] = self.rec.wait(lambda: [m for m in self.rec.messages
                                                if m.body == f"alive-{n}"], f"alive-{n}")
        assert got
        fresh, rec = connect(self.b)
        fresh.send("/topic/fuzz.health", "x", receipt="sent")
        rec.wait_receipt("sent")
        fresh.disconnect()
        self.ch.basic_publish("", "fuzz-amqp-canary", b"alive-%d" % n,
                              pika.BasicProperties(delivery_mode=2))
        assert self.ch.basic_get("fuzz-amqp-canary", auto_ack=True)[2] == b"alive-%d" % n

    def close(self) -> None:
        self.stomp.disconnect()
        self.amqp.close()


def _fuzz(b: BrokerProcess, cases: list[Any], run: Any) -> dict[str, int]:
    healthy = Healthy(b)
    kinds: dict[str, int] = {}
    t0 = time.monotonic()
    try:
        for kind in run_batches(cases, run, healthy.check, BATCH, TIME_BUDGET):
            kinds[kind] = kinds.get(kind, 0) + 1
    finally:
        healthy.close()
    print(f"stomp fuzz: {sum(kinds.values())} cases in {time.monotonic() - t0:.1f}s: {kinds}")
    assert sum(kinds.values()) >= len(cases) // 2, kinds
    assert b.proc is not None and b.proc.poll() is None, "the broker died"
    log = b.log()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    return kinds


def test_fuzzed_stomp_never_hurts_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    cases = [_stream(rng) for _ in range(CASES)]
    kinds = _fuzz(broker, cases, lambda data: run_case(stomp_port(broker), data))
    assert kinds.get("error", 0) >= CASES // 4, kinds  # most hostile input gets an ERROR


def test_fuzzed_web_stomp_never_hurts_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(SEED + 1)
    cases = [_frames(rng, _stream) for _ in range(WS_CASES)]

    def run(case: tuple[str, list[bytes]]) -> str:
        outcome, codes = run_ws_case(broker.admin_port, case[1], "v12.stomp")
        assert INTERNAL_ERROR not in codes, (case[0], codes)
        return f"{case[0]}:{outcome}"

    _fuzz(broker, cases, run)

