"""The errors a STOMP connection answers with an ERROR frame.

``message`` becomes the ERROR frame's ``message`` header (RabbitMQ's short
titles such as "Missing destination"), ``detail`` its text/plain body.
"""

from __future__ import annotations


class StompError(Exception):
    """Input a STOMP server refuses: answered by ERROR; then the connection closes,
    or goes on for a frame refused after login (``keeps_open``)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message, detail)
        self.message = message
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.message}: {self.detail}" if self.detail else self.message


class FrameError(StompError):
    """Bytes that are not a well-formed frame, or break a size limit.

    The only exception the frame parser raises: after it the byte stream
    cannot be resynchronised, so the parser stays poisoned.
    """

    def __init__(self, detail: str, message: str = "Malformed frame") -> None:
        super().__init__(message, detail)


#: refusals of a frame after which RabbitMQ 3.10.8's plugin closes the connection
#: anyway (after its other refusals of a frame it goes on)
_CLOSING = frozenset({"Duplicated subscription identifier", "Illegal command"})


def keeps_open(err: StompError) -> bool:
    """Does a logged-in connection go on after ``err``? Yes for a frame the STOMP
    rules refuse, as in RabbitMQ (its ``error/3``); no for bytes that are not a
    frame, for RabbitMQ's exceptions, and for the broker's refusals (``not_found``,
    ``access_refused``, ...: the callers close for those), as the specification
    has every ERROR do (docs/stomp.md, Errors)."""
    return not isinstance(err, FrameError) and err.message not in _CLOSING


# RabbitMQ 3.10.8's refusals of a CONNECT, for the shell (docs/dev/stomp-reference.md)


def access_refused(login: str) -> StompError:
    return StompError("Bad CONNECT", f"Access refused for user '{login}'\n")


def vhost_access_denied(vhost: str) -> StompError:
    return StompError("Bad CONNECT", f"Virtual host '{vhost}' access denied")


def vhost_connection_limit(vhost: str, limit: int) -> StompError:
    return StompError("Bad CONNECT", f"access to vhost '{vhost}' refused: connection "
                                     f"limit ({limit}) is reached\n")


def not_loopback() -> StompError:
    return StompError("Bad CONNECT", "non-loopback access denied")
