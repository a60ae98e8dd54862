"""Logins (MQTT 3.1.1 3.1.3.4-5, 3.2.2.3; MQTT 5 3.1.3.5-6, 3.2.2.2): a listener
that checks passwords refuses a wrong password or an unknown user, a client without a
username with 5 / 0x87 (not authorised), then closes the connection; the right
password is accepted.

Which refusal a wrong password gets, the specifications leave open: 3.1.1's 4 / 5.0's
0x86 ("bad user name or password", described as malformed data) or 5 / 0x87 ("not
authorized"). amqplite sends 4 / 0x86, as RabbitMQ's plugin does; Mosquitto 2.0.11
sends 5 / 0x87 for a password that does not match its password file. Both pass.

The listener is ``MQTT_AUTH_PORT`` (default ``MQTT_PORT``: amqplite checks passwords
on its one MQTT listener when started with ``--no-mqtt-allow-anonymous``, as CI
starts it: anonymous logins from loopback are on by default). CI points it at a
second Mosquitto listener with ``allow_anonymous false`` and a password file that
holds ``MQTT_USERNAME`` / ``MQTT_PASSWORD``.
"""

from __future__ import annotations

import os

import pytest

from conformance.mqtt import _raw
from conformance.mqtt._raw import Packet, RawClient
from conformance.mqtt.conftest import Names, credentials, host, port


def auth_port() -> int:
    return int(os.environ.get("MQTT_AUTH_PORT", str(port())))


def login(version: int, client_id: str, user: str | None,
          password: str | None) -> tuple[RawClient, Packet]:
    """A socket that sent CONNECT, and the CONNACK it read."""
    r = RawClient(host(), auth_port(), version)
    r.send(_raw.connect(client_id, version, user=user, password=password))
    return r, r.expect(_raw.CONNACK)


@pytest.mark.parametrize(("version", "refused"), [(4, {4, 5}), (5, {0x86, 0x87})])
def test_wrong_password_is_refused_and_closed(names: Names, version: int,
                                              refused: set[int]) -> None:
    user, password = credentials()
    r, ack = login(version, names.client_id(), user, password + "-wrong")
    try:
        assert ack.reason_code(version) in refused
        assert ack.body[0] == 0  # no session present on a refusal
        assert r.closed()
    finally:
        r.close()


@pytest.mark.parametrize(("version", "refused"), [(4, {4, 5}), (5, {0x86, 0x87})])
def test_unknown_user_is_refused(names: Names, version: int, refused: set[int]) -> None:
    r, ack = login(version, names.client_id(), f"nobody-{names.client_id()}", "guest")
    try:
        assert ack.reason_code(version) in refused
        assert r.closed()
    finally:
        r.close()


@pytest.mark.parametrize(("version", "refused"), [(4, 5), (5, 0x87)])
def test_no_username_is_not_authorised(names: Names, version: int, refused: int) -> None:
    r, ack = login(version, names.client_id(), None, None)
    try:
        assert ack.reason_code(version) == refused
        assert r.closed()
    finally:
        r.close()


@pytest.mark.parametrize("version", [4, 5])
def test_right_password_is_accepted_and_serves(names: Names, version: int) -> None:
    user, password = credentials()
    t = names.topic()
    r, ack = login(version, names.client_id(), user, password)
    try:
        assert ack.reason_code(version) == 0
        r.send(_raw.subscribe(1, t, 1, version))
        assert r.expect(_raw.SUBACK).reason_code(version) == 1
        r.send(_raw.publish(t, b"logged-in", 1, 2, version=version))
        got = {p.type: p for p in (r.recv(), r.recv())}
        assert set(got) == {_raw.PUBACK, _raw.PUBLISH}, got
        assert got[_raw.PUBLISH].publish_parts(version)[:2] == (t, b"logged-in")
    finally:
        r.close()
