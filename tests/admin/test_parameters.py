"""Runtime parameters over the admin API (RabbitMQ's ``/api/parameters`` shapes):
validation at PUT, masking of URI passwords, definitions export/import, and
durability across a restart of the broker."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.admin.conftest import start_admin_broker

#: nothing listens there: the shovel retries, the parameter is what is tested
NOWHERE = "amqp://shovel:s3cret-pw@127.0.0.1:1/%2F"


def shovel(**over: Any) -> dict[str, Any]:
    v: dict[str, Any] = {"src-uri": NOWHERE, "src-queue": "src", "dest-uri": NOWHERE,
                         "dest-queue": "dst"}
    v.update(over)
    return {k: x for k, x in v.items() if x is not None}


def pname() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def test_put_get_list_delete(api: httpx.Client) -> None:
    name = pname()
    url = f"/api/parameters/shovel/%2F/{name}"
    assert api.put(url, json={"value": shovel()}).status_code == 201
    assert api.put(url, json={"value": shovel(**{"src-prefetch-count": 5})}).status_code == 204
    got = api.get(url).json()
    assert got["component"] == "shovel" and got["vhost"] == "/" and got["name"] == name
    assert got["value"]["src-prefetch-count"] == 5
    for path in ("/api/parameters", "/api/parameters/shovel", "/api/parameters/shovel/%2F"):
        assert name in [p["name"] for p in api.get(path).json()], path
    assert api.get("/api/parameters/federation-upstream").json() == []
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404
    assert api.delete(url).status_code == 404


def test_passwords_are_masked(api: httpx.Client) -> None:
    name = pname()
    url = f"/api/parameters/shovel/%2F/{name}"
    assert api.put(url, json={"value": shovel(**{"dest-uri": [NOWHERE]})}).status_code == 201
    for body in (api.get(url).text, api.get("/api/parameters/shovel").text):
        assert "s3cret-pw" not in body
    got = api.get(url).json()["value"]
    assert got["src-uri"] == "amqp://shovel:***@127.0.0.1:1/%2F"
    assert got["dest-uri"] == ["amqp://shovel:***@127.0.0.1:1/%2F"]
    api.delete(url)


@pytest.mark.parametrize(("value", "field"), [
    (shovel(**{"src-queue": None}), "src-queue"),
    (shovel(**{"src-exchange": "x"}), "src-queue"),
    (shovel(**{"dest-exchange": "x"}), "dest-queue"),
    (shovel(**{"src-uri": None}), "src-uri"),
    (shovel(**{"dest-uri": "http://example.com/"}), "dest-uri"),
    (shovel(**{"ack-mode": "sometimes"}), "ack-mode"),
    (shovel(**{"no-such-field": 1}), "no-such-field"),
    (shovel(**{"src-prefetch-count": 0}), "src-prefetch-count"),
    (shovel(**{"src-delete-after": "soon"}), "src-delete-after"),
    (shovel(**{"reconnect-delay": "5"}), "reconnect-delay"),
])
def test_bad_shovel_is_400_naming_the_field(api: httpx.Client, value: dict[str, Any],
                                            field: str) -> None:
    url = f"/api/parameters/shovel/%2F/{pname()}"
    r = api.put(url, json={"value": value})
    assert r.status_code == 400, r.text
    assert field in r.json()["reason"]
    assert api.get(url).status_code == 404


def test_unknown_component_and_bad_value(api: httpx.Client) -> None:
    r = api.put(f"/api/parameters/nonesuch/%2F/{pname()}", json={"value": {}})
    assert r.status_code == 400 and "component" in r.json()["reason"]
    r = api.put(f"/api/parameters/shovel/%2F/{pname()}", json={"value": "x"})
    assert r.status_code == 400 and "value" in r.json()["reason"]
    assert api.put(f"/api/parameters/shovel/nonesuch/{pname()}",
                   json={"value": shovel()}).status_code == 404


def test_definitions_round_trip(api: httpx.Client) -> None:
    name = pname()
    url = f"/api/parameters/shovel/%2F/{name}"
    assert api.put(url, json={"value": shovel()}).status_code == 201
    exported = api.get("/api/definitions").json()
    mine = [p for p in exported["parameters"] if p["name"] == name]
    # the export imports back whole: URIs in clear, as RabbitMQ writes them
    assert mine == [{"vhost": "/", "component": "shovel", "name": name, "value": shovel(),
                     "defined_by": "guest"}]
    assert api.delete(url).status_code == 204
    doc = {"parameters": [*mine, {"vhost": "/", "component": "some-other-plugin",
                                  "name": "up", "value": {"uri": "amqp://"}}]}
    r = api.post("/api/definitions", json=doc)
    assert r.status_code in (200, 201, 204), r.text
    assert api.get(url).json()["value"]["src-queue"] == "src"
    skipped = api.post("/api/definitions", json=doc).json()
    assert any("some-other-plugin" in s for s in skipped.get("skipped", [])), skipped
    bad = {"parameters": [{"vhost": "/", "component": "shovel", "name": pname(),
                           "value": shovel(**{"ack-mode": "x"})}]}
    r = api.post("/api/definitions", json=bad)
    assert r.status_code == 400 and "parameters[0].value" in r.json()["reason"]
    api.delete(url)


def test_parameters_survive_a_restart(tmp_path: Path) -> None:
    b = start_admin_broker(tmp_path / "b")
    try:
        with b.api() as api:
            assert api.put("/api/vhosts/v1").status_code in (201, 204)
            for vh in ("%2F", "v1"):
                assert api.put(f"/api/parameters/shovel/{vh}/keep",
                               json={"value": shovel()}).status_code == 201
            assert api.put("/api/parameters/shovel/%2F/gone",
                           json={"value": shovel()}).status_code == 201
            assert api.delete("/api/parameters/shovel/%2F/gone").status_code == 204
            # a value that is a list (an upstream set) comes back as one too
            assert api.put("/api/parameters/federation-upstream/v1/up", json={
                "value": {"uri": "amqp://127.0.0.1:1"}}).status_code == 201
            assert api.put("/api/parameters/federation-upstream-set/v1/both", json={
                "value": [{"upstream": "up"}]}).status_code == 201
        b.proc.kill()  # no clean stop: what the API answered was committed
        b = start_admin_broker(tmp_path / "b")
        with b.api() as api:
            got = api.get("/api/parameters/shovel").json()
            assert sorted((p["vhost"], p["name"]) for p in got) == [("/", "keep"),
                                                                     ("v1", "keep")]
            got_set = api.get("/api/parameters/federation-upstream-set/v1/both").json()
            assert got_set["value"] == [{"upstream": "up"}]
            assert api.delete("/api/vhosts/v1").status_code == 204
        b.proc.stop()
        b = start_admin_broker(tmp_path / "b")
        with b.api() as api:
            assert [p["vhost"] for p in api.get("/api/parameters").json()] == ["/"]
    finally:
        b.proc.stop()
