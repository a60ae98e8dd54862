"""Random link values PUT to a running broker (issue 33, items 4 and 10).

Hypothesis builds shovel and federation-upstream values: random JSON (deep
nesting, integers beyond 64 bits, wrong types, long and non-ASCII strings) on
its own and in place of one field of a valid value. Every answer must be a
201/204/400/403 (never a 500), the broker must stay healthy (an AMQP publish
and get still work, no traceback in its log), and every value it accepted
must export through GET /api/definitions and import back.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.admin.conftest import AdminBroker
from tests.links.test_link_values import broker, healthy

__all__ = ["broker"]  # the module's broker fixture, shared

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


#: per field, values of its own type (most accepted, some just out of range)
TYPED: dict[str, Any] = {
    "src-prefetch-count": st.integers(0, 70000), "prefetch-count": st.integers(0, 70000),
    "reconnect-delay": st.integers(-1, 100) | st.floats(0, 10),
    "src-delete-after": st.sampled_from(["never", "queue-length", 0, 1, 100]),
    "ack-mode": st.sampled_from(["on-confirm", "on-publish", "no-ack", "none"]),
    "dest-add-forward-headers": st.booleans(), "trust-user-id": st.booleans(),
    "src-consumer-args": st.dictionaries(st.text(max_size=8), scalar, max_size=3),
    "expires": st.integers(0, 2**33), "message-ttl": st.integers(-1, 2**33),
    "max-hops": st.integers(0, 40000), "priority": st.integers(0, 300),
    "timestamp": st.integers(-1, 2**65), "delivery_mode": st.integers(0, 3),
    "expiration": st.sampled_from(["0", "60000", "-1", "4294967296"]),
}


@st.composite
def field_value(draw: st.DrawFn, field: str = "") -> Any:
    """Mostly a value of the field's own type, else plausible, random JSON or deep."""
    kind = draw(st.sampled_from(["typed"] * 3 + ["plausible", "random", "deep"]))
    options = {"typed": TYPED.get(field, plausible), "plausible": plausible,
               "random": json_value, "deep": deep_value}
    return draw(options[kind])


@st.composite
def properties(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(PROPERTIES), max_size=2, unique=True))
    return {k: draw(field_value(k)) for k in keys}


@st.composite
def shovel_value(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["random", "one-field", "one-field", "one-field",
                                 "properties", "properties"]))
    if kind == "random":
        return draw(json_value)
    value = dict(SHOVEL)
    if kind == "properties":
        value["dest-publish-properties"] = draw(properties())
    else:
        field = draw(st.sampled_from(SHOVEL_FIELDS))
        value[field] = draw(field_value(field))
    return value


@st.composite
def upstream_value(draw: st.DrawFn) -> Any:
    if draw(st.sampled_from([True, False, False, False])):
        return draw(json_value)
    value = dict(UPSTREAM)
    field = draw(st.sampled_from(UPSTREAM_FIELDS))
    value[field] = draw(field_value(field))
    return value


COUNTS: dict[str, int] = {}


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
            # (404: a shovel with src-delete-after may have deleted itself already)
            assert api.delete(path).status_code in (204, 404)
    healthy(broker)
    assert "Traceback" not in broker.proc.log()


def test_counts_after_fuzzing(broker: AdminBroker) -> None:
    """Prints how the fuzzed PUTs were answered (run with -s to see it)."""
    print("link value fuzz answers:", dict(sorted(COUNTS.items())))
    assert "Traceback" not in broker.proc.log()
