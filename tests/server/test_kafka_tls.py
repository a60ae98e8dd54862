"""Kafka over TLS (issue 37): confluent-kafka with security.protocol SSL and SASL_SSL
on ``--kafka-tls-port``, certificates made for the run by tests/tlscerts.py; the
admin API's overview lists the listener."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.brokerproc import free_port, wait_for
from tests.server.kafkaclient import kafka_broker
from tests.server.mqttclient import listening
from tests.server.test_kafka_wire import admin_get

pytest.importorskip("cryptography")
from tests.tlscerts import make_pki

DEADLINE = 30.0


def test_ssl_and_sasl_ssl(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    with kafka_broker(tmp_path / "data", "--kafka-tls-port", str(port), "--tls-cert",
                      str(pki.server.cert), "--tls-key", str(pki.server.key)) as b:
        wait_for(lambda: listening(port), DEADLINE, what="the Kafka TLS listener")
        common = {"bootstrap.servers": f"127.0.0.1:{port}", "ssl.ca.location": str(pki.ca.cert)}
        ssl_only = {**common, "security.protocol": "SSL"}
        sasl = {**common, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.username": "guest", "sasl.password": "guest"}
        for i, conf in enumerate((ssl_only, sasl)):
            p = Producer({**conf, "acks": "all"})
            p.produce("secure", b"over tls %d" % i)
            assert p.flush(DEADLINE) == 0
        c = Consumer({**sasl, "group.id": "unused"})
        c.assign([TopicPartition("secure", 0, 0)])
        got: list[bytes] = []
        end = time.monotonic() + DEADLINE
        while len(got) < 2 and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == [b"over tls 0", b"over tls 1"]
        listeners = admin_get(b, "/api/overview")["listeners"]
        assert {"kafka", "kafka/ssl"} <= {x["protocol"] for x in listeners}


def test_client_certificate_login(tmp_path: Path) -> None:
    """With kafka_ssl_cert_login, a verified certificate's CN is the user of a client
    that skips SASL (security.protocol SSL); a CN that is no user closes it with one
    log line; SASL_SSL still logs in by SASL whatever the certificate says."""
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    cfg = tmp_path / "amqplite.toml"
    cfg.write_text('[users.app]\npassword = "app-secret"\n')
    with kafka_broker(tmp_path / "data", "--config", str(cfg), "--kafka-tls-port", str(port),
                      "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
                      "--tls-ca", str(pki.ca.cert), "--tls-verify-peer",
                      "--kafka-ssl-cert-login") as b:
        wait_for(lambda: listening(port), DEADLINE, what="the Kafka TLS listener")
        common = {"bootstrap.servers": f"127.0.0.1:{port}", "ssl.ca.location": str(pki.ca.cert),
                  "security.protocol": "SSL"}

        def with_cert(cn: str, **extra: str) -> dict[str, str]:
            cert = pki.issue(cn)
            return {**common, "ssl.certificate.location": str(cert.cert),
                    "ssl.key.location": str(cert.key), **extra}

        p = Producer({**with_cert("app"), "acks": "all", "client.id": "mtls-app"})
        p.produce("mtls", b"as app")
        assert p.flush(DEADLINE) == 0

        def users_of(client_id: str) -> set[str]:
            return {c["user"] for c in admin_get(b, "/api/connections")
                    if c["protocol"] == "Kafka"
                    and c["client_properties"].get("client_id") == client_id}
        assert wait_for(lambda: users_of("mtls-app"), DEADLINE, what="the connection") \
            == {"app"}
        del p

        refused = Producer({**with_cert("nobody"), "acks": "all",
                            "message.timeout.ms": 3000})
        errors: list[object] = []
        refused.produce("mtls", b"as nobody", on_delivery=lambda err, _m: errors.append(err))
        refused.flush(DEADLINE)
        assert errors and errors[0] is not None  # never delivered: each connection closes
        wait_for(lambda: "login refused for user 'nobody' (client certificate)" in b.log(),
                 DEADLINE, what="the refusal's log line")
        del refused

        # SASL over TLS logs in by SASL, whatever the certificate's CN
        sasl = Producer({**with_cert("nobody"), "security.protocol": "SASL_SSL",
                         "sasl.mechanism": "PLAIN", "sasl.username": "app",
                         "sasl.password": "app-secret", "acks": "all",
                         "client.id": "mtls-sasl"})
        sasl.produce("mtls", b"by sasl")
        assert sasl.flush(DEADLINE) == 0
        assert users_of("mtls-sasl") == {"app"}
        # no certificate: the anonymous user, as before
        anon = Producer({**common, "acks": "all", "client.id": "mtls-anon"})
        anon.produce("mtls", b"anonymous")
        assert anon.flush(DEADLINE) == 0
        assert users_of("mtls-anon") == {"guest"}
        assert "Traceback" not in b.log()
