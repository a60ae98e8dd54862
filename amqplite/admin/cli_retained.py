"""``amqplite retained list|show|clear EXCHANGE [KEY]``: what an x-lvc or
x-recent-history exchange retains, or (EXCHANGE = the MQTT exchange, amq.topic) the
vhost's MQTT retained messages by topic, through
``/api/exchanges/{vhost}/{name}/retained``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from amqplite.admin.cli import Ctx, _body_of, _plural, _size, _table, _yn, common
from amqplite.admin.client import path
from amqplite.admin.messages import preview


@click.group()
def retained() -> None:
    """Retained messages of x-lvc and x-recent-history exchanges, and MQTT's (EXCHANGE
    amq.topic, KEY an MQTT topic): list, show, clear."""


#: messages asked for per request while paging through a set
PAGE = 1000


def _command(name: str, *, limit: bool = False) -> Callable[[Callable[..., None]], click.Command]:
    """``amqplite retained NAME EXCHANGE [KEY]`` with the admin options."""
    def wrap(f: Callable[..., None]) -> click.Command:
        f = common(f)
        if limit:
            f = click.option("-n", "--limit", type=click.IntRange(min=1), default=None,
                             help="at most this many messages (default: all, fetched "
                                  f"{PAGE} at a time)")(f)
        f = click.argument("key", required=False)(f)
        f = click.argument("exchange")(f)
        return retained.command(name)(f)

    return wrap


def _url(ctx: Ctx, exchange: str, key: str | None) -> str:
    parts = ["exchanges", ctx.vhost, exchange, "retained"]
    return path(*parts, key) if key is not None else path(*parts)


def _fetch(ctx: Ctx, exchange: str, key: str | None,
           limit: int | None) -> tuple[list[Any], int]:
    """The retained messages (at most ``limit``) and the set's size, a page at a time:
    the API bounds each answer by count and bytes and says where the next goes on."""
    out: list[Any] = []
    offset = 0
    while True:
        want = PAGE if limit is None else min(PAGE, limit - len(out))
        r = ctx.client.call("GET", _url(ctx, exchange, key),
                            params={"offset": offset, "limit": want})
        items = r.json()
        out.extend(items)
        total = int(r.headers.get("x-total-count", len(out)))
        nxt = r.headers.get("x-next-offset")
        if nxt is None or not items or (limit is not None and len(out) >= limit):
            return out, total
        offset = int(nxt)


@_command("list", limit=True)
def list_(ctx: Ctx, exchange: str, key: str | None, limit: int | None) -> None:
    """List what EXCHANGE retains (under KEY only, when given), oldest first."""
    data, total_count = _fetch(ctx, exchange, key, limit)
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = []
    for i, m in enumerate(data, 1):
        text, _ = preview(_body_of(m), m["properties"].get("content_type"))
        rows.append([i, m["key"], m["routing_key"], _yn(m["stored"]),
                     _size(m["payload_bytes"]), text])
    total = sum(m["payload_bytes"] for m in data)
    mqtt = any("topic" in m for m in data)  # MQTT's: the key is the topic
    title = f"MQTT retained messages (exchange {exchange})" if mqtt else f"Retained by {exchange}"
    _table(title, ["#", "Topic" if mqtt else "Key", "Routing key", "Stored", "Size", "Payload"],
           rows, f"{_plural(len(data), 'message')}, {_size(total)}"
           + (f" (of {total_count})" if total_count > len(data) else ""), right=("#", "Size"))


@_command("show", limit=True)
def show(ctx: Ctx, exchange: str, key: str | None, limit: int | None) -> None:
    """Show each retained message of EXCHANGE (under KEY) in full: properties and body."""
    data, _total = _fetch(ctx, exchange, key, limit)
    if ctx.as_json:
        return ctx.emit_json(data)
    for i, m in enumerate(data, 1):
        text, how = preview(_body_of(m), m["properties"].get("content_type"), limit=100_000)
        props: dict[str, Any] = {k: v for k, v in m["properties"].items() if v is not None}
        what = "topic" if "topic" in m else "key"
        click.echo(f"--- {i}. {what} {m['key']!r}, routing key {m['routing_key']!r}, "
                   f"{_size(m['payload_bytes'])}{', stored' if m['stored'] else ''}")
        click.echo(f"properties: {json.dumps(props, ensure_ascii=False)}")
        click.echo(f"body ({how}): {text}")
    if not data:
        click.echo(f"Exchange '{exchange}' retains nothing.")


@_command("clear")
def clear(ctx: Ctx, exchange: str, key: str | None) -> None:
    """Drop what EXCHANGE retains (under KEY only, when given); live bindings stay.
    An MQTT topic cleared here is cleared for MQTT subscribers too, durably."""
    res = ctx.client.send("DELETE", _url(ctx, exchange, key))
    if ctx.as_json:
        return ctx.emit_json(res)
    where = f" under key '{key}'" if key is not None else ""
    click.echo(f"Cleared {_plural(res['removed'], 'retained message')} of exchange "
               f"'{exchange}'{where}.")


def register(main: click.Group) -> None:
    """Attach ``amqplite retained`` to the top-level group."""
    if "retained" not in main.commands:
        main.add_command(retained)
