"""amqplite.protocol.stomp: sans-I/O STOMP 1.0, 1.1 and 1.2 (no sockets, no clocks).

Modules: ``errors`` (StompError, FrameError), ``frames`` (Frame, header
escaping, the incremental FrameParser and ``serialize``), ``destinations``
(RabbitMQ's destination grammar: /queue/, /topic/, /exchange/, /amq/queue/,
/temp-queue/, /reply-queue/), ``events`` (what a connection hands its shell)
and ``connection`` (StompConnection, the server-side state machine). It
follows RabbitMQ's rabbitmq_stomp plugin where that is stricter or clearer
than the specification leaves it; docs/dev/stomp-reference.md records what
RabbitMQ 3.10.8 was seen to do. A sibling of the AMQP and MQTT modules; it
imports none of them.
"""
