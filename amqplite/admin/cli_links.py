"""``amqplite shovels list|add|delete|restart``: dynamic shovels through
``/api/shovels`` and ``/api/parameters/shovel``; ``amqplite federation
list|add-upstream|delete-upstream|restart``: exchange federation through
``/api/federation-links`` and ``/api/parameters/federation-upstream`` (see
docs/federation.md)."""

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
    value = _fields(fields)
    if "delete-after" in value:
        after = value.pop("delete-after")
        value["src-delete-after"] = int(after) if after.isdigit() else after
    _put(ctx, "shovel", name, value, extra, f"Shovel '{name}' set on vhost {ctx.vhost}.")


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


def _fields(options: dict[str, Any]) -> dict[str, Any]:
    """The options given, as parameter fields (``max_hops`` -> ``max-hops``)."""
    return {k.replace("_", "-"): v for k, v in options.items() if v is not None}


def _put(ctx: Ctx, component: str, name: str, value: dict[str, Any],
         extra: tuple[str, ...], done: str) -> None:
    """PUT a parameter, ``--set FIELD=JSON`` options added (text not JSON: a string)."""
    for item in extra:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not FIELD=JSON", param_hint="--set")
        try:
            value[key] = json.loads(raw)
        except ValueError:
            value[key] = raw
    res = ctx.client.send("PUT", path("parameters", component, ctx.vhost, name),
                          {"value": value})
    if ctx.as_json:
        return ctx.emit_json(res)
    click.echo(done)


def _delete(ctx: Ctx, url: str, done: str) -> None:
    ctx.client.send("DELETE", url)
    if ctx.as_json:
        return ctx.emit_json(None)
    click.echo(done)


def _federation_list(ctx: Ctx) -> None:
    data = ctx.client.get(path("federation-links", ctx.vhost))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = [[lk["exchange"], lk["upstream"], lk["status"], lk["uri"],
             lk.get("upstream_exchange", ""), lk.get("forwarded", 0), lk["id"],
             lk.get("error", "")] for lk in data]
    _table(f"Federation links in vhost {ctx.vhost}",
           ["Exchange", "Upstream", "Status", "URI", "Upstream exchange", "Forwarded", "Id",
            "Error"], rows, _plural(len(data), "link"), right=("Forwarded",))


@click.group(invoke_without_command=True)
@common
def federation(ctx: Ctx) -> None:
    """Exchange federation: list links (the default), add-upstream, delete-upstream,
    restart. A policy with federation-upstream-set or federation-upstream (apply-to
    exchanges) chooses the federated exchanges."""
    if click.get_current_context().invoked_subcommand is None:
        _federation_list(ctx)


@federation.command("list")
@common
def federation_list(ctx: Ctx) -> None:
    """List the federation links of the vhost with their status (no credentials)."""
    _federation_list(ctx)


@federation.command("add-upstream")
@common
@click.argument("name")
@click.option("--uri", "uris", required=True, multiple=True,
              help="Upstream AMQP URI (repeat for a list tried in turn).")
@click.option("--exchange", help="Upstream exchange (default: the federated one's name).")
@click.option("--max-hops", type=int, help="Hops a message may make (default 1).")
@click.option("--ack-mode", type=click.Choice(["on-confirm", "on-publish", "no-ack"]),
              help="When the upstream message is acked (default on-confirm).")
@click.option("--set", "extra", multiple=True, metavar="FIELD=JSON",
              help="Any other upstream field, e.g. --set expires=3600000.")
def add_upstream(ctx: Ctx, name: str, uris: tuple[str, ...], extra: tuple[str, ...],
                 **fields: Any) -> None:
    """Create or replace federation upstream NAME (RabbitMQ's fields)."""
    value = _fields(fields)
    value["uri"] = uris[0] if len(uris) == 1 else list(uris)
    _put(ctx, "federation-upstream", name, value, extra,
         f"Federation upstream '{name}' set on vhost {ctx.vhost}.")


@federation.command("delete-upstream")
@common
@click.argument("name")
def delete_upstream(ctx: Ctx, name: str) -> None:
    """Delete federation upstream NAME (its links stop)."""
    _delete(ctx, path("parameters", "federation-upstream", ctx.vhost, name),
            f"Federation upstream '{name}' deleted.")


@federation.command("restart")
@common
@click.argument("link_id")
def federation_restart(ctx: Ctx, link_id: str) -> None:
    """Restart the link with id LINK_ID (see list): it reconnects and rebinds upstream."""
    _delete(ctx, path("federation-links", "vhost", ctx.vhost, link_id, "restart"),
            f"Federation link '{link_id}' restarted.")


def register(main: click.Group) -> None:
    """Attach ``amqplite shovels`` and ``amqplite federation`` to the top-level group."""
    for group in (shovels, federation):
        if group.name not in main.commands:
            main.add_command(group)
