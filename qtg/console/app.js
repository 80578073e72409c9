// The console's shell: sign-in state, the navigation, and a hash router over
// the page registry (pages/registry.js). A page is one module; see there.

import { api, session } from "./api.js";
import { h, mount } from "./dom.js";
import { PAGES } from "./pages/registry.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
let cleanup = null;

/** Compile "movements/:id" into a matcher of hash paths. */
function matcher(pattern) {
  const names = [];
  const re = new RegExp(
    "^" + pattern.replace(/:([a-z_]+)/g, (_, name) => (names.push(name), "([^/]+)")) + "$",
  );
  return (path) => {
    const m = re.exec(path);
    return m && Object.fromEntries(names.map((n, i) => [n, decodeURIComponent(m[i + 1])]));
  };
}

const ROUTES = PAGES.map((page) => ({ page, match: matcher(page.path) }));

/** Go to a page: path like "movements/<id>", query an object of filters. */
export function navigate(path, query = {}) {
  const q = new URLSearchParams(
    Object.entries(query).filter(([, v]) => v !== undefined && v !== null && v !== ""),
  ).toString();
  const target = `#/${path}${q ? `?${q}` : ""}`;
  if (window.location.hash === target) route();
  else window.location.hash = target;
}

function parseHash() {
  const raw = window.location.hash.replace(/^#\/?/, "");
  const [path, q = ""] = raw.split("?");
  return { path: path || "movements", query: new URLSearchParams(q) };
}

function drawNav(current) {
  mount(nav, PAGES.filter((p) => p.nav && session.may(p.role || "viewer")).map((p) =>
    h("a", { href: `#/${p.path}`, class: current === p ? "active" : null }, p.title)));
  if (session.principal) {
    mount(who,
      h("span.principal", { dataset: { role: session.principal.role } },
        `${session.principal.name} (${session.principal.role})`),
      h("button.link#signout", { type: "button", onclick: signOut }, "sign out"));
  } else {
    mount(who);
  }
}

function signOut() {
  session.clear();
  session.principal = null;
  navigate("signin");
}

async function whoami() {
  if (!session.token) return false;
  if (session.principal) return true;
  const r = await api("GET", "/v3/whoami");
  if (!r.ok) {
    session.clear();
    return false;
  }
  session.principal = r.body;
  return true;
}

let generation = 0;

async function route() {
  const gen = ++generation;
  if (cleanup) {
    try {
      cleanup();
    } catch (e) {
      console.error(e);
    }
    cleanup = null;
  }
  const { path, query } = parseHash();
  let found = null;
  for (const r of ROUTES) {
    const params = r.match(path);
    if (params) {
      found = { page: r.page, params };
      break;
    }
  }
  const signedIn = await whoami();
  if (gen !== generation) return; // another navigation started meanwhile
  if (found && !found.page.public && !signedIn) {
    // Remembered in memory only: after signing in, the page that was asked for.
    session.next = window.location.hash.replace(/^#\/?/, "");
  }
  if (!found || (!found.page.public && !signedIn)) {
    found = { page: PAGES.find((p) => p.public), params: {} };
  }
  drawNav(found.page);
  document.title = `${found.page.title} · qtg console`;
  // Each page draws into its own element: a page still loading when the
  // person moves on writes into a detached element, never over the next page.
  const view = h("div.page", h("p.muted", "Loading…"));
  mount(main, view);
  const ctx = { params: found.params, query, navigate, session, refresh: route, main: view };
  let stop = null;
  try {
    stop = (await found.page.render(view, ctx)) || null;
  } catch (e) {
    console.error(e);
    mount(view, h("div.error", { role: "alert" }, `this page failed: ${e.message}`));
  }
  if (gen !== generation) {
    if (stop) stop(); // it finished after the person moved on
    return;
  }
  cleanup = stop;
}

window.addEventListener("hashchange", route);
window.addEventListener("qtg:unauthenticated", () => {
  session.clear();
  session.principal = null;
  navigate("signin");
});
route();
