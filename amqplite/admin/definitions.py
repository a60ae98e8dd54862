"""Definitions in RabbitMQ's JSON format: export the broker's topology, import one.

The shape is the one ``rabbitmqctl export_definitions`` and the management
API's ``/api/definitions`` write: users (``password_hash`` with
``hashing_algorithm``), vhosts, permissions, policies, exchanges, queues and
bindings, so a file exported from RabbitMQ imports here and back. Exclusive
queues, the built-in ``amq.*`` exchanges and the default exchange's implicit
bindings are left out, as RabbitMQ leaves them out. For one vhost
(``/api/definitions/{vhost}``) only its policies, exchanges, queues and
bindings are written, without vhost fields.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqplite import __version__
from amqplite.admin.views import jsonable
from amqplite.broker.auth import HASHING_ALGORITHM, hash_password, parse_tags, valid_hash
from amqplite.broker.core import Broker
from amqplite.broker.model import ChannelState
from amqplite.broker.permissions import FULL

#: AMQP-side failures of an import surface as ValueError with the broker's text
ChannelFor = Callable[[str], ChannelState]


def _builtin(name: str) -> bool:
    return name == "" or name.startswith("amq.")


def export(broker: Broker, vhost: str | None = None) -> dict[str, Any]:
    """The broker's definitions; ``vhost`` narrows them to one vhost's objects."""
    names = [vhost] if vhost is not None else sorted(broker.vhosts)
    out: dict[str, Any] = {"rabbit_version": "3.13.0", "rabbitmq_version": "3.13.0",
                           "product_name": "amqplite", "product_version": __version__}
    if vhost is None:
        out["users"] = [
            {"name": u.name, "password_hash": u.password_hash,
             "hashing_algorithm": HASHING_ALGORITHM, "tags": list(u.tags), "limits": {}}
            for u in sorted(broker.users.users.values(), key=lambda u: u.name)]
        out["vhosts"] = [
            {"name": n, "description": broker.vhosts[n].description, "tags": [],
             "metadata": {"description": broker.vhosts[n].description, "tags": []}}
            for n in names]
        out["permissions"] = [
            {"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
            for (u, v), p in sorted(broker.permissions.items())]
        out["topic_permissions"] = []
        out["parameters"] = []
        out["global_parameters"] = []
    out["policies"], out["queues"], out["exchanges"], out["bindings"] = [], [], [], []
    for n in names:
        vh = broker.vhosts[n]
        where = {"vhost": n} if vhost is None else {}
        for name, pol in sorted(broker.policies.get(n, {}).items()):
            d = pol.as_dict()
            out["policies"].append({**where, "name": name, "pattern": d["pattern"],
                                    "apply-to": d["apply-to"], "priority": d["priority"],
                                    "definition": jsonable(d["definition"])})
        for q in sorted(vh.queues.values(), key=lambda q: q.name):
            if q.exclusive:
                continue
            out["queues"].append({"name": q.name, **where, "durable": q.durable,
                                  "auto_delete": q.auto_delete,
                                  "arguments": jsonable(dict(q.arguments or {}))})
        for ex in sorted(vh.exchanges.values(), key=lambda e: e.name):
            if _builtin(ex.name):
                continue
            out["exchanges"].append({"name": ex.name, **where, "type": ex.type_name,
                                     "durable": ex.durable, "auto_delete": ex.auto_delete,
                                     "internal": ex.internal,
                                     "arguments": jsonable(dict(ex.arguments or {}))})
        rows = []
        for ex in vh.exchanges.values():
            for b in ex.bindings:
                kind, dest = b.destination
                if kind == "queue" and (dest not in vh.queues or vh.queues[dest].exclusive):
                    continue
                rows.append({"source": b.source, **where, "destination": dest,
                             "destination_type": kind, "routing_key": b.routing_key,
                             "arguments": jsonable(b.args_dict)})
        out["bindings"].extend(sorted(rows, key=lambda r: (r["source"], r["destination"],
                                                          r["routing_key"])))
    return out


def _items(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = data.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError(f"'{key}' must be a list of objects")
    return items


def _need(item: dict[str, Any], key: str, what: str) -> Any:
    if key not in item:
        raise ValueError(f"{what} without '{key}': {item}")
    return item[key]


def import_users(broker: Broker, data: dict[str, Any]) -> None:
    """Vhosts, users and permissions of a full definitions file (nothing else)."""
    for v in _items(data, "vhosts"):
        meta = v.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        broker.add_vhost(str(_need(v, "name", "vhost")),
                         str(v.get("description", meta.get("description", "")) or ""))
    for u in _items(data, "users"):
        name = str(_need(u, "name", "user"))
        broker.put_user(name, user_hash(u), parse_tags(u.get("tags") or []))
    for p in _items(data, "permissions"):
        broker.set_permissions(str(_need(p, "user", "permission")),
                               str(_need(p, "vhost", "permission")),
                               str(p.get("configure", "")), str(p.get("write", "")),
                               str(p.get("read", "")))


def user_hash(u: dict[str, Any], current: str = "") -> str:
    """The stored hash for a user object: ``password`` (hashed here) or ``password_hash``
    in RabbitMQ's sha256 format; neither keeps ``current``."""
    if isinstance(u.get("password"), str):
        return hash_password(u["password"])
    if "password_hash" in u:
        algo = u.get("hashing_algorithm") or HASHING_ALGORITHM
        if algo != HASHING_ALGORITHM:
            raise ValueError(f"unsupported hashing_algorithm '{algo}' (only {HASHING_ALGORITHM})")
        h = u["password_hash"]
        if not isinstance(h, str) or not valid_hash(h):
            raise ValueError("password_hash is not base64(salt + sha256) as RabbitMQ writes it")
        return h
    return current


def import_objects(broker: Broker, data: dict[str, Any], channel_for: ChannelFor,
                   vhost: str | None = None) -> None:
    """Policies, exchanges, queues and bindings (in that order), declared as the broker
    itself; ``vhost`` puts every object there whatever its own vhost field says."""
    def where(item: dict[str, Any]) -> str:
        v = vhost if vhost is not None else str(item.get("vhost", "/"))
        if v not in broker.vhosts:
            raise ValueError(f"no vhost '{v}'")
        return v

    for p in _items(data, "policies"):
        definition = p.get("definition")
        if not isinstance(definition, dict):
            raise ValueError(f"policy without a definition object: {p}")
        broker.set_policy(where(p), str(_need(p, "name", "policy")),
                          str(_need(p, "pattern", "policy")), definition,
                          int(p.get("priority", 0)), str(p.get("apply-to", "queues")))
    for x in _items(data, "exchanges"):
        name = str(_need(x, "name", "exchange"))
        if _builtin(name):
            continue
        broker.exchange_declare(channel_for(where(x)), name, str(x.get("type", "direct")),
                                durable=bool(x.get("durable", True)),
                                auto_delete=bool(x.get("auto_delete", False)),
                                internal=bool(x.get("internal", False)),
                                arguments=dict(x.get("arguments") or {}))
    for q in _items(data, "queues"):
        broker.queue_declare(channel_for(where(q)), str(_need(q, "name", "queue")),
                             durable=bool(q.get("durable", True)),
                             auto_delete=bool(q.get("auto_delete", False)),
                             arguments=dict(q.get("arguments") or {}))
    for b in _items(data, "bindings"):
        ch = channel_for(where(b))
        source = str(_need(b, "source", "binding"))
        dest = str(_need(b, "destination", "binding"))
        rk = str(b.get("routing_key", ""))
        args = dict(b.get("arguments") or {})
        if b.get("destination_type", "queue") == "exchange":
            broker.exchange_bind(ch, dest, source, rk, args)
        else:
            broker.queue_bind(ch, dest, source, rk, args)


def grant_creator(broker: Broker, user: str, vhost: str) -> None:
    """RabbitMQ gives the user who creates a vhost over HTTP full permissions in it."""
    if user in broker.users.users and (user, vhost) not in broker.permissions:
        broker.set_permissions(user, vhost, *FULL)
