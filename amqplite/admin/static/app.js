// The dashboard's entry point: login, hash routing, periodic refresh.

import { api, login, loggedIn, logout, session, setUnauthorisedHandler } from "./api.js";
import { clear, flash, h } from "./dom.js";
import { permissions, users, vhosts } from "./admin.js";
import { kafka, kafkaGroup } from "./kafka.js";
import { federation, shovels } from "./links.js";
import { channel, connection, exchange, nodes, queue } from "./objects.js";
import {
  bindings, channels, connections, exchanges, overview, policies, queues, trace,
} from "./pages.js";
import { loadVhosts, watchVhost } from "./vhost.js";

// ?refresh=<seconds> changes how often a page reloads its figures (default 5)
const REFRESH_MS = Math.max(1, Number(new URLSearchParams(location.search).get("refresh")) || 5) * 1000;
const ROUTES = {
  "": overview, connections, connection, channels, channel, exchanges, exchange, queues, queue, bindings, policies, trace,
  shovels, federation, users, vhosts, permissions, nodes, kafka, "kafka-group": kafkaGroup,
};
const NAV = { exchange: "exchanges", queue: "queues", connection: "connections", channel: "channels", "kafka-group": "kafka", "": "overview" };

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const loginForm = document.getElementById("login");
let timer = 0;
let generation = 0;

function stop() {
  clearTimeout(timer);
  generation++;
}

function showLogin(message) {
  stop();
  clear(main);
  nav.hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  document.getElementById("vhost-choice").hidden = true;
  loginForm.hidden = false;
  const err = document.getElementById("login-error");
  err.textContent = message || "";
  err.hidden = !message;
  loginForm.elements.user.focus();
}

async function start() {
  const me = await api("/api/whoami");
  Object.assign(session, { name: me.name, tags: me.tags, permitted: me.permitted || [] });
  loginForm.hidden = true;
  nav.hidden = false;
  document.getElementById("logout").hidden = false;
  const readOnly = !me.is_admin && !(me.permitted || []).length;
  document.getElementById("who").textContent = `${me.name}${readOnly ? " (read-only)" : ""}`;
  // the administration pages need the administrator tag
  for (const a of nav.querySelectorAll("a.admin")) a.hidden = !me.is_admin;
  await loadVhosts();
  document.getElementById("vhost-choice").hidden = false;
  route();
}

// #/queue/%2F/orders -> ["queue", ["/", "orders"]]
function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const [page, ...args] = parts;
  return [page, args.map(decodeURIComponent)];
}

function route() {
  if (!loggedIn()) return;
  stop();
  const mine = generation;
  const [page, args] = parseHash();
  const render = Object.hasOwn(ROUTES, page) ? ROUTES[page] : null;
  for (const a of nav.querySelectorAll("a")) {
    a.classList.toggle("active", a.dataset.page === (NAV[page] ?? page));
  }
  clear(main);
  delete main.dataset.loaded;
  if (!render) {
    main.append(h("h1", {}, "Not found"), h("p", {}, "No such page; see the navigation above."));
    return;
  }
  const refresh = render(main, args);
  if (!refresh) return;
  // one refresh at a time; a page left behind stops refreshing (generation)
  const tick = async () => {
    try {
      await refresh();
      if (mine === generation) main.dataset.loaded = page || "overview";
    } catch (err) {
      if (mine !== generation || err.loginRefused) return;
      if (err.status === 404) {  // deleted, or a mistyped link: stop asking
        clear(main, h("h1", {}, "Not found"), h("p", {}, err.message));
        main.dataset.loaded = "not-found";
        return;
      }
      flash(err.message, "error");
    }
    if (mine === generation) timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
}

loginForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  login(loginForm.elements.user.value, loginForm.elements.password.value);
  try {
    await start();
  } catch (err) {
    showLogin(err.loginRefused ? "Login failed: wrong user or password." : err.message);
  }
});

document.getElementById("logout").addEventListener("click", () => {
  logout();
  showLogin();
});

setUnauthorisedHandler(() => showLogin("Your session ended; log in again."));
window.addEventListener("hashchange", route);
watchVhost(route);

if (loggedIn()) {
  start().catch((err) => { if (!err.loginRefused) showLogin(err.message); });
} else {
  showLogin();
}
