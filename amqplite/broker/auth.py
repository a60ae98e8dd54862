"""Users and passwords, hashed the way RabbitMQ stores them (salted SHA-256).

The default ``guest`` user is allowed from loopback addresses only, as in
RabbitMQ, so an exposed broker does not accept the well-known password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os

import attrs


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode()).digest()
    return base64.b64encode(salt + digest).decode()


def check_password(password: str, stored: str) -> bool:
    raw = base64.b64decode(stored)
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(hashlib.sha256(salt + password.encode()).digest(), digest)


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
    loopback_only: bool = False

    @property
    def is_admin(self) -> bool:
        return "administrator" in self.tags


class UserDB:
    def __init__(self) -> None:
        self.users: dict[str, User] = {}

    def add(self, name: str, password: str, tags: list[str] | None = None,
            loopback_only: bool = False) -> User:
        u = User(name, hash_password(password), list(tags or []), loopback_only)
        self.users[name] = u
        return u

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

    @staticmethod
    def _may_connect(u: User, peer_host: str) -> User | None:
        """Loopback-only users (guest) are refused from elsewhere, whatever the mechanism."""
        return None if u.loopback_only and not is_loopback(peer_host) else u
