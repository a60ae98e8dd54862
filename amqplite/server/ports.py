"""A taken port, reported so the operator knows which listener and which setting.

The kernel says only "Address already in use"; the broker opens several kinds of
listener (AMQP, AMQPS, MQTT, admin API), each moved by its own setting.
"""

from __future__ import annotations

import contextlib
import errno

import trio

__all__ = ["PortInUse", "accepted_peer", "address_in_use", "listen_tcp"]


#: who else usually holds a listener's port, and how to do without that listener
_USUAL: dict[str, tuple[str, str]] = {
    # 1883 is MQTT's registered port: a system Mosquitto holds it on many machines
    "mqtt_port": ("another amqplite, Mosquitto or RabbitMQ's MQTT plugin?",
                  "; --mqtt-port 0 turns MQTT off"),
    "stomp_port": ("another amqplite or RabbitMQ's STOMP plugin?",
                   "; --stomp-port 0 turns STOMP off"),
    "kafka_port": ("another amqplite, Kafka or Redpanda?", "; --kafka-port 0 turns Kafka off"),
}


class PortInUse(OSError):
    def __init__(self, what: str, host: str, port: int, setting: str, extra: str = "") -> None:
        super().__init__(errno.EADDRINUSE, "Address already in use")
        flag = "--" + setting.replace("_", "-")
        who, off = _USUAL.get(setting, ("another amqplite or RabbitMQ?", ""))
        self.message = (
            f"{what} port {port} on {host} is already in use ({who}); "
            f"choose another with {flag}, AMQPLITE_{setting.upper()} or `{setting}` in the "
            f"config file{off}{extra}")

    def __str__(self) -> str:
        return self.message


def address_in_use(exc: BaseException) -> bool:
    """Is ``exc``, or an exception inside it (trio groups them), EADDRINUSE?"""
    if isinstance(exc, BaseExceptionGroup):
        return any(address_in_use(e) for e in exc.exceptions)
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE


async def listen_tcp(port: int, hosts: list[str], what: str, setting: str,
                     ) -> list[trio.SocketListener]:
    """Listeners on ``port`` at each of ``hosts`` (every address when empty); a taken
    port raises :class:`PortInUse` naming ``what`` and its ``setting``. Port 0 picks
    one free port, the same on every host."""
    out: list[trio.SocketListener] = []
    targets: list[str | None] = list(hosts) or [None]
    for host in targets:
        try:
            got = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            if address_in_use(exc):
                raise PortInUse(what, host or "every address", port, setting) from None
            raise
        out.extend(got)
        if port == 0 and got:
            port = got[0].socket.getsockname()[1]
    return out


def accepted_peer(stream: trio.SocketStream) -> tuple[str, int] | None:
    """The peer of a fresh connection, with Nagle off (small frames go at once);
    None when it is already gone."""
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return None
    with contextlib.suppress(OSError):
        stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
    return peer[0], peer[1]
