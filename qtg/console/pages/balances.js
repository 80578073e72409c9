// Latest balances per venue, account and asset, with stale flags and each fetcher's last try.

import { api } from "../api.js";
import { ago, errorBox, h, json, mount, when } from "../dom.js";

export default {
  path: "balances",
  title: "Balances",
  nav: true,
  async render(main) {
    const r = await api("GET", "/v3/balances");
    if (!r.ok) {
      mount(main, h("h1", "Balances"), errorBox(r));
      return;
    }
    const b = r.body;
    mount(main, h("h1", "Balances"),
      h("p.muted", `as of `, when(b.as_of), ` · stale after ${b.stale_threshold_seconds} s`),
      h("table.list",
        h("thead", h("tr", ["Venue", "Account", "Asset", "Amount", "Observed", "Age", "Stale", "Fetcher"].map((t) => h("th", t)))),
        h("tbody", b.items.length ? b.items.map((x) => h("tr", { class: x.stale ? "warn" : null },
          h("td.mono", x.venue_key), h("td.mono", x.account), h("td", x.asset), h("td.num", x.amount),
          h("td", when(x.observed_at)), h("td", ago(x.age_seconds)), h("td", x.stale ? "stale" : "no"),
          h("td.mono", x.fetcher_key))) : h("tr", h("td.muted", { colspan: 8 }, "no balances recorded")))),
      h("h2", "Fetchers"),
      h("table.list",
        h("thead", h("tr", ["Fetcher", "Venue", "Outcome", "Rows", "Finished", "Error"].map((t) => h("th", t)))),
        h("tbody", b.fetchers.map((f) => h("tr", { class: f.outcome !== "ok" ? "warn" : null },
          h("td.mono", f.fetcher_key), h("td.mono", f.venue_key), h("td", f.outcome), h("td", String(f.rows)),
          h("td", when(f.finished_at)), h("td.error-text", f.error || ""))))),
      b.fresh ? json(b.fresh) : null);
  },
};
