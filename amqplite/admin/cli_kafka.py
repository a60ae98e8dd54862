"""``amqplite kafka ...``: Kafka consumer groups and their lag, from
``GET /api/kafka/groups``; ``group NAME`` prints what ``kafka-consumer-groups
--describe --group NAME`` prints (per partition: committed offset, log end
offset, lag and the consumer that owns it), ``--members`` who is in it.
"""

from __future__ import annotations

from typing import Any

import click

from amqplite.admin.cli import Ctx, _plural, _table, common
from amqplite.admin.client import path


@click.group()
def kafka() -> None:
    """Kafka clients' consumer groups: state, members, committed offsets and lag."""


def _lag(v: int | None) -> str:
    return "-" if v is None else str(v)


def _assigned(m: dict[str, Any]) -> str:
    if m["assignment"] is None:
        return "-"
    return " ".join(f"{a['topic']}[{','.join(map(str, a['partitions']))}]"
                    for a in m["assignment"]) or "(none)"


@kafka.command("groups")
@common
def groups(ctx: Ctx) -> None:
    """List the consumer groups of the vhost (-V): state, members, lag."""
    data = ctx.client.get(path("kafka", "groups", ctx.vhost))
    if ctx.as_json:
        return ctx.emit_json(data)
    rows = [[g["name"], g["state"], g["protocol"] or "-", len(g["members"]),
             len({p["topic"] for p in g["partitions"]}), len(g["partitions"]), g["lag"]]
            for g in data]
    _table(f"Kafka consumer groups in vhost {ctx.vhost}",
           ["Group", "State", "Assignor", "Members", "Topics", "Partitions", "Lag"], rows,
           f"{_plural(len(data), 'group')}, total lag {sum(g['lag'] for g in data)}",
           right=("Members", "Topics", "Partitions", "Lag"))


@kafka.command("group")
@click.argument("name")
@click.option("--members", is_flag=True, help="List the members and their assignments "
              "instead of the partitions.")
@common
def group(ctx: Ctx, name: str, members: bool) -> None:
    """Describe consumer group NAME: per partition its committed offset, log end
    offset, lag and owner (as kafka-consumer-groups --describe)."""
    g = ctx.client.get(path("kafka", "groups", ctx.vhost, name))
    if ctx.as_json:
        return ctx.emit_json(g)
    head = (f"Group {name} in vhost {ctx.vhost}: {g['state']}, generation "
            f"{g['generation']}, {_plural(len(g['members']), 'member')}")
    if members:
        rows = [[m["member_id"], m["client_id"], m["client_host"], _assigned(m)]
                for m in g["members"]]
        _table(head, ["Member", "Client id", "Host", "Assignment"], rows,
               f"assignor {g['protocol'] or '-'}, leader {g['leader'] or '-'}")
        return
    rows = [[p["topic"], p["partition"],
             _lag(None if p["committed_offset"] < 0 else p["committed_offset"]),
             _lag(p["log_end_offset"]), _lag(p["lag"]), p["member_id"] or "-",
             p["client_host"] or "-", p["client_id"] or "-"] for p in g["partitions"]]
    _table(head, ["Topic", "Partition", "Current offset", "Log end offset", "Lag",
                  "Consumer id", "Host", "Client id"], rows, f"total lag {g['lag']}",
           right=("Partition", "Current offset", "Log end offset", "Lag"))


def register(main: click.Group) -> None:
    """Attach ``amqplite kafka`` to the top-level group."""
    if "kafka" not in main.commands:
        main.add_command(kafka)
