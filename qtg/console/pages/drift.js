// On-chain drift findings (verify_drift): what the chain shows against the recorded baseline.

import { api } from "../api.js";
import { errorBox, h, json, mount, when } from "../dom.js";

export default {
  path: "drift",
  title: "Drift",
  nav: true,
  async render(main, ctx) {
    const open = ctx.query.get("open") === "true";
    const r = await api("GET", "/v3/drift", { query: { open, limit: 200 } });
    const toggle = h("a", { href: open ? "#/drift" : "#/drift?open=true" }, open ? "show all" : "open only");
    if (!r.ok) {
      mount(main, h("h1", "Drift"), errorBox(r));
      return;
    }
    mount(main, h("h1", "Drift findings"), h("p", toggle),
      h("table.list",
        h("thead", h("tr", ["#", "Chain", "Subject", "Check", "Expected", "Observed", "Found", "Cleared", "Evidence"].map((t) => h("th", t)))),
        h("tbody", r.body.items.length ? r.body.items.map((f) => h("tr", { class: f.cleared_at ? null : "warn" },
          h("td", String(f.id)), h("td", String(f.chain_id)), h("td.mono", f.subject), h("td", f.check_name),
          h("td.mono", f.expected), h("td.mono", f.observed), h("td", when(f.found_at)), h("td", when(f.cleared_at)),
          h("td", h("details", h("summary", "evidence"), json(f.evidence)))))
          : h("tr", h("td.muted", { colspan: 9 }, "no findings")))));
  },
};
