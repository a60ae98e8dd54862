"""``amqplite shovels list|add|delete|restart``: dynamic shovels through
``/api/shovels`` and ``/api/parameters/shovel`` (see docs/federation.md)."""

from __future__ import annotations

import json
from typing import Any

import click

from amqplite.admin.cli import Ctx, _plural, _table, common
from amqplite.admin.client import path


def _list(ctx: Ctx) -> None:
    data = ctx.client.get(path("shovels", ctx.vhost))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = []
    for s in data:
        src = s.get("src_queue") or f"exchange {s.get('src_exchange', '')}"
        dest = s.get("dest_queue") or s.get("dest_exchange") or "(as published)"
        rows.append([s["name"], s["state"], f"{s['src_uri']} {src}", f"{s['dest_uri']} {dest}",
                     s.get("forwarded", 0), s.get("reason", "")])
    _table(f"Shovels in vhost {ctx.vhost}",
           ["Name", "State", "Source", "Destination", "Forwarded", "Reason"], rows,
           _plural(len(data), "shovel"), right=("Forwarded",))


@click.group(invoke_without_command=True)
@common
def shovels(ctx: Ctx) -> None:
    """Dynamic shovels: list (the default), add, delete, restart."""
    if click.get_current_context().invoked_subcommand is None:
        _list(ctx)


@shovels.command("list")
@common
def list_(ctx: Ctx) -> None:
    """List the shovels of the vhost with their state (URI passwords masked)."""
    _list(ctx)


@shovels.command("add")
@common
@click.argument("name")
@click.option("--src-uri", required=True, help="Source AMQP URI (amqp:// alone: this broker).")
@click.option("--src-queue", help="Source queue.")
@click.option("--src-exchange", help="Source exchange (instead of --src-queue).")
@click.option("--src-exchange-key", help="Binding key for --src-exchange (default #).")
@click.option("--dest-uri", required=True, help="Destination AMQP URI.")
@click.option("--dest-queue", help="Destination queue.")
@click.option("--dest-exchange", help="Destination exchange (instead of --dest-queue).")
@click.option("--dest-exchange-key", help="Routing key for --dest-exchange.")
@click.option("--ack-mode", type=click.Choice(["on-confirm", "on-publish", "no-ack"]),
              help="When the source message is acked (default on-confirm).")
@click.option("--delete-after", help="never, queue-length or a number of messages.")
@click.option("--set", "extra", multiple=True, metavar="FIELD=JSON",
              help="Any other shovel field, e.g. --set src-prefetch-count=100.")
def add(ctx: Ctx, name: str, extra: tuple[str, ...], **fields: Any) -> None:
    """Create or replace shovel NAME (RabbitMQ's dynamic shovel fields)."""
    value: dict[str, Any] = {k.replace("_", "-"): v for k, v in fields.items() if v is not None}
    if "delete-after" in value:
        after = value.pop("delete-after")
        value["src-delete-after"] = int(after) if after.isdigit() else after
    for item in extra:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not FIELD=JSON", param_hint="--set")
        try:
            value[key] = json.loads(raw)
        except ValueError:
            value[key] = raw
    res = ctx.client.send("PUT", path("parameters", "shovel", ctx.vhost, name),
                          {"value": value})
    if ctx.as_json:
        return ctx.emit_json(res)
    click.echo(f"Shovel '{name}' set on vhost {ctx.vhost}.")


@shovels.command("delete")
@common
@click.argument("name")
def delete(ctx: Ctx, name: str) -> None:
    """Delete shovel NAME (it stops at once; unacked messages go back to the source)."""
    _delete(ctx, path("parameters", "shovel", ctx.vhost, name), f"Shovel '{name}' deleted.")


@shovels.command("restart")
@common
@click.argument("name")
def restart(ctx: Ctx, name: str) -> None:
    """Restart shovel NAME: both connections are dropped and made again."""
    _delete(ctx, path("shovels", "vhost", ctx.vhost, name, "restart"),
            f"Shovel '{name}' restarted.")


def _delete(ctx: Ctx, url: str, done: str) -> None:
    ctx.client.send("DELETE", url)
    if ctx.as_json:
        return ctx.emit_json(None)
    click.echo(done)


def register(main: click.Group) -> None:
    """Attach ``amqplite shovels`` to the top-level group."""
    if "shovels" not in main.commands:
        main.add_command(shovels)
