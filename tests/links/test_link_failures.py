"""Links say in plain words why they cannot connect (refused, unresolvable host,
silent peer, refused login, missing vhost, TLS), with host and port, the same in
the API, the CLI and the log; and definitions imported again, or an identical
PUT, leave running links alone while a changed one restarts. Two real amqplite
brokers, a closed port and a silent TCP listener opened here."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqplite.links.client import ConnectFailure, handshake_failure, where
from amqplite.links.client_protocol import PeerClosed
from amqplite.links.uri import parse
from tests.admin.conftest import AdminBroker
from tests.brokerproc import free_port, wait_for
from tests.links.test_federation import federate, links, running
from tests.links.test_shovel import name, publish, put_shovel, status, two_brokers


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[AdminBroker, AdminBroker]]:
    """Two fresh brokers per test: these tests leave federation upstreams and failed
    links behind, which the next test's listings would see."""
    yield from two_brokers(tmp_path)


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def failed(broker: AdminBroker, shovel: str) -> dict[str, Any]:
    """The shovel's row once it has failed (a long reconnect-delay keeps it so)."""
    row = wait_for(lambda: (r := status(broker, shovel)) and r["state"] == "terminated"
                   and r, 30, what=f"shovel {shovel} to fail")
    assert isinstance(row, dict)
    return row


def test_failures_in_plain_words(pair: tuple[AdminBroker, AdminBroker], silent: int) -> None:
    a, b = pair
    port_b = b.amqp_url.rsplit(":", 1)[1].split("/")[0]
    closed = free_port()
    base = b.amqp_url.split("@", 1)[1].split("/")[0]  # 127.0.0.1:port
    cases = {
        "refused": (f"amqp://guest:guest@127.0.0.1:{closed}",
                    f"connection refused by 127.0.0.1:{closed}"),
        "dns": ("amqp://guest:guest@no-such-host.invalid:5672",
                "could not resolve host no-such-host.invalid"),
        "silent": (f"amqp://guest:guest@127.0.0.1:{silent}?connection_timeout=1000",
                   f"no AMQP handshake from 127.0.0.1:{silent} within 1 s"),
        "login": (f"amqp://guest:wrong-pw@{base}",
                  f"authentication failed for user 'guest' at 127.0.0.1:{port_b}"),
        "vhost": (f"amqp://guest:guest@{base}/nope",
                  f"vhost 'nope' not found at 127.0.0.1:{port_b}"),
        "tls": (f"amqps://guest:guest@{base}?verify=verify_none",
                f"TLS handshake with 127.0.0.1:{port_b} failed"),
    }
    shovels = {case: name(case) for case in cases}
    for case, (uri, _) in cases.items():
        put_shovel(a, shovels[case], {"src-uri": "amqp://", "src-queue": name("q"),
                                      "dest-uri": uri, "dest-queue": "d",
                                      "reconnect-delay": 120})
    rows = {case: failed(a, shovels[case]) for case in cases}
    for case, (_, text) in cases.items():
        assert rows[case]["reason"].startswith(text), (case, rows[case])
        assert "Error" not in rows[case]["reason"] and "wrong-pw" not in str(rows[case])
    cli = a.cli("shovels")
    assert cli.returncode == 0, cli.stderr
    log = a.proc.log_path.read_text(errors="replace")
    for case, (_, text) in cases.items():
        assert text in cli.stdout, (case, cli.stdout)
        assert text in log, (case, log[-3000:])


def test_federation_link_to_a_stopped_peer(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    closed = free_port()
    with b.api() as api:
        assert api.put("/api/exchanges/%2F/fed.x", json={"type": "topic"}).status_code \
            in (201, 204)
    federate(b, a, uri=f"amqp://guest:guest@127.0.0.1:{closed}", **{"reconnect-delay": 120})
    text = f"connection refused by 127.0.0.1:{closed}"
    row = wait_for(lambda: next((lk for lk in links(b) if lk["status"] == "error"), None), 30,
                   what="the link to fail")
    assert row["error"] == text, row
    cli = b.cli("federation")
    assert text in cli.stdout, cli.stdout + cli.stderr


def connections(broker: AdminBroker) -> set[str]:
    with broker.api() as api:
        return {c["name"] for c in api.get("/api/connections").json()}


def test_unchanged_definitions_leave_links_running(
        pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    src, sh = name("src"), name()
    shovel = {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
              "dest-queue": name("dst")}
    put_shovel(a, sh, shovel)
    with b.api() as api:
        assert api.put("/api/exchanges/%2F/fed.x", json={"type": "topic"}).status_code \
            in (201, 204)
    federate(b, a)
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running" and running(b, "fed.x"),
             30, what="shovel and federation link running")
    publish(a, src, [b"m%d" % i for i in range(5)])
    wait_for(lambda: (status(a, sh) or {}).get("forwarded") == 5, 30, what="5 forwarded")
    before_a, before_b = connections(a), connections(b)
    row, link = status(a, sh), links(b)[0]
    for broker in (a, b):
        with broker.api() as api:
            defs = api.get("/api/definitions").json()
            r = api.post("/api/definitions", json=defs)
            assert r.status_code in (200, 201, 204), r.text
    put_shovel(a, sh, shovel)  # an identical PUT
    assert status(a, sh) == row and links(b)[0] == link
    assert connections(a) == before_a and connections(b) == before_b
    # a changed one restarts: new connections, its count from 0
    put_shovel(a, sh, {**shovel, "prefetch-count": 7})
    wait_for(lambda: (r := status(a, sh)) is not None and r["state"] == "running"
             and r["forwarded"] == 0, 30, what="the changed shovel restarted")
    wait_for(lambda: connections(b) - before_b, 30, what="a new connection to B")


def test_handshake_failures_by_stage() -> None:
    """What a close (or a dropped socket) during the handshake means depends on how
    far it got: after the login a refused login, after connection.open the vhost."""
    ep = parse("amqp://u:pw@h:5672/v?connection_timeout=1500")
    assert ep.timeout == 1.5
    cases = [
        (PeerClosed(403, "ACCESS_REFUSED - Login was refused"), "login",
         "authentication failed", "authentication failed for user 'u' at h:5672"),
        (PeerClosed(530, "NOT_ALLOWED - vhost v not found"), "vhost",
         "vhost not found", "vhost 'v' not found at h:5672"),
        (PeerClosed(530, "NOT_ALLOWED - access to vhost 'v' refused for user 'u'"), "vhost",
         "vhost refused", "access to vhost 'v' refused for user 'u' at h:5672"),
        (ConnectFailure("closed", ""), "login", "authentication failed",
         "authentication failed for user 'u' at h:5672 (the peer closed the connection)"),
        (ConnectFailure("closed", ""), "header", "closed",
         "h:5672 closed the connection during the AMQP handshake"),
        (PeerClosed(320, "CONNECTION_FORCED - bye"), "vhost", "closed",
         "h:5672 closed the connection: 320 CONNECTION_FORCED - bye"),
    ]
    for exc, stage, kind, text in cases:
        got = handshake_failure(exc, stage, ep, where(ep.host, ep.port))
        assert (got.kind, str(got)) == (kind, text)
    assert where("::1", 5672) == "[::1]:5672"
    for bad in ("0", "-5", "soon"):
        with pytest.raises(ValueError, match="connection_timeout"):
            parse(f"amqp://h?connection_timeout={bad}")
