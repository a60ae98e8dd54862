"""amqplite.protocol: sans-I/O AMQP 0-9-1 (no sockets, no clocks, no trio).

Modules: ``spec`` (constants, ReplyCode), ``errors`` (AMQPError and friends),
``codec`` (lossless field tables), ``properties`` (basic content properties),
``methods`` (one attrs class per method), ``frames`` (fast frame encoders),
``events`` (what the server is handed), ``reader`` (bytes to frames and
content), ``sasl`` (credentials), ``handshake`` (what start/tune negotiate)
and ``connection`` (ServerConnection, the server-side state machine). The
``mqtt`` package is the MQTT sibling (codec and MQTTConnection); it shares
nothing with the AMQP modules. Nothing is re-exported here so that importing
``protocol.spec`` stays cheap.
"""
