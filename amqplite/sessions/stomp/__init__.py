"""STOMP's session rules (DESIGN.md section 11): ``session`` (StompSession: frames
into broker commands, deliveries and confirms into MESSAGE and RECEIPT) and
``mapping`` (STOMP headers <-> AMQP properties). No trio, no sockets, no clock:
the trio shell is ``amqplite.server.stomp``."""
