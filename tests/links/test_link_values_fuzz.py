"""Random link values PUT to a running broker (issue 33, items 4 and 10).

Hypothesis builds shovel and federation-upstream values: random JSON (deep
nesting, integers beyond 64 bits, wrong types, long and non-ASCII strings) on
its own and in place of one field of a valid value. Every answer must be a
201/204/400/403 (never a 500), the broker must stay healthy (an AMQP publish
and get still work, no traceback in its log), and every value it accepted
must export through GET /api/definitions and import back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.admin.conftest import AdminBroker, start_admin_broker

SHOVEL = {"src-uri": "amqp://", "src-queue": "fuzz-src", "dest-uri": "amqp://",
          "dest-queue": "fuzz-dst", "reconnect-delay": 5}
UPSTREAM = {"uri": "amqp://", "exchange": "fuzz-x", "max-hops": 1}
SHOVEL_FIELDS = sorted({*SHOVEL, "src-exchange", "src-exchange-key", "dest-exchange",
                        "dest-exchange-key", "src-prefetch-count", "src-delete-after",
                        "ack-mode", "dest-add-forward-headers", "dest-publish-properties",
                        "src-consumer-args", "src-protocol", "dest-protocol"})
UPSTREAM_FIELDS = sorted({*UPSTREAM, "prefetch-count", "reconnect-delay", "ack-mode",
                          "trust-user-id", "expires", "message-ttl", "queue"})
PROPERTIES = ["priority", "timestamp", "delivery_mode", "content_type", "expiration",
              "headers", "user_id"]

text = st.text(st.characters(codec="utf-8"), max_size=20) | st.sampled_from(
    ["x" * 255, "x" * 256, "é" * 128, "amq.x", "never", "queue-length", "on-confirm", ""])
scalar = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
          | st.sampled_from([0, 1, 255, 256, -1, 2**63, 2**64, 10**30])
          | st.floats(allow_nan=False, allow_infinity=False) | text)
json_value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(text, inner, max_size=3), max_leaves=12)


def deep(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


deep_value = st.builds(deep, st.sampled_from([1, 30, 63, 64, 65, 200, 900]), scalar)
#: values of the right type, often in range: so that many PUTs are accepted too
plausible = (st.integers(0, 300) | st.booleans() | st.text(max_size=10)
             | st.sampled_from(["on-publish", "no-ack", "never", "amqp://", "60000", 2, 1.5])
             | st.dictionaries(st.text(max_size=5), st.integers(0, 9) | st.text(max_size=5),
                               max_size=2))


@st.composite
def field_value(draw: st.DrawFn) -> Any:
    """Half the time a plausible value, else random JSON or a deep one."""
    kind = draw(st.sampled_from(["plausible"] * 4 + ["random", "deep"]))
    return draw({"plausible": plausible, "random": json_value, "deep": deep_value}[kind])


properties = st.dictionaries(st.sampled_from(PROPERTIES), field_value(), max_size=2)


@st.composite
def shovel_value(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["random", "one-field", "one-field", "one-field",
                                 "properties", "properties"]))
    if kind == "random":
        return draw(json_value)
    value = dict(SHOVEL)
    if kind == "properties":
        value["dest-publish-properties"] = draw(properties)
    else:
        value[draw(st.sampled_from(SHOVEL_FIELDS))] = draw(field_value())
    return value


@st.composite
def upstream_value(draw: st.DrawFn) -> Any:
    if draw(st.sampled_from([True, False, False, False])):
        return draw(json_value)
    value = dict(UPSTREAM)
    value[draw(st.sampled_from(UPSTREAM_FIELDS))] = draw(field_value())
    return value


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_admin_broker(tmp_path_factory.mktemp("linkfuzz"))
    yield b
    b.proc.stop()


COUNTS: dict[str, int] = {}


def healthy(b: AdminBroker) -> None:
    conn = b.connect()
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"alive")
        assert ch.basic_get(q, auto_ack=True)[2] == b"alive"
    finally:
        conn.close()


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(component=st.sampled_from(["shovel", "federation-upstream"]), data=st.data())
def test_random_link_values(broker: AdminBroker, component: str, data: st.DataObject) -> None:
    value = data.draw(shovel_value() if component == "shovel" else upstream_value())
    path = f"/api/parameters/{component}/%2F/fuzz"
    with broker.api() as api:
        r = api.put(path, json={"value": value})
        assert r.status_code in (201, 204, 400, 403), (value, r.status_code, r.text)
        key = f"{component} {r.status_code}"
        COUNTS[key] = COUNTS.get(key, 0) + 1
        if r.status_code in (201, 204):
            defs = api.get("/api/definitions")
            assert defs.status_code == 200, defs.text
            again = api.post("/api/definitions", json=defs.json())
            assert again.status_code in (200, 201, 204), (value, again.text)
            assert api.delete(path).status_code == 204
    healthy(broker)
    assert "Traceback" not in broker.proc.log()


def test_counts_after_fuzzing(broker: AdminBroker) -> None:
    """Prints how the fuzzed PUTs were answered (run with -s to see it)."""
    print("link value fuzz answers:", dict(sorted(COUNTS.items())))
    assert "Traceback" not in broker.proc.log()
