"""amqplite.protocol.kafka: Kafka's wire protocol, sans-I/O (no sockets, no clocks, no trio).

Modules: ``primitives`` (integers, varints, strings, tags; :class:`CodecError`),
``framing`` (the size-prefixed :class:`FrameBuffer`, request/response headers),
``schema`` (the text schema and the one generic encoder/decoder), ``apis_core``,
``apis_groups`` and ``apis_admin`` (each API's schema), ``messages`` (the
``SUPPORTED`` table, whole requests and responses) and ``records`` (record
batches v2: CRC-32C, compression, re-basing stored batches for Fetch). Error
codes live in ``errors``; the session and the shell sit above this package.
"""
