"""Admin commands of the ``amqplite`` CLI; they talk to a running broker's HTTP API.

``register(main)`` attaches them to the top-level click group. Every command
prints an aligned table for humans, JSON with ``--format json`` (or ``--json``),
or tab- or comma-separated rows with ``--format tsv|csv``; errors are one line on stderr and a
non-zero exit status. Short options follow rabbitmqadmin: ``-u`` user,
``-p`` password, ``-V`` vhost.
"""

from __future__ import annotations

import base64
import json
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import click

from amqplite.admin.cli_common import (
    FORMATS,
    OUTPUT,
    Ctx,
    _console,
    _progress,
    _table,
    common,
    common_json_only,
)
from amqplite.admin.client import AdminError, path
from amqplite.admin.messages import ACK_MODES, decode_payload, parse_filter, preview

__all__ = ["FORMATS", "OUTPUT", "Ctx", "common", "common_json_only", "register"]

PAGE = 500


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _yn(v: Any) -> str:
    return "yes" if v else ""


def _args(d: dict[str, Any] | None) -> str:
    return " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                    for k, v in (d or {}).items())


def _time_ms(ms: int | None) -> str:
    from amqplite.admin.messages import iso

    return (iso(ms / 1000) or "") if ms else ""


def _filters(values: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_filter(list(values) or None)
    except ValueError as exc:
        raise AdminError(str(exc)) from None


# -------------------------------------------------------------------- listing
@click.command()
@common
def queues(ctx: Ctx) -> None:
    """List queues: ready, unacked, consumers, bytes, rates and policy."""
    data = ctx.client.get(path("queues", ctx.vhost))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = []
    ready = unacked = 0
    for q in data:
        ready += q["messages_ready"]
        unacked += q["messages_unacknowledged"]
        feats = [f for f, on in (("D", q["durable"]), ("AD", q["auto_delete"]),
                                 ("Excl", q["exclusive"])) if on]
        if q["arguments"].get("x-dead-letter-exchange") is not None or \
                "dead-letter-exchange" in q.get("effective_policy_definition", {}):
            feats.append("DLX")
        if q.get("stream"):
            s = q["stream"]
            feats.append(f"Stream[{s['first_offset']}..{s['last_offset']}, "
                         f"{_plural(s['segments'], 'segment')}]")
        stats = q.get("message_stats", {})
        rate = stats.get("publish_details", {}).get("rate", 0.0)
        rows.append([q["name"], q["messages_ready"], q["messages_unacknowledged"],
                     q["consumers"], _size(q["message_bytes"]), f"{rate:g}",
                     q.get("policy") or "", " ".join(feats)])
    cap = (f"{_plural(len(data), 'queue')}, {_plural(ready + unacked, 'message')} "
           f"({ready} ready, {unacked} unacked)")
    _table(f"Queues in vhost {ctx.vhost}",
           ["Name", "Ready", "Unacked", "Consumers", "Bytes", "In/s", "Policy", "Features"],
           rows, cap, right=("Ready", "Unacked", "Consumers", "Bytes", "In/s"))


@click.command()
@common
def exchanges(ctx: Ctx) -> None:
    """List exchanges."""
    data = ctx.client.get(path("exchanges", ctx.vhost))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = [[x["name"] or "(default)", x["type"], _yn(x["durable"]), _yn(x["auto_delete"]),
             _yn(x["internal"]), _args(x["arguments"])] for x in data]
    _table(f"Exchanges in vhost {ctx.vhost}",
           ["Name", "Type", "Durable", "Auto-delete", "Internal", "Arguments"], rows,
           _plural(len(data), "exchange"))


@click.command()
@click.option("--all", "show_default", is_flag=True,
              help="Include the implicit default-exchange binding of every queue.")
@common
def bindings(ctx: Ctx, show_default: bool) -> None:
    """List bindings."""
    data = ctx.client.get(path("bindings", ctx.vhost))
    if not show_default:
        data = [b for b in data if b["source"] != ""]
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = [[b["source"] or "(default)", b["destination"], b["destination_type"],
             b["routing_key"], _args(b["arguments"])] for b in data]
    _table(f"Bindings in vhost {ctx.vhost}",
           ["Source", "Destination", "Type", "Routing key", "Arguments"], rows,
           _plural(len(data), "binding"))


def _list_connections(ctx: Ctx) -> None:
    data = ctx.client.get(path("connections"))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = []
    for c in data:
        cp = c.get("client_properties") or {}
        client = " ".join(str(x) for x in (cp.get("product"), cp.get("version")) if x)
        if "client_id" in cp:  # an MQTT client: its protocol and client id
            client = f"{c['protocol']} {cp['client_id']}"
        rows.append([c["name"], c["user"], c["vhost"], c["channels"], client,
                     _time_ms(c["connected_at"]), _size(c["recv_oct"]), _size(c["send_oct"])])
    _table("Connections", ["Name", "User", "VHost", "Channels", "Client", "Connected",
                           "Received", "Sent"], rows, _plural(len(data), "connection"),
           right=("Channels", "Received", "Sent"))


@click.group(invoke_without_command=True)
@common
def connections(ctx: Ctx) -> None:
    """List client connections (or ``connections close NAME``)."""
    if click.get_current_context().invoked_subcommand is None:
        _list_connections(ctx)


@connections.command("list")
@common
def connections_list(ctx: Ctx) -> None:
    """List client connections."""
    _list_connections(ctx)


@connections.command("close")
@click.argument("name")
@common
def connections_close(ctx: Ctx, name: str) -> None:
    """Close connection NAME (as listed) with 320 CONNECTION_FORCED."""
    ctx.client.send("DELETE", path("connections", name))
    if ctx.as_json:
        return ctx.emit_json({"closed": name})
    click.echo(f"Closed connection {name}.")


@click.command()
@common
def consumers(ctx: Ctx) -> None:
    """List consumers."""
    data = ctx.client.get(path("consumers", ctx.vhost))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = [[c["queue"]["name"], c["consumer_tag"], c["channel_details"]["name"],
             "manual" if c["ack_required"] else "auto", _yn(c["exclusive"]),
             c["prefetch_count"], c.get("messages_unacknowledged", "")] for c in data]
    _table(f"Consumers in vhost {ctx.vhost}",
           ["Queue", "Consumer tag", "Channel", "Ack", "Exclusive", "Prefetch", "Unacked"],
           rows, _plural(len(data), "consumer"), right=("Prefetch", "Unacked"))


# ------------------------------------------------------------------- policies
def _list_policies(ctx: Ctx) -> None:
    data = ctx.client.get(path("policies", ctx.vhost))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = [[p["name"], p["pattern"], p["apply-to"], p["priority"],
             json.dumps(p["definition"], sort_keys=True)] for p in data]
    _table(f"Policies in vhost {ctx.vhost}",
           ["Name", "Pattern", "Apply to", "Priority", "Definition"], rows,
           _plural(len(data), "policy").replace("policys", "policies"), right=("Priority",))


@click.group(invoke_without_command=True)
@common
def policies(ctx: Ctx) -> None:
    """List policies (or ``policies set`` / ``policies clear``)."""
    if click.get_current_context().invoked_subcommand is None:
        _list_policies(ctx)


@policies.command("list")
@common
def policies_list(ctx: Ctx) -> None:
    """List policies."""
    _list_policies(ctx)


@policies.command("set")
@click.argument("name")
@click.argument("pattern")
@click.argument("definition")
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--apply-to", type=click.Choice(["queues", "exchanges", "all"]), default="queues",
              show_default=True)
@common
def policies_set(ctx: Ctx, name: str, pattern: str, definition: str, priority: int,
                 apply_to: str) -> None:
    """Create or replace policy NAME for queues matching PATTERN (a regex).

    DEFINITION is a JSON object, e.g. '{"dead-letter-exchange": "dlx"}'.
    """
    try:
        defn = json.loads(definition)
    except ValueError as exc:
        raise AdminError(f"definition is not valid JSON: {exc}") from None
    if not isinstance(defn, dict):
        raise AdminError("definition must be a JSON object")
    r = ctx.client.call("PUT", path("policies", ctx.vhost, name),
                        json={"pattern": pattern, "definition": defn, "priority": priority,
                              "apply-to": apply_to})
    outcome = "added" if r.status_code == 201 else "updated"
    answer = r.json() if r.content else None
    ignored = answer.get("ignored", []) if isinstance(answer, dict) else []
    if ctx.as_json:
        return ctx.emit_json({"set": name, "result": outcome, "ignored": ignored})
    click.echo(f"Policy '{name}' set on vhost {ctx.vhost} ({outcome}).")
    for line in ignored:  # keys without effect here (RabbitMQ's cluster keys, ...)
        click.echo(f"ignored: {line}")


@policies.command("clear")
@click.argument("name")
@common
def policies_clear(ctx: Ctx, name: str) -> None:
    """Delete policy NAME."""
    ctx.client.send("DELETE", path("policies", ctx.vhost, name))
    if ctx.as_json:
        return ctx.emit_json({"cleared": name})
    click.echo(f"Policy '{name}' cleared.")


# ------------------------------------------------------------ purge / delete
@click.command()
@click.argument("queue")
@common
def purge(ctx: Ctx, queue: str) -> None:
    """Remove every ready message from QUEUE."""
    res = ctx.client.send("DELETE", path("queues", ctx.vhost, queue, "contents"))
    if ctx.as_json:
        return ctx.emit_json(res)
    click.echo(f"Purged {_plural(res['purged'], 'message')} from queue '{queue}'.")


# ---------------------------------------------------------------- publish/get
def _kv(values: tuple[str, ...], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k:
            raise AdminError(f"{what} {v!r} is not of the form name=value")
        out[k] = val
    return out


@click.command()
@click.option("--exchange", "-e", default="", help="Exchange (default: the default exchange).")
@click.option("--routing-key", "-k", default="", help="Routing key (a queue name for the "
              "default exchange).")
@click.argument("body", required=False)
@click.option("--file", "body_file", type=click.File("rb"), help="Read the body from a file.")
@click.option("--header", "-H", multiple=True, help="Header name=value (repeatable).")
@click.option("--property", "-P", "props", multiple=True,
              help="Property name=value, e.g. content_type=application/json (repeatable).")
@click.option("--persistent/--transient", default=True, show_default=True)
@common
def publish(ctx: Ctx, exchange: str, routing_key: str, body: str | None, body_file: Any,
            header: tuple[str, ...], props: tuple[str, ...], persistent: bool) -> None:
    """Publish one message; BODY is text ('-' or omitted: read standard input)."""
    if body_file is not None:
        data = body_file.read()
    elif body is None or body == "-":
        data = sys.stdin.buffer.read()
    else:
        data = body.encode()
    properties: dict[str, Any] = _kv(props, "property")
    for k in ("priority", "timestamp", "delivery_mode"):
        if k in properties:
            try:
                properties[k] = int(properties[k])
            except ValueError:
                raise AdminError(f"property {k} must be an integer") from None
    properties.setdefault("delivery_mode", 2 if persistent else 1)
    if header:
        properties["headers"] = _kv(header, "header")
    res = ctx.client.send(
        "POST", path("exchanges", ctx.vhost, exchange or "amq.default", "publish"),
        {"routing_key": routing_key, "payload": base64.b64encode(data).decode(),
         "payload_encoding": "base64", "properties": properties})
    if ctx.as_json:
        return ctx.emit_json(res)
    where = f"exchange '{exchange}'" if exchange else "the default exchange"
    if res["routed"]:
        click.echo(f"Published {_plural(len(data), 'byte')} to {where} with routing key "
                   f"'{routing_key}'.")
    else:
        click.echo(f"Published to {where}, but no queue matched routing key '{routing_key}' "
                   "(message dropped).", err=True)


def _body_of(m: dict[str, Any]) -> bytes:
    return decode_payload(m.get("payload"), m.get("payload_encoding"))


@click.command()
@click.argument("queue")
@click.option("--count", "-n", type=click.IntRange(1), default=1, show_default=True)
@click.option("--ackmode", type=click.Choice(ACK_MODES), default="ack_requeue_true",
              show_default=True, help="ack_requeue_true leaves the message in the queue "
              "(marked redelivered); ack_requeue_false consumes it; reject_requeue_false "
              "dead-letters it.")
@common
def get(ctx: Ctx, queue: str, count: int, ackmode: str) -> None:
    """Get up to COUNT messages from QUEUE (RabbitMQ's ack modes)."""
    data = ctx.client.send("POST", path("queues", ctx.vhost, queue, "get"),
                           {"count": count, "ackmode": ackmode, "encoding": "auto"})
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = []
    for i, m in enumerate(data, 1):
        text, _ = preview(_body_of(m), m["properties"].get("content_type"))
        rows.append([i, m["exchange"] or "(default)", m["routing_key"], _yn(m["redelivered"]),
                     _size(m["payload_bytes"]), text])
    left = data[-1]["message_count"] if data else None
    if left is not None and ackmode.endswith("requeue_true"):
        left += len(data)  # message_count was taken before they went back
    cap = _plural(len(data), "message") + (f", {left} left in the queue" if left is not None
                                            else "")
    _table(f"Messages from {queue} ({ackmode})",
           ["#", "Exchange", "Routing key", "Redelivered", "Size", "Payload"], rows, cap,
           right=("#", "Size"))


# ------------------------------------------------------------------------ dlq
@click.group()
def dlq() -> None:
    """Dead letters: list, show, replay, purge and export them."""


def _dlq_row(m: dict[str, Any]) -> dict[str, Any]:
    """The ``dlq list --json`` object of one peeked message."""
    d = m.get("death") or {}
    body = _body_of(m)
    text, how = preview(body, m["properties"].get("content_type"))
    return {
        "index": m["index"] + 1,
        "message_id": m.get("message_id"),
        "reason": d.get("reason"),
        "queue": d.get("queue"),
        "exchange": d.get("exchange"),
        "routing_keys": d.get("routing_keys", []),
        "count": d.get("count", 0),
        "first_death_at": d.get("first_death_at"),
        "last_death_at": d.get("last_death_at"),
        "origin_queue": d.get("origin_queue"),
        "size": m["payload_bytes"],
        "body": text,
        "body_encoding": how,
        "content_type": m["properties"].get("content_type"),
        "redelivered": m["redelivered"],
    }


def _peek(ctx: Ctx, queue: str, *, limit: int, offset: int = 0,
          flt: dict[str, str] | None = None, truncate: int | None = None) -> tuple[list[Any], int]:
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if truncate is not None:
        params["truncate"] = truncate
    if flt:
        params["filter"] = [f"{k}={v}" for k, v in flt.items()]
    r = ctx.client.call("GET", path("queues", ctx.vhost, queue, "messages"), params=params)
    return r.json(), int(r.headers.get("x-total-count", "0"))


@dlq.command("list")
@click.argument("queue")
@click.option("--limit", type=click.IntRange(0), default=100, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0)
@click.option("--filter", "filters", multiple=True, metavar="FIELD=GLOB",
              help="Only matching messages, e.g. reason=rejected (repeatable).")
@common
def dlq_list(ctx: Ctx, queue: str, limit: int, offset: int, filters: tuple[str, ...]) -> None:
    """Show the dead letters in QUEUE without consuming them."""
    msgs, total = _peek(ctx, queue, limit=limit, offset=offset, flt=_filters(filters),
                        truncate=4096)
    rows = [_dlq_row(m) for m in msgs]
    if ctx.as_json:
        return ctx.emit_json(rows)
    table = [[r["index"], r["reason"] or "-", r["queue"] or "-",
              r["exchange"] if r["exchange"] else ("(default)" if r["queue"] else "-"),
              ",".join(k for k in r["routing_keys"] if k), r["count"],
              r["first_death_at"] or "", r["last_death_at"] or "", _size(r["size"]), r["body"]]
             for r in rows]
    shown = f" (showing {offset + 1}-{offset + len(rows)})" if rows and (
        offset or len(rows) < total) else ""
    cap = f"{_plural(total, 'message')} in '{queue}'{shown}"
    if filters:
        cap = f"{_plural(len(rows), 'matching message')}; {cap}"
    _table(f"Dead letters in {queue}",
           ["#", "Reason", "Died in", "Exchange", "Routing keys", "Deaths", "First death",
            "Last death", "Size", "Body"], table, cap, right=("#", "Deaths", "Size"))


@dlq.command("show")
@click.argument("queue")
@click.argument("index", type=click.IntRange(1), required=False)
@click.option("--id", "message_id", help="Select by message id instead of list index.")
@common
def dlq_show(ctx: Ctx, queue: str, index: int | None, message_id: str | None) -> None:
    """Print one message of QUEUE in full: properties, headers, deaths and body.

    INDEX is the ``#`` column of ``dlq list`` (1 = the head of the queue).
    """
    if (index is None) == (message_id is None):
        raise AdminError("give a message INDEX (see `dlq list`) or --id MESSAGE_ID")
    if message_id is not None:
        msgs, _ = _peek(ctx, queue, limit=1, flt={"message_id": message_id})
    else:
        assert index is not None
        msgs, _ = _peek(ctx, queue, limit=1, offset=index - 1)
    if not msgs:
        what = f"id '{message_id}'" if message_id else f"#{index}"
        raise AdminError(f"no message {what} in queue '{queue}'")
    m = msgs[0]
    if ctx.as_json:
        return ctx.emit_json(m)
    _show_message(m)


def _show_message(m: dict[str, Any]) -> None:
    con = _console()
    d = m.get("death")
    props = dict(m["properties"])
    headers = props.pop("headers", None) or {}
    con.print(f"[bold]Message #{m['index'] + 1}[/bold]  id {m.get('message_id')}  "
              f"position {m['position']}  {_size(m['payload_bytes'])}"
              f"{'  redelivered' if m['redelivered'] else ''}")
    con.print(f"Exchange: {m['exchange'] or '(default)'}   Routing key: {m['routing_key']}")
    if d:
        con.print(f"Died: {d['reason']} in queue '{d['queue']}' ({_plural(d['count'], 'time')}), "
                  f"first {d['first_death_at'] or '?'}, last {d['last_death_at'] or '?'}")
        con.print(f"Origin: queue '{d['origin_queue']}' via exchange "
                  f"'{d['origin_exchange'] or ''}' routing keys {d['origin_routing_keys']}")
    if props:
        con.print("[bold]Properties[/bold]")
        for k, v in props.items():
            con.print(f"  {k}: {v}", markup=False)
    if headers:
        con.print("[bold]Headers[/bold]")
        con.print(json.dumps(headers, indent=2, ensure_ascii=False), markup=False)
    con.print("[bold]Body[/bold]")
    body = _body_of(m)
    _, how = preview(body, props.get("content_type"))
    if how == "json":
        con.print(json.dumps(json.loads(body), indent=2, ensure_ascii=False), markup=False)
    elif how == "text":
        con.print(body.decode("utf-8"), markup=False)
    else:
        for i in range(0, len(body), 16):
            chunk = body[i:i + 16]
            asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
            con.print(f"  {i:08x}  {chunk.hex(' '):<47}  {asc}", markup=False)


@dlq.command("replay")
@click.argument("queue")
@click.option("--to", "to", type=click.Choice(["origin", "exchange"]), default="origin",
              show_default=True, help="origin: the queue each message first died in; "
              "exchange: re-route through its original exchange and routing keys.")
@click.option("--queue", "target", help="Send every message to this queue instead.")
@click.option("--limit", type=click.IntRange(1), help="At most this many messages.")
@click.option("--filter", "filters", multiple=True, metavar="FIELD=GLOB",
              help="Only matching messages, e.g. reason=rejected (repeatable).")
@common
def dlq_replay(ctx: Ctx, queue: str, to: str, target: str | None, limit: int | None,
               filters: tuple[str, ...]) -> None:
    """Send dead letters in QUEUE back where they came from.

    Each message leaves QUEUE only in the same store transaction that stores
    its copy in the target, so a crash never loses or duplicates it.
    """
    flt = _filters(filters)
    info = ctx.client.get(path("queues", ctx.vhost, queue))
    total = info["messages_ready"] if limit is None else min(limit, info["messages_ready"])
    moved = 0
    last: dict[str, Any] = {"skipped": 0, "errors": [], "remaining": info["messages_ready"]}
    with _progress(total, f"Replaying {queue}") as progress:
        task = progress.add_task("replay", total=total)
        while limit is None or moved < limit:
            step = PAGE if limit is None else min(PAGE, limit - moved)
            body: dict[str, Any] = {"limit": step, "to": to}
            if target:
                body["queue"] = target
            if flt:
                body["filter"] = flt
            last = ctx.client.send("POST", path("queues", ctx.vhost, queue, "replay"), body)
            moved += last["moved"]
            progress.update(task, completed=min(moved, total))
            if last["moved"] < step:
                break
    result = {"replayed": moved, "skipped": last["skipped"], "errors": last["errors"],
              "remaining": last["remaining"]}
    if ctx.as_json:
        ctx.emit_json(result)
    else:
        click.echo(f"Replayed {_plural(moved, 'message')} from '{queue}'; "
                   f"{last['remaining']} left.")
        for reason, n in Counter(e["reason"] for e in last["errors"]).most_common():
            click.echo(f"  not replayed: {n} x {reason}")
    if last["errors"]:
        n = len(last["errors"])
        raise AdminError(f"{_plural(n, 'message')} could not be replayed "
                         f"({last['errors'][0]['reason']})")


@dlq.command("purge")
@click.argument("queue")
@common
def dlq_purge(ctx: Ctx, queue: str) -> None:
    """Delete every dead letter in QUEUE."""
    res = ctx.client.send("DELETE", path("queues", ctx.vhost, queue, "contents"))
    if ctx.as_json:
        return ctx.emit_json(res)
    click.echo(f"Purged {_plural(res['purged'], 'dead letter')} from '{queue}'.")


def _all_messages(ctx: Ctx, queue: str, limit: int | None) -> Iterator[dict[str, Any]]:
    offset = 0
    while limit is None or offset < limit:
        n = PAGE if limit is None else min(PAGE, limit - offset)
        msgs, _ = _peek(ctx, queue, limit=n, offset=offset)
        yield from msgs
        offset += len(msgs)
        if len(msgs) < n:
            return


def _export_obj(m: dict[str, Any], raw_body: bool) -> dict[str, Any]:
    out = {k: m[k] for k in ("message_id", "exchange", "routing_key", "redelivered",
                             "delivery_count", "properties", "death", "payload_bytes")}
    body = _body_of(m)
    if raw_body:
        out["body"] = body
    else:
        out["payload"], out["payload_encoding"] = m["payload"], m["payload_encoding"]
    return out


@dlq.command("export")
@click.argument("queue")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(["json", "cbor"]), default="json",
              show_default=True)
@click.option("--limit", type=click.IntRange(1), help="At most this many messages.")
@common_json_only
def dlq_export(ctx: Ctx, queue: str, file: str, fmt: str, limit: int | None) -> None:
    """Write the dead letters of QUEUE to FILE ('-' for stdout) without consuming them.

    JSON: an array of messages (payload as text, or base64 for binary bodies);
    CBOR: the same array with each body as a byte string.
    """
    info = ctx.client.get(path("queues", ctx.vhost, queue))
    total = info["messages_ready"] if limit is None else min(limit, info["messages_ready"])
    out: list[dict[str, Any]] = []
    with _progress(total, f"Exporting {queue}") as progress:
        task = progress.add_task("export", total=total)
        for m in _all_messages(ctx, queue, limit):
            out.append(_export_obj(m, fmt == "cbor"))
            progress.update(task, completed=len(out))
    if fmt == "cbor":
        import cbor2

        data = cbor2.dumps(out)
    else:
        data = (json.dumps(out, indent=2, ensure_ascii=False) + "\n").encode()
    if file == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        with open(file, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise AdminError(f"cannot write {file}: {exc.strerror}") from None
    if ctx.as_json:
        ctx.emit_json({"exported": len(out), "file": file, "format": fmt})
    else:
        click.echo(f"Exported {_plural(len(out), 'message')} from '{queue}' to {file} ({fmt}).")


# --------------------------------------------------------------------- memory
@click.command("set-memory-high-watermark")
@click.argument("value")
@common
def set_memory_high_watermark(ctx: Ctx, value: str) -> None:
    """Block publishers above VALUE of memory: a fraction of RAM (0.4) or a size
    (200MB, 1GiB, bytes). Applies at once; the configured value returns on restart."""
    res = ctx.client.send("PUT", path("node", "memory"), {"memory_high_watermark": value})
    if ctx.as_json:
        return ctx.emit_json(res)
    click.echo(f"Memory high watermark set to {res['memory_high_watermark']}: limit "
               f"{_size(res['mem_limit'])}, {_size(res['mem_used'])} used, "
               f"alarm {'on' if res['mem_alarm'] else 'off'}.")


# ---------------------------------------------------------------------- trace
def _trace_offline(message_id: str, data_dir: str | None, db_url: str | None,
                   ) -> list[dict[str, Any]]:
    """Read a stopped broker's database directly (the only command that does)."""
    from amqplite.audit.trace import TraceError, message_history, open_log

    try:
        return message_history(open_log(data_dir, db_url), message_id)
    except TraceError as exc:
        raise AdminError(str(exc)) from None


@click.command()
@click.argument("message_id")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Read this data directory's database instead of asking the broker "
                   "(for a stopped broker).")
@click.option("--db-url", help="As --data-dir, for a database URL (SQLAlchemy form).")
@common
def trace(ctx: Ctx, message_id: str, data_dir: str | None, db_url: str | None) -> None:
    """Print the whole history of MESSAGE_ID from the delivery log.

    MESSAGE_ID is the message-id property (or amq-<key> for messages without
    one); a number also matches the broker's internal message key. No rows is
    an error (exit status 1), with --json too.
    """
    if data_dir or db_url:
        rows = _trace_offline(message_id, data_dir, db_url)
    else:
        rows = ctx.client.get(path("trace", message_id))
    if not rows:
        raise AdminError(f"no delivery-log rows for message {message_id!r}")
    if ctx.as_json:
        return ctx.emit_json(rows)
    keys = sorted({r["message_key"] for r in rows if r["message_key"] is not None})
    title = f"Message {message_id}" + (f" (key {', '.join(map(str, keys))})" if keys else "")
    _table(title, ["Time (UTC)", "Event", "Queue", "Exchange", "Routing key", "Consumer",
                   "Attempt", "Reason"],
           [[r["time"].replace("T", " ").rstrip("Z"), r["event"], r["queue"],
             r["exchange"] or "(default)", r["routing_key"], r["consumer_tag"], r["attempt"],
             r["reason"]] for r in rows], _plural(len(rows), "event"), right=("Attempt",))


COMMANDS: list[click.Command] = [queues, exchanges, bindings, connections, consumers, policies,
                                 purge, publish, get, dlq, trace,
                                 set_memory_high_watermark]


def register(main: click.Group) -> None:
    """Attach the admin commands to the ``amqplite`` group."""
    for cmd in COMMANDS:
        if cmd.name not in main.commands:
            main.add_command(cmd)
