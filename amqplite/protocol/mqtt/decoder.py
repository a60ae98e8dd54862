"""Incremental MQTT decoder: bytes in, whole packets out.

The remaining length is checked against ``max_packet_size`` as soon as its
varint is complete, before the body is buffered, so an oversize packet costs
no memory (0x95 Packet too large, MQTT 5 sections 3.1.2.11.4 and 4.13). After an error the decoder
is poisoned: every later call raises the same error.
"""

from __future__ import annotations

from typing import NoReturn

from amqplite.protocol.mqtt.datatypes import MAX_VARINT, decode_varint
from amqplite.protocol.mqtt.errors import MQTTError, ReasonCode
from amqplite.protocol.mqtt.packets import (
    CONNECT,
    MQTT_311,
    Packet,
    decode_body,
    decode_connect_header,
)

MAX_PACKET = MAX_VARINT + 5  # largest packet the remaining length can express


class Decoder:
    """Frame an MQTT byte stream. ``version`` is the protocol level of the
    session (a CONNECT sets it from its own level); ``max_packet_size``
    bounds the whole packet, fixed header included, as MQTT 5 counts it."""

    __slots__ = ("_buf", "_error", "_pos", "max_packet_size", "version")

    def __init__(self, version: int = MQTT_311, max_packet_size: int = MAX_PACKET) -> None:
        self.version = version
        self.max_packet_size = max_packet_size
        self._buf = bytearray()
        self._pos = 0
        self._error: MQTTError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """Add bytes and return every packet now complete (raises on the first bad one)."""
        self.receive(data)
        out = []
        while (packet := self.next_packet()) is not None:
            out.append(packet)
        return out

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes without decoding (use :meth:`next_packet`)."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_packet(self) -> Packet | None:
        """The next complete packet, or None until more bytes arrive."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        end = len(buf)
        if end - pos < 2:
            return None
        first = buf[pos]
        try:
            length, body = decode_varint(buf, pos + 1, end)
        except MQTTError as err:
            self._fail(err)
        if length < 0:
            return None
        total = body - pos + length
        if total > self.max_packet_size:
            if first >> 4 == CONNECT:
                self._peek_level(body, end)
            self._fail(MQTTError(ReasonCode.PACKET_TOO_LARGE, f"packet of {total} bytes", first >> 4))
        stop = body + length
        if stop > end:
            return None
        view = memoryview(buf)
        try:
            if first >> 4 == CONNECT:
                self.version, _ = decode_connect_header(view, body, stop)
            packet = decode_body(first, view, body, stop, self.version)
        except MQTTError as err:
            self._fail(err)
        finally:
            view.release()
        self._pos = stop
        if stop == end:
            buf.clear()
            self._pos = 0
        elif stop > 65536:
            del buf[:stop]
            self._pos = 0
        return packet

    def _peek_level(self, body: int, end: int) -> None:
        """Learn an oversize CONNECT's level from what arrived, so an MQTT 5 client
        can be told 0x95 in a CONNACK it understands."""
        view = memoryview(self._buf)
        try:
            self.version, _ = decode_connect_header(view, body, end)
        except MQTTError:
            pass
        finally:
            view.release()

    def _fail(self, err: MQTTError) -> NoReturn:
        self._error = err
        raise err


def decode_all(data: bytes, version: int = MQTT_311) -> list[Packet]:
    """Decode a complete byte string (tests, tools); trailing partial bytes are malformed."""
    dec = Decoder(version)
    packets = dec.feed(data)
    if dec.buffered:
        raise MQTTError(ReasonCode.MALFORMED_PACKET, "truncated packet")
    return packets
