"""``amqplite stream ...``: super streams (RabbitMQ's layout) and reading a stream.

``tail`` reads through ``GET /api/streams/{vhost}/{name}/entries``: it
attaches no consumer and consumes nothing, so it is safe on a live stream.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from amqplite.admin.cli import Ctx, _body_of, _plural, _table, common
from amqplite.admin.cli_common import common_long_format
from amqplite.admin.client import AdminError, path
from amqplite.admin.messages import preview
from amqplite.protocol.streamrecord import OFFSET_HEADER

#: entries asked for per request (the API's bound is 1000)
TAIL_PAGE = 200
#: how often --follow asks again once it has caught up (seconds)
FOLLOW_INTERVAL = 0.5


@click.group()
def stream() -> None:
    """Streams: super streams, and reading entries without consuming them."""


@stream.command("add-super-stream")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(1), default=None,
              help="Partitions NAME-0..NAME-(N-1), routing keys 0..N-1.")
@click.option("--routing-keys", default=None,
              help="Comma-separated keys: one partition NAME-<key> per key.")
@click.option("--max-length-bytes", type=click.IntRange(1), default=None,
              help="Retention of each partition (x-max-length-bytes).")
@click.option("--max-age", default=None, help="Retention of each partition (x-max-age, "
              "e.g. 7D).")
@click.option("--stream-max-segment-size-bytes", type=click.IntRange(1), default=None,
              help="Segment size of each partition.")
@click.option("--routing", type=click.Choice(["key", "hash"]), default="key",
              show_default=True, help="key: by routing key (direct, as RabbitMQ); hash: "
              "murmur3 of the routing key over the partitions (amqplite).")
@common
def add_super_stream(ctx: Ctx, name: str, partitions: int | None, routing_keys: str | None,
                     max_length_bytes: int | None, max_age: str | None,
                     stream_max_segment_size_bytes: int | None, routing: str) -> None:
    """Create super stream NAME as rabbitmq-streams add_super_stream does."""
    if (partitions is None) == (routing_keys is None):
        raise AdminError("give either --partitions or --routing-keys")
    args: dict[str, Any] = {}
    for key, v in (("x-max-length-bytes", max_length_bytes), ("x-max-age", max_age),
                   ("x-stream-max-segment-size-bytes", stream_max_segment_size_bytes)):
        if v is not None:
            args[key] = v
    body: dict[str, Any] = {"arguments": args, "routing": routing}
    if partitions is not None:
        body["partitions"] = partitions
    else:
        body["routing_keys"] = [k.strip() for k in (routing_keys or "").split(",")]
    res = ctx.client.send("PUT", path("super-streams", ctx.vhost, name), body)
    if ctx.as_json:
        return ctx.emit_json(res)
    parts = ", ".join(p["name"] for p in res["partitions"])
    click.echo(f"Super stream '{name}' created ({_plural(len(res['partitions']), 'partition')}"
               f": {parts}; routing by {res['routing']}).")


@stream.command("delete-super-stream")
@click.argument("name")
@common
def delete_super_stream(ctx: Ctx, name: str) -> None:
    """Delete super stream NAME: its partition streams and its exchange."""
    ctx.client.send("DELETE", path("super-streams", ctx.vhost, name))
    if ctx.as_json:
        return ctx.emit_json({"deleted": name})
    click.echo(f"Super stream '{name}' deleted.")


def _line(e: dict[str, Any], width: int) -> str:
    props = e.get("properties") or {}
    headers = {k: v for k, v in (props.get("headers") or {}).items() if k != OFFSET_HEADER}
    text, _ = preview(_body_of(e), props.get("content_type"), limit=width)
    hdr = json.dumps(headers, ensure_ascii=False, separators=(",", ":")) if headers else "-"
    return (f"{e['offset']:>8}  {e['timestamp']}  {e['routing_key'] or '-'}  {hdr}  "
            f"[{e['payload_bytes']} B] {text}")


@stream.command("tail")
@click.argument("name")
@click.option("--from", "from_", default="last", show_default=True,
              help="first, last, next, an offset, an interval (10m) or a time "
              "(ISO 8601, or @<unix seconds>).")
@click.option("--count", "-n", type=click.IntRange(1), default=None,
              help="Print at most this many entries; with --from last, the last N "
              "(as tail -n).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new entries as they "
              "are appended (Ctrl-C to stop).")
@click.option("--width", type=click.IntRange(8), default=80, show_default=True,
              help="Body preview length.")
@common_long_format
def tail(ctx: Ctx, name: str, from_: str, count: int | None, follow: bool,
         width: int) -> None:
    """Print entries of stream NAME (offset, time, routing key, headers, body preview)
    without consuming anything."""
    url = path("streams", ctx.vhost, name, "entries")
    start: str = from_
    if from_ == "last" and count is not None and count > 1:
        # "last" alone is the newest entry; -n N means the N before it too, as tail -n
        probe = ctx.client.get(url, **{"from": "last", "count": "1", "truncate": "0"})
        first, last = probe["first_offset"], probe["last_offset"]
        if last >= first:
            start = str(max(first, last - count + 1))
    shown = 0
    out: list[dict[str, Any]] = []
    while True:
        want = TAIL_PAGE if count is None else min(TAIL_PAGE, count - shown)
        page = ctx.client.get(url, **{"from": start, "count": str(want),
                                      "truncate": str(max(width * 4, 64))})
        entries = page["entries"]
        for e in entries:
            if not ctx.as_json:
                click.echo(_line(e, width))
            elif follow:
                click.echo(json.dumps(e))  # one object per line as they come
            else:
                out.append(e)
        shown += len(entries)
        start = str(page["next"])
        if count is not None and shown >= count:
            break
        if page["next"] > page["last_offset"]:  # caught up
            if not follow:
                break
            time.sleep(FOLLOW_INTERVAL)
    if ctx.as_json and not follow:
        ctx.emit_json(out)
    elif not ctx.as_json and not shown and not follow:
        _table(None, [], [], caption=f"no entries in stream '{name}' from {from_}")


def register(main: click.Group) -> None:
    """Attach ``amqplite stream`` to the top-level group."""
    if "stream" not in main.commands:
        main.add_command(stream)
