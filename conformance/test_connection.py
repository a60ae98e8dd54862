"""Connection and channel life: channel numbers."""

from __future__ import annotations

import struct

from conformance._raw import RawConnection, shortstr, table

# ----------------------------------------------------------- channel numbers


def test_channel_65535_opens_on_a_fresh_connection(url: str) -> None:
    """channel_max caps how many channels are open, not their numbers."""
    raw = RawConnection(url).open(channel=False)
    try:
        raw.open_channel(65535)
        raw.send_method(65535, 50, 10, b"\x00\x00" + shortstr("") + b"\x08" + table())
        ok = raw.expect((50, 11), channel=65535)
        assert ok.args[1 : 1 + ok.args[0]].startswith(b"amq.gen-")
    finally:
        raw.close()


def test_negotiated_channel_max_counts_open_channels(url: str) -> None:
    raw = RawConnection(url).open(channel=False, channel_max=3)
    try:
        for number in (100, 65535, 7):  # all above channel_max, three of them
            raw.open_channel(number)
        raw.send_method(8, 20, 10, shortstr(""))
        assert raw.expect_close() == (
            530, "NOT_ALLOWED - number of channels opened (3) has reached the negotiated"
            " channel_max (3)", 0, 0)
    finally:
        raw.sock.close()


def test_closed_channel_frees_its_slot(url: str) -> None:
    raw = RawConnection(url).open(channel=False, channel_max=1)
    try:
        for number in (40000, 2, 40000):
            raw.open_channel(number)
            raw.send_method(number, 20, 40, struct.pack(">H", 200) + shortstr("done")
                            + struct.pack(">HH", 0, 0))
            raw.expect((20, 41), channel=number)
    finally:
        raw.close()
