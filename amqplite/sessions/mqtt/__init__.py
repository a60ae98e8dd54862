"""The MQTT front's session rules as plain objects (DESIGN.md section 11): what a
session is and does, apart from sockets and clocks. The shell
(amqplite/server/mqtt/) reads and writes bytes through the sans-I/O codec
(amqplite/protocol/mqtt/), runs the timers, and calls these.

Modules: ``session`` (one connected session: CONNECT, PUBLISH into the broker,
confirms as PUBACK/PUBREC, deliveries as PUBLISH, QoS 1/2 flows, the end),
``registry`` (every session by (vhost, client id): takeover, packet ids and
rows across connections, expiry), ``wills`` (pending wills, delay and expiry
interplay), ``inflight`` (a session's QoS 2 packet ids, both ways),
``subscriptions`` (a session's queues and bindings, SUBSCRIBE/UNSUBSCRIBE,
retained messages owed), ``options`` (subscription options in bindings, what
a delivery makes of them), ``shared`` (shared subscriptions), ``accounting``
(the front's counters), ``common``.
"""
