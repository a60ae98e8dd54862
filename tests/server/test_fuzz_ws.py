"""MQTT over WebSockets, fuzzed against the live broker: random and mutated MQTT
packets in binary, text, fragmented, interleaved-control, malformed and oversized
WebSocket frames at ``/ws``. Every case ends in a close or silence, never in a
crash: no close 1011 (the app failed), no HTTP 500, no traceback in the log; and
between batches another WebSocket client still connects, subscribes, publishes
and receives. Bounded: CASES cases, TIME_BUDGET seconds, a fixed seed."""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request

from amqplite.protocol.mqtt.packets import (
    MQTT_5,
    MQTT_311,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PubAck,
    Publish,
    PubRel,
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
    encode,
)
from tests.brokerproc import BrokerProcess
from tests.protocol.fuzz_harness import send_then_read
from tests.server.mqttclient import mqtt_broker, new_id
from tests.server.test_mqtt_listeners import WSRaw

CASES = 360
BATCH = 24
SEED = 20261128
READ_DEADLINE = 1.0
TIME_BUDGET = 150.0
#: RFC 6455: the server failed (the ASGI app raised)
INTERNAL_ERROR = 1011


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = mqtt_broker(tmp_path_factory.mktemp("ws-fuzz"))
    yield b
    assert b.stop() == 0


# ---------------------------------------------------------------- MQTT packets
def _topic(rng: random.Random) -> str:
    parts = ["a", "b", "+", "#", "", "x" * rng.randint(1, 40), "é", "\u0000", "$SYS"]
    return "/".join(rng.choice(parts) for _ in range(rng.randint(1, 4)))


def _packet(rng: random.Random, version: int) -> bytes:
    kind = rng.randrange(8)
    pid = rng.randint(1, 65535)
    p: object
    if kind == 0:
        will = Will(_topic(rng), rng.randbytes(rng.randint(0, 30)), rng.randint(0, 2),
                    rng.random() < 0.5) if rng.random() < 0.3 else None
        p = Connect(new_id() if rng.random() < 0.9 else "", version,
                    keep_alive=rng.randint(0, 120), username="guest",
                    password=b"guest" if rng.random() < 0.8 else b"wrong", will=will)
    elif kind == 1:
        qos = rng.randint(0, 2)
        p = Publish(_topic(rng), rng.randbytes(rng.randint(0, 2000)), qos,
                    rng.random() < 0.2, packet_id=pid if qos else None)
    elif kind == 2:
        p = Subscribe(pid, tuple(Subscription(_topic(rng), rng.randint(0, 2))
                                 for _ in range(rng.randint(1, 3))))
    elif kind == 3:
        p = Unsubscribe(pid, (_topic(rng),))
    elif kind == 4:
        p = PubAck(pid)
    elif kind == 5:
        p = PubRel(pid)
    elif kind == 6:
        p = PingReq()
    else:
        p = Disconnect()
    try:
        return encode(p, version)  # type: ignore[arg-type]
    except Exception:  # a field our encoder refuses (e.g. a NUL topic): random bytes
        return rng.randbytes(rng.randint(1, 50))


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1 and b:
            del b[rng.randrange(len(b)):]
        elif op == 2:
            b[rng.randrange(len(b) + 1):0] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and len(b) > 1:  # a remaining length that lies
            b[1] = rng.choice([0x00, 0x7F, 0xFF, 0x80])
        else:
            b += rng.randbytes(rng.randint(1, 64))
    return bytes(b)


def _stream(rng: random.Random) -> bytes:
    """A CONNECT (most of the time valid) and some packets, some of them mutated."""
    version = rng.choice([MQTT_311, MQTT_311, MQTT_5, 3])
    first = encode(Connect(new_id(), version, username="guest", password=b"guest"), version)
    packets = [first if rng.random() < 0.8 else _packet(rng, version)]
    for _ in range(rng.randint(0, 6)):
        pkt = _packet(rng, version)
        packets.append(_mutate(rng, pkt) if rng.random() < 0.4 else pkt)
    if rng.random() < 0.15:
        packets.append(rng.randbytes(rng.randint(1, 300)))
    return b"".join(packets)


# ---------------------------------------------------------------- WebSocket frames
def _frame(opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0,
           masked: bool = True, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    mbit = 0x80 if masked else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if not masked:
        return head + payload
    key = bytes([0, 0, 0, 0])  # a zero mask: the payload as it is
    return head + key + payload


def _fragments(payload: bytes, pieces: int, opcode: int = 2) -> list[bytes]:
    size = max(1, len(payload) // pieces)
    chunks = [payload[i:i + size] for i in range(0, len(payload), size)] or [b""]
    return [_frame(opcode if i == 0 else 0, c, fin=i == len(chunks) - 1)
            for i, c in enumerate(chunks)]


def _frames(rng: random.Random,
            stream: Callable[[random.Random], bytes] = _stream) -> tuple[str, list[bytes]]:
    """One case: how the MQTT (or ``stream``'s) bytes travel, as raw WebSocket frames."""
    data = stream(rng)
    shape = rng.randrange(10)
    if shape == 0:
        return "binary", [_frame(2, data)]
    if shape == 1:
        return "one-per-packet-split", [_frame(2, data[i:i + 7]) for i in range(0, len(data), 7)]
    if shape == 2:
        return "fragmented", _fragments(data, rng.randint(2, 12))
    if shape == 3:  # a ping between fragments, as RFC 6455 allows
        fr = _fragments(data, 3)
        return "ping-between-fragments", [*fr[:1], _frame(9, b"hi"), *fr[1:]]
    if shape == 4:
        return "text", [_frame(1, data)]
    if shape == 5:
        return "unmasked", [_frame(2, data, masked=False)]
    if shape == 6:
        bad = rng.choice([(3, 0), (11, 0), (2, 3)])  # reserved opcodes, RSV bits
        return "reserved-bits-or-opcode", [_frame(bad[0], data, rsv=bad[1])]
    if shape == 7:  # a continuation with no message begun, or a message never ended
        return "bad-continuation", [_frame(0, data)] if rng.random() < 0.5 else [
            _frame(2, data, fin=False), _frame(2, data)]
    if shape == 8:  # oversized: a header announcing far more than any limit
        return "oversized", [_frame(2, b"", length=rng.choice([70_000, 20 << 20, 1 << 40])),
                             data + b"\0" * 65536]
    return "close-odd", [_frame(2, data), _frame(8, rng.choice(
        [b"", b"\x03", struct.pack("!H", 999) + b"x", struct.pack("!H", 1000) + b"\xff"]))]


# ---------------------------------------------------------------- running
def _handshake(port: int, subprotocol: str = "mqtt") -> tuple[socket.socket, WSConnection, bytes]:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    ws = WSConnection(ConnectionType.CLIENT)
    s.sendall(ws.send(Request(host="127.0.0.1", target="/ws", subprotocols=[subprotocol])))
    head = b""
    while b"\r\n\r\n" not in head:
        got = s.recv(4096)
        if not got:
            break
        head += got
    return s, ws, head


def run_case(port: int, frames: list[bytes], subprotocol: str = "mqtt") -> tuple[str, list[int]]:
    """('closed' | 'open', close codes the broker sent). The handshake must be 101."""
    s, _ws, head = _handshake(port, subprotocol)
    with s:
        assert head.startswith(b"HTTP/1.1 101"), head[:100]
        rest = head.split(b"\r\n\r\n", 1)[1]
        outcome, data = send_then_read(s, frames, READ_DEADLINE)
    return outcome, _close_codes(rest + data)


def _close_codes(data: bytes) -> list[int]:
    """The codes of the close frames in the broker's (unmasked) frames."""
    codes = []
    i = 0
    while i + 2 <= len(data):
        op, n = data[i] & 0x0F, data[i + 1] & 0x7F
        j = i + 2
        if n == 126:
            n, j = struct.unpack("!H", data[j:j + 2])[0], j + 2
        elif n == 127:
            n, j = struct.unpack("!Q", data[j:j + 8])[0], j + 8
        body = data[j:j + n]
        if op == 8:
            codes.append(struct.unpack("!H", body[:2])[0] if len(body) >= 2 else 1005)
        i = j + n
    return codes


def _healthy(port: int, n: int) -> None:
    """Another WebSocket client still logs in, subscribes, publishes and receives."""
    ws = WSRaw(port)
    try:
        assert isinstance(ws.answer, AcceptConnection)
        ws.send(encode(Connect(new_id(), username="guest", password=b"guest"), MQTT_311))
        ack = ws.packet()
        assert isinstance(ack, ConnAck) and ack.reason_code == 0, ack
        topic = f"fuzz/health/{new_id()}"
        ws.send(encode(Subscribe(1, (Subscription(topic, 1),)), MQTT_311))
        ws.packet()
        ws.send(encode(Publish(topic, b"alive-%d" % n), MQTT_311))
        got = ws.packet()
        assert isinstance(got, Publish) and got.payload == b"alive-%d" % n, got
    finally:
        ws.sock.close()


def test_fuzzed_mqtt_over_websocket_never_hurts_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    cases = [_frames(rng) for _ in range(CASES)]
    port = broker.admin_port
    outcomes: dict[str, int] = {}
    shapes: dict[str, int] = {}
    codes_seen: dict[int, int] = {}
    ran = 0
    t0 = time.monotonic()

    def run(case: tuple[str, list[bytes]]) -> tuple[str, list[int]]:
        return run_case(port, case[1])

    # a batch's connections at once: the cases left open wait out READ_DEADLINE together
    with ThreadPoolExecutor(BATCH) as pool:
        for start in range(0, CASES, BATCH):
            batch = cases[start:start + BATCH]
            for (shape, _f), (outcome, codes) in zip(batch, pool.map(run, batch), strict=True):
                ran += 1
                shapes[shape] = shapes.get(shape, 0) + 1
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                for c in codes:
                    codes_seen[c] = codes_seen.get(c, 0) + 1
                assert INTERNAL_ERROR not in codes, (shape, codes)
            _healthy(port, start)
            if time.monotonic() - t0 > TIME_BUDGET:
                break
    print(f"ws fuzz: {ran} cases in {time.monotonic() - t0:.1f}s; outcomes {outcomes}; "
          f"shapes {shapes}; close codes {dict(sorted(codes_seen.items()))}")
    assert ran >= CASES // 2
    log = broker.log()
    assert "Traceback" not in log and "internal_error" not in log, log[-3000:]
