// One queue and one exchange: details, charts, and the message operations
// (publish; peek, get, purge, move, dead-letter replay).

import { api, enc, may, mayClose, mayDo } from "./api.js";
import { LineChart } from "./chart.js";
import {
  bytes, clear, counted, duration, flash, form, h, json, link, num, plural, rate, section, table,
} from "./dom.js";
import {
  attempt, bindForm, bindingTable, clientOf, confirmButton, exchangeName, exchangePath, features, traceHref,
} from "./pages.js";

function dl(pairs) {
  return h("dl", { class: "props" }, pairs.flatMap(([k, v, id]) => [h("dt", {}, k), h("dd", { id }, v)]));
}

function payload(m) {
  if (m.payload_encoding === "base64") return h("span", { class: "muted" }, `(${m.payload_bytes} bytes, base64) ${m.payload}`);
  return m.payload ?? "";
}

// The death is in its own column: keep the x-death headers and the repeated
// message id out of the summary (the cell's tooltip has everything).
function propsSummary(m) {
  const { message_id: _, ...props } = m.properties || {};
  if (props.headers) {
    const headers = Object.fromEntries(Object.entries(props.headers).filter(
      ([k]) => !(m.death && (k === "x-death" || /^x-(first|last)-death-/.test(k)))));
    if (Object.keys(headers).length) props.headers = headers; else delete props.headers;
  }
  return h("span", { title: JSON.stringify(m.properties || {}, null, 1) }, json(props));
}

function messageTable(rows, peeked) {
  return table([
    peeked ? { title: "#", value: (m) => m.index, num: true } : null,
    { title: "Message id", value: (m) => (m.message_id ? link(traceHref(m.message_id), m.message_id) : "") },
    { title: "Exchange", value: (m) => exchangeName(m.exchange) },
    { title: "Routing key", value: (m) => m.routing_key, cls: "mono" },
    { title: "Redelivered", value: (m) => (m.redelivered ? "yes" : "") },
    peeked ? { title: "Deliveries", value: (m) => num(m.delivery_count), num: true } : null,
    { title: "Dead-lettered", value: (m) => (m.death ? `${m.death.reason} in ${m.death.origin_queue ?? m.death.queue}` : "") },
    { title: "Properties", value: propsSummary, cls: "mono small" },
    { title: "Payload", value: payload, cls: "payload mono" },
  ].filter(Boolean), rows, { empty: "No messages.", rowAttrs: (m) => ({ dataset: { messageId: m.message_id ?? "" } }) });
}

const intOrUndefined = (v) => (v === "" || v === undefined ? undefined : Number(v));

function moveSummary(r) {
  const errs = r.errors.length ? `; ${r.errors.length} failed: ${r.errors[0].reason}` : "";
  return `moved ${r.moved}, skipped ${r.skipped}, ${r.remaining} left${errs}`;
}

// A stream's entries from an offset (first, last, next, a number, an interval
// such as 10m, or a time), read without consuming; "Read on" continues after
// the last one shown.
function streamEntries(vhost, name) {
  const path = `/api/streams/${enc(vhost)}/${enc(name)}/entries`;
  const body = h("div", { id: "entries" });
  let next = null;
  const more = h("button", { type: "button", id: "entries-next", hidden: true }, "Read on");
  const read = async (from, count = 20) => {
    const r = await attempt(() => api(`${path}?${new URLSearchParams({ from, count, truncate: 2000 })}`));
    if (!r) return;
    next = r.next;
    more.hidden = !r.entries.length;
    clear(body, h("p", { class: "muted" }, `Offsets ${r.first_offset} to ${r.last_offset} are in the stream; `
      + `showing ${r.entries.length} from ${from}.`), table([
      { title: "Offset", value: (e) => e.offset, num: true, cls: "offset" },
      { title: "Time", value: (e) => e.timestamp ?? "" },
      { title: "Message id", value: (e) => (e.message_id ? link(traceHref(e.message_id), e.message_id) : "") },
      { title: "Routing key", value: (e) => e.routing_key, cls: "mono" },
      { title: "Properties", value: propsSummary, cls: "mono small" },
      { title: "Payload", value: payload, cls: "payload mono" },
    ], r.entries, { empty: "No entries from there.", rowAttrs: (e) => ({ dataset: { offset: e.offset } }) }));
  };
  more.addEventListener("click", () => read(String(next)));
  const f = form("entries-form", [
    h("label", {}, "Read ", h("input", { name: "count", type: "number", min: 1, max: 1000, value: 20 }), " entries from "),
    h("input", { name: "from", value: "first", size: 12, title: "first, last, next, an offset, 10m, or an ISO time" }),
    h("button", { type: "submit" }, "Read"),
  ], (v) => read(v.from.trim() || "first", Number(v.count) || 20));
  return [section("Stream entries", h("div", { class: "ops" }, f), body, more), read];
}

export function queue(main, [vhost, name]) {
  const path = `/api/queues/${enc(vhost)}/${enc(name)}`;
  const details = h("div");
  const depth = new LineChart(`queue.${vhost}.${name}.depth`, ["ready", "unacked", "paged out"]);
  const rates = new LineChart(`queue.${vhost}.${name}.rates`, ["incoming", "deliver / get", "ack"], { unit: "/s" });
  const consumers = h("div");
  const binds = h("div");
  const messages = h("div", { id: "messages" });
  const result = h("p", { id: "op-result", class: "result" });

  const show = (text) => { result.textContent = text; flash(text); };
  let refresh;

  const peek = form("peek-form", [
    h("label", {}, "Peek at ", h("input", { name: "limit", type: "number", min: 1, max: 500, value: 20 }), " ready messages"),
    h("button", { type: "submit" }, "Peek"),
  ], async (v) => {
    const rows = await attempt(() => api(`${path}/messages?limit=${Number(v.limit) || 20}&truncate=2000`));
    if (rows) clear(messages, h("h3", {}, `Peeked (${rows.length}, still in the queue)`), messageTable(rows, true));
  });

  const get = form("get-form", [
    h("label", {}, "Get ", h("input", { name: "count", type: "number", min: 1, value: 1 })),
    h("select", { name: "ackmode" },
      h("option", { value: "ack_requeue_true" }, "and requeue"),
      h("option", { value: "ack_requeue_false" }, "and ack (removes them)"),
      h("option", { value: "reject_requeue_false" }, "and reject (dead-letters them)")),
    h("button", { type: "submit" }, "Get"),
  ], async (v) => {
    const rows = await attempt(() => api(`${path}/get`, {
      method: "POST", body: { count: Number(v.count) || 1, ackmode: v.ackmode, encoding: "auto", truncate: 2000 },
    }));
    if (rows) {
      clear(messages, h("h3", {}, `Got ${rows.length}`), messageTable(rows, false));
      show(`got ${plural(rows.length, "message")}`);
      await refresh();
    }
  });

  const move = form("move-form", [
    h("label", {}, "Move ", h("input", { name: "limit", type: "number", min: 1, placeholder: "all" }), " messages to"),
    h("select", { name: "kind" }, h("option", { value: "queue" }, "queue"), h("option", { value: "exchange" }, "exchange")),
    h("input", { name: "target", required: true, placeholder: "name" }),
    h("input", { name: "routing_key", placeholder: "routing key (default: each message's own)" }),
    h("button", { type: "submit" }, "Move"),
  ], async (v) => {
    const body = { limit: intOrUndefined(v.limit) };
    if (v.kind === "queue") body.to_queue = v.target;
    else body.to_exchange = v.target === "(AMQP default)" ? "" : v.target;
    if (v.routing_key) body.routing_key = v.routing_key;
    const r = await attempt(() => api(`${path}/move`, { method: "POST", body }));
    if (r) { show(moveSummary(r)); await refresh(); }
  });

  const replay = form("replay-form", [
    h("label", {}, "Replay ", h("input", { name: "limit", type: "number", min: 1, placeholder: "all" }), " dead letters"),
    h("select", { name: "to" },
      h("option", { value: "origin" }, "to the queue they died in"),
      h("option", { value: "exchange" }, "through their original exchange"),
      h("option", { value: "queue" }, "to this queue:")),
    h("input", { name: "queue", placeholder: "queue (for 'to this queue')" }),
    h("button", { type: "submit", id: "replay" }, "Replay"),
  ], async (v) => {
    const body = { limit: intOrUndefined(v.limit) };
    if (v.to === "queue") body.queue = v.queue;
    else body.to = v.to;
    const r = await attempt(() => api(`${path}/replay`, { method: "POST", body }));
    if (r) { show(moveSummary(r)); await refresh(); }
  });

  const purge = confirmButton("Purge", async () => {
    const r = await attempt(() => api(`${path}/contents`, { method: "DELETE" }));
    if (r) { show(`purged ${plural(r.purged, "message")}`); await refresh(); }
  }, { id: "purge" }, `purge:${vhost}/${name}`);

  // a stream keeps its entries after delivery: it is read from an offset, and
  // get, move, replay and purge do not apply to it (RabbitMQ refuses them too)
  // get and purge act as the user (its read permission decides, as RabbitMQ's);
  // move and replay are the administrator tag's; everyone who may read may peek
  const ops = section("Messages", h("div", { class: "ops" }, peek,
    mayDo("read") ? get : null, may("administrator") ? [move, replay] : null,
    mayDo("read") ? h("div", { class: "inline" }, purge) : null), result, messages);
  const [entries, readEntries] = streamEntries(vhost, name);
  ops.hidden = true;
  entries.hidden = true;
  let kind = null;

  clear(main, h("h1", {}, "Queue ", h("span", { class: "name" }, name), h("span", { class: "muted" }, ` in ${vhost}`)),
    details,
    h("div", { class: "charts" }, section("Queued messages", depth.el), section("Message rates", rates.el)),
    ops, entries,
    mayDo("write") ? section("Publish a message", publishForm(`/api/exchanges/${exchangePath(vhost, "")}/publish`, name)) : null,
    section("Consumers", consumers), section("Bindings", bindForm(vhost, { queue: name }, () => refresh()), binds));

  refresh = async () => {
    const [q, cons, bs] = await Promise.all([
      api(path), api(`/api/consumers/${enc(vhost)}`), api(`${path}/bindings`)]);
    if (kind !== q.type) {  // the first refresh: show what applies to this queue type
      kind = q.type;
      ops.hidden = kind === "stream";
      entries.hidden = kind !== "stream";
      if (kind === "stream") await readEntries("first");
    }
    const ms = q.message_stats || {};
    depth.push([q.messages_ready, q.messages_unacknowledged, q.messages_paged_out ?? 0]);
    rates.push(["publish", "deliver_get", "ack"].map((k) => (ms[`${k}_details`] ? ms[`${k}_details`].rate : 0)));
    clear(details, dl([
      ["Type", q.type], ["Features", features(q)], ["State", q.state],
      ["Ready", num(q.messages_ready), "q-ready"], ["Unacked", num(q.messages_unacknowledged), "q-unacked"],
      ["Total", num(q.messages), "q-messages"], ["Paged out", num(q.messages_paged_out ?? 0), "q-paged-out"],
      ["Bytes", bytes(q.message_bytes)], ["Consumers", num(q.consumers), "q-consumers"],
      ["Incoming", rate(ms, "publish")], ["Deliver / get", rate(ms, "deliver_get")],
      ["Acked", counted(ms, "ack"), "q-ack"], ["Redelivered", counted(ms, "redeliver"), "q-redeliver"],
      ["Got (basic.get)", counted(ms, "get", "get_no_ack"), "q-get"], ["Get empty", counted(ms, "get_empty")],
      ["Policy", q.policy ?? "none"], ["Effective policy", json(q.effective_policy_definition) || "none"],
      ["Arguments", json(q.arguments) || "none"],
    ]));
    clear(consumers, table([
      { title: "Tag", value: (c) => c.consumer_tag },
      { title: "Channel", value: (c) => c.channel_details.name ?? "" },
      { title: "Ack", value: (c) => (c.ack_required ? "manual" : "auto") },
      { title: "Prefetch", value: (c) => num(c.prefetch_count), num: true },
      { title: "Unacked", value: (c) => num(c.messages_unacknowledged ?? 0), num: true },
      { title: "Active", value: (c) => (c.active === false ? "no" : "yes") },
    ], cons.filter((c) => c.queue.name === name), { empty: "No consumers." }));
    clear(binds, bindingTable(bs, refresh));
  };
  return refresh;
}

// POST {exchange}/publish: the publish form of the exchange page, and of a
// queue's page with queue set (the default exchange, routing key = the queue),
// as RabbitMQ's UI has it on both.
function publishForm(publishPath, queue) {
  const result = h("p", { id: "publish-result", class: "result" });
  const key = queue === undefined
    ? h("label", {}, "Routing key ", h("input", { name: "routing_key" }))
    : h("label", {}, "Routing key ", h("input", { name: "routing_key", value: queue, readonly: true, title: "the default exchange routes by queue name" }));
  const f = form("publish-form", [
    key,
    h("label", {}, "Message id ", h("input", { name: "message_id", placeholder: "optional" })),
    h("label", {}, h("input", { type: "checkbox", name: "persistent", value: "1", checked: true }), " persistent"),
    h("label", { class: "wide" }, "Headers (JSON) ", h("input", { name: "headers", placeholder: "{}" })),
    h("label", { class: "wide" }, "Payload ", h("textarea", { name: "payload", rows: 4 })),
    h("button", { type: "submit" }, "Publish"),
  ], async (v) => {
    const properties = { delivery_mode: v.persistent ? 2 : 1 };
    if (v.message_id) properties.message_id = v.message_id;
    if (v.headers && v.headers.trim()) {
      try { properties.headers = JSON.parse(v.headers); } catch (err) { flash(`headers: ${err.message}`, "error"); return; }
    }
    const r = await attempt(() => api(publishPath, {
      method: "POST",
      body: { routing_key: v.routing_key || "", payload: v.payload || "", payload_encoding: "string", properties },
    }));
    if (r) {
      const text = r.routed ? "published: routed to at least one queue" : "published, but no queue was bound to take it";
      result.textContent = text;
      flash(text, r.routed ? "ok" : "warn");
    }
  });
  return h("div", {}, f, result);
}

export function exchange(main, [vhost, name]) {
  const xname = name === "amq.default" ? "" : name;
  const path = `/api/exchanges/${exchangePath(vhost, xname)}`;
  const details = h("div");
  const binds = h("div");
  const publish = mayDo("write") ? section("Publish a message", publishForm(`${path}/publish`)) : null;
  // x-lvc and x-recent-history: what the exchange retains, and a way to clear it
  const retained = h("section", { id: "retained", hidden: true });
  clear(main, h("h1", {}, "Exchange ", h("span", { class: "name" }, exchangeName(xname)), h("span", { class: "muted" }, ` in ${vhost}`)),
    details, retained, publish,
    section("Bindings from this exchange", xname === "" ? null : bindForm(vhost, { source: xname }, () => refresh()), binds));
  const refresh = async () => {
    const [x, bs] = await Promise.all([api(path), api(`${path}/bindings/source`)]);
    const rows = [["Type", x.type], ["Features", features(x)], ["Arguments", json(x.arguments) || "none"]];
    if (x.retained) rows.push(["Retained", `${plural(x.retained.messages, "message")}, ${bytes(x.retained.bytes)}`, "x-retained"]);
    clear(details, dl(rows));
    clear(binds, bindingTable(bs, refresh));
    retained.hidden = !x.retained;
    if (x.retained) clear(retained, ...(await retainedSection(path)));
  };
  return refresh;
}

async function retainedSection(path) {
  // the first page only: a set may hold 100,000 keys (the API caps a listing anyway)
  const paged = await api(`${path}/retained?page=1&page_size=500`);
  const items = paged.items;
  const clearAll = confirmButton("Clear retained", async () => {
    const r = await attempt(() => api(`${path}/retained`, { method: "DELETE" }));
    if (r) flash(`cleared ${plural(r.removed, "retained message")}`, "ok");
  }, { id: "clear-retained" });
  // the MQTT exchange (amq.topic) shows MQTT's retained messages: one per topic
  const mqtt = items.some((m) => m.topic !== undefined);
  const clearOne = (m) => confirmButton("Clear", async () => {
    const r = await attempt(() => api(`${path}/retained/${encodeURIComponent(m.key)}`, { method: "DELETE" }));
    if (r) flash(`cleared the retained message of ${m.key}`, "ok");
  }, { class: "danger clear-topic" }, `clear-topic ${path} ${m.key}`);
  return [h("h2", {}, mqtt ? "MQTT retained messages" : "Retained messages"), table([
    { title: mqtt ? "Topic" : "Key", value: (m) => m.key, cls: "mono" },
    { title: "Routing key", value: (m) => m.routing_key, cls: "mono" },
    { title: "Stored", value: (m) => (m.stored ? "yes" : "") },
    { title: "Size", value: (m) => bytes(m.payload_bytes), num: true },
    { title: "Properties", value: propsSummary, cls: "mono small" },
    { title: "Payload", value: payload, cls: "payload mono" },
    ...(mqtt && may("administrator") ? [{ title: "", value: clearOne }] : []),
  ], items, { empty: "Nothing retained.", rowAttrs: (m) => ({ dataset: { key: m.key } }) }),
  ...(paged.total_count > items.length
    ? [h("p", { class: "small" }, `showing the oldest ${num(items.length)} of ${num(paged.total_count)}; `
        + "amqplite retained list pages through them all")] : []),
  may("administrator") ? h("p", {}, clearAll) : null];
}

// One connection (AMQP, MQTT or STOMP): who, how, how much, and its channels;
// administrators may close it from here, and a user its own (the API's rule).
export function connection(main, [name]) {
  const path = `/api/connections/${enc(name)}`;
  const details = h("div");
  const chans = h("div", { id: "connection-channels" });
  const close = h("p", { hidden: true }, confirmButton("Close connection", async () => {
    if (await attempt(() => api(path, { method: "DELETE" }), `connection ${name} closed`) !== undefined) {
      location.hash = "#/connections";
    }
  }, { id: "close-connection" }, `connection:${name}`));
  clear(main, h("h1", {}, "Connection ", h("span", { class: "name" }, name)), details, close,
    section("Channels", chans));
  return async () => {
    const [c, chs] = await Promise.all([api(path), api(`${path}/channels`)]);
    close.hidden = !mayClose(c);
    clear(details, dl([
      ["Protocol", c.protocol ?? "", "c-protocol"], ["Client", clientOf(c), "c-client"],
      ["User", c.user ?? ""], ["Vhost", c.vhost ?? ""], ["State", c.state],
      ["Peer", `${c.peer_host}:${c.peer_port}`], ["TLS", c.ssl ? "yes" : "no"],
      ["Heartbeat / keep alive", c.timeout ? `${c.timeout} s` : "none"],
      ["Received", bytes(c.recv_oct)], ["Sent", bytes(c.send_oct)],
      ["Connected", new Date(c.connected_at).toLocaleString()],
      ["Client properties", json(c.client_properties) || "none"],
    ]));
    clear(chans, table([
      { title: "Channel", value: (ch) => link(`#/channel/${enc(ch.name)}`, ch.name) },
      { title: "Prefetch", value: (ch) => num(ch.prefetch_count), num: true },
      { title: "Consumers", value: (ch) => num(ch.consumer_count), num: true },
      { title: "Unacked", value: (ch) => num(ch.messages_unacknowledged), num: true },
      { title: "Publish", value: (ch) => rate(ch.message_stats, "publish"), num: true },
      { title: "Deliver", value: (ch) => rate(ch.message_stats, "deliver_get"), num: true },
    ], chs, { empty: "No channels." }));
  };
}

// #/nodes: this node's figures as /api/nodes has them (the monitoring tag's).
export function nodes(main) {
  const body = h("div", { id: "nodes" });
  clear(main, h("h1", {}, "Node"), body);
  if (!may("monitoring")) {
    body.append(h("p", { class: "muted" }, "The node's figures need the monitoring tag."));
    return undefined;
  }
  return async () => {
    const [n] = await api("/api/nodes");
    clear(body, dl([
      ["Name", n.name, "n-name"], ["Running", n.running ? "yes" : "no"], ["Uptime", duration(n.uptime || 0)],
      ["OS pid", n.os_pid], ["Processors", num(n.processors)],
      ["Memory", `${bytes(n.mem_used)} of ${bytes(n.mem_limit)}${n.mem_alarm ? " — ALARM" : ""}`, "n-memory"],
      ["Disk free", `${bytes(n.disk_free)} (limit ${bytes(n.disk_free_limit)})${n.disk_free_alarm ? " — ALARM" : ""}`],
      ["File descriptors", `${num(n.fd_used)} / ${num(n.fd_total)}`],
      ["Sockets", `${num(n.sockets_used)} / ${num(n.sockets_total)}`],
      ["Exchange types", (n.exchange_types || []).map((t) => t.name).join(", ")],
      ["Auth mechanisms", (n.auth_mechanisms || []).filter((m) => m.enabled !== false).map((m) => m.name).join(", ")],
      ["Data directory", n.db_dir ?? ""],
      ["Config files", (n.config_files || []).join(", ") || "none"],
    ]));
  };
}

// One AMQP channel: its mode, prefetch, counts and rates, and its consumers.
export function channel(main, [name]) {
  const details = h("div");
  const consumers = h("div", { id: "channel-consumers" });
  clear(main, h("h1", {}, "Channel ", h("span", { class: "name" }, name)), details, section("Consumers", consumers));
  return async () => {
    const [ch, cons] = await Promise.all([api(`/api/channels/${enc(name)}`), api("/api/consumers")]);
    const ms = ch.message_stats || {};
    clear(details, dl([
      ["Connection", link(`#/connection/${enc(ch.connection_details.name)}`, ch.connection_details.name)],
      ["User", ch.user ?? ""], ["Vhost", ch.vhost ?? ""], ["State", ch.state],
      ["Mode", [ch.confirm && "confirm", ch.transactional && "transactional"].filter(Boolean).join(", ") || "plain", "ch-mode"],
      ["Prefetch", num(ch.prefetch_count), "ch-prefetch"], ["Global prefetch", num(ch.global_prefetch_count)],
      ["Unacked", num(ch.messages_unacknowledged)], ["Uncommitted", num(ch.messages_uncommitted ?? 0)],
      ["Published", num(ms.publish ?? 0)], ["Publish rate", rate(ms, "publish")],
      ["Delivered / got", num(ms.deliver_get ?? 0)], ["Deliver rate", rate(ms, "deliver_get")],
      ["Acked", counted(ms, "ack"), "ch-ack"], ["Redelivered", counted(ms, "redeliver"), "ch-redeliver"],
      ["Got (basic.get)", counted(ms, "get", "get_no_ack"), "ch-get"], ["Get empty", counted(ms, "get_empty")],
      ["Confirmed", counted(ms, "confirm")],
      ["Unroutable", `${num(ms.return_unroutable ?? 0)} returned, ${num(ms.drop_unroutable ?? 0)} dropped`],
    ]));
    clear(consumers, table([
      { title: "Tag", value: (c) => c.consumer_tag },
      { title: "Queue", value: (c) => link(`#/queue/${enc(c.queue.vhost)}/${enc(c.queue.name)}`, c.queue.name) },
      { title: "Ack", value: (c) => (c.ack_required ? "manual" : "auto") },
      { title: "Prefetch", value: (c) => num(c.prefetch_count), num: true },
    ], cons.filter((c) => c.channel_details.name === name), { empty: "No consumers." }));
  };
}
