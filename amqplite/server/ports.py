"""A taken port, reported so the operator knows which listener and which setting.

The kernel says only "Address already in use"; the broker opens two kinds of
listener (AMQP, admin API), each moved by its own setting.
"""

from __future__ import annotations

import errno

__all__ = ["PortInUse", "address_in_use"]


class PortInUse(OSError):
    def __init__(self, what: str, host: str, port: int, setting: str, extra: str = "") -> None:
        super().__init__(errno.EADDRINUSE, "Address already in use")
        flag = "--" + setting.replace("_", "-")
        self.message = (
            f"{what} port {port} on {host} is already in use (another amqplite or RabbitMQ?); "
            f"choose another with {flag}, AMQPLITE_{setting.upper()} or `{setting}` in the "
            f"config file{extra}")

    def __str__(self) -> str:
        return self.message


def address_in_use(exc: BaseException) -> bool:
    """Is ``exc``, or an exception inside it (trio groups them), EADDRINUSE?"""
    if isinstance(exc, BaseExceptionGroup):
        return any(address_in_use(e) for e in exc.exceptions)
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
