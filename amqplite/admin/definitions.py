"""Definitions in RabbitMQ's JSON format: export the broker's topology, import one.

The shape is the one ``rabbitmqctl export_definitions`` and the management
API's ``/api/definitions`` write: users (``password_hash`` with
``hashing_algorithm``), vhosts, permissions, topic permissions, policies,
exchanges, queues and bindings, so a file exported from RabbitMQ imports here and back. Exclusive
queues, the built-in ``amq.*`` exchanges and the default exchange's implicit
bindings are left out, as RabbitMQ leaves them out. For one vhost
(``/api/definitions/{vhost}``) only its policies, exchanges, queues and
bindings are written, without vhost fields.

An import is all or nothing: :func:`plan` validates the whole document
(every value the store and AMQP can hold, every reference) without changing
anything, then :func:`apply` carries it out in one synchronous step, which
is one store submission and one commit, journalling an :class:`Undo` so a
refusal half-way or a failed commit leaves memory as it was. What has no
meaning in one process (mirroring policy keys, ...) is ``ignored`` and what
is not supported (user limits, parameters of components other than the links'
and ``vhost-limits``) is ``skipped``;
both are listed in the answer, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from amqplite import __version__
from amqplite.admin import validate as V
from amqplite.admin.views import jsonable
from amqplite.admin.writes import Undo
from amqplite.broker import topic_permissions as topics
from amqplite.broker.auth import (
    HASHES,
    HASHING_ALGORITHM,
    User,
    hash_password,
    hashing_algorithm,
    valid_hash,
)
from amqplite.broker.core import Broker
from amqplite.broker.exchanges import EXCHANGE_TYPES, Binding
from amqplite.broker.exchanges.base import freeze_args
from amqplite.broker.model import ChannelState
from amqplite.broker.permissions import FULL, validate_pattern
from amqplite.broker.policy import (
    VHOST_LIMITS_COMPONENT,
    VHOST_LIMITS_NAME,
    check_vhost_limits,
    ignored_reason,
    make_policy,
    split_definition,
    validate_queue_args,
)
from amqplite.links.config import COMPONENTS
from amqplite.protocol.errors import AMQPError

#: AMQP-side failures of an import surface as ValueError with the broker's text
ChannelFor = Callable[[str], ChannelState]


def user_info(u: User) -> dict[str, Any]:
    """A user as RabbitMQ's API and its definitions export show one."""
    return {"name": u.name, "password_hash": u.password_hash,
            "hashing_algorithm": hashing_algorithm(u.password_hash), "tags": list(u.tags),
            "limits": {}}


def _limits_step(path: str, vhost: str, raw: Any, at: str) -> _Step:
    """A vhost's limits, from either place an export keeps them, as the
    ``vhost-limits`` parameter they are kept in; ``at`` names them in an error."""
    try:
        limits = check_vhost_limits(raw)
    except ValueError as exc:
        raise V.Invalid(at, f"is refused: {exc}") from None
    return _Step(path, vhost, {"component": VHOST_LIMITS_COMPONENT, "name": VHOST_LIMITS_NAME,
                               "value": limits, "defined_by": None})


def _builtin(name: str) -> bool:
    return name == "" or name.startswith("amq.")


def export(broker: Broker, vhost: str | None = None) -> dict[str, Any]:
    """The broker's definitions; ``vhost`` narrows them to one vhost's objects."""
    names = [vhost] if vhost is not None else sorted(broker.vhosts)
    out: dict[str, Any] = {"rabbit_version": "3.13.0", "rabbitmq_version": "3.13.0",
                           "product_name": "amqplite", "product_version": __version__}
    if vhost is None:
        out["users"] = [user_info(u) for u in
                        sorted(broker.users.users.values(), key=lambda u: u.name)]
        out["vhosts"] = [
            {"name": n, "description": broker.vhosts[n].description, "tags": [],
             "metadata": {"description": broker.vhosts[n].description, "tags": []}}
            for n in names]
        out["permissions"] = [
            {"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
            for (u, v), p in sorted(broker.permissions.items())]
        out["topic_permissions"] = [
            {"user": u, "vhost": v, "exchange": tp.exchange, "write": tp.write,
             "read": tp.read} for u, v, tp in broker.topic_permissions.items()]
        out["global_parameters"] = []
    out["parameters"] = []  # one vhost's export has them too (RabbitMQ's)
    out["policies"], out["queues"], out["exchanges"], out["bindings"] = [], [], [], []
    for n in names:
        vh = broker.vhosts[n]
        where = {"vhost": n} if vhost is None else {}
        # in clear, as RabbitMQ exports them: an export must import back whole
        for (component, _, name), value in broker.parameters.items(vhost=n):
            row = {**where, "component": component, "name": name, "value": jsonable(value)}
            owner = broker.parameters.defined_by(component, n, name)
            if owner is not None:  # whom its links act as; RabbitMQ ignores the key
                row["defined_by"] = owner
            out["parameters"].append(row)
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


def ignored_queue_arg(key: str) -> bool:
    """``x-queue-mode`` and friends: the ignored policy keys' twins as queue arguments
    (kept, so an export gives them back, but without effect here)."""
    return key.startswith("x-") and ignored_reason(key[2:]) is not None


@attrs.frozen
class _Step:
    """One validated change: where it came from (``queues[3]``), its vhost, its data."""
    path: str
    vhost: str
    data: dict[str, Any]


@attrs.define
class Plan:
    """A definitions document after validation: what to apply, in order, and what
    of it has no effect here (``ignored``) or is not imported (``skipped``)."""
    vhosts: list[_Step] = attrs.field(factory=list)
    users: list[_Step] = attrs.field(factory=list)
    permissions: list[_Step] = attrs.field(factory=list)
    topic_permissions: list[_Step] = attrs.field(factory=list)
    exchanges: list[_Step] = attrs.field(factory=list)
    queues: list[_Step] = attrs.field(factory=list)
    bindings: list[_Step] = attrs.field(factory=list)
    policies: list[_Step] = attrs.field(factory=list)
    parameters: list[_Step] = attrs.field(factory=list)
    ignored: list[str] = attrs.field(factory=list)
    skipped: list[str] = attrs.field(factory=list)

    def report(self) -> dict[str, list[str]]:
        return {"ignored": self.ignored, "skipped": self.skipped}


def _items(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = data.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise V.Invalid(key, "must be a list of objects")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise V.Invalid(f"{key}[{i}]", "must be an object")
    return items


def _need(item: dict[str, Any], key: str, path: str) -> Any:
    if key not in item:
        raise V.Invalid(f"{path}.{key}", "is required")
    return item[key]


def plan(broker: Broker, data: dict[str, Any], vhost: str | None = None) -> Plan:
    """Validate a whole definitions document (nothing changes); 400 naming the first
    bad field. ``vhost``: put every object there (a one-vhost import)."""
    out = Plan()
    vhosts = set(broker.vhosts)
    users = set(broker.users.users)
    if vhost is None:
        _plan_security(data, out, vhosts, users)
    else:
        for key in ("users", "vhosts", "permissions", "topic_permissions"):
            if _items(data, key):
                out.ignored.append(f"{key}: only a full import (/api/definitions) reads them")

    def where(item: dict[str, Any], path: str) -> str:
        if vhost is not None:
            return vhost
        v = V.shortstr(item.get("vhost", "/"), f"{path}.vhost", allow_empty=False)
        if v not in vhosts:
            raise V.Invalid(f"{path}.vhost", f"names vhost '{v}', which does not exist")
        return v

    for i, p in enumerate(_items(data, "policies")):
        path = f"policies[{i}]"
        vh = where(p, path)
        name = V.text(_need(p, "name", path), f"{path}.name", allow_empty=False)
        pattern = V.text(_need(p, "pattern", path), f"{path}.pattern")
        apply_to = V.text(p.get("apply-to", "queues"), f"{path}.apply-to")
        priority = V.integer(p.get("priority", 0), f"{path}.priority")
        definition = V.arguments(_need(p, "definition", path), f"{path}.definition")
        kept, notes = split_definition(definition)
        if notes:
            out.ignored.append(policy_note(f"{path}: ", name, vh, notes, bool(kept)))
        if not kept:
            continue
        try:
            make_policy(vh, name, pattern, kept, priority, apply_to)
        except ValueError as exc:
            raise V.Invalid(path, f"is refused: {exc}") from None
        out.policies.append(_Step(path, vh, {"name": name, "pattern": pattern,
                                             "definition": kept, "priority": priority,
                                             "apply_to": apply_to}))
    for i, p in enumerate(_items(data, "parameters")):
        path = f"parameters[{i}]"
        component = p.get("component")
        if component == VHOST_LIMITS_COMPONENT:  # RabbitMQ keeps vhost limits as one
            out.parameters.append(_limits_step(path, where(p, path),
                                               _need(p, "value", path), f"{path}.value"))
            continue
        if component not in COMPONENTS:
            out.skipped.append(f"{path}: {component} '{p.get('name')}' in vhost "
                               f"'{p.get('vhost')}' (component {component!r} is not supported)")
            continue
        vh = where(p, path)
        name = V.text(_need(p, "name", path), f"{path}.name", allow_empty=False)
        value = _need(p, "value", path)
        try:
            COMPONENTS[component][0](value)
        except ValueError as exc:
            raise V.Invalid(f"{path}.value", f"is refused: {exc}") from None
        owner = p.get("defined_by")
        if owner is not None and (not isinstance(owner, str) or owner not in users):
            out.ignored.append(f"{path}.defined_by: names no user; the importing user "
                               "defines it")
            owner = None
        out.parameters.append(_Step(path, vh, {"component": component, "name": name,
                                               "value": value, "defined_by": owner}))
    for i, x in enumerate(_items(data, "exchanges")):
        path = f"exchanges[{i}]"
        vh = where(x, path)
        name = V.shortstr(_need(x, "name", path), f"{path}.name")
        if _builtin(name):
            out.ignored.append(f"{path}: built-in exchange '{name or 'amq.default'}' "
                               "(every vhost has it)")
            continue
        type_ = V.text(x.get("type", "direct"), f"{path}.type")
        if type_ not in EXCHANGE_TYPES:
            raise V.Invalid(f"{path}.type", f"names an unknown exchange type '{type_}' "
                            f"(known: {', '.join(sorted(EXCHANGE_TYPES))})")
        out.exchanges.append(_Step(path, vh, {
            "name": name, "type_": type_,
            "durable": V.boolean(x.get("durable", True), f"{path}.durable"),
            "auto_delete": V.boolean(x.get("auto_delete", False),
                                     f"{path}.auto_delete"),
            "internal": V.boolean(x.get("internal", False), f"{path}.internal"),
            "arguments": V.arguments(x.get("arguments"), f"{path}.arguments")}))
    for i, q in enumerate(_items(data, "queues")):
        path = f"queues[{i}]"
        vh = where(q, path)
        name = V.shortstr(_need(q, "name", path), f"{path}.name", allow_empty=False)
        args = V.arguments(q.get("arguments"), f"{path}.arguments")
        bad = validate_queue_args(args)
        if bad is not None:
            raise V.Invalid(f"{path}.arguments.{bad[0]}", f"is refused: {bad[1]}")
        inert = sorted(k for k in args if ignored_queue_arg(k))
        if inert:
            out.ignored.append(f"{path}: queue '{name}' in vhost '{vh}': {', '.join(inert)} "
                               "(kept in its arguments, without effect)")
        out.queues.append(_Step(path, vh, {
            "name": name,
            "durable": V.boolean(q.get("durable", True), f"{path}.durable"),
            "auto_delete": V.boolean(q.get("auto_delete", False),
                                     f"{path}.auto_delete"),
            "arguments": args}))
    for i, b in enumerate(_items(data, "bindings")):
        path = f"bindings[{i}]"
        vh = where(b, path)
        kind = V.text(b.get("destination_type", "queue"), f"{path}.destination_type")
        if kind not in ("queue", "exchange"):
            raise V.Invalid(f"{path}.destination_type", "must be queue or exchange")
        out.bindings.append(_Step(path, vh, {
            "source": V.shortstr(_need(b, "source", path), f"{path}.source"),
            "destination": V.shortstr(_need(b, "destination", path), f"{path}.destination"),
            "kind": kind,
            "routing_key": V.shortstr(b.get("routing_key", ""),
                                      f"{path}.routing_key"),
            "arguments": V.arguments(b.get("arguments"), f"{path}.arguments")}))
    return out


def policy_note(where: str, name: str, vhost: str, notes: list[str], created: bool) -> str:
    """One line of what a policy's definition has without effect here, and why."""
    whole = "" if created else "; nothing else in it: the policy is not created"
    return f"{where}policy '{name}' in vhost '{vhost}': {'; '.join(notes)}{whole}"


def _user_in_vhost(item: dict[str, Any], path: str, users: set[str],
                   vhosts: set[str]) -> tuple[str, str]:
    """A (topic) permission's user and vhost, both existing or about to."""
    user = V.text(_need(item, "user", path), f"{path}.user")
    vh = V.text(_need(item, "vhost", path), f"{path}.vhost")
    if user not in users:
        raise V.Invalid(f"{path}.user", f"names user '{user}', which does not exist")
    if vh not in vhosts:
        raise V.Invalid(f"{path}.vhost", f"names vhost '{vh}', which does not exist")
    return user, vh


def _plan_security(data: dict[str, Any], out: Plan, vhosts: set[str], users: set[str]) -> None:
    """Vhosts, users, permissions, and the sections this broker has no equivalent of."""
    for i, v in enumerate(_items(data, "vhosts")):
        path = f"vhosts[{i}]"
        name = V.shortstr(_need(v, "name", path), f"{path}.name", allow_empty=False)
        meta = V.obj(v.get("metadata"), f"{path}.metadata")
        desc = V.text(v.get("description", meta.get("description", "")) or "",
                      f"{path}.description")
        out.vhosts.append(_Step(path, name, {"description": desc}))
        if isinstance(v.get("limits"), dict) and v["limits"]:  # newer exports' place
            out.parameters.append(_limits_step(f"{path}.limits", name, v["limits"],
                                               f"{path}.limits"))
        vhosts.add(name)
    for i, u in enumerate(_items(data, "users")):
        path = f"users[{i}]"
        name = V.text(_need(u, "name", path), f"{path}.name", allow_empty=False)
        if "password" in u:
            V.text(u["password"], f"{path}.password")
        try:
            pw_hash = user_hash(u)
        except ValueError as exc:
            raise V.Invalid(path, str(exc)) from None
        if u.get("limits"):
            out.skipped.append(f"{path}.limits: user limits of '{name}'")
        out.users.append(_Step(path, "", {"name": name, "password_hash": pw_hash,
                                          "tags": V.tags(u.get("tags"), f"{path}.tags")}))
        users.add(name)
    for i, p in enumerate(_items(data, "permissions")):
        path = f"permissions[{i}]"
        user, vh = _user_in_vhost(p, path, users, vhosts)
        pats = {}
        for key in ("configure", "write", "read"):
            pats[key] = V.text(p.get(key, ""), f"{path}.{key}")
            why = validate_pattern(pats[key])
            if why is not None:
                raise V.Invalid(f"{path}.{key}", why)
        out.permissions.append(_Step(path, vh, {"user": user, **pats}))
    for i, t in enumerate(_items(data, "topic_permissions")):
        path = f"topic_permissions[{i}]"
        user, vh = _user_in_vhost(t, path, users, vhosts)
        exchange = V.shortstr(_need(t, "exchange", path), f"{path}.exchange")
        pats = {k: V.pattern(t.get(k, ""), f"{path}.{k}", topics.validate)
                for k in ("write", "read")}
        out.topic_permissions.append(_Step(path, vh, {"user": user, "exchange": exchange,
                                                      **pats}))
    for i, p in enumerate(_items(data, "global_parameters")):
        out.ignored.append(f"global_parameters[{i}]: '{p.get('name')}' (cluster-wide)")


def apply(broker: Broker, p: Plan, channel_for: ChannelFor, undo: Undo,
          user: str | None = None) -> None:
    """Carry out a validated plan in one synchronous step, journalling in ``undo``;
    ``user`` (the importing user) defines its parameters (their links act as it)
    but those whose ``defined_by`` (our own exports write it) names a user.

    Policies come last: a refusal by the broker (an existing queue declared
    with other properties) then never follows a policy that already trimmed
    or dead-lettered messages, so the journal can undo everything before it.
    The refusal is raised as a 400 naming the document's item.
    """
    step: _Step | None = None
    try:
        for step in p.vhosts:
            undo.vhost(step.vhost)
            broker.add_vhost(step.vhost, step.data["description"])
        for step in p.users:
            d = step.data
            undo.user(d["name"])
            broker.put_user(d["name"], d["password_hash"], d["tags"])
        for step in p.permissions:
            d = step.data
            undo.permission(d["user"], step.vhost)
            broker.set_permissions(d["user"], step.vhost, d["configure"], d["write"], d["read"])
        for step in p.topic_permissions:
            d = step.data
            undo.topic_permissions(d["user"], step.vhost)
            broker.set_topic_permission(d["user"], step.vhost, d["exchange"], d["write"],
                                        d["read"])
        for step in p.exchanges:
            d = dict(step.data)
            undo.exchange(step.vhost, d["name"])
            broker.exchange_declare(channel_for(step.vhost), d.pop("name"), d.pop("type_"), **d)
        for step in p.queues:
            d = dict(step.data)
            undo.queue(step.vhost, d["name"])
            broker.queue_declare(channel_for(step.vhost), d.pop("name"), **d)
        for step in p.bindings:
            d = step.data
            dest = ("queue" if d["kind"] == "queue" else "exchange", d["destination"])
            undo.binding(step.vhost, Binding(d["source"], dest, d["routing_key"],
                                             freeze_args(d["arguments"])))
            ch = channel_for(step.vhost)
            if d["kind"] == "exchange":
                broker.exchange_bind(ch, d["destination"], d["source"], d["routing_key"],
                                     d["arguments"])
            else:
                broker.queue_bind(ch, d["destination"], d["source"], d["routing_key"],
                                  d["arguments"])
        for step in p.policies:
            d = step.data
            undo.policy(step.vhost, d["name"])
            broker.set_policy(step.vhost, d["name"], d["pattern"], d["definition"],
                              d["priority"], d["apply_to"])
        for step in p.parameters:  # last: a shovel starts once its queues exist
            d = step.data
            undo.parameter(d["component"], step.vhost, d["name"])
            broker.parameters.put(d["component"], step.vhost, d["name"], d["value"],
                                  defined_by=d["defined_by"] or user)
    except AMQPError as exc:
        where = step.path if step is not None else "definitions"
        raise V.Invalid(where, f"is refused: {exc.reply_text}") from None
    except ValueError as exc:
        where = step.path if step is not None else "definitions"
        raise V.Invalid(where, f"is refused: {exc}") from None


def user_hash(u: dict[str, Any], current: str = "") -> str:
    """The stored hash for a user object: ``password`` (hashed here) or ``password_hash``
    in one of RabbitMQ's formats (sha256, sha512, md5); neither keeps ``current``."""
    if isinstance(u.get("password"), str):
        return hash_password(u["password"])
    if "password_hash" in u:
        algo = u.get("hashing_algorithm") or HASHING_ALGORITHM
        if algo not in HASHES:
            raise ValueError(f"unsupported hashing_algorithm '{algo}' "
                             f"(known: {', '.join(HASHES)})")
        h = u["password_hash"]
        if not isinstance(h, str) or not valid_hash(h, algo):
            raise ValueError(f"password_hash is not base64(salt + {HASHES[algo]}) as "
                             "RabbitMQ writes it")
        return h
    return current


def grant_creator(broker: Broker, user: str, vhost: str) -> None:
    """RabbitMQ gives the user who creates a vhost over HTTP full permissions in it."""
    if user in broker.users.users and (user, vhost) not in broker.permissions:
        broker.set_permissions(user, vhost, *FULL)
