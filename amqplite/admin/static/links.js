// Links between brokers: the Shovels page (/api/shovels, shovel parameters) and
// the Federation page (federation-upstream parameters, /api/federation-links).
// URIs come back from the API masked (password ***); the add forms send what
// the user typed, once, in the PUT.

import { api, enc, may } from "./api.js";
import { clear, form, h, json, num, section, table } from "./dom.js";
import { attempt, confirmButton, listPage } from "./pages.js";
import { currentVhost, scoped } from "./vhost.js";

const ACK_MODES = ["on-confirm", "on-publish", "no-ack"];

const paramPath = (component, vhost, name) => `/api/parameters/${component}/${enc(vhost)}/${enc(name)}`;

// A state as a tag (running, starting, terminated / error), with the reason beside it.
const stateOf = (state, reason) => [h("span", { class: `tag state-${state}` }, state),
  reason ? h("span", { class: "reason" }, ` ${reason}`) : null];

// Where a shovel reads from or writes to: its URI and queue or exchange.
function end(uri, queue, exchange) {
  const what = queue !== undefined ? `queue ${queue}` : exchange !== undefined ? `exchange ${exchange}` : "";
  return [h("span", { class: "mono" }, uri), what ? h("div", { class: "muted" }, what) : null];
}

// The non-empty fields of a form, numbers where the API wants them.
function valueOf(v, numbers) {
  const out = {};
  for (const [k, x] of Object.entries(v)) {
    if (k === "vhost" || k === "name" || x === "") continue;
    out[k] = numbers.includes(k) ? Number(x) : x;
  }
  return out;
}

// PUT /api/parameters/shovel/{vhost}/{name}: a queue or exchange at each end.
function shovelForm(refresh) {
  if (!may("policymaker")) return null;  // shovels are parameters: the policymaker tag's
  const input = (name, placeholder, extra = {}) => h("input", { name, placeholder, ...extra });
  return form("shovel-form", [
    input("vhost", "vhost", { value: currentVhost() || "/", required: true, size: 6 }),
    input("name", "name", { required: true }),
    input("src-uri", "source URI (amqp:// is this broker)", { value: "amqp://", required: true, class: "mono" }),
    input("src-queue", "source queue"),
    input("src-exchange", "or source exchange"),
    input("src-exchange-key", "its routing key", { size: 8 }),
    input("dest-uri", "destination URI", { required: true, class: "mono" }),
    input("dest-queue", "destination queue"),
    input("dest-exchange", "or destination exchange"),
    h("select", { name: "ack-mode", title: "ack mode" }, ACK_MODES.map((m) => h("option", { value: m }, m))),
    input("src-prefetch-count", "prefetch", { type: "number", min: 1, size: 6 }),
    h("button", { type: "submit" }, "Add shovel"),
  ], async (v) => {
    const value = valueOf(v, ["src-prefetch-count"]);
    if (await attempt(() => api(paramPath("shovel", v.vhost, v.name), { method: "PUT", body: { value } }),
      `shovel ${v.name} added`) !== undefined) await refresh();
  });
}

export const shovels = listPage("Shovels", "/api/shovels", (refresh) => [
  { title: "Vhost", value: (s) => s.vhost },
  { title: "Name", value: (s) => s.name },
  { title: "State", value: (s) => stateOf(s.state, s.reason), cls: "state" },
  { title: "Source", value: (s) => end(s.src_uri, s.src_queue, s.src_exchange), cls: "source" },
  { title: "Destination", value: (s) => end(s.dest_uri, s.dest_queue, s.dest_exchange), cls: "destination" },
  { title: "Forwarded", value: (s) => num(s.forwarded), num: true, cls: "forwarded" },
  { title: "Since", value: (s) => s.timestamp },
  may("policymaker") ? { title: "", value: (s) => [
    h("button", { type: "button", class: "restart", onclick: async () => {
      if (await attempt(() => api(`/api/shovels/vhost/${enc(s.vhost)}/${enc(s.name)}/restart`,
        { method: "DELETE" }), `shovel ${s.name} restarted`) !== undefined) await refresh();
    } }, "Restart"), " ",
    confirmButton("Delete", async () => {
      if (await attempt(() => api(paramPath("shovel", s.vhost, s.name), { method: "DELETE" }),
        `shovel ${s.name} deleted`) !== undefined) await refresh();
    }, { class: "danger delete" }, `shovel:${s.vhost}/${s.name}`)] } : null,
].filter(Boolean), { empty: "No shovels.", above: shovelForm,
  rowAttrs: (s) => ({ dataset: { shovel: s.name, vhost: s.vhost, state: s.state } }) });

// PUT /api/parameters/federation-upstream/{vhost}/{name}
function upstreamForm(refresh) {
  if (!may("policymaker")) return null;
  return form("upstream-form", [
    h("input", { name: "vhost", value: currentVhost() || "/", required: true, size: 6, title: "vhost" }),
    h("input", { name: "name", required: true, placeholder: "upstream name" }),
    h("input", { name: "uri", required: true, placeholder: "amqp://user:password@host", class: "mono" }),
    h("input", { name: "exchange", placeholder: "upstream exchange (default: same name)" }),
    h("input", { name: "max-hops", type: "number", min: 1, placeholder: "max hops (1)", size: 6 }),
    h("input", { name: "prefetch-count", type: "number", min: 1, placeholder: "prefetch", size: 6 }),
    h("select", { name: "ack-mode", title: "ack mode" }, ACK_MODES.map((m) => h("option", { value: m }, m))),
    h("button", { type: "submit" }, "Add / replace upstream"),
  ], async (v) => {
    const value = valueOf(v, ["max-hops", "prefetch-count"]);
    if (await attempt(() => api(paramPath("federation-upstream", v.vhost, v.name), { method: "PUT", body: { value } }),
      `upstream ${v.name} saved`) !== undefined) await refresh();
  });
}

// The upstreams (parameters) and the links' status. Federation may be absent
// from this broker (an API without /api/federation-links answers 404): the
// status part then says so and the rest of the page works.
export function federation(main) {
  const upstreams = h("div", { id: "upstreams" });
  const links = h("div", { id: "federation-links" });
  let refresh;
  clear(main, h("h1", {}, "Federation"),
    section("Upstreams", upstreamForm(() => refresh()), upstreams),
    section("Links", links));
  const upstreamColumns = [
    { title: "Vhost", value: (p) => p.vhost },
    { title: "Name", value: (p) => p.name },
    { title: "URI", value: (p) => [].concat(p.value.uri ?? []).join(" "), cls: "mono" },
    { title: "Definition", value: (p) => json(Object.fromEntries(Object.entries(p.value).filter(([k]) => k !== "uri"))), cls: "mono" },
    may("policymaker") ? { title: "", value: (p) => confirmButton("Delete", async () => {
      if (await attempt(() => api(paramPath("federation-upstream", p.vhost, p.name), { method: "DELETE" }),
        `upstream ${p.name} deleted`) !== undefined) await refresh();
    }, { class: "danger delete" }, `upstream:${p.vhost}/${p.name}`) } : null,
  ].filter(Boolean);
  const linkColumns = [
    { title: "Vhost", value: (l) => l.vhost },
    { title: "Upstream", value: (l) => l.upstream },
    { title: "Exchange", value: (l) => l.exchange ?? "" },
    { title: "URI", value: (l) => l.uri ?? "", cls: "mono" },
    { title: "Status", value: (l) => stateOf(l.status, l.error), cls: "state" },
    { title: "Forwarded", value: (l) => num(l.forwarded), num: true, cls: "forwarded" },
    { title: "Since", value: (l) => l.timestamp ?? "" },
    // a restart reconnects the link and rebinds upstream (the policymaker tag's)
    may("policymaker") ? { title: "", value: (l) => h("button", { type: "button", class: "restart", onclick: async () => {
      if (await attempt(() => api(`/api/federation-links/vhost/${enc(l.vhost)}/${enc(l.id)}/restart`,
        { method: "DELETE" }), `federation link ${l.id} restarted`) !== undefined) await refresh();
    } }, "Restart") } : null,
  ].filter(Boolean);
  refresh = async () => {
    const [params, status] = await Promise.all([
      api(scoped("/api/parameters/federation-upstream")).catch((err) => {
        if (err.status === 404) return [];
        throw err;
      }),
      api(scoped("/api/federation-links")).catch((err) => {
        if (err.status === 404) return null;  // this broker has no federation status
        throw err;
      }),
    ]);
    clear(upstreams, table(upstreamColumns, params, {
      empty: "No upstreams.", rowAttrs: (p) => ({ dataset: { upstream: p.name, vhost: p.vhost } }) }));
    clear(links, status === null
      ? h("p", { class: "empty", id: "federation-unavailable" },
        "This broker reports no federation links (/api/federation-links is not available).")
      : table(linkColumns, status, { empty: "No federation links.",
        rowAttrs: (l) => ({ dataset: { link: l.id, exchange: l.exchange ?? "", status: l.status } }) }));
  };
  return refresh;
}
