"""SASL responses of connection.start-ok: PLAIN and AMQPLAIN to (username, password),
EXTERNAL to the name the transport vouches for (a TLS client certificate).

Apart from the state machine because mechanisms change for reasons of their
own; errors use RabbitMQ's reply codes and texts. No TLS here: the server
passes the certificate's user name in as plain data.
"""

from __future__ import annotations

import struct

from amqplite.protocol.codec import decode_table
from amqplite.protocol.errors import ConnectionError_, erl_binary
from amqplite.protocol.spec import ReplyCode

__all__ = ["EXTERNAL", "MECHANISMS", "offered", "parse_credentials"]

#: Mechanisms offered by default, in the order connection.start offers them.
MECHANISMS = ("PLAIN", "AMQPLAIN")
#: RabbitMQ's rabbitmq_auth_mechanism_ssl: the user is the client certificate's name.
EXTERNAL = "EXTERNAL"


def offered(configured: tuple[str, ...], external_user: str | None) -> tuple[str, ...]:
    """The configured mechanisms this connection can use: EXTERNAL only with a user
    name from a verified client certificate (RabbitMQ offers it only then too)."""
    return tuple(m for m in configured if m != EXTERNAL or external_user is not None)

_I = struct.Struct(">I")


def parse_credentials(mechanism: str, response: bytes,
                      external_user: str | None = None) -> tuple[str, str | None]:
    """(username, password) from a start-ok response; 502/503 when it is malformed.

    EXTERNAL gives (the certificate's user, None): there is no password to check,
    and the response (an optional authorisation identity) is ignored, as RabbitMQ does.
    """
    if mechanism == EXTERNAL and external_user is not None:
        return external_user, None
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
