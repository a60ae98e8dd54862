"""Protocol exceptions that carry an AMQP reply code.

Raising one of these anywhere below the server means "answer the peer with
this close"; ``ChannelError`` closes only the channel, ``ConnectionError_``
the whole connection.
"""

from __future__ import annotations

from amqplite.protocol.spec import ReplyCode


def amqp_text(code: int, detail: str) -> str:
    """Format a reply text the way RabbitMQ does: ``"NOT_FOUND - no queue 'x' in vhost '/'"``."""
    try:
        name = ReplyCode(code).name
    except ValueError:
        return detail
    return f"{name} - {detail}"


def erl_binary(data: bytes) -> str:
    """Render bytes the way Erlang's ~tp prints a binary (for RabbitMQ-shaped texts)."""
    if data and all(32 <= b < 127 for b in data):
        text = data.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


class AMQPError(Exception):
    """An error that maps to a channel.close or connection.close.

    ``reply_text`` is the full wire text (use :func:`amqp_text` to build it);
    ``class_id``/``method_id`` name the method that caused it (0 if none).
    """

    def __init__(
        self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        super().__init__(reply_code, reply_text, class_id, method_id)
        self.reply_code = int(reply_code)
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    @classmethod
    def make(
        cls, code: int, detail: str, class_id: int = 0, method_id: int = 0
    ) -> AMQPError:
        """Build an error whose text is ``amqp_text(code, detail)``."""
        return cls(code, amqp_text(code, detail), class_id, method_id)

    def __str__(self) -> str:
        return f"{self.reply_code} {self.reply_text}"


class ChannelError(AMQPError):
    """Soft error: the channel is closed with channel.close, the connection lives on."""


class ConnectionError_(AMQPError):  # trailing _ : not the builtin
    """Hard error: the whole connection is closed with connection.close."""


class FrameSyntaxError(ConnectionError_):
    """Malformed field data (truncated, bad tag, bad UTF-8): 502 SYNTAX_ERROR."""

    def __init__(self, detail: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(
            ReplyCode.SYNTAX_ERROR, amqp_text(ReplyCode.SYNTAX_ERROR, detail), class_id, method_id
        )
        self.detail = detail
