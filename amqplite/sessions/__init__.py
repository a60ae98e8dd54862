"""Protocol fronts' session rules as plain objects (DESIGN.md section 11): no trio,
no sockets, no SQL; ``now`` is an argument; the core is reached through the
Broker's commands only. One package per front: ``mqtt`` (``stomp`` and
``kafka`` follow the same recipe, docs/internals.md)."""
