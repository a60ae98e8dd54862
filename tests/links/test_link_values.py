"""Link values typed at PUT and failing links that back off (issue 33, items 4 and 10).

Pure parts (the value checks, the backoff) by plain calls; the rest against a
real broker process with httpx and pika: each bad value is a 400 naming its
field, and a shovel that fails while connecting or while forwarding costs a
bounded number of connections, shows its reason, and with reconnect-delay 0
stays terminated. The counts are of connections the broker opened
(``rabbitmq_connections_opened_total``) while the link failed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio

from amqplite.links import backoff as B
from amqplite.links import config, federation_config
from amqplite.links import values as V
from amqplite.links.client_protocol import ProtocolFailure
from amqplite.links.shovel import cancellation
from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for
from tests.links.test_shovel import name, publish, status


def nested(depth: int, leaf: Any = 1) -> Any:
    v = leaf
    for _ in range(depth):
        v = {"a": v}
    return v


SHOVEL = {"src-uri": "amqp://", "src-queue": "s", "dest-uri": "amqp://", "dest-queue": "d"}
UPSTREAM = {"uri": "amqp://"}

# ------------------------------------------------------------------ pure: the values

BAD_PROPERTIES = [
    ({"priority": 10**9}, "dest-publish-properties.priority"),
    ({"timestamp": "x"}, "dest-publish-properties.timestamp"),
    ({"delivery_mode": "x"}, "dest-publish-properties.delivery_mode"),
    ({"content_type": "x" * 300}, "dest-publish-properties.content_type"),
    ({"headers": nested(900)}, "dest-publish-properties.headers"),
    ({"expiration": "soon"}, "dest-publish-properties.expiration"),
    ({"nonesuch": 1}, "dest-publish-properties.nonesuch"),
]


@pytest.mark.parametrize(("props", "field"), BAD_PROPERTIES)
def test_unencodable_publish_properties_are_refused(props: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        config.parse({**SHOVEL, "dest-publish-properties": props})


def test_publish_properties_that_encode_are_kept() -> None:
    props = {"priority": 9, "timestamp": 2**63, "delivery_mode": 2, "content_type": "x" * 255,
             "expiration": "60000", "user_id": "guest"}
    assert config.parse({**SHOVEL, "dest-publish-properties": props}).publish_properties \
        == props


@pytest.mark.parametrize(("value", "field"), [
    ({"src-queue": "q" * 256}, "src-queue"),
    ({"dest-exchange-key": "k" * 256, "dest-queue": None}, "dest-exchange-key"),
    ({"src-prefetch-count": "10"}, "src-prefetch-count"),
    ({"prefetch-count": 10**30}, "prefetch-count"),
    ({"src-delete-after": 1.5}, "src-delete-after"),
    ({"dest-add-forward-headers": "yes"}, "dest-add-forward-headers"),
    ({"src-consumer-args": nested(65)}, "src-consumer-args"),
    ({"src-consumer-args": {"x": 2**64}}, "src-consumer-args.x"),
    ({"src-consumer-args": {"k" * 256: 1}}, "src-consumer-args key"),
    ({"src-queue": "\ud800"}, "src-queue"),
    ({"dest-queue": ""}, "dest-queue: must not be empty"),
])
def test_shovel_fields_typed_as_amqp_carries_them(value: dict[str, Any], field: str) -> None:
    v = {k: x for k, x in {**SHOVEL, **value}.items() if x is not None}
    with pytest.raises(ValueError, match=rf"^{field}"):
        config.parse(v)


def test_tables_nest_as_deep_as_the_codec_reads() -> None:
    V.table(nested(64), "t")  # the codec's MAX_NESTING, the table itself counting 1
    with pytest.raises(ValueError, match="nests deeper than 64"):
        V.table(nested(65), "t")


@pytest.mark.parametrize("delay", [-1, "5", True, 10**400, float("inf"), float("nan")])
def test_reconnect_delay_must_be_seconds(delay: Any) -> None:
    with pytest.raises(ValueError, match=r"^reconnect-delay: must be a number of seconds"):
        config.parse({**SHOVEL, "reconnect-delay": delay})
    with pytest.raises(ValueError, match=r"^reconnect-delay: must be a number of seconds"):
        federation_config.parse_upstream({**UPSTREAM, "reconnect-delay": delay})


def test_reconnect_delay_default_and_zero() -> None:
    assert config.parse(SHOVEL).reconnect_delay == 5.0  # RabbitMQ's default
    assert config.parse({**SHOVEL, "reconnect-delay": 0}).reconnect_delay == 0.0


@pytest.mark.parametrize(("value", "field"), [
    ({"max-hops": 10**9}, "max-hops"),
    ({"max-hops": 0}, "max-hops"),
    ({"prefetch-count": 2**64}, "prefetch-count"),
    ({"expires": 2**40}, "expires"),
    ({"message-ttl": -1}, "message-ttl"),
    ({"exchange": "x" * 256}, "exchange"),
    ({"queue": 5}, "queue"),
    ({"trust-user-id": "true"}, "trust-user-id"),
    ({"ack-mode": {"a": 1}}, "ack-mode"),
])
def test_upstream_fields_typed_as_amqp_carries_them(value: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        federation_config.parse_upstream({**UPSTREAM, **value})
    with pytest.raises(ValueError, match=rf"^\[0\]\.{field}: "):
        federation_config.parse_upstream_set([{"upstream": "u", **value}])


# ------------------------------------------------------------------ pure: the backoff

def test_backoff_doubles_to_a_cap_and_starts_again_after_a_healthy_run() -> None:
    b = B.Backoff(1.0)
    waits = [b.failed(0) for _ in range(10)]
    assert waits[:4] == [1, 2, 4, 8] and max(waits) == B.MAX_DELAY
    assert b.failed(B.HEALTHY_AFTER) == 1.0  # it had run long enough: from the start
    assert B.Backoff(300).failed(0) == 300  # a longer reconnect-delay is honoured
    assert B.Backoff(0).failed(0) == B.MIN_DELAY


def test_backoff_logs_once_per_reason() -> None:
    b = B.Backoff(1.0)
    assert [b.should_log(r) for r in ("a", "a", "a", "b", "b")] == [True, False, False,
                                                                   True, False]
    assert b.recovered() and not b.recovered()  # it runs, and fails again at once:
    assert not b.should_log("b") and not b.recovered()  # nothing new to say
    b.failed(B.HEALTHY_AFTER)  # it had run long enough: a new run of failures
    assert b.should_log("b") and b.recovered()


async def test_a_stopped_link_raises_only_its_cancellation() -> None:
    """A link stopped while its connections fail (a delivery in flight when the scope
    is cancelled) catches a group of Cancelled and ProtocolFailure; re-raised whole, the
    failure escaped the cancel scope and ended the links supervisor and the broker
    (found by test_link_values_fuzz). Only the Cancelled goes on, and the scope
    absorbs it."""
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.sleep(0)
        except trio.Cancelled as exc:
            group = BaseExceptionGroup("teardown", [
                exc, ProtocolFailure("the source connection ended")])
            stop = cancellation(group)
            assert isinstance(stop, BaseExceptionGroup)
            assert all(isinstance(e, trio.Cancelled) for e in stop.exceptions)
            raise stop from None
    assert scope.cancelled_caught
    assert cancellation(ProtocolFailure("x")) is None


# ------------------------------------------------------------------ the real broker

@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_admin_broker(tmp_path_factory.mktemp("linkvals"))
    yield b
    b.proc.stop()


def healthy(b: AdminBroker) -> None:
    """An AMQP publish and get still work."""
    conn = b.connect()
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"alive")
        assert ch.basic_get(q, auto_ack=True)[2] == b"alive"
    finally:
        conn.close()


def put(b: AdminBroker, component: str, pname: str, value: Any) -> httpx.Response:
    with b.api() as api:
        return api.put(f"/api/parameters/{component}/%2F/{pname}", json={"value": value})


def test_put_refuses_each_bad_value_naming_it(broker: AdminBroker) -> None:
    for props, field in BAD_PROPERTIES:
        r = put(broker, "shovel", name(), {**SHOVEL, "dest-publish-properties": props})
        assert r.status_code == 400, (props, r.text)
        assert r.json()["reason"].startswith(f"value.{field}: "), r.text
    r = put(broker, "shovel", name(), {**SHOVEL, "reconnect-delay": -1})
    assert r.status_code == 400 and "value.reconnect-delay" in r.json()["reason"]
    r = put(broker, "federation-upstream", name(), {**UPSTREAM, "max-hops": 10**9})
    assert r.status_code == 400 and "value.max-hops" in r.json()["reason"]
    # the broker is well: a 900-deep value reached neither the links nor the store
    r = put(broker, "shovel", name(), {**SHOVEL, "src-consumer-args": nested(900)})
    assert r.status_code == 400 and "nests deeper than 64" in r.json()["reason"], r.text
    healthy(broker)


def opened(b: AdminBroker) -> int:
    """Connections the broker has opened since it started."""
    for line in httpx.get(b.admin_url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("rabbitmq_connections_opened_total "):
            return int(float(line.split()[1]))
    raise AssertionError("no rabbitmq_connections_opened_total in /metrics")


def failures_within(b: AdminBroker, shovel: str, seconds: float) -> tuple[int, dict[str, Any]]:
    """Connections opened in a window of ``seconds`` that starts once the shovel has
    failed (and the row then): what its retries cost."""
    row = wait_for(lambda: (r := status(b, shovel)) and r.get("reason") and r, 30,
                   what="the shovel to fail")
    before = opened(b)
    done = threading.Event()
    done.wait(seconds)  # a window to count in, not a synchronisation
    return opened(b) - before, row


def test_shovel_failing_at_setup_backs_off(broker: AdminBroker) -> None:
    """Refused at its destination's declare (403 for an amq.* name): before, the error
    was swallowed and the shovel reconnected at once, thousands of times a second."""
    sh = name()
    r = put(broker, "shovel", sh, {**SHOVEL, "src-queue": name("src"),
                                   "dest-queue": "amq.refused", "reconnect-delay": 1})
    assert r.status_code == 201, r.text
    n, row = failures_within(broker, sh, 4)
    # waits of 1, 2, 4 s: at most 3 attempts in 4 s, 2 connections each
    assert n <= 8, f"{n} connections in 4 s"
    assert row["state"] in ("terminated", "starting") and "403" in row["reason"], row
    with broker.api() as api:
        api.delete(f"/api/parameters/shovel/%2F/{sh}")


def test_shovel_failing_at_forward_backs_off(broker: AdminBroker) -> None:
    """Each forward refused (404: no such destination exchange): every attempt
    connects, consumes the waiting message and fails publishing it."""
    sh, src = name(), name("src")
    publish(broker, src, [b"waiting"])
    r = put(broker, "shovel", sh, {**SHOVEL, "src-queue": src, "dest-queue": None,
                                   "dest-exchange": "x.nonesuch", "reconnect-delay": 0.2})
    assert r.status_code == 201, r.text
    n, row = failures_within(broker, sh, 3)
    # waits of 0.2, 0.4, 0.8, 1.6 s: at most 4 attempts in 3 s (a fixed 0.2 s: 15)
    assert n <= 10, f"{n} connections in 3 s"
    assert "404" in row["reason"], row
    with broker.api() as api:
        api.delete(f"/api/parameters/shovel/%2F/{sh}")


@pytest.fixture
def refuser() -> Iterator[tuple[int, list[int]]]:
    """A port that accepts connections and closes them at once: (port, [accepted])."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = [0]

    def serve() -> None:
        while True:
            try:
                c, _ = server.accept()
            except OSError:
                return
            accepted[0] += 1
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def test_reconnect_delay_zero_means_not_restarted(broker: AdminBroker,
                                                  refuser: tuple[int, list[int]]) -> None:
    """RabbitMQ's meaning: a failed shovel stays terminated, until restarted by hand."""
    sh = name()
    port, accepted = refuser
    try:
        r = put(broker, "shovel", sh, {**SHOVEL, "dest-uri": f"amqp://guest:guest@127.0.0.1:{port}",
                                       "reconnect-delay": 0})
        assert r.status_code == 201, r.text
        row = wait_for(lambda: (x := status(broker, sh)) and x["state"] == "terminated" and x,
                       30, what="the shovel to terminate")
        assert "not restarted" in row["reason"], row
        assert accepted[0] == 1
        with broker.api() as api:  # a restart by hand tries once more
            assert api.delete(f"/api/shovels/vhost/%2F/{sh}/restart").status_code == 204
        wait_for(lambda: accepted[0] == 2, 30, what="the restart's one attempt")
        wait_for(lambda: (x := status(broker, sh)) and x["state"] == "terminated", 30,
                 what="the restarted shovel to terminate")
        assert accepted[0] == 2
    finally:
        with broker.api() as api:
            api.delete(f"/api/parameters/shovel/%2F/{sh}")


def test_federation_link_failing_at_connect_backs_off(
        broker: AdminBroker, refuser: tuple[int, list[int]]) -> None:
    """An upstream that closes every connection: the link shows the error and its
    attempts thin out (0.2, 0.4, 0.8, 1.6 s apart; a fixed 0.2 s made 15 in 3 s)."""
    port, accepted = refuser
    with broker.api() as api:
        r = api.put("/api/parameters/federation-upstream/%2F/closing", json={"value": {
            "uri": f"amqp://guest:guest@127.0.0.1:{port}", "reconnect-delay": 0.2}})
        assert r.status_code == 201, r.text
        r = api.put("/api/policies/%2F/fed-closing", json={
            "pattern": r"^fed\.closing$", "apply-to": "exchanges",
            "definition": {"federation-upstream": "closing"}})
        assert r.status_code in (201, 204), r.text
        assert api.put("/api/exchanges/%2F/fed.closing", json={"type": "fanout"}
                       ).status_code in (201, 204)

        def failed() -> dict[str, Any] | None:
            rows = [x for x in api.get("/api/federation-links/%2F").json()
                    if x["upstream"] == "closing" and x.get("error")]
            return rows[0] if rows else None

        try:
            row = wait_for(failed, 30, what="the link to fail")
            # (closed during the handshake, or reset: as the refuser's close lands)
            assert row["status"] in ("error", "starting") and row["error"], row
            before = accepted[0]
            threading.Event().wait(3)  # a window to count in, not a synchronisation
            assert accepted[0] - before <= 5, f"{accepted[0] - before} attempts in 3 s"
        finally:
            api.delete("/api/policies/%2F/fed-closing")
            api.delete("/api/exchanges/%2F/fed.closing")
            api.delete("/api/parameters/federation-upstream/%2F/closing")


def test_a_failing_shovel_logs_once(broker: AdminBroker) -> None:
    """Many failures with one reason: one log line (before, none at all)."""
    sh = name()
    r = put(broker, "shovel", sh, {**SHOVEL, "src-queue": name("src"),
                                   "dest-queue": "amq.logged", "reconnect-delay": 0.1})
    assert r.status_code == 201, r.text
    wait_for(lambda: opened(broker) and (status(broker, sh) or {}).get("reason"), 30,
             what="the shovel to fail")
    start = opened(broker)
    wait_for(lambda: opened(broker) - start >= 6, 30, what="three more attempts")
    lines = [ln for ln in broker.proc.log().splitlines() if f"shovel '{sh}'" in ln]
    assert len(lines) == 1 and "403" in lines[0], lines
    with broker.api() as api:
        api.delete(f"/api/parameters/shovel/%2F/{sh}")
