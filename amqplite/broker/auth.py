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
        if u.loopback_only and not is_loopback(peer_host):
            return None
        return u
