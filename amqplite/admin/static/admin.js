// Administration pages: users, virtual hosts and permissions, so an
// administrator never has to leave the dashboard for the CLI. Each is a list
// page with a form above it that adds a row or changes one (PUT is
// create-or-update in the API, as in RabbitMQ's).

import { api, enc } from "./api.js";
import { clear, flash, form, h, num, section, table } from "./dom.js";
import { attempt, confirmButton, listPage } from "./pages.js";
import { currentVhost, loadVhosts } from "./vhost.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator"];

// A delete button that asks first, then deletes path and refreshes the page.
function deleteButton(path, what, key, refresh) {
  return confirmButton("Delete", async () => {
    if (await attempt(() => api(path, { method: "DELETE" }), `${what} deleted`) !== undefined) await refresh();
  }, { class: "danger delete" }, key);
}

// Submits a PUT and refreshes; the flash says what happened.
async function put(path, body, done, refresh) {
  if (await attempt(() => api(path, { method: "PUT", body }), done) !== undefined) await refresh();
}

// PUT /api/users/{name}: adds a user, or changes an existing one's tags and,
// when one is given, its password.
function userForm(refresh) {
  return form("user-form", [
    h("input", { name: "name", required: true, placeholder: "user name", autocomplete: "off" }),
    h("input", { name: "password", type: "password", placeholder: "password (empty: keep)", autocomplete: "new-password" }),
    h("input", { name: "tags", placeholder: "tags, comma separated", list: "user-tags" }),
    h("datalist", { id: "user-tags" }, TAGS.map((t) => h("option", { value: t }))),
    h("button", { type: "submit" }, "Add / update user"),
  ], async (v, f) => {
    const body = { tags: v.tags.trim() };
    if (v.password) body.password = v.password;
    await put(`/api/users/${enc(v.name)}`, body, `user ${v.name} saved`, refresh);
    f.elements.password.value = "";
  });
}

function editUser(u) {
  const f = document.getElementById("user-form");
  f.elements.name.value = u.name;
  f.elements.tags.value = u.tags.join(",");
  f.elements.password.focus();
}

export const users = listPage("Users", "/api/users", (refresh) => [
  { title: "Name", value: (u) => u.name },
  { title: "Tags", value: (u) => u.tags.map((t) => h("span", { class: "tag" }, t)) },
  { title: "Password", value: (u) => (u.password_hash ? "set" : "none (cannot log in)") },
  { title: "", value: (u) => [h("button", { type: "button", class: "edit", onclick: () => editUser(u) }, "Edit"), " ",
    deleteButton(`/api/users/${enc(u.name)}`, `user ${u.name}`, `user:${u.name}`, refresh)] },
], { empty: "No users.", above: userForm, rowAttrs: (u) => ({ dataset: { user: u.name } }), unscoped: true });

// PUT /api/vhosts/{name}: the creator gets full permissions in it.
function vhostForm(refresh) {
  return h("div", {}, form("vhost-form", [
    h("input", { name: "name", required: true, placeholder: "virtual host name" }),
    h("input", { name: "description", placeholder: "description" }),
    h("button", { type: "submit" }, "Add virtual host"),
  ], async (v) => {
    await put(`/api/vhosts/${enc(v.name)}`, { description: v.description }, `virtual host ${v.name} added`,
      async () => { await loadVhosts(); await refresh(); });
  }), h("p", { class: "muted", id: "vhost-limits-note" },
    "Limits (max-connections, max-queues): the admin API has no vhost limits yet, so none are shown here."));
}

export const vhosts = listPage("Virtual hosts", "/api/vhosts", (refresh) => [
  { title: "Name", value: (v) => v.name },
  { title: "Description", value: (v) => v.description },
  { title: "Ready", value: (v) => num(v.messages_ready), num: true, cls: "ready" },
  { title: "Unacked", value: (v) => num(v.messages_unacknowledged), num: true },
  { title: "Total", value: (v) => num(v.messages), num: true, cls: "messages" },
  { title: "", value: (v) => deleteButton(`/api/vhosts/${enc(v.name)}`, `virtual host ${v.name}`, `vhost:${v.name}`,
    async () => { await loadVhosts(); await refresh(); }) },
], { empty: "No virtual hosts.", above: vhostForm, rowAttrs: (v) => ({ dataset: { vhost: v.name } }), unscoped: true });

// A user and a vhost select, their choices the users and vhosts there are now.
function userVhostSelects() {
  const user = h("select", { name: "user", required: true });
  const vhost = h("select", { name: "vhost", required: true });
  Promise.all([api("/api/users"), api("/api/vhosts")]).then(([us, vs]) => {
    user.append(...us.map((u) => h("option", { value: u.name }, u.name)));
    vhost.append(...vs.map((v) => h("option", { value: v.name }, v.name)));
    vhost.value = currentVhost() || "/";
  }).catch((err) => flash(err.message, "error"));
  return [user, vhost];
}

const expr = (name) => h("input", { name, value: ".*", title: `${name} (regex)`, class: "mono", size: 8 });

// PUT /api/topic-permissions/{vhost}/{user}: write and read expressions on the
// routing keys of one topic exchange; the list below it has its own refresh.
function topicPermissions() {
  const list = h("div", { id: "topic-permissions" });
  const path = currentVhost() ? `/api/vhosts/${enc(currentVhost())}/topic-permissions` : "/api/topic-permissions";
  const refresh = async () => {
    clear(list, table([
      { title: "User", value: (p) => p.user },
      { title: "Vhost", value: (p) => p.vhost },
      { title: "Exchange", value: (p) => p.exchange },
      { title: "Write", value: (p) => p.write, cls: "mono" },
      { title: "Read", value: (p) => p.read, cls: "mono" },
      { title: "", value: (p) => confirmButton("Clear", async () => {
        const url = `/api/topic-permissions/${enc(p.vhost)}/${enc(p.user)}?exchange=${enc(p.exchange)}`;
        if (await attempt(() => api(url, { method: "DELETE" }),
          `topic permission of ${p.user} on ${p.exchange} cleared`) !== undefined) await refresh();
      }, { class: "danger delete" }, `tperm:${p.vhost}/${p.user}/${p.exchange}`) },
    ], await api(path), { empty: "No topic permissions.",
      rowAttrs: (p) => ({ dataset: { user: p.user, vhost: p.vhost, exchange: p.exchange } }) }));
  };
  const [user, vhost] = userVhostSelects();
  const f = form("topic-permission-form", [
    h("label", {}, "User ", user), h("label", {}, "in ", vhost),
    h("label", {}, "exchange ", h("input", { name: "exchange", value: "amq.topic", required: true, size: 12 })),
    h("label", {}, "write ", expr("write")), h("label", {}, "read ", expr("read")),
    h("button", { type: "submit" }, "Set topic permission"),
  ], async (v) => {
    await put(`/api/topic-permissions/${enc(v.vhost)}/${enc(v.user)}`,
      { exchange: v.exchange, write: v.write, read: v.read },
      `topic permission of ${v.user} on ${v.exchange} set`, refresh);
  });
  refresh().catch((err) => flash(err.message, "error"));
  return section("Topic permissions", h("p", { class: "muted", id: "topic-permissions-note" },
    "Topic permissions: on a topic exchange, a publish's routing key must match write and a binding key read " +
    "({username}, {vhost} and MQTT's {client_id} are expanded); a user with none on an exchange may use every key."),
  f, list);
}

// PUT /api/permissions/{vhost}/{user}: configure, write and read expressions.
function permissionForm(refresh) {
  const [user, vhost] = userVhostSelects();
  return h("div", {}, form("permission-form", [
    h("label", {}, "User ", user), h("label", {}, "in ", vhost),
    h("label", {}, "configure ", expr("configure")), h("label", {}, "write ", expr("write")),
    h("label", {}, "read ", expr("read")),
    h("button", { type: "submit" }, "Set permission"),
  ], async (v) => {
    await put(`/api/permissions/${enc(v.vhost)}/${enc(v.user)}`,
      { configure: v.configure, write: v.write, read: v.read }, `permissions of ${v.user} in ${v.vhost} set`, refresh);
  }));
}

export const permissions = (main) => listPage("Permissions",
  currentVhost() ? `/api/vhosts/${enc(currentVhost())}/permissions` : "/api/permissions", (refresh) => [
    { title: "User", value: (p) => p.user },
    { title: "Vhost", value: (p) => p.vhost },
    { title: "Configure", value: (p) => p.configure, cls: "mono" },
    { title: "Write", value: (p) => p.write, cls: "mono" },
    { title: "Read", value: (p) => p.read, cls: "mono" },
    { title: "", value: (p) => confirmButton("Clear", async () => {
      if (await attempt(() => api(`/api/permissions/${enc(p.vhost)}/${enc(p.user)}`, { method: "DELETE" }),
        `permissions of ${p.user} in ${p.vhost} cleared`) !== undefined) await refresh();
    }, { class: "danger delete" }, `perm:${p.vhost}/${p.user}`) },
  ], { empty: "No permissions.", above: permissionForm, below: topicPermissions, unscoped: true,
    rowAttrs: (p) => ({ dataset: { user: p.user, vhost: p.vhost } }) })(main);
