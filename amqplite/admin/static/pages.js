// The list pages, the overview and the trace page. Each page builds its
// static parts once and returns a refresh function the app calls on a timer,
// so forms keep what the user typed while the figures update.

import { api, enc, hasTag, may, mayClose, mayDo } from "./api.js";
import { LineChart } from "./chart.js";
import {
  bytes, clear, duration, flash, form, h, json, link, num, rate, section, table,
} from "./dom.js";
import { currentVhost, inVhost, scoped } from "./vhost.js";

export const exchangeName = (name) => name || "(AMQP default)";
// The API names the default exchange amq.default in paths, as RabbitMQ does.
export const exchangePath = (vhost, name) => `${enc(vhost)}/${enc(name || "amq.default")}`;
export const queueHref = (vhost, name) => `#/queue/${enc(vhost)}/${enc(name)}`;
export const exchangeHref = (vhost, name) => `#/exchange/${enc(vhost)}/${enc(name || "amq.default")}`;
export const traceHref = (id) => `#/trace/${enc(id)}`;

// A button that asks once more before doing something that cannot be undone.
// The question stays open for ARM_MS under its key, so a table refresh that
// re-creates the button does not swallow the confirming click.
const ARM_MS = 10000;
const armedAt = new Map();

export function confirmButton(text, action, attrs = {}, key = attrs.id ?? Symbol(text)) {
  const btn = h("button", { type: "button", class: "danger", ...attrs }, text);
  const armed = () => Date.now() - (armedAt.get(key) ?? 0) < ARM_MS;
  if (armed()) btn.textContent = `Confirm: ${text.toLowerCase()}`;
  btn.addEventListener("click", async () => {
    if (!armed()) {
      armedAt.set(key, Date.now());
      btn.textContent = `Confirm: ${text.toLowerCase()}`;
      return;
    }
    armedAt.delete(key);
    btn.textContent = text;
    await action();
  });
  return btn;
}

// Runs a write, reporting its outcome in the flash area.
export async function attempt(fn, done) {
  try {
    const result = await fn();
    if (done) flash(typeof done === "function" ? done(result) : done);
    return result;
  } catch (err) {
    flash(err.message, "error");
    return undefined;
  }
}

function card(title, value, id, sub) {
  return h("div", { class: "card" }, h("div", { class: "card-title" }, title),
    h("div", { class: "card-value", id }, value), sub ? h("div", { class: "card-sub" }, sub) : null);
}

// Unlabelled samples of a Prometheus text exposition: name -> value.
function samples(text, names) {
  const out = {};
  for (const line of String(text).split("\n")) {
    const sp = line.lastIndexOf(" ");
    if (line.startsWith("#") || sp < 0) continue;
    if (names.includes(line.slice(0, sp))) out[line.slice(0, sp)] = Number(line.slice(sp + 1));
  }
  return out;
}

const STORE = ["amqplite_store_commit_seconds_sum", "amqplite_store_commit_seconds_count",
  "amqplite_store_writer_backlog_ops", "amqplite_store_writer_backlog_batches"];
const ms = (s) => `${(s * 1000).toFixed(1)} ms`;
const pct = (used, limit) => (limit ? ` (${((100 * used) / limit).toFixed(0)}%)` : "");

// The node's resources (/api/nodes, as RabbitMQ's overview shows them) and the
// store's commit latency and writer backlog (/metrics only has those). A user
// without the monitoring tag cannot read /api/nodes: the cards say so.
function nodeFigures() {
  const el = h("div", { class: "cards", id: "node" });
  let last = null;
  const refresh = async () => {
    const [nodes, metrics] = await Promise.all([
      hasTag("administrator", "monitoring") ? api("/api/nodes") : null, api("/metrics")]);
    const n = nodes && nodes[0];
    const m = samples(metrics, STORE);
    const sum = m.amqplite_store_commit_seconds_sum ?? 0;
    const count = m.amqplite_store_commit_seconds_count ?? 0;
    // latency of the commits since the last refresh; the all-time mean below it
    const recent = last && count > last.count ? ms((sum - last.sum) / (count - last.count)) : "no commits";
    last = { sum, count };
    const parts = [];
    if (n) {
      parts.push(
        card("Memory", bytes(n.mem_used), "node-memory",
          `watermark ${bytes(n.mem_limit)}${pct(n.mem_used, n.mem_limit)}${n.mem_alarm ? " — ALARM" : ""}`),
        card("Disk free", bytes(n.disk_free), "node-disk",
          `limit ${bytes(n.disk_free_limit)}${n.disk_free_alarm ? " — ALARM" : ""}`),
        card("File descriptors", `${num(n.fd_used)} / ${num(n.fd_total)}`, "node-fds"),
        card("Sockets", `${num(n.sockets_used)} / ${num(n.sockets_total)}`, "node-sockets"));
    } else {
      parts.push(h("p", { class: "muted", id: "node-hidden" }, "Memory, disk and descriptors need the monitoring tag."));
    }
    if (STORE.every((k) => k in m)) {
      parts.push(
        card("Store commit latency", recent, "node-commit",
          `mean ${count ? ms(sum / count) : "-"} over ${num(count)} commits`),
        card("Store writer backlog", `${num(m.amqplite_store_writer_backlog_ops)} ops`, "node-backlog",
          `${num(m.amqplite_store_writer_backlog_batches)} batches`));
    }
    clear(el, parts);
  };
  return [el, refresh];
}

const rateOf = (stats, key) => (stats && stats[`${key}_details`] ? stats[`${key}_details`].rate : 0);

export function overview(main) {
  const cards = h("div", { class: "cards" });
  const rates = new LineChart("overview.rates", ["publish", "deliver / get", "ack", "dead-lettered"], { unit: "/s" });
  const depth = new LineChart("overview.depth", ["ready", "unacked"]);
  const listeners = h("div");
  const [node, nodeRefresh] = nodeFigures();
  main.append(h("h1", {}, "Overview"), cards,
    h("div", { class: "charts" }, section("Message rates", rates.el), section("Queued messages", depth.el)),
    section("Node", node), section("Listeners", listeners));
  return async () => {
    const [o] = await Promise.all([api("/api/overview"), nodeRefresh()]);
    const ms = o.message_stats || {};
    rates.push(["publish", "deliver_get", "ack", "dead_letter"].map((k) => rateOf(ms, k)));
    const qt = o.queue_totals;
    depth.push([qt.messages_ready, qt.messages_unacknowledged]);
    const ot = o.object_totals;
    const alarms = (o.alarms || []).map((a) => a.resource || JSON.stringify(a));
    clear(cards,
      card("Version", `${o.product_name} ${o.product_version}`, "version"),
      card("Uptime", duration(o.uptime || 0), "uptime"),
      card("Connections", num(ot.connections), "total-connections"),
      card("Channels", num(ot.channels), "total-channels"),
      card("Exchanges", num(ot.exchanges), "total-exchanges"),
      card("Queues", num(ot.queues), "total-queues"),
      card("Consumers", num(ot.consumers), "total-consumers"),
      card("Messages", num(qt.messages), "total-messages"),
      card("Alarms", alarms.length ? alarms.join(", ") : "none", "alarms"));
    clear(listeners, table([
      { title: "Protocol", value: (l) => l.protocol },
      { title: "Address", value: (l) => l.ip_address },
      { title: "Port", value: (l) => l.port, num: true },
    ], o.listeners || []));
  };
}

// A page that is one table of what an API list answers, for the vhost chosen
// in the header; columns(refresh) lets a row's button refresh the page after it
// acted. opts.above(refresh): nodes shown above the table (a form that adds a
// row); opts.below(refresh): nodes shown below it; opts.filterVhost: the API cannot narrow this list to a vhost, filter it
// here; opts.unscoped: a list that is not per vhost (users, vhosts).
export function listPage(title, path, columns, opts = {}) {
  return (main) => {
    const body = h("div");
    let refresh;
    let asked = 0;
    // h() drops a missing part; main.append() would print it as "null"
    clear(main, h("h1", {}, title), opts.above ? opts.above(() => refresh()) : null, body,
      opts.below ? opts.below(() => refresh()) : null);
    refresh = async () => {
      // a button's refresh and the periodic one may overlap: the newest asked draws
      const mine = ++asked;
      const rows = opts.filterVhost ? inVhost(await api(path)) : await api(opts.unscoped ? path : scoped(path));
      if (mine === asked) clear(body, table(columns(refresh), rows, opts));
    };
    return refresh;
  };
}

// Who is on the other end: an MQTT or STOMP client's id, else the name an AMQP
// client gave its connection, else its library (product and version).
export function clientOf(c) {
  const cp = c.client_properties || {};
  if (cp.client_id !== undefined) return String(cp.client_id);
  return cp.connection_name ?? [cp.product, cp.version].filter(Boolean).join(" ");
}

export const connections = listPage("Connections", "/api/connections", (refresh) => [
  { title: "Name", value: (c) => link(`#/connection/${enc(c.name)}`, c.name) },
  { title: "Protocol", value: (c) => c.protocol ?? "", cls: "protocol" },
  { title: "Client", value: clientOf, cls: "client" },
  { title: "User", value: (c) => c.user ?? "" },
  { title: "Vhost", value: (c) => c.vhost ?? "" },
  { title: "State", value: (c) => c.state },
  { title: "TLS", value: (c) => (c.ssl ? "yes" : "") },
  { title: "Channels", value: (c) => num(c.channels), num: true },
  { title: "Received", value: (c) => bytes(c.recv_oct), num: true },
  { title: "Sent", value: (c) => bytes(c.send_oct), num: true },
  { title: "Connected", value: (c) => new Date(c.connected_at).toLocaleString() },
  // an administrator closes any connection, a user its own (the API's rule)
  { title: "", value: (c) => (!mayClose(c) ? "" : confirmButton("Close", () => attempt(
    () => api(`/api/connections/${enc(c.name)}`, { method: "DELETE" }), `connection ${c.name} closed`).then(refresh),
  { class: "danger close" }, `connection:${c.name}`)) },
].filter(Boolean), { empty: "No connections.", filterVhost: true,
  rowAttrs: (c) => ({ dataset: { connection: c.name, protocol: c.protocol ?? "" } }) });

export const channels = listPage("Channels", "/api/channels", () => [
  { title: "Channel", value: (c) => link(`#/channel/${enc(c.name)}`, c.name) },
  { title: "User", value: (c) => c.user ?? "" },
  { title: "Vhost", value: (c) => c.vhost ?? "" },
  { title: "Mode", value: (c) => [c.confirm && "confirm", c.transactional && "tx"].filter(Boolean).join(" ") },
  { title: "Prefetch", value: (c) => num(c.prefetch_count), num: true },
  { title: "Consumers", value: (c) => num(c.consumer_count), num: true },
  { title: "Unacked", value: (c) => num(c.messages_unacknowledged), num: true },
  { title: "Publish", value: (c) => rate(c.message_stats, "publish"), num: true },
  { title: "Deliver", value: (c) => rate(c.message_stats, "deliver_get"), num: true },
  { title: "Ack", value: (c) => rate(c.message_stats, "ack"), num: true, cls: "ack" },
  { title: "Redeliver", value: (c) => rate(c.message_stats, "redeliver"), num: true, cls: "redeliver" },
  { title: "Get", value: (c) => rate(c.message_stats, "get", "get_no_ack"), num: true, cls: "get" },
], { empty: "No channels.", filterVhost: true, rowAttrs: (c) => ({ dataset: { channel: c.name } }) });

// A declare form's arguments: a JSON object, or key=value lines whose values
// read as numbers, true/false or else strings (x-message-ttl=60000). Throws
// with a message for the flash on anything else.
export function parseArguments(text) {
  const t = (text || "").trim();
  if (!t) return {};
  if (t.startsWith("{")) {
    const v = JSON.parse(t);
    if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("arguments: not a JSON object");
    return v;
  }
  const out = {};
  for (const line of t.split("\n")) {
    if (!line.trim()) continue;
    const eq = line.indexOf("=");
    if (eq <= 0) throw new Error(`arguments: "${line.trim()}" is not key=value`);
    const key = line.slice(0, eq).trim();
    const raw = line.slice(eq + 1).trim();
    out[key] = raw === "true" ? true : raw === "false" ? false
      : raw !== "" && Number.isFinite(Number(raw)) ? Number(raw) : raw;
  }
  return out;
}

const checkbox = (name, label, checked = false) =>
  h("label", {}, h("input", { type: "checkbox", name, value: "1", checked }), ` ${label}`);

const argumentsBox = () => h("textarea", {
  name: "arguments", rows: 2, cols: 30, class: "mono",
  placeholder: "arguments: key=value lines or JSON", title: "e.g. x-message-ttl=60000" });

// Sends a declare (PUT) built from a form; the flash says what happened.
async function declare(path, v, body, done, refresh) {
  try {
    body.arguments = parseArguments(v.arguments);
  } catch (err) {
    flash(err.message, "error");
    return;
  }
  if (await attempt(() => api(path, { method: "PUT", body }), done) !== undefined) await refresh();
}

export const EXCHANGE_TYPES = ["direct", "fanout", "topic", "headers", "x-recent-history", "x-lvc"];

// PUT /api/exchanges/{vhost}/{name}: any management tag; the user's configure
// permission decides (the API's rule, as RabbitMQ's).
function exchangeForm(refresh) {
  if (!mayDo("configure")) return null;
  return form("exchange-form", [
    h("input", { name: "vhost", value: currentVhost() || "/", required: true, title: "vhost", size: 6 }),
    h("input", { name: "name", required: true, placeholder: "exchange name" }),
    h("select", { name: "type", title: "type" }, EXCHANGE_TYPES.map((t) => h("option", { value: t }, t))),
    checkbox("durable", "durable", true), checkbox("auto_delete", "auto-delete"), checkbox("internal", "internal"),
    argumentsBox(),
    h("button", { type: "submit" }, "Add exchange"),
  ], (v) => declare(`/api/exchanges/${enc(v.vhost)}/${enc(v.name)}`, v,
    { type: v.type, durable: !!v.durable, auto_delete: !!v.auto_delete, internal: !!v.internal },
    `exchange ${v.name} added`, refresh));
}

// The default exchange and the amq.* ones cannot be deleted (RabbitMQ's rule too).
const deletable = (x) => x.name !== "" && !x.name.startsWith("amq.");

export const exchanges = listPage("Exchanges", "/api/exchanges", (refresh) => [
  { title: "Vhost", value: (x) => x.vhost },
  { title: "Name", value: (x) => link(exchangeHref(x.vhost, x.name), exchangeName(x.name)) },
  { title: "Type", value: (x) => x.type },
  { title: "Features", value: (x) => features(x) },
  { title: "Arguments", value: (x) => json(x.arguments), cls: "mono" },
  mayDo("configure") ? { title: "", value: (x) => (deletable(x) ? confirmButton("Delete", () => attempt(
    () => api(`/api/exchanges/${exchangePath(x.vhost, x.name)}`, { method: "DELETE" }),
    `exchange ${x.name} deleted`).then(refresh), { class: "danger delete" }, `exchange:${x.vhost}/${x.name}`) : "") }
    : null,
].filter(Boolean), { rowAttrs: (x) => ({ dataset: { exchange: x.name, vhost: x.vhost } }), above: exchangeForm });

// PUT /api/queues/{vhost}/{name}: the type goes as x-queue-type, as RabbitMQ's UI sends it.
function queueForm(refresh) {
  if (!mayDo("configure")) return null;
  return form("queue-form", [
    h("input", { name: "vhost", value: currentVhost() || "/", required: true, title: "vhost", size: 6 }),
    h("input", { name: "name", required: true, placeholder: "queue name" }),
    h("select", { name: "type", title: "type" }, ["classic", "quorum", "stream"].map((t) => h("option", { value: t }, t))),
    checkbox("durable", "durable", true), checkbox("auto_delete", "auto-delete"),
    argumentsBox(),
    h("button", { type: "submit" }, "Add queue"),
  ], async (v) => {
    const path = `/api/queues/${enc(v.vhost)}/${enc(v.name)}`;
    const body = { durable: !!v.durable, auto_delete: !!v.auto_delete };
    let args;
    try { args = parseArguments(v.arguments); } catch (err) { flash(err.message, "error"); return; }
    if (v.type !== "classic") args["x-queue-type"] = v.type;
    await declare(path, { arguments: JSON.stringify(args) }, body, `queue ${v.name} added`, refresh);
  });
}

export function features(o) {
  return [o.durable && "D", o.auto_delete && "AD", o.exclusive && "Excl", o.internal && "I",
    o.arguments && o.arguments["x-dead-letter-exchange"] !== undefined && "DLX"]
    .filter(Boolean).map((f) => h("span", { class: "tag" }, f));
}

export function queues(main) {
  const filter = h("input", { type: "search", name: "name", placeholder: "filter by name (regex)" });
  let page = 1;
  const pager = h("div", { class: "pager" });
  const body = h("div");
  let asked = 0;
  const refresh = async () => {
    const mine = ++asked;  // paging, the filter and the periodic refresh may overlap
    const q = new URLSearchParams({ page, page_size: 50, name: filter.value, use_regex: "true" });
    const res = await api(`${scoped("/api/queues")}?${q}`);
    if (mine !== asked) return;  // a newer request draws
    if (page > Math.max(1, res.page_count)) { page = Math.max(1, res.page_count); return refresh(); }
    clear(pager,
      h("button", { type: "button", disabled: page <= 1, onclick: () => { page--; refresh(); } }, "‹ prev"),
      ` page ${res.page} of ${Math.max(1, res.page_count)} (${res.filtered_count} of ${res.total_count} queues) `,
      h("button", { type: "button", disabled: page >= res.page_count, onclick: () => { page++; refresh(); } }, "next ›"));
    clear(body, table([
      { title: "Vhost", value: (x) => x.vhost },
      { title: "Name", value: (x) => link(queueHref(x.vhost, x.name), x.name) },
      { title: "Type", value: (x) => x.type },
      { title: "Features", value: (x) => features(x) },
      { title: "Policy", value: (x) => x.policy ?? "" },
      { title: "Ready", value: (x) => num(x.messages_ready), num: true, cls: "ready" },
      { title: "Unacked", value: (x) => num(x.messages_unacknowledged), num: true, cls: "unacked" },
      { title: "Total", value: (x) => num(x.messages), num: true, cls: "messages" },
      { title: "Paged out", value: (x) => num(x.messages_paged_out ?? 0), num: true, cls: "paged-out" },
      { title: "Consumers", value: (x) => num(x.consumers), num: true, cls: "consumers" },
      { title: "Incoming", value: (x) => rate(x.message_stats, "publish"), num: true },
      { title: "Deliver / get", value: (x) => rate(x.message_stats, "deliver_get"), num: true },
      { title: "Ack", value: (x) => rate(x.message_stats, "ack"), num: true },
      mayDo("configure") ? { title: "", value: (x) => confirmButton("Delete", () => attempt(
        () => api(`/api/queues/${enc(x.vhost)}/${enc(x.name)}`, { method: "DELETE" }),
        `queue ${x.name} deleted`).then(refresh), { class: "danger delete" }, `queue:${x.vhost}/${x.name}`) } : null,
    ].filter(Boolean), res.items, {
      empty: filter.value ? "No queue matches." : "No queues.",
      rowAttrs: (x) => ({ dataset: { vhost: x.vhost, queue: x.name } }),
    }));
  };
  filter.addEventListener("input", () => { page = 1; refresh().catch((e) => flash(e.message, "error")); });
  main.append(...[h("h1", {}, "Queues"), queueForm(() => refresh()), h("div", { class: "toolbar" }, filter, pager), body]
    .filter(Boolean));
  return refresh;
}

const BINDING_COLUMNS = [
  { title: "Vhost", value: (b) => b.vhost },
  { title: "Source", value: (b) => link(exchangeHref(b.vhost, b.source), exchangeName(b.source)) },
  { title: "Destination", value: (b) => (b.destination_type === "queue"
    ? link(queueHref(b.vhost, b.destination), b.destination)
    : link(exchangeHref(b.vhost, b.destination), exchangeName(b.destination))) },
  { title: "Type", value: (b) => b.destination_type },
  { title: "Routing key", value: (b) => b.routing_key, cls: "mono" },
  { title: "Arguments", value: (b) => json(b.arguments), cls: "mono" },
];

// /api/bindings/{vhost}/e/{source}/q|e/{destination}: where a binding is added and,
// with its properties_key, removed.
export const bindingPath = (vhost, source, type, destination) =>
  `/api/bindings/${enc(vhost)}/e/${enc(source)}/${type === "queue" ? "q" : "e"}/${enc(destination)}`;

// The binding columns, with an Unbind button for administrators when refresh is
// given; the default exchange's implicit bindings cannot be removed.
function bindingColumns(refresh) {
  if (!refresh || !mayDo("write", "read")) return BINDING_COLUMNS;
  return [...BINDING_COLUMNS, { title: "", value: (b) => (b.source === "" ? "" : confirmButton("Unbind", () => attempt(
    () => api(`${bindingPath(b.vhost, b.source, b.destination_type, b.destination)}/${enc(b.properties_key)}`,
      { method: "DELETE" }), "binding removed").then(refresh),
  { class: "danger unbind" }, `unbind:${b.vhost}/${b.source}/${b.destination_type}/${b.destination}/${b.properties_key}`)) }];
}

const bindingRow = (b) => ({ dataset: { source: b.source, destination: b.destination, key: b.routing_key } });

export const bindingTable = (rows, refresh) => table(bindingColumns(refresh), rows,
  { empty: "No bindings.", rowAttrs: bindingRow });

// POST a binding: on a queue's page from an exchange to it, on an exchange's page
// from it to a queue or an exchange. Any management tag; the user's permissions
// decide (the API's rule).
export function bindForm(vhost, { source, queue }, refresh) {
  if (!mayDo("write", "read")) return null;
  const parts = queue !== undefined
    ? [h("label", {}, "From exchange ", h("input", { name: "source", required: true, placeholder: "exchange" }))]
    : [h("label", {}, "To ", h("select", { name: "type" }, h("option", { value: "queue" }, "queue"),
      h("option", { value: "exchange" }, "exchange"))), h("input", { name: "destination", required: true, placeholder: "name" })];
  return form("bind-form", [
    ...parts,
    h("label", {}, "routing key ", h("input", { name: "routing_key" })),
    argumentsBox(),
    h("button", { type: "submit" }, "Bind"),
  ], async (v) => {
    let args;
    try { args = parseArguments(v.arguments); } catch (err) { flash(err.message, "error"); return; }
    const path = queue !== undefined ? bindingPath(vhost, v.source, "queue", queue)
      : bindingPath(vhost, source, v.type, v.destination);
    if (await attempt(() => api(path, { method: "POST", body: { routing_key: v.routing_key || "", arguments: args } }),
      "binding added") !== undefined) await refresh();
  });
}

export const bindings = listPage("Bindings", "/api/bindings", bindingColumns,
  { empty: "No bindings.", rowAttrs: bindingRow });

export const policies = listPage("Policies", "/api/policies", (refresh) => [
  { title: "Vhost", value: (p) => p.vhost },
  { title: "Name", value: (p) => p.name },
  { title: "Pattern", value: (p) => p.pattern, cls: "mono" },
  { title: "Apply to", value: (p) => p["apply-to"] },
  { title: "Priority", value: (p) => num(p.priority), num: true },
  { title: "Definition", value: (p) => json(p.definition), cls: "mono" },
  // setting and deleting policies needs the policymaker (or administrator) tag
  may("policymaker") ? { title: "", value: (p) => [h("button", { type: "button", class: "edit", onclick: () => editPolicy(p) }, "Edit"), " ",
    confirmButton("Delete", () => attempt(
    () => api(`/api/policies/${enc(p.vhost)}/${enc(p.name)}`, { method: "DELETE" }),
    `policy ${p.name} deleted`).then(refresh), { class: "danger delete" }, `policy:${p.vhost}/${p.name}`)] } : null,
].filter(Boolean), { empty: "No policies.", rowAttrs: (p) => ({ dataset: { policy: p.name } }), above: policyForm });

// Puts a policy into the form above the table, to change and submit again.
function editPolicy(p) {
  const f = document.getElementById("policy-form");
  const values = { vhost: p.vhost, name: p.name, pattern: p.pattern, "apply-to": p["apply-to"],
    priority: p.priority, definition: JSON.stringify(p.definition) };
  for (const [k, v] of Object.entries(values)) f.elements[k].value = v;
  f.elements.definition.focus();
}

// PUT /api/policies/{vhost}/{name}: adds a policy or replaces one of that name.
function policyForm(refresh) {
  if (!may("policymaker")) return null;
  return form("policy-form", [
    h("input", { name: "vhost", value: currentVhost() || "/", required: true, title: "vhost", size: 6 }),
    h("input", { name: "name", required: true, placeholder: "name" }),
    h("input", { name: "pattern", required: true, placeholder: "pattern (regex)" }),
    h("select", { name: "apply-to" }, ["queues", "exchanges", "all"].map((v) => h("option", { value: v }, v))),
    h("input", { name: "priority", type: "number", value: 0, title: "priority" }),
    h("input", { name: "definition", required: true, placeholder: '{"max-length": 1000}', class: "mono" }),
    h("button", { type: "submit" }, "Add / replace policy"),
  ], async (v) => {
    let definition;
    try { definition = JSON.parse(v.definition); } catch (err) { flash(`definition: ${err.message}`, "error"); return; }
    const body = { pattern: v.pattern, definition, priority: Number(v.priority) || 0, "apply-to": v["apply-to"] };
    if (await attempt(() => api(`/api/policies/${enc(v.vhost)}/${enc(v.name)}`, { method: "PUT", body }),
      `policy ${v.name} set`) !== undefined) await refresh();
  });
}

// The delivery log of one message: published, routed, delivered, ... in order.
export function trace(main, [id = ""]) {
  const input = h("input", { name: "message", value: id, placeholder: "message id or message key", required: true });
  const form = h("form", { class: "inline", id: "trace-form" }, input, h("button", { type: "submit" }, "Trace"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = traceHref(input.value.trim());
  });
  const body = h("div", { id: "trace-result" });
  main.append(h("h1", {}, "Message trace"), form, body);
  if (!id) return undefined;
  return async () => {
    const rows = await api(`/api/trace/${enc(id)}`);
    const t0 = rows.length ? rows[0].ts_us : 0;
    clear(body, h("ol", { class: "timeline" }, rows.map((r) => h("li", { class: `ev-${r.event}` },
      h("span", { class: "event" }, r.event),
      h("span", { class: "when" }, `+${((r.ts_us - t0) / 1000).toFixed(1)} ms`),
      r.queue ? h("span", {}, "queue ", link(queueHref(r.vhost, r.queue), r.queue)) : null,
      r.reason ? h("span", { class: "reason" }, r.reason) : null))),
    table([
      { title: "Time", value: (r) => r.time },
      { title: "Event", value: (r) => r.event, cls: "event" },
      { title: "Vhost", value: (r) => r.vhost },
      { title: "Exchange", value: (r) => (r.exchange === null ? "" : exchangeName(r.exchange)) },
      { title: "Routing key", value: (r) => r.routing_key ?? "", cls: "mono" },
      { title: "Queue", value: (r) => r.queue ?? "" },
      { title: "Consumer", value: (r) => r.consumer_tag ?? "" },
      { title: "Attempt", value: (r) => r.attempt ?? "", num: true },
      { title: "Size", value: (r) => (r.size === null ? "" : bytes(r.size)), num: true },
      { title: "Reason", value: (r) => r.reason ?? "" },
    ], rows, { empty: `No delivery-log rows for ${id}.` }));
  };
}
