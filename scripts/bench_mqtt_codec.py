"""Packets per second for the MQTT codec's hot path: a typical QoS 1 PUBLISH.

Usage: python scripts/bench_mqtt_codec.py [--count N] [--payload BYTES]
Measures encode, decode (Decoder fed 64 KiB reads) and the full inbound path
through MQTTConnection (decode + QoS 1 bookkeeping + PUBACK), for MQTT 3.1.1
and 5 (with two user properties). Single thread, no I/O.
"""

from __future__ import annotations

import argparse
import time

from amqplite.protocol.mqtt.connection import MQTTConnection, ServerLimits
from amqplite.protocol.mqtt.decoder import Decoder
from amqplite.protocol.mqtt.events import PublishReceived
from amqplite.protocol.mqtt.packets import Connect, Publish, encode
from amqplite.protocol.mqtt.properties import EMPTY, Properties

TOPIC = "sensors/building-1/floor-2/temperature"
CHUNK = 65_536


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>12,.0f} packets/s"


def bench(version: int, count: int, payload: bytes) -> None:
    props = Properties(user_properties=(("device", "d-17"), ("unit", "C"))) if version == 5 else EMPTY
    packets = [Publish(TOPIC, payload, 1, packet_id=i % 65535 + 1, properties=props) for i in range(count)]

    start = time.perf_counter()
    stream = b"".join([encode(p, version) for p in packets])
    enc = time.perf_counter() - start

    dec = Decoder(version)
    start = time.perf_counter()
    n = 0
    for off in range(0, len(stream), CHUNK):
        dec.receive(stream[off : off + CHUNK])
        while dec.next_packet() is not None:
            n += 1
    decode = time.perf_counter() - start
    assert n == count

    conn = MQTTConnection(ServerLimits(receive_maximum=65535))
    conn.receive_data(encode(Connect("bench", version)), 0.0)
    list(conn.events())
    conn.accept()
    conn.data_to_send()
    start = time.perf_counter()
    n = 0
    for off in range(0, len(stream), CHUNK):
        conn.receive_data(stream[off : off + CHUNK], 0.0)
        for event in conn.events():
            assert isinstance(event, PublishReceived)
            conn.ack_publish(event.publish.packet_id or 0)
            n += 1
        conn.data_to_send()
    full = time.perf_counter() - start
    assert n == count

    size = len(stream) // count
    print(f"MQTT level {version}, {size}-byte PUBLISH QoS 1:")
    print(f"  encode          {_rate(count, enc)}")
    print(f"  decode          {_rate(count, decode)}")
    print(f"  connection+ack  {_rate(count, full)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--payload", type=int, default=100)
    args = parser.parse_args()
    for version in (4, 5):
        bench(version, args.count, b"x" * args.payload)


if __name__ == "__main__":
    main()
