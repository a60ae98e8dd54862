"""rabbitmqadmin's verbs: ``declare``, ``delete`` and ``list`` with ``key=value`` arguments.

``amqplite declare queue name=q durable=true`` does what rabbitmqadmin's line does,
with the same argument names, so scripts written for rabbitmqadmin run as they are.
Unlike rabbitmqadmin, every answer says whether the object was added, updated or
already there, and a bad argument (unknown key, missing mandatory one, a boolean
that is not true/false, JSON that does not parse) is one line naming it.
The amqplite habits stay: ``delete queue NAME`` with a bare name still works.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import click

from amqplite.admin.cli_common import Ctx, _table, common, given_vhost
from amqplite.admin.cli_security import vhost_description
from amqplite.admin.client import AdminError, path
from amqplite.config import parse_bool


@dataclass(frozen=True)
class Spec:
    """The arguments of one object type: rabbitmqadmin's names and defaults."""

    mandatory: tuple[str | tuple[str, ...], ...]
    optional: dict[str, Any] = field(default_factory=dict)
    json_keys: tuple[str, ...] = ()
    bools: tuple[str, ...] = ()
    ints: tuple[str, ...] = ()
    #: JSON values of any type (a vhost limit's number), not only objects
    json_any: tuple[str, ...] = ()

    def names(self) -> list[str]:
        flat = [k for m in self.mandatory for k in ((m,) if isinstance(m, str) else m)]
        return flat + [k for k in self.optional if k not in flat]


DECLARE: dict[str, Spec] = {
    "queue": Spec(("name",), {"durable": True, "auto_delete": False, "arguments": {},
                              "node": None, "queue_type": None},
                  json_keys=("arguments",), bools=("durable", "auto_delete")),
    "exchange": Spec(("name", "type"), {"durable": True, "auto_delete": False,
                                        "internal": False, "arguments": {}},
                     json_keys=("arguments",), bools=("durable", "auto_delete", "internal")),
    "binding": Spec(("source", "destination"), {"destination_type": "queue",
                                                "routing_key": "", "arguments": {}},
                    json_keys=("arguments",)),
    "vhost": Spec(("name",), {"description": None, "tracing": None}, bools=("tracing",)),
    "user": Spec(("name", ("password", "password_hash"), "tags"),
                 {"hashing_algorithm": None}),
    "permission": Spec(("vhost", "user", "configure", "write", "read")),
    "policy": Spec(("name", "pattern", "definition"), {"priority": 0, "apply-to": None},
                   json_keys=("definition",), ints=("priority",)),
    "parameter": Spec(("component", "name", "value"), json_keys=("value",)),
    "vhost_limit": Spec(("vhost", "name", "value"), json_any=("value",)),
    # not in rabbitmqadmin 3.10 (rabbitmqctl set_topic_permissions), same key=value style
    "topic_permission": Spec(("vhost", "user", "exchange", "write", "read")),
}

DELETE: dict[str, Spec] = {
    "queue": Spec(("name",)),
    "exchange": Spec(("name",)),
    "binding": Spec(("source", "destination_type", "destination"),
                    {"properties_key": None, "routing_key": None}),
    "vhost": Spec(("name",)),
    "user": Spec(("name",)),
    "permission": Spec(("vhost", "user")),
    "policy": Spec(("name",)),
    "parameter": Spec(("component", "name")),
    "vhost_limit": Spec(("vhost", "name")),
    "topic_permission": Spec(("vhost", "user"), {"exchange": None}),
}

def parse(verb: str, kind: str, spec: Spec, args: tuple[str, ...]) -> dict[str, Any]:
    """``key=value`` arguments checked against ``spec``; a lone bare word is the name."""
    if len(args) == 1 and "=" not in args[0] and "name" in spec.names():
        args = (f"name={args[0]}",)
    values: dict[str, Any] = {k: v for k, v in spec.optional.items() if v is not None}
    known = spec.names()
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep or not key:
            raise AdminError(f"{verb} {kind}: argument {arg!r} is not of the form key=value")
        if key not in known:
            raise AdminError(f"{verb} {kind}: unknown argument '{key}' (known: "
                             f"{', '.join(known)})")
        values[key] = _convert(verb, kind, spec, key, raw)
    for m in spec.mandatory:
        names = (m,) if isinstance(m, str) else m
        if not any(n in values for n in names):
            raise AdminError(f"{verb} {kind}: mandatory argument "
                             f"{' or '.join(repr(n) for n in names)} missing")
    return values


def _convert(verb: str, kind: str, spec: Spec, key: str, raw: str) -> Any:
    if key in spec.bools:
        try:
            return parse_bool(raw)
        except ValueError:
            raise AdminError(f"{verb} {kind}: {key}={raw!r} is not a boolean (true or false)") \
                from None
    if key in spec.ints:
        try:
            return int(raw)
        except ValueError:
            raise AdminError(f"{verb} {kind}: {key}={raw!r} is not an integer") from None
    if key in spec.json_keys or key in spec.json_any:
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise AdminError(f"{verb} {kind}: {key} is not valid JSON ({exc})") from None
        if key in spec.json_keys and not isinstance(value, dict):
            raise AdminError(f"{verb} {kind}: {key} must be a JSON object")
        return value
    return raw


def _report(ctx: Ctx, kind: str, what: str, outcome: str) -> None:
    """``outcome``: added, updated, exists (unchanged) or deleted."""
    if ctx.as_json:
        return ctx.emit_json({"object": kind, "name": what, "result": outcome})
    text = {"added": f"Added {kind} {what}.", "updated": f"Updated {kind} {what}.",
            "exists": f"{kind.capitalize()} {what} already exists; unchanged.",
            "deleted": f"Deleted {kind} {what}."}[outcome]
    click.echo(text)


def _put(ctx: Ctx, url: str, body: dict[str, Any], existing: str = "updated") -> str:
    """PUT ``body``; the API answers 201 for a new object and 204 for an existing one."""
    r = ctx.client.call("PUT", url, json=body)
    return "added" if r.status_code == 201 else existing


# -------------------------------------------------------------------- declare
def _declare_queue(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    args = dict(v.get("arguments", {}))
    if "queue_type" in v:
        args["x-queue-type"] = v["queue_type"]
    body = {"durable": v["durable"], "auto_delete": v["auto_delete"], "arguments": args}
    return (f"'{v['name']}' in vhost {ctx.vhost}",
            _put(ctx, path("queues", ctx.vhost, v["name"]), body, "exists"))


def _declare_exchange(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    body = {k: v[k] for k in ("type", "durable", "auto_delete", "internal", "arguments")}
    return (f"'{v['name']}' in vhost {ctx.vhost}",
            _put(ctx, path("exchanges", ctx.vhost, v["name"]), body, "exists"))


def _dest(v: dict[str, Any], verb: str) -> str:
    kind = v["destination_type"]
    if kind not in ("queue", "exchange"):
        raise AdminError(f"{verb} binding: destination_type={kind!r} is not queue or exchange")
    return kind[0]


def _declare_binding(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    url = path("bindings", ctx.vhost, "e", v["source"], _dest(v, "declare"), v["destination"])
    what = (f"from '{v['source']}' to {v['destination_type']} '{v['destination']}' with "
            f"routing key '{v['routing_key']}' in vhost {ctx.vhost}")
    there = ctx.client.get(url)
    if any(b["routing_key"] == v["routing_key"] and b["arguments"] == v["arguments"]
           for b in there):
        return what, "exists"
    ctx.client.send("POST", url, {"routing_key": v["routing_key"],
                                  "arguments": v["arguments"]})
    return what, "added"


def _declare_vhost(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    body: dict[str, Any] = {k: v[k] for k in ("description", "tracing") if k in v}
    if "description" not in body:  # an existing vhost keeps the description it has
        body["description"] = vhost_description(ctx, v["name"])
    return f"'{v['name']}'", _put(ctx, path("vhosts", v["name"]), body)


def _declare_user(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    body: dict[str, Any] = {k: v[k] for k in ("password", "password_hash", "tags",
                                              "hashing_algorithm") if k in v}
    return f"'{v['name']}'", _put(ctx, path("users", v["name"]), body)


def _declare_permission(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    body = {k: v[k] for k in ("configure", "write", "read")}
    return (f"of '{v['user']}' in vhost {v['vhost']}",
            _put(ctx, path("permissions", v["vhost"], v["user"]), body))


def _declare_policy(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    body: dict[str, Any] = {k: v[k] for k in ("pattern", "definition", "priority",
                                              "apply-to") if k in v}
    return (f"'{v['name']}' in vhost {ctx.vhost}",
            _put(ctx, path("policies", ctx.vhost, v["name"]), body))


def _declare_parameter(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    return (f"{v['component']} '{v['name']}' in vhost {ctx.vhost}",
            _put(ctx, path("parameters", v["component"], ctx.vhost, v["name"]),
                 {"value": v["value"]}))


def _declare_vhost_limit(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    """The API answers 204 either way: whether the limit was set before tells."""
    rows = ctx.client.get(path("vhost-limits", v["vhost"]))
    had = any(v["name"] in (r.get("value") or {}) for r in rows)
    ctx.client.call("PUT", path("vhost-limits", v["vhost"], v["name"]),
                    json={"value": v["value"]})
    return f"{v['name']} of vhost {v['vhost']}", "updated" if had else "added"


def _declare_topic_permission(ctx: Ctx, v: dict[str, Any]) -> tuple[str, str]:
    body = {k: v[k] for k in ("exchange", "write", "read")}
    return (f"of '{v['user']}' on exchange '{v['exchange']}' in vhost {v['vhost']}",
            _put(ctx, path("topic-permissions", v["vhost"], v["user"]), body))


DECLARERS: dict[str, Callable[[Ctx, dict[str, Any]], tuple[str, str]]] = {
    "queue": _declare_queue, "exchange": _declare_exchange, "binding": _declare_binding,
    "vhost": _declare_vhost, "user": _declare_user, "permission": _declare_permission,
    "policy": _declare_policy, "parameter": _declare_parameter,
    "vhost_limit": _declare_vhost_limit, "topic_permission": _declare_topic_permission,
}


@click.group()
def declare() -> None:
    """Create or update an object, as rabbitmqadmin's declare: KEY=VALUE arguments."""


def _declare_command(kind: str) -> click.Command:
    spec = DECLARE[kind]

    @click.argument("args", nargs=-1, metavar="KEY=VALUE...")
    @common
    def run(ctx: Ctx, args: tuple[str, ...]) -> None:
        what, outcome = DECLARERS[kind](ctx, parse("declare", kind, spec, args))
        _report(ctx, kind, what, outcome)

    run.__doc__ = f"Declare a {kind}: {_usage(spec)}."
    return declare.command(kind)(run)


def _usage(spec: Spec) -> str:
    mandatory = " ".join(f"{m}=..." if isinstance(m, str) else
                         "(" + "|".join(f"{n}=..." for n in m) + ")" for m in spec.mandatory)
    optional = " ".join(f"[{k}=...]" for k in spec.optional)
    return f"{mandatory} {optional}".strip()


for _kind in DECLARE:
    _declare_command(_kind)


# --------------------------------------------------------------------- delete
@click.group()
def delete() -> None:
    """Delete an object: rabbitmqadmin's KEY=VALUE arguments, or a bare NAME."""


@delete.command("queue")
@click.argument("args", nargs=-1, metavar="NAME | name=NAME")
@click.option("--if-empty", is_flag=True, help="Only if it has no ready messages.")
@click.option("--if-unused", is_flag=True, help="Only if it has no consumers.")
@common
def delete_queue(ctx: Ctx, args: tuple[str, ...], if_empty: bool, if_unused: bool) -> None:
    """Delete a queue (its messages go with it)."""
    name = parse("delete", "queue", DELETE["queue"], args)["name"]
    params = {k: "true" for k, on in (("if-empty", if_empty), ("if-unused", if_unused)) if on}
    ctx.client.send("DELETE", path("queues", ctx.vhost, name), **params)
    _report(ctx, "queue", f"'{name}' in vhost {ctx.vhost}", "deleted")


@delete.command("exchange")
@click.argument("args", nargs=-1, metavar="NAME | name=NAME")
@click.option("--if-unused", is_flag=True, help="Only if it has no bindings.")
@common
def delete_exchange(ctx: Ctx, args: tuple[str, ...], if_unused: bool) -> None:
    """Delete an exchange."""
    name = parse("delete", "exchange", DELETE["exchange"], args)["name"]
    params = {"if-unused": "true"} if if_unused else {}
    ctx.client.send("DELETE", path("exchanges", ctx.vhost, name), **params)
    _report(ctx, "exchange", f"'{name}' in vhost {ctx.vhost}", "deleted")


@delete.command("binding")
@click.argument("args", nargs=-1, metavar="KEY=VALUE...")
@common
def delete_binding(ctx: Ctx, args: tuple[str, ...]) -> None:
    """Delete a binding: source=... destination_type=queue|exchange destination=...
    and properties_key=... (as listed) or routing_key=... (default: the empty key)."""
    v = parse("delete", "binding", DELETE["binding"], args)
    pair = ("bindings", ctx.vhost, "e", v["source"], _dest(v, "delete"), v["destination"])
    url = path(*pair)
    key = v.get("properties_key")
    if key is None:
        rk = v.get("routing_key", "")
        found = [b for b in ctx.client.get(url) if b["routing_key"] == rk]
        if not found:
            raise AdminError(f"no binding from '{v['source']}' to {v['destination_type']} "
                             f"'{v['destination']}' with routing key '{rk}' in vhost "
                             f"{ctx.vhost}")
        key = found[0]["properties_key"]
    ctx.client.send("DELETE", path(*pair, key))
    _report(ctx, "binding", f"from '{v['source']}' to {v['destination_type']} "
            f"'{v['destination']}' ({key}) in vhost {ctx.vhost}", "deleted")


_DELETE_URLS: dict[str, Callable[[Ctx, dict[str, Any]], tuple[str, str]]] = {
    "vhost": lambda ctx, v: (path("vhosts", v["name"]), f"'{v['name']}'"),
    "user": lambda ctx, v: (path("users", v["name"]), f"'{v['name']}'"),
    "permission": lambda ctx, v: (path("permissions", v["vhost"], v["user"]),
                                  f"of '{v['user']}' in vhost {v['vhost']}"),
    "policy": lambda ctx, v: (path("policies", ctx.vhost, v["name"]),
                              f"'{v['name']}' in vhost {ctx.vhost}"),
    "parameter": lambda ctx, v: (path("parameters", v["component"], ctx.vhost, v["name"]),
                                 f"{v['component']} '{v['name']}' in vhost {ctx.vhost}"),
    "vhost_limit": lambda ctx, v: (path("vhost-limits", v["vhost"], v["name"]),
                                   f"{v['name']} of vhost {v['vhost']}"),
    "topic_permission": lambda ctx, v: (
        path("topic-permissions", v["vhost"], v["user"])
        + (f"?exchange={quote(v['exchange'], safe='')}" if "exchange" in v else ""),
        f"of '{v['user']}' in vhost {v['vhost']}"
        + (f" on exchange '{v['exchange']}'" if "exchange" in v else "")),
}


def _delete_command(kind: str) -> click.Command:
    spec = DELETE[kind]

    @click.argument("args", nargs=-1, metavar="KEY=VALUE...")
    @common
    def run(ctx: Ctx, args: tuple[str, ...]) -> None:
        url, what = _DELETE_URLS[kind](ctx, parse("delete", kind, spec, args))
        ctx.client.send("DELETE", url)
        _report(ctx, kind, what, "deleted")

    run.__doc__ = f"Delete a {kind}: {_usage(spec)}."
    return delete.command(kind)(run)


for _kind in _DELETE_URLS:
    _delete_command(_kind)


# ----------------------------------------------------------------------- list
#: rabbitmqadmin's LISTABLE: which lists a -V narrows, and the default columns
LISTABLE: dict[str, tuple[bool, tuple[str, ...]]] = {
    "connections": (False, ("name", "user", "channels")),
    "channels": (False, ("name", "user")),
    "consumers": (True, ()),
    "exchanges": (True, ("name", "type")),
    "queues": (True, ("name", "messages")),
    "bindings": (True, ("source", "destination", "routing_key")),
    "users": (False, ()),
    "vhosts": (False, ("name", "messages")),
    "permissions": (False, ()),
    "policies": (False, ()),
    "parameters": (False, ()),
    "vhost_limits": (True, ()),
    "topic_permissions": (False, ()),
    "nodes": (False, ("name", "type", "mem_used")),
}
#: the API path of a listing whose name differs from it
LIST_PATHS = {"vhost_limits": "vhost-limits", "topic_permissions": "topic-permissions"}
#: columns first when all are shown, as rabbitmqadmin orders them
PROMOTE = ("vhost", "name", "type", "source", "destination", "destination_type",
           "routing_key")


def _lookup(item: dict[str, Any], dotted: str) -> Any:
    value: Any = item
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _cell(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


def _all_columns(items: list[dict[str, Any]]) -> list[str]:
    seen = [k for k in items[0] if not isinstance(items[0][k], dict)] if items else []
    return [k for k in PROMOTE if k in seen] + [k for k in seen if k not in PROMOTE]


@click.command("list")
@click.argument("what", type=click.Choice(list(LISTABLE)))
@click.argument("fields", nargs=-1)
@common
def list_(ctx: Ctx, what: str, fields: tuple[str, ...]) -> None:
    """List objects as rabbitmqadmin does: WHAT, then the FIELDS to show (dotted for
    nested ones, e.g. message_stats.publish). Every vhost's unless -V is given."""
    per_vhost, default_cols = LISTABLE[what]
    where = LIST_PATHS.get(what, what)
    url = path(where, ctx.vhost) if per_vhost and given_vhost() else path(where)
    data = ctx.client.get(url)
    if ctx.as_json:
        if fields:
            data = [{f: _lookup(item, f) for f in fields} for item in data]
        return ctx.emit_json(data)
    cols = list(fields or default_cols) or _all_columns(data)
    _table(None, cols, [[_cell(_lookup(item, c)) for c in cols] for item in data])


COMMANDS: list[click.Command] = [declare, delete, list_]


def register(main: click.Group) -> None:
    """Attach the rabbitmqadmin verbs to the ``amqplite`` group."""
    for cmd in COMMANDS:
        main.add_command(cmd)
