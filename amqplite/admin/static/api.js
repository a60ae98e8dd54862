// The admin HTTP API, as the dashboard calls it: basic auth from sessionStorage.
// Credentials live for the browser tab only and go out as an Authorization
// header; the static page itself is public.

const KEY = "amqplite.auth";

export class ApiError extends Error {
  constructor(status, error, reason, loginRefused = false) {
    super(reason || error || `HTTP ${status}`);
    this.status = status;
    this.error = error;
    // the login itself was refused (a 401 can also refuse one operation)
    this.loginRefused = loginRefused;
  }
}

// Who is logged in (/api/whoami), so pages skip what the user's tags cannot read.
export const session = { name: "", tags: [], permitted: [] };

export const hasTag = (...tags) => session.tags.some((t) => tags.includes(t));

// Whether the user's tags allow what an API route needs (the server's rule,
// http.py _authorize): a page shows only the forms and buttons the user may use.
export const may = (needs) => hasTag("administrator")
  || (needs === "policymaker" && hasTag("policymaker"))
  || (needs === "monitoring" && hasTag("monitoring"))
  || needs === "management";

// Whether the user holds AMQP permission ``kind`` (configure, write, read) in some
// vhost (/api/whoami's "permitted"): writes through the API act as the user, so a
// form the permissions refuse everywhere is not offered.
export const mayDo = (...kinds) => kinds.every((k) => session.permitted.includes(k));

// A connection may be closed by an administrator, or by the user it belongs to.
export const mayClose = (c) => hasTag("administrator") || c.user === session.name;

export function loggedIn() {
  return sessionStorage.getItem(KEY) !== null;
}

export function login(user, password) {
  // btoa takes Latin-1 only: encode UTF-8 first so any password works
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  sessionStorage.setItem(KEY, btoa(String.fromCharCode(...bytes)));
}

export function logout() {
  sessionStorage.removeItem(KEY);
}

// The reasons of a 401 that refuses the login; any other 401 refuses one
// operation to a logged-in user (an AMQP permission), who stays logged in.
const LOGIN_REFUSED = new Set(["Login failed", "Login required",
  "Malformed Authorization header", "Not management user"]);

// Called on a 401 that refuses the login, so the app can show the login form again.
let onUnauthorised = () => {};
export function setUnauthorisedHandler(fn) {
  onUnauthorised = fn;
}

export const enc = encodeURIComponent;

export async function api(path, { method = "GET", body } = {}) {
  // X-Requested-With: the API then answers a failed login without
  // WWW-Authenticate, so the browser shows our form, not its own dialog
  const headers = { Accept: "application/json", "X-Requested-With": "XMLHttpRequest" };
  const auth = sessionStorage.getItem(KEY);
  if (auth !== null) headers.Authorization = `Basic ${auth}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store", credentials: "omit",
  });
  const text = await resp.text();
  // a purge answers 204 with no body, as RabbitMQ's; the count comes in a header
  const purged = resp.headers.get("x-amqplite-purged");
  if (resp.ok && purged !== null) return { purged: Number(purged) };
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!resp.ok) {
    const err = data && typeof data === "object" ? data : {};
    const loginRefused = resp.status === 401 && LOGIN_REFUSED.has(err.reason);
    if (loginRefused) {
      logout();
      onUnauthorised();
    }
    throw new ApiError(resp.status, err.error, err.reason || text, loginRefused);
  }
  return data;
}
