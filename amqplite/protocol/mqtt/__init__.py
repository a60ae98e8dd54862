"""amqplite.protocol.mqtt: sans-I/O MQTT 3.1, 3.1.1 and 5.0 (no sockets, no clocks).

Modules: ``errors`` (ReasonCode, MQTTError), ``properties`` (the MQTT 5
Properties record and its codec), ``packets`` (one frozen attrs class per
packet type, ``encode``), ``decoder`` (incremental ``Decoder``), ``topics``
(name/filter validation, ``$share``, matching, AMQP routing-key translation)
and ``connection`` (``MQTTConnection``, the server-side state machine).
A sibling of the AMQP modules in ``protocol/``; it imports none of them.
"""
