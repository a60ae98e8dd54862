// The virtual host selector in the header: every list shows one vhost or all
// of them, as RabbitMQ's UI does. The choice lives in this page only (a reload
// shows all again), so it never leaks into another tab's session.

import { api, enc } from "./api.js";
import { clear, h } from "./dom.js";

let current = "";

export const currentVhost = () => current;

// "/api/exchanges" -> "/api/exchanges/%2F" while one vhost is chosen
export const scoped = (path) => (current ? `${path}/${enc(current)}` : path);

// Rows of the chosen vhost, for lists the API cannot narrow (connections, channels).
export const inVhost = (rows) => (current ? rows.filter((r) => r.vhost === current) : rows);

const select = () => document.getElementById("vhost");

// Fills the selector from /api/vhosts; a deleted vhost falls back to all.
export async function loadVhosts() {
  const names = (await api("/api/vhosts")).map((v) => v.name);
  if (!names.includes(current)) current = "";
  const el = select();
  clear(el, h("option", { value: "" }, "All"), names.map((n) => h("option", { value: n }, n)));
  el.value = current;
  return names;
}

// onchange(): re-render the page for the new choice.
export function watchVhost(onchange) {
  select().addEventListener("change", () => {
    current = select().value;
    onchange();
  });
}
