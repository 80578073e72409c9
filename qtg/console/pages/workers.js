// Workers of this network class: status, heartbeats, stale flags, per-process instances.
// Re-read every few seconds while the page is open.

import { api } from "../api.js";
import { ago, errorBox, h, mount, stateBadge, when } from "../dom.js";

const REFRESH_MS = 5000;

export default {
  path: "workers",
  title: "Workers",
  nav: true,
  async render(main) {
    const body = h("div");
    mount(main, h("h1", "Workers"), body);
    const load = async () => {
      const r = await api("GET", "/v3/workers");
      if (!r.ok) {
        mount(body, errorBox(r));
        return;
      }
      mount(body,
        h("p.muted", `network class ${r.body.network_class} · ${r.body.items.length} workers · refreshed ${new Date().toLocaleTimeString()}`),
        h("table.list#workers",
          h("thead", h("tr", ["Worker", "Group", "Status", "Stale", "Last beat", "Beat age", "Last success",
            "Passes", "Items", "Errors", "Instances", "Last error"].map((t) => h("th", t)))),
          h("tbody", r.body.items.map((w) => h("tr", { class: w.stale || w.dead_instances ? "warn" : null, dataset: { worker: w.worker_name, stale: String(w.stale) } },
            h("td.mono", w.worker_name), h("td", w.worker_group), h("td", stateBadge(w.status)),
            h("td", w.stale ? h("span.badge.st-FAILED", "stale") : "no"),
            h("td", when(w.last_beat_at)), h("td", ago(w.beat_age_seconds)), h("td", when(w.last_success_at)),
            h("td", String(w.iterations)), h("td", String(w.items)), h("td", String(w.consecutive_errors)),
            h("td", h("details", h("summary", `${w.live_instances} live / ${w.dead_instances} dead`),
              h("ul", w.instances.map((i) => h("li", h("span.mono", `${i.host}:${i.pid}`), " ", stateBadge(i.status),
                i.stale ? " stale" : "", i.superseded ? " superseded" : "", ` · beat ${ago(i.beat_age_seconds)} ago`))))),
            h("td.error-text", w.last_error || ""))))));
    };
    await load();
    const timer = setInterval(load, REFRESH_MS);
    return () => clearInterval(timer);
  },
};
