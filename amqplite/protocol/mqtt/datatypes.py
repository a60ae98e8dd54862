"""MQTT data representations (section 1.5): integers, varints, strings, binary.

Readers take a memoryview and an offset and return ``(value, new_offset)``;
they raise :class:`MQTTError` 0x81 on truncation or invalid data, never an
IndexError or UnicodeDecodeError.
"""

from __future__ import annotations

import struct

from amqplite.protocol.mqtt.errors import malformed

MAX_VARINT = 268_435_455  # 4 bytes of 7 bits [MQTT-1.5.5]
MAX_STRING = 65_535

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
pack_u16 = _U16.pack
pack_u32 = _U32.pack
unpack_u16 = _U16.unpack_from
unpack_u32 = _U32.unpack_from


def encode_varint(value: int) -> bytes:
    """Variable Byte Integer, minimal length [MQTT-1.5.5-1]."""
    if value < 128:
        if value < 0:
            raise ValueError(f"varint out of range: {value}")
        return bytes((value,))
    if value > MAX_VARINT:
        raise ValueError(f"varint out of range: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(buf: memoryview | bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    """Read a Variable Byte Integer; more than 4 bytes or a non-minimal form is malformed.

    Returns ``(-1, pos)`` when the buffer ends before the integer does (the
    incremental decoder waits for more bytes); callers inside a packet body
    treat that as truncation.
    """
    value = 0
    shift = 0
    for i in range(4):
        if pos + i >= end:
            return -1, pos
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and i:
                # [MQTT-1.5.5-1] the encoding MUST use the minimum number of bytes
                raise malformed("variable byte integer not in its shortest form")
            return value, pos + i + 1
        shift += 7
    raise malformed("variable byte integer longer than 4 bytes")


def body_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """A varint that must lie inside a packet body."""
    value, new = decode_varint(buf, pos, end)
    if value < 0:
        raise malformed("truncated variable byte integer")
    return value, new


def check_text(text: str) -> str:
    """UTF-8 rules beyond well-formedness: no U+0000 [MQTT-1.5.4-2] (surrogates
    cannot be encoded by Python's strict codec [MQTT-1.5.4-1])."""
    if "\x00" in text:
        raise malformed("UTF-8 string contains U+0000")
    return text


def encode_str(text: str) -> bytes:
    """A UTF-8 Encoded String: two-byte length then the bytes."""
    data = text.encode("utf-8")
    if len(data) > MAX_STRING:
        raise ValueError("string longer than 65535 bytes")
    return pack_u16(len(data)) + data


def encode_bin(data: bytes) -> bytes:
    """Binary Data: two-byte length then the bytes."""
    if len(data) > MAX_STRING:
        raise ValueError("binary data longer than 65535 bytes")
    return pack_u16(len(data)) + data


def read_u8(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise malformed("truncated byte")
    return buf[pos], pos + 1


def read_u16(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise malformed("truncated two-byte integer")
    return unpack_u16(buf, pos)[0], pos + 2


def read_u32(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise malformed("truncated four-byte integer")
    return unpack_u32(buf, pos)[0], pos + 4


def read_bin(buf: memoryview, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 2 > end:
        raise malformed("truncated length")
    size = unpack_u16(buf, pos)[0]
    start = pos + 2
    stop = start + size
    if stop > end:
        raise malformed("length runs past the end of the packet")
    return bytes(buf[start:stop]), stop


def read_str(buf: memoryview, pos: int, end: int) -> tuple[str, int]:
    """A UTF-8 Encoded String; ill-formed UTF-8 is malformed [MQTT-1.5.4-1]."""
    if pos + 2 > end:
        raise malformed("truncated length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise malformed("length runs past the end of the packet")
    try:
        text = str(buf[pos + 2 : stop], "utf-8")
    except UnicodeDecodeError:
        raise malformed("string is not well-formed UTF-8") from None
    if "\x00" in text:
        raise malformed("UTF-8 string contains U+0000")  # [MQTT-1.5.4-2]
    return text, stop
