"""The STOMP front's trio shell (DESIGN.md section 11): ``listener`` accepts, and
``client`` reads, writes and keeps the heart-beat timers of one connection. The
rules are ``amqplite.sessions.stomp``, the wire ``amqplite.protocol.stomp``."""

from amqplite.server.stomp.listener import StompListener, run_stomp

__all__ = ["StompListener", "run_stomp"]
