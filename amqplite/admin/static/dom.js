// Small DOM helpers: element building, tables, number formatting, messages.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const link = (href, text) => h("a", { href }, text);

// columns: [{ title, value: row => node|string, cls, num }]; rowAttrs: row => attrs
export function table(columns, rows, { empty = "none", rowAttrs } = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.title)))),
    h("tbody", {}, rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : {},
      columns.map((c) => h("td", { class: [c.cls, c.num ? "num" : null].filter(Boolean).join(" ") || null },
        c.value(r)))))));
}

export function num(n) {
  return typeof n === "number" ? n.toLocaleString("en") : "";
}

// "1 message", "2 messages"
export function plural(n, word, many = `${word}s`) {
  return `${num(n)} ${n === 1 ? word : many}`;
}

// The rate of one message_stats field, or the sum of several ("get", "get_no_ack").
export function rate(stats, ...keys) {
  const ds = keys.map((k) => stats && stats[`${k}_details`]).filter(Boolean);
  return ds.length ? `${ds.reduce((a, d) => a + d.rate, 0).toFixed(1)}/s` : "";
}

// A count and its rate, "12 (0.4/s)": the fields summed when several are named.
export function counted(stats, ...keys) {
  if (!stats || !keys.some((k) => typeof stats[k] === "number")) return "";
  return `${num(keys.reduce((a, k) => a + (stats[k] ?? 0), 0))} (${rate(stats, ...keys)})`;
}

export function bytes(n) {
  if (typeof n !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function duration(ms) {
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400); s %= 86400;
  const hh = Math.floor(s / 3600); s %= 3600;
  const mm = Math.floor(s / 60); s %= 60;
  return (d ? `${d}d ` : "") + `${hh}h ${mm}m ${s}s`;
}

export function json(v) {
  return v && typeof v === "object" && Object.keys(v).length ? JSON.stringify(v) : "";
}

let flashTimer = 0;
export function flash(text, kind = "ok") {
  const el = document.getElementById("flash");
  el.textContent = text;
  el.className = kind;
  el.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => { el.hidden = true; }, 6000);
}

// A form's named fields as an object of strings.
export function fields(form) {
  return Object.fromEntries(new FormData(form).entries());
}

// A form whose submit calls onsubmit(fields, form) instead of navigating.
export function form(id, children, onsubmit) {
  const f = h("form", { id, class: "inline" }, children);
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await onsubmit(fields(f), f);
  });
  return f;
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}
