"""The MQTT shell's socket constants (the session rules' names: sessions/mqtt/common.py)."""

from __future__ import annotations

RECV_SIZE = 64 * 1024
#: a client's consumers stop receiving while this much is queued unsent to it
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: after the connection ends, how long the writer may take to send what is queued
FINISH_TIMEOUT = 2.0
