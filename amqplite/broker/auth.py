"""Users and passwords, hashed the way RabbitMQ stores them (salted SHA-256).

The hash format is RabbitMQ's ``rabbit_password_hashing_sha256``:
base64(4-byte salt + sha256(salt + password)), so a ``password_hash`` exported
from RabbitMQ's definitions logs in here unchanged. Its ``sha512`` and ``md5``
hashes (other nodes' settings, old exports) are kept as they come and checked
the same way; the digest's length tells the three apart, so a stored hash
needs no algorithm beside it. Users named in
``loopback`` (the default ``guest``) are allowed from loopback addresses only,
as in RabbitMQ, so an exposed broker does not accept the well-known password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os

import attrs

#: the hashing algorithm we write (RabbitMQ's default since 3.6)
HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
#: RabbitMQ's hashing algorithms we accept -> hashlib's name
HASHES = {HASHING_ALGORITHM: "sha256", "rabbit_password_hashing_sha512": "sha512",
          "rabbit_password_hashing_md5": "md5"}
#: salt + digest length -> hashlib's name
_BY_LENGTH = {4 + hashlib.new(h).digest_size: h for h in HASHES.values()}
#: tags that give access to the HTTP API, in RabbitMQ's meaning
MANAGEMENT_TAGS = frozenset({"administrator", "monitoring", "policymaker", "management"})
#: characters of a client-sent name a log line keeps
LOG_NAME_MAX = 100
#: failed-login lines logged per peer address within FAILED_LOGIN_WINDOW seconds
FAILED_LOGIN_BURST = 5
FAILED_LOGIN_WINDOW = 60.0
#: peers remembered at most (a flood from many addresses cannot grow the table)
FAILED_LOGIN_PEERS = 4096


def log_safe(text: str, limit: int = LOG_NAME_MAX) -> str:
    """Client-sent text fit for one log line: control and other unprintable characters
    and backslashes escaped (a newline cannot forge a line), cut to ``limit``
    characters with the original length noted (a megabyte of name is not logged)."""
    out = "".join(map(_escape, text[:limit]))
    return out if len(text) <= limit else f"{out}... ({len(text)} characters)"


def _escape(c: str) -> str:
    if c == "\\":
        return "\\\\"
    return c if c.isprintable() else c.encode("unicode_escape").decode("ascii")


class FailedLogins:
    """Rate limit of the failed-login log line, per peer address: at most ``burst``
    lines per ``window`` seconds, then one line saying how many were left out.

    Pure (the caller passes the time), shared by the AMQP and HTTP logins.
    """

    def __init__(self, burst: int = FAILED_LOGIN_BURST, window: float = FAILED_LOGIN_WINDOW,
                 max_peers: int = FAILED_LOGIN_PEERS) -> None:
        self.burst, self.window, self.max_peers = burst, window, max_peers
        #: peer -> [window start, lines logged, lines left out]
        self._peers: dict[str, list[float]] = {}

    def note(self, peer: str, now: float) -> tuple[bool, int]:
        """(log this failure?, failures left out of the log before it)."""
        st = self._peers.get(peer)
        if st is None or now - st[0] >= self.window:
            left_out = int(st[2]) if st is not None else 0
            if st is None and len(self._peers) >= self.max_peers:
                self._prune(now)
            self._peers[peer] = [now, 1, 0]
            return True, left_out
        if st[1] < self.burst:
            st[1] += 1
            return True, 0
        st[2] += 1
        return False, 0

    def _prune(self, now: float) -> None:
        for p in [p for p, st in self._peers.items() if now - st[0] >= self.window]:
            del self._peers[p]
        if len(self._peers) >= self.max_peers:  # all recent: forget them, never grow
            self._peers.clear()


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode()).digest()
    return base64.b64encode(salt + digest).decode()


def check_password(password: str, stored: str) -> bool:
    """False for an empty or malformed hash: such a user cannot log in with a password."""
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        return False
    algo = _BY_LENGTH.get(len(raw))
    if algo is None:
        return False
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(hashlib.new(algo, salt + password.encode()).digest(), digest)


def valid_hash(stored: str, algorithm: str = HASHING_ALGORITHM) -> bool:
    """True for an empty hash (no password login) or a well-formed one of
    ``algorithm`` (RabbitMQ's name)."""
    if stored == "":
        return True
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        return False
    return _BY_LENGTH.get(len(raw)) == HASHES.get(algorithm)


def hashing_algorithm(stored: str) -> str:
    """RabbitMQ's name of the algorithm of a stored hash (sha256 for an empty one)."""
    try:
        algo = _BY_LENGTH.get(len(base64.b64decode(stored, validate=True)), "sha256")
    except (binascii.Error, ValueError):
        algo = "sha256"
    return next(name for name, h in HASHES.items() if h == algo)


def parse_tags(tags: str | list[str] | tuple[str, ...]) -> list[str]:
    """RabbitMQ writes tags as a comma-separated string or a list; we keep a list."""
    items = tags.replace(",", " ").split() if isinstance(tags, str) else list(tags)
    return [t.strip() for t in items if t.strip()]


def is_loopback(peer_host: str) -> bool:
    try:
        return ipaddress.ip_address(peer_host.split("%")[0]).is_loopback
    except ValueError:
        return peer_host in ("localhost", "")


@attrs.define
class User:
    name: str
    password_hash: str
    tags: list[str] = attrs.field(factory=list)

    @property
    def is_admin(self) -> bool:
        return "administrator" in self.tags

    @property
    def can_manage(self) -> bool:
        """Any management-ish tag opens the HTTP API (RabbitMQ answers 401 otherwise)."""
        return not MANAGEMENT_TAGS.isdisjoint(self.tags)

    @property
    def can_monitor(self) -> bool:
        """monitoring (and administrator) see every connection, channel and consumer and the
        node's figures; a vhost's objects only where the user has a permission."""
        return "administrator" in self.tags or "monitoring" in self.tags

    @property
    def can_set_policies(self) -> bool:
        return "administrator" in self.tags or "policymaker" in self.tags


class UserDB:
    """The users the broker knows, by name; ``loopback`` names log in from loopback only."""

    def __init__(self, loopback: list[str] | tuple[str, ...] = ()) -> None:
        self.users: dict[str, User] = {}
        self.loopback = set(loopback)
        #: the failed-login log line's rate limit, one for AMQP and HTTP logins
        self.failed_logins = FailedLogins()

    def failure_line(self, what: str, name: str, peer_host: str, now: float, *,
                     refused: str = "") -> str | None:
        """The log line of a failed login (name escaped), or None when this peer's
        failures are over the rate limit; ``refused`` names a login refused without a
        password ("client certificate")."""
        log_it, left_out = self.failed_logins.note(peer_host, now)
        if not log_it:
            return None
        more = (f" ({left_out} more failed logins from this address were not logged)"
                if left_out else "")
        how = f"refused for user '{log_safe(name)}' ({refused})" if refused else \
            f"failed for user '{log_safe(name)}'"
        return f"{what}: login {how} from {peer_host}{more}"

    def get(self, name: str) -> User | None:
        return self.users.get(name)

    def add(self, name: str, password: str, tags: list[str] | None = None,
            loopback_only: bool = False) -> User:
        """A user with a plain password (tests, seeding): hashed here."""
        if loopback_only:
            self.loopback.add(name)
        return self.put(name, hash_password(password), list(tags or []))

    def put(self, name: str, password_hash: str, tags: list[str]) -> User:
        u = User(name, password_hash, list(tags))
        self.users[name] = u
        return u

    def remove(self, name: str) -> User | None:
        return self.users.pop(name, None)

    def authenticate(self, name: str, password: str, peer_host: str) -> User | None:
        u = self.users.get(name)
        if u is None or not check_password(password, u.password_hash):
            return None
        return self._may_connect(u, peer_host)

    def identify(self, name: str, peer_host: str) -> User | None:
        """The user a verified TLS client certificate names (SASL EXTERNAL): it must
        exist and may connect from here; there is no password to check."""
        u = self.users.get(name)
        return None if u is None else self._may_connect(u, peer_host)

    def _may_connect(self, u: User, peer_host: str) -> User | None:
        """Loopback-only users (guest) are refused from elsewhere, whatever the mechanism."""
        return None if u.name in self.loopback and not is_loopback(peer_host) else u
