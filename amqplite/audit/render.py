"""Report output: ``report.json``, a self-contained ``report.html`` with inline
SVG charts (no scripts, no CDN), and ``stuck.csv``. Pure Python, no Spark."""

from __future__ import annotations

import csv
import html
import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amqplite.audit.reports import STUCK_FIELDS

EVENT_COLORS = {
    "routed": "#4e79a7",
    "delivered": "#76b7b2",
    "acked": "#59a14f",
    "requeued": "#edc948",
    "rejected": "#b07aa1",
    "dead_lettered": "#e15759",
    "expired": "#f28e2b",
    "purged": "#9c755f",
    "replayed": "#bab0ac",
    "retained": "#86bcb6",
}
STATE_COLORS = {
    "dead_lettered": "#e15759",
    "rejected": "#b07aa1",
    "expired": "#f28e2b",
    "purged": "#9c755f",
    "in_flight": "#4e79a7",
    "stuck": "#ff2d2d",
}
PCT_COLORS = {"p50_ms": "#59a14f", "p90_ms": "#edc948", "p99_ms": "#e15759"}
MAX_CHART_ROWS = 30
MAX_TABLE_ROWS = 100

_e = html.escape


def queue_label(vhost: str | None, queue: str | None) -> str:
    """``queue`` in the default vhost, ``vhost:queue`` elsewhere."""
    q = queue if queue is not None else "(no queue)"
    return q if vhost in (None, "/") else f"{vhost}:{q}"


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


def _fmt(v: float) -> str:
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:,.1f}" if v >= 10 else f"{v:,.2f}"


def bar_chart(
    categories: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float]]],
    *,
    stacked: bool = False,
    unit: str = "",
    title: str = "",
) -> str:
    """A horizontal bar chart as an inline ``<svg>``.

    ``series`` is ``(name, colour, values)`` with one value per category; bars
    are grouped per category, or stacked when ``stacked``.
    """
    label_w, plot_w, pad = 200, 520, 12
    bar_h = 14 if stacked else 9
    group_h = bar_h + 8 if stacked else bar_h * len(series) + 10
    legend_h = 22
    height = legend_h + pad + group_h * max(len(categories), 1) + 28
    width = label_w + plot_w + 90
    totals = [
        sum(s[2][i] for s in series) if stacked else max((s[2][i] for s in series), default=0)
        for i in range(len(categories))
    ]
    vmax = _nice_max(max(totals, default=0))
    scale = plot_w / vmax
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" '
        'font-family="sans-serif" font-size="11">'
    ]
    x = label_w
    for name, color, _ in series:  # legend
        out.append(f'<rect x="{x}" y="4" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{x + 14}" y="13">{_e(name)}</text>')
        x += 24 + 7 * len(name)
    top = legend_h + pad
    for tick in range(5):  # grid and axis labels
        tx = label_w + plot_w * tick / 4
        ty = top + group_h * max(len(categories), 1)
        out.append(f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{ty}" stroke="#ddd"/>')
        out.append(
            f'<text x="{tx:.1f}" y="{ty + 14}" text-anchor="middle" fill="#555">'
            f"{_e(_fmt(vmax * tick / 4))}{_e(unit)}</text>"
        )
    if not categories:
        out.append(f'<text x="{label_w + 8}" y="{top + 12}" fill="#777">no data</text>')
    for i, cat in enumerate(categories):
        gy = top + i * group_h
        short = cat if len(cat) <= 30 else cat[:29] + "…"
        out.append(
            f'<text x="{label_w - 6}" y="{gy + group_h / 2 + 3:.1f}" text-anchor="end">'
            f"<title>{_e(cat)}</title>{_e(short)}</text>"
        )
        offset = 0.0
        for j, (name, color, values) in enumerate(series):
            v = float(values[i] or 0)
            w = v * scale
            if stacked:
                if v > 0:
                    out.append(
                        f'<rect x="{label_w + offset:.1f}" y="{gy + 4}" width="{w:.1f}" '
                        f'height="{bar_h}" fill="{color}"><title>{_e(cat)} {_e(name)}: '
                        f"{_e(_fmt(v))}{_e(unit)}</title></rect>"
                    )
                offset += w
            else:
                by = gy + 5 + j * bar_h
                out.append(
                    f'<rect x="{label_w}" y="{by}" width="{w:.1f}" height="{bar_h - 1}" '
                    f'fill="{color}"><title>{_e(cat)} {_e(name)}: {_e(_fmt(v))}{_e(unit)}'
                    "</title></rect>"
                )
                if v > 0:
                    out.append(
                        f'<text x="{label_w + w + 3:.1f}" y="{by + bar_h - 2}" font-size="9" '
                        f'fill="#333">{_e(_fmt(v))}</text>'
                    )
        if stacked and totals[i] > 0:
            out.append(
                f'<text x="{label_w + offset + 4:.1f}" y="{gy + 4 + bar_h - 3}" fill="#333">'
                f"{_e(_fmt(totals[i]))}</text>"
            )
    out.append("</svg>")
    return "".join(out)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str = "none") -> str:
    if not rows:
        return f'<p class="empty">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for v in row:
            if isinstance(v, int | float) and not isinstance(v, bool):
                cells.append(f'<td class="n">{_e(_fmt(v))}</td>')
            else:
                cells.append(f"<td>{_e('' if v is None else str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:13px}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:20px}.card span{font-size:12px;color:#555}
.card.bad b{color:#c00}table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}th{background:#f4f4f4}
td.n{text-align:right;font-variant-numeric:tabular-nums}.empty{color:#777;font-style:italic}
"""


def render_html(report: dict[str, Any], meta: dict[str, str] | None = None) -> str:
    """The human-readable page of one report."""
    meta = meta or {}
    if report["kind"] == "run":
        title = f"amqplite audit — run {report['run_id']}"
        scope = (
            f"log ids {report['batch']['lo'] + 1}..{report['batch']['hi']} "
            f"({report['batch']['rows']:,} rows exported by this run)"
        )
    else:
        title = f"amqplite audit — {report['day']} (UTC)"
        scope = f"all events of {report['day']} UTC, as known after run {report['run_id']}"
    totals = report["totals"]
    un = report["unacked"]["totals"]
    cards = [
        ("published", totals.get("published", 0), False),
        ("routed", totals.get("routed", 0), False),
        ("delivered", totals.get("delivered", 0), False),
        ("acked", totals.get("acked", 0), False),
        ("redelivered msgs", report["redelivered"]["count"], False),
        ("dead-lettered", totals.get("dead_lettered", 0), totals.get("dead_lettered", 0) > 0),
        ("in flight", un.get("in_flight", 0), False),
        ("stuck", report["stuck"]["count"], report["stuck"]["count"] > 0),
        ("forwarded by links", sum(d["count"] for d in report.get("links", [])), False),
    ]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class='meta'>{_e(scope)}<br>as of {_e(report['as_of'] or '')} · "
        f"stuck = in flight over {_e(_fmt(report['stuck_after_s']))} s · "
        f"source {_e(meta.get('source', ''))} · generated {_e(report['generated_at'] or '')}</p>",
        "<div class='cards'>",
        *(
            f"<div class='card{' bad' if bad else ''}'><b>{_e(_fmt(v))}</b><span>{_e(k)}</span></div>"
            for k, v, bad in cards
        ),
        "</div>",
    ]

    queues = report["queues"][:MAX_CHART_ROWS]
    cats = [queue_label(q["vhost"], q["queue"]) for q in queues]
    present = [e for e in EVENT_COLORS if any(q.get(e, 0) for q in queues)]
    parts.append("<h2>Events per queue</h2>")
    parts.append(
        bar_chart(
            cats,
            [(e, EVENT_COLORS[e], [q.get(e, 0) for q in queues]) for e in present],
            title="events per queue",
        )
    )
    cols = [
        "routed",
        "delivered",
        "acked",
        "rejected",
        "requeued",
        "dead_lettered",
        "expired",
        "purged",
        "replayed",
        "retained",
    ]
    parts.append(
        _table(
            ["queue", *cols, "redelivered msgs", "in flight", "stuck", "p50 ms", "p99 ms"],
            [
                [
                    queue_label(q["vhost"], q["queue"]),
                    *(q.get(c, 0) for c in cols),  # reports written before an event existed
                    q["redelivered_messages"],
                    q["in_flight"],
                    q["stuck"],
                    q["p50_ms"],
                    q["p99_ms"],
                ]
                for q in report["queues"]
            ],
        )
    )

    lat = report["latency"][:MAX_CHART_ROWS]
    parts.append("<h2>Publish → ack latency per queue</h2>")
    parts.append(
        bar_chart(
            [queue_label(d["vhost"], d["queue"]) for d in lat],
            [(k.removesuffix("_ms"), c, [d[k] for d in lat]) for k, c in PCT_COLORS.items()],
            unit=" ms",
            title="latency percentiles",
        )
    )
    parts.append(
        _table(
            ["queue", "acks", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms"],
            [
                [
                    queue_label(d["vhost"], d["queue"]),
                    d["count"],
                    d["p50_ms"],
                    d["p90_ms"],
                    d["p99_ms"],
                    d["max_ms"],
                    d["mean_ms"],
                ]
                for d in report["latency"]
            ],
        )
    )

    by_q = report["unacked"]["by_queue"]
    parts.append("<h2>Published but not acked, by current state</h2>")
    present_states = [s for s in STATE_COLORS if any(d[s] for d in by_q)]
    parts.append(
        bar_chart(
            [queue_label(d["vhost"], d["queue"]) for d in by_q[:MAX_CHART_ROWS]],
            [(s, STATE_COLORS[s], [d[s] for d in by_q[:MAX_CHART_ROWS]]) for s in present_states],
            stacked=True,
            title="unacked by state",
        )
    )
    states = list(STATE_COLORS)
    parts.append(
        _table(
            ["queue", *states, "total"],
            [[queue_label(d["vhost"], d["queue"]), *(d[s] for s in states), d["total"]] for d in by_q],
        )
    )

    stuck = report["stuck"]
    parts.append(f"<h2>Stuck messages ({stuck['count']:,})</h2>")
    parts.append("<p class='meta'>Complete list: <a href='stuck.csv'>stuck.csv</a></p>")
    parts.append(
        _table(
            ["message id", "queue", "entered", "age s", "last event", "attempt", "consumer"],
            [
                [
                    m["message_id"],
                    queue_label(m["vhost"], m["queue"]),
                    m["entered_at"],
                    m["age_s"],
                    m["last_event"],
                    m["max_attempt"],
                    m["consumer_tag"],
                ]
                for m in stuck["messages"][:MAX_TABLE_ROWS]
            ],
        )
    )

    red = report["redelivered"]
    parts.append(f"<h2>Delivered more than once ({red['count']:,})</h2>")
    parts.append(
        _table(
            ["message id", "queue", "max attempt", "requeues", "state"],
            [
                [
                    m["message_id"],
                    queue_label(m["vhost"], m["queue"]),
                    m["max_attempt"],
                    m["requeues"],
                    m["state"],
                ]
                for m in red["messages"][:MAX_TABLE_ROWS]
            ],
        )
    )

    for title, section in (("Dead-letter reasons", "dead_letter_reasons"),
                           ("Retained deliveries (bind / request)", "retained_reasons")):
        parts.append(f"<h2>{title}</h2>")
        parts.append(
            _table(
                ["queue", "reason", "count"],
                [
                    [queue_label(d["vhost"], d["queue"]), d["reason"], d["count"]]
                    for d in report.get(section, [])
                ],
            )
        )
    parts.append("<h2>By protocol</h2>")
    parts.append(
        _table(
            ["protocol", "event", "messages", "bytes"],
            [[d["protocol"], d["event"], d["count"], d["bytes"]]
             for d in report.get("protocols", [])],
        )
    )
    parts.append("<h2>Forwarded by shovels and federation links</h2>")
    parts.append(
        _table(
            ["link", "kind", "source queue", "from", "to", "messages", "bytes"],
            [[queue_label(d["vhost"], d["link"]), d["kind"], d["queue"], d["from"], d["to"],
              d["count"], d["bytes"]] for d in report.get("links", [])],
        )
    )
    parts.append("<h2>Top routing keys (published)</h2>")
    parts.append(
        _table(
            ["vhost", "exchange", "routing key", "messages", "bytes"],
            [
                [d["vhost"], d["exchange"] or "(default)", d["routing_key"], d["count"], d["bytes"]]
                for d in report["top_routing_keys"]
            ],
        )
    )
    parts.append("<h2>Streams</h2>")
    parts.append(
        _table(
            ["stream", "messages appended", "bytes", "consumers attached",
             "records fetched (Kafka)"],
            [
                [queue_label(d["vhost"], d["queue"]), d["messages"], d["bytes"], d["attached"],
                 d.get("fetched", 0)]
                for d in report.get("streams", [])
            ],
        )
    )
    parts.append("<p class='meta'>Machine-readable: <a href='report.json'>report.json</a></p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_stuck_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """All stuck messages, one per line, with a header."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(STUCK_FIELDS))
        w.writeheader()
        w.writerows(rows)


def write_report_dir(
    path: Path,
    report: dict[str, Any],
    stuck_rows: Sequence[dict[str, Any]],
    meta: dict[str, str] | None = None,
) -> Path:
    """Write report.json, report.html and stuck.csv; replace ``path`` as a whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    full = {**report, "source": (meta or {}).get("source"), "dataset": (meta or {}).get("dataset")}
    (tmp / "report.json").write_text(json.dumps(full, indent=2, default=str) + "\n")
    (tmp / "report.html").write_text(render_html(report, meta), encoding="utf-8")
    write_stuck_csv(tmp / "stuck.csv", stuck_rows)
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return path


def write_index(root: Path) -> Path:
    """``reports/index.html``: links to every run and daily report, newest first."""
    runs = sorted((p for p in root.iterdir() if p.is_dir() and p.name[0].isdigit()), reverse=True)
    daily_root = root / "daily"
    days = (
        sorted((p for p in daily_root.iterdir() if p.is_dir() and p.name[0].isdigit()), reverse=True)
        if daily_root.exists()
        else []
    )

    def links(paths: list[Path], prefix: str) -> str:
        if not paths:
            return "<p class='empty'>none yet</p>"
        items = "".join(
            f"<li><a href='{_e(prefix + p.name)}/report.html'>{_e(p.name)}</a></li>" for p in paths
        )
        return f"<ul>{items}</ul>"

    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>amqplite audit"
        f"</title><style>{_CSS}</style></head><body><h1>amqplite audit reports</h1>"
        f"<h2>Days (UTC)</h2>{links(days, 'daily/')}<h2>Runs</h2>{links(runs, '')}</body></html>"
    )
    index = root / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
