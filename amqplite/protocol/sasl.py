"""SASL responses of connection.start-ok: PLAIN and AMQPLAIN to (username, password).

Apart from the state machine because mechanisms change for reasons of their
own (a later EXTERNAL, say); errors use RabbitMQ's reply codes and texts.
"""

from __future__ import annotations

import struct

from amqplite.protocol.codec import decode_table
from amqplite.protocol.errors import ConnectionError_, erl_binary
from amqplite.protocol.spec import ReplyCode

__all__ = ["MECHANISMS", "parse_credentials"]

#: Mechanisms this module understands, in the order connection.start offers them.
MECHANISMS = ("PLAIN", "AMQPLAIN")

_I = struct.Struct(">I")


def parse_credentials(mechanism: str, response: bytes) -> tuple[str, str]:
    """(username, password) from a start-ok response; 502/503 when it is malformed."""
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise ConnectionError_.make(ReplyCode.SYNTAX_ERROR,
                                        f"response {erl_binary(response)} invalid", 10, 11)
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        # A field table *without* its length prefix (py-amqp, kombu, RabbitMQ's parser).
        table, _ = decode_table(_I.pack(len(response)) + response)
        login = table.get("LOGIN")
        password = table.get("PASSWORD")
        if not isinstance(login, str | bytes) or not isinstance(password, str | bytes):
            raise ConnectionError_.make(ReplyCode.SYNTAX_ERROR,
                                        "AMQPLAIN auth info is missing LOGIN or PASSWORD field",
                                        10, 11)
        if isinstance(login, bytes):
            login = login.decode("utf-8", "replace")
        if isinstance(password, bytes):
            password = password.decode("utf-8", "replace")
        return login, password
    raise ConnectionError_.make(ReplyCode.COMMAND_INVALID,
                                f"invalid authentication mechanism '{mechanism}'", 10, 11)
