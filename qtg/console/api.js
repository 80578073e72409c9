// The API edge: the token (sessionStorage of this tab only, never a URL), JSON
// requests, and the live event stream.

const TOKEN_KEY = "qtg.console.token";

export const session = {
  get token() {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  set(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
  /** {name, role} once signed in; filled by app.js from GET /v3/whoami. */
  principal: null,
  /** the page asked for before signing in (memory only) */
  next: null,
  may(role) {
    const rank = { viewer: 1, operator: 2, admin: 3 };
    return !!this.principal && rank[this.principal.role] >= rank[role];
  },
};

/**
 * One API call. Resolves to {ok, status, body, text}; never throws for an
 * HTTP error, so pages can show the API's error body as it is.
 */
export async function api(method, path, { query, body, idempotencyKey, token } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const headers = { Accept: "application/json" };
  const bearer = token ?? session.token;
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
      referrerPolicy: "no-referrer",
    });
  } catch (e) {
    return { ok: false, status: 0, body: null, text: `network error: ${e.message}` };
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (response.status === 401 && bearer && token === undefined) {
    window.dispatchEvent(new CustomEvent("qtg:unauthenticated"));
  }
  return { ok: response.ok, status: response.status, body: parsed, text };
}

/**
 * Follow `WS /v3/stream` for one movement (or all; `types` filters event types): backlog after `after`,
 * then live. The token travels as a subprotocol (`qtg.token.<token>`), never
 * in the URL. Reconnects with `after=<last id>` so nothing is lost or seen
 * twice; `onStatus` hears "live", "reconnecting" or "closed".
 * Returns a function that stops it.
 */
export function follow({ requestId, types, after, onEvent, onStatus }) {
  let last = after ?? null;
  let socket = null;
  let stopped = false;
  let retry = 0;
  let timer = null;

  const open = () => {
    const url = new URL("/v3/stream", window.location.origin);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    if (requestId) url.searchParams.set("request_id", requestId);
    if (types) url.searchParams.set("types", types);
    if (last !== null) url.searchParams.set("after", String(last));
    socket = new WebSocket(url, ["qtg.v3", `qtg.token.${session.token}`]);
    socket.onopen = () => {
      retry = 0;
      onStatus && onStatus("live");
    };
    socket.onmessage = (message) => {
      const data = JSON.parse(message.data);
      if (data.type === "event") {
        last = data.id;
        onEvent(data);
      } else if (data.type === "ping" && (last === null || data.after > last)) {
        last = data.after;
      }
    };
    socket.onclose = () => {
      if (stopped) return;
      onStatus && onStatus("reconnecting");
      const delay = Math.min(10000, 250 * 2 ** retry++);
      timer = setTimeout(open, delay);
    };
  };
  open();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (socket) socket.close(1000, "page left");
    onStatus && onStatus("closed");
  };
}
