"""Random frames into one STOMP session (plain calls, hypothesis): valid and
invalid commands, destinations, ids, ack ids, transactions and header values in
any order. The session answers with MESSAGE, RECEIPT or ERROR (then nothing more
is read), never with an exception; and after the connection closes, nothing it
held is lost: every queue's messages are ready again."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sessions.stomp_node import Node

DESTINATIONS = ("/queue/q", "/queue/r", "/topic/t.*", "/topic/t.a", "/exchange/amq.direct/k",
                "/exchange/nosuch", "/amq/queue/q", "/amq/queue/missing", "/reply-queue/x",
                "/temp-queue/x", "q", "/bad", "")
VALUES = ("true", "false", "1", "-1", "x", "", "client", "client-individual", "auto", "s",
          "T_s@@session-1@@1", "T_s@@session-1@@2", "Q_/queue/q@@session-1@@1", "bogus",
          "/temp-queue/r", "t", "offset=1", "a = 1")
HEADERS = ("destination", "id", "ack", "receipt", "transaction", "persistent", "durable",
           "auto-delete", "prefetch-count", "requeue", "reply-to", "priority", "timestamp",
           "x-message-ttl", "x-queue-type", "x-dead-letter-exchange", "message-id",
           "subscription", "selector", "x-custom")
COMMANDS = ("SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT",
            "DISCONNECT")

frames = st.lists(st.tuples(
    st.sampled_from(COMMANDS),
    st.dictionaries(st.sampled_from(HEADERS), st.sampled_from(VALUES + DESTINATIONS),
                    max_size=5),
    st.sampled_from((b"", b"body", b"\x00\xff"))), max_size=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames, st.sampled_from(("1.0", "1.1", "1.2")))
def test_random_frames_never_raise_and_lose_nothing(
        script: list[tuple[str, dict[str, str], bytes]], version: str) -> None:
    node = Node()
    c = node.connect(version)
    for command, headers, body in script:
        if c.finished or c.proto.closed:
            break
        c.send(command, body, **{k.replace("-", "_"): v for k, v in headers.items()})
        node.commit()
        for f in c.frames():
            assert f.command in ("MESSAGE", "RECEIPT", "ERROR"), f
    c.close()
    node.commit()
    for vh in node.broker.vhosts.values():
        for q in vh.queues.values():
            assert q.unacked == 0, q.name
