// Templates: the list, and one template's graph with a form to start a movement from it.

import { api } from "../api.js";
import { errorBox, field, h, json, mount, when } from "../dom.js";
import { draw } from "../graph.js";

export default {
  path: "templates",
  title: "Templates",
  nav: true,
  async render(main, ctx) {
    const key = ctx.query.get("key");
    const r = await api("GET", "/v3/templates");
    if (!r.ok) {
      mount(main, h("h1", "Templates"), errorBox(r));
      return;
    }
    const table = h("table.list",
      h("thead", h("tr", ["Key", "Name", "Version", "Updated"].map((t) => h("th", t)))),
      h("tbody", r.body.items.map((t) => h("tr", { class: t.template_key === key ? "current" : null },
        h("td", h("a.mono", { href: `#/templates?key=${encodeURIComponent(t.template_key)}` }, t.template_key)),
        h("td", t.name), h("td", t.version ?? "—"), h("td", when(t.updated_at))))));
    mount(main, h("h1", "Templates"), table);
    if (!key) return;
    const d = await api("GET", `/v3/templates/${encodeURIComponent(key)}`);
    if (!d.ok) {
      main.append(errorBox(d));
      return;
    }
    const t = d.body;
    const graph = t.graph || { nodes: [], edges: [] };
    const preview = {
      nodes: graph.nodes.map((n) => ({
        node_key: n.key, node_kind: n.kind, action_type: n.action_type, node_state: "PLAN", attempt_no: 0,
      })),
      edges: graph.edges || [],
      current_frontier: [],
    };
    main.append(h("section.card",
      h("h2", `${t.template_key} v${t.version} — ${t.name}`),
      h("p.muted", t.description || ""),
      h("div.graph-scroll", draw(preview)),
      h("details", h("summary", "graph JSON"), json(graph))));
    if (ctx.session.may("operator")) main.append(createForm(ctx, t.template_key));
  },
};

function createForm(ctx, templateKey) {
  const out = h("div.out");
  const asset = h("input", { name: "asset", value: "USDC", required: true });
  const amount = h("input", { name: "amount", value: "10.00", required: true, pattern: "[0-9]+(\\.[0-9]+)?" });
  // No default destination: a made-up one ("0xabc") was accepted and sent money
  // nowhere sensible; the person types where it goes (issue 26).
  const destination = h("input", {
    name: "destination", value: "", required: true, placeholder: "receiving address, e.g. 0x…", autocomplete: "off",
  });
  return h("form.card.create", {
    onsubmit: async (e) => {
      e.preventDefault();
      const r = await api("POST", "/v3/movements", {
        idempotencyKey: `console-${crypto.randomUUID()}`,
        body: {
          template_key: templateKey,
          intent: { asset: asset.value, amount: amount.value, destination: destination.value },
        },
      });
      if (r.ok) ctx.navigate(`movements/${r.body.id}`);
      else mount(out, errorBox(r));
    },
  },
  h("h2", "New movement from this template"),
  h("p.muted", "It waits for approval by someone else (four-eyes)."),
  h("div.row", field("Asset", asset), field("Amount", amount), field("Destination", destination)),
  h("button.primary", { type: "submit" }, "Create movement"),
  out);
}
