"""MQTT session rows are keyed by (vhost, client id) (issue 33, item 2): two vhosts'
``sensor-42`` are two rows each (session, packet ids, will), and a version-4
database's rows, keyed by the client id alone, move to the new keys in place."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from amqplite.store import Store
from amqplite.store.ops import (
    DeleteMQTTSession,
    DeleteMQTTWill,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
)
from amqplite.store.schema import SCHEMA_VERSION


def _will(vhost: str, cid: str) -> PutMQTTWill:
    return PutMQTTWill(cid, vhost, "u", "status", b"OFFLINE", 1, True, b"", 0, None)


def test_the_same_client_id_in_two_vhosts_is_two_sessions(make_store: Callable[..., Store]
                                                           ) -> None:
    store = make_store()
    store.start()
    store.submit([op for v in ("A", "B") for op in (
        PutMQTTSession(v, "sensor-42", 60, user=f"user-{v}"),
        PutMQTTPacketId(v, "sensor-42", 9, False), _will(v, "sensor-42"))])
    store.submit([DeleteMQTTSession("B", "sensor-42"), DeleteMQTTWill("B", "sensor-42")])
    store.flush(10)
    got = store.load().mqtt_sessions
    assert got == [PutMQTTSession("A", "sensor-42", 60, user="user-A"),
                   PutMQTTPacketId("A", "sensor-42", 9, False), _will("A", "sensor-42")]


def test_a_version_4_database_moves_to_vhost_keys(db_path: Path,
                                                  make_store: Callable[..., Store]) -> None:
    """The rows of a version-4 database (keyed by client id) keep their values under
    (vhost, client id); a packet id takes its session's vhost, an orphan one goes."""
    make_store().close()
    conn = sqlite3.connect(db_path)
    conn.executescript(
        "DROP TABLE mqtt_sessions; DROP TABLE mqtt_packet_ids; DROP TABLE mqtt_wills;"
        "CREATE TABLE mqtt_sessions (client_id VARCHAR(255) PRIMARY KEY,"
        " vhost VARCHAR(255) NOT NULL, expiry INTEGER NOT NULL, disconnected_at FLOAT,"
        " awaiting_pubrel VARCHAR NOT NULL);"
        "CREATE TABLE mqtt_packet_ids (client_id VARCHAR(255) NOT NULL, outbound BOOLEAN NOT"
        " NULL, packet_id INTEGER NOT NULL, message_key BIGINT NOT NULL, released BOOLEAN NOT"
        " NULL, PRIMARY KEY (client_id, outbound, packet_id));"
        "CREATE TABLE mqtt_wills (client_id VARCHAR(255) PRIMARY KEY, vhost VARCHAR(255) NOT"
        " NULL, user VARCHAR(255) NOT NULL, topic VARCHAR NOT NULL, payload BLOB NOT NULL,"
        " qos INTEGER NOT NULL, retain BOOLEAN NOT NULL, properties BLOB NOT NULL,"
        " delay INTEGER NOT NULL, due_at FLOAT);"
        "INSERT INTO mqtt_sessions VALUES ('s1', 'tenantA', 60, 1.5, '');"
        "INSERT INTO mqtt_packet_ids VALUES ('s1', 1, 7, 1234, 1);"
        "INSERT INTO mqtt_packet_ids VALUES ('orphan', 0, 3, 0, 0);"
        "INSERT INTO mqtt_wills VALUES ('s1', 'tenantA', 'u', 'status', x'4f4646', 1, 1, x'',"
        " 0, NULL);"
        "UPDATE meta SET value = '4' WHERE key = 'schema_version';")
    conn.commit()
    conn.close()
    store = make_store()  # Store.create upgrades in place
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert store.load().mqtt_sessions == [
        PutMQTTSession("tenantA", "s1", 60, 1.5),
        PutMQTTPacketId("tenantA", "s1", 7, True, 1234, True),
        PutMQTTWill("s1", "tenantA", "u", "status", b"OFF", 1, True, b"", 0, None)]
    store.start()  # and the new keys hold: the same id in another vhost is another row
    store.submit([PutMQTTSession("tenantB", "s1", 5, user="bob")])
    store.flush(10)
    assert [(s.vhost, s.client_id) for s in store.load().mqtt_sessions
            if isinstance(s, PutMQTTSession)] == [("tenantA", "s1"), ("tenantB", "s1")]
