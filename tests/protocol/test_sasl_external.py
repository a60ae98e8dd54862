"""SASL EXTERNAL in the sans-I/O handshake: offered only when the server hands in a
certificate's user name, and that name (never the response) is who logs in."""

from __future__ import annotations

from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.events import ConnectionClosed
from amqplite.protocol.sasl import offered
from amqplite.protocol.spec import PROTOCOL_HEADER
from tests.protocol.client import make_connection, parse_frames, start_ok

ALL = ("PLAIN", "AMQPLAIN", "EXTERNAL")


Logins = list[tuple[str, str | None]]


def _started(**kwargs: object) -> tuple[ServerConnection, str, Logins]:
    """A connection past connection.start, its offered mechanisms, and the logins it
    asked the (fake) user store about: only "app", and only without a password."""
    logins: Logins = []

    def authenticate(user: str, password: str | None) -> bool:
        logins.append((user, password))
        return user == "app" and password is None

    conn = make_connection(authenticate=authenticate, **kwargs)
    conn.receive_data(PROTOCOL_HEADER)
    [(_, start)] = parse_frames(conn.data_to_send())
    return conn, start.mechanisms, logins


def test_offered_only_with_a_certificate_user_and_in_configured_order() -> None:
    assert offered(ALL, None) == ("PLAIN", "AMQPLAIN")
    assert offered(("EXTERNAL", "PLAIN"), "app") == ("EXTERNAL", "PLAIN")
    assert offered(("PLAIN",), "app") == ("PLAIN",)
    assert _started(mechanisms=ALL, external_user="app")[1] == "PLAIN AMQPLAIN EXTERNAL"
    assert _started(mechanisms=ALL)[1] == "PLAIN AMQPLAIN"


def test_external_logs_in_as_the_certificate_user_whatever_the_response() -> None:
    conn, _, logins = _started(mechanisms=ALL, external_user="app")
    conn.receive_data(start_ok(mechanism="EXTERNAL", response=b"someone-else"))
    [(_, tune)] = parse_frames(conn.data_to_send())
    assert tune.name == "Connection.Tune"
    assert conn.username == "app"
    assert logins == [("app", None)]


def test_external_refused_for_an_unknown_user_as_rabbitmq_words_it() -> None:
    conn, _, _ = _started(mechanisms=ALL, external_user="stranger")
    conn.receive_data(start_ok(mechanism="EXTERNAL", response=b""))
    [(_, close)] = parse_frames(conn.data_to_send())
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. "
             "For details see the broker logfile.")
    assert isinstance(list(conn.events())[-1], ConnectionClosed)


def test_external_without_a_certificate_is_an_unknown_mechanism() -> None:
    conn, _, logins = _started(mechanisms=ALL)
    conn.receive_data(start_ok(mechanism="EXTERNAL", response=b""))
    assert conn.data_to_send() == b""
    [event] = list(conn.events())
    assert isinstance(event, ConnectionClosed) and event.reply_code == 503
    assert logins == []
