"""A tiny blocking MQTT client on a raw socket, packets encoded by hand.

paho answers the broker by itself (PUBREC -> PUBREL) and retries on its own;
the QoS 2 flow, retransmissions and an abrupt socket close need the bytes in
the test's hands. Nothing here imports a broker's codec.
"""

from __future__ import annotations

import socket
import struct

import attrs

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = range(8, 15)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def utf8(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(raw)) + raw


def packet(ptype: int, flags: int, body: bytes) -> bytes:
    return bytes([ptype << 4 | flags]) + varint(len(body)) + body


def connect(client_id: str, version: int = 4, *, clean: bool = True, keepalive: int = 60,
            user: str | None = None, password: str | None = None,
            will: tuple[str, bytes, int, bool] | None = None) -> bytes:
    """CONNECT at protocol level ``version`` (4: 3.1.1, 5: 5.0, empty properties)."""
    flags = (0x02 if clean else 0) | (0x80 if user is not None else 0)
    flags |= 0x40 if password is not None else 0
    props = b"\x00" if version == 5 else b""
    payload = utf8(client_id)
    if will is not None:
        topic, message, qos, retain = will
        flags |= 0x04 | qos << 3 | (0x20 if retain else 0)
        payload += props + utf8(topic) + utf8(message)
    if user is not None:
        payload += utf8(user)
    if password is not None:
        payload += utf8(password)
    head = utf8("MQTT") + bytes([version, flags]) + struct.pack(">H", keepalive)
    return packet(CONNECT, 0, head + props + payload)


def publish(topic: str, payload: bytes, qos: int = 0, packet_id: int = 0, *,
            version: int = 4, retain: bool = False, dup: bool = False) -> bytes:
    body = utf8(topic) + (struct.pack(">H", packet_id) if qos else b"")
    body += b"\x00" if version == 5 else b""
    return packet(PUBLISH, (8 if dup else 0) | qos << 1 | (1 if retain else 0), body + payload)


def ack(ptype: int, packet_id: int) -> bytes:
    """PUBACK / PUBREC / PUBREL / PUBCOMP (PUBREL carries flags 0010)."""
    return packet(ptype, 2 if ptype == PUBREL else 0, struct.pack(">H", packet_id))


def subscribe(packet_id: int, topic_filter: str, options: int, version: int = 4) -> bytes:
    """One filter; ``options`` is the QoS (3.1.1) or the MQTT 5 options byte."""
    props = b"\x00" if version == 5 else b""
    return packet(SUBSCRIBE, 2, struct.pack(">H", packet_id) + props + utf8(topic_filter)
                  + bytes([options]))


_BYTE = {0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A}
_TWO = {0x13, 0x21, 0x22, 0x23}
_FOUR = {0x02, 0x11, 0x18, 0x27}
_TEXT = {0x03, 0x08, 0x12, 0x15, 0x1A, 0x1C, 0x1F, 0x09, 0x16}  # binary data alike


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    """(value, next index) of a variable byte integer at ``data[i]``."""
    value, shift = 0, 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if not b & 0x80:
            return value, i


def properties(data: bytes, i: int) -> dict[int, list[object]]:
    """MQTT 5 properties at ``data[i]`` (length first): identifier -> values."""
    length, i = read_varint(data, i)
    end, out = i + length, {}  # type: ignore[var-annotated]
    while i < end:
        pid = data[i]
        i += 1
        value: object
        if pid in _BYTE:
            value, i = data[i], i + 1
        elif pid in _TWO:
            value, i = struct.unpack_from(">H", data, i)[0], i + 2
        elif pid in _FOUR:
            value, i = struct.unpack_from(">I", data, i)[0], i + 4
        elif pid == 0x0B:
            value, i = read_varint(data, i)
        elif pid in _TEXT:
            n = struct.unpack_from(">H", data, i)[0]
            value, i = data[i + 2:i + 2 + n], i + 2 + n
        elif pid == 0x26:
            n = struct.unpack_from(">H", data, i)[0]
            k = data[i + 2:i + 2 + n]
            i += 2 + n
            m = struct.unpack_from(">H", data, i)[0]
            value, i = (k, data[i + 2:i + 2 + m]), i + 2 + m
        else:
            raise AssertionError(f"unknown property 0x{pid:02x}")
        out.setdefault(pid, []).append(value)
    return out


@attrs.frozen
class Packet:
    type: int
    flags: int
    body: bytes

    @property
    def packet_id(self) -> int:
        return int(struct.unpack_from(">H", self.body)[0])

    def reason_code(self, version: int) -> int:
        """The reason code of a CONNACK (also 3.1.1's return code), an MQTT 5 ack or
        DISCONNECT (0 when the packet is in its short form)."""
        if self.type == CONNACK:
            return self.body[1]
        if self.type == DISCONNECT:
            return self.body[0] if self.body else 0
        if self.type == SUBACK:
            return self.body[3 if version == 5 else 2]
        return self.body[2] if version == 5 and len(self.body) > 2 else 0

    def publish_parts(self, version: int = 4) -> tuple[str, bytes, int, bool]:
        """(topic, payload, qos, retain) of a PUBLISH."""
        n = struct.unpack_from(">H", self.body)[0]
        topic = self.body[2:2 + n].decode()
        i = 2 + n
        qos = self.flags >> 1 & 3
        if qos:
            i += 2
        if version == 5:
            plen, i2 = read_varint(self.body, i)
            i = i2 + plen
        return topic, self.body[i:], qos, bool(self.flags & 1)


class RawClient:
    """One socket; ``recv`` returns whole packets, None once the broker closed."""

    def __init__(self, host: str, port: int, version: int = 4, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.version = version
        self._buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _need(self, n: int) -> bool:
        while len(self._buf) < n:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:  # closed with unread bytes: a reset
                return False
            if not chunk:
                return False
            self._buf += chunk
        return True

    def recv(self) -> Packet | None:
        if not self._need(2):
            return None
        length, mult, i = 0, 1, 1
        while True:
            if not self._need(i + 1):
                return None
            b = self._buf[i]
            length += (b & 0x7F) * mult
            mult *= 128
            i += 1
            if not b & 0x80:
                break
        if not self._need(i + length):
            return None
        first = self._buf[0]
        p = Packet(first >> 4, first & 0x0F, self._buf[i:i + length])
        self._buf = self._buf[i + length:]
        return p

    def expect(self, ptype: int) -> Packet:
        p = self.recv()
        assert p is not None, f"connection closed, expected packet type {ptype}"
        assert p.type == ptype, f"expected packet type {ptype}, got {p.type} {p.body!r}"
        return p

    def closed(self) -> bool:
        """Reads until the broker closes the connection; True (a timeout raises)."""
        while self.recv() is not None:
            pass
        return True

    def close(self) -> None:
        """Close the socket without DISCONNECT (an abnormal end for the broker)."""
        self.sock.close()
