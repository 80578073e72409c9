// Template proposals: operators propose, admins approve or reject (not their own).

import { api } from "../api.js";
import { errorBox, field, h, json, mount, select, stateBadge, when } from "../dom.js";

const STATES = ["PENDING_REVIEW", "APPROVED", "REJECTED", "EXPIRED"];

export default {
  path: "proposals",
  title: "Proposals",
  nav: true,
  async render(main, ctx) {
    const state = ctx.query.get("state") || "";
    const out = h("div#proposal-result");
    const filter = h("form.filters", {
      onsubmit: (e) => {
        e.preventDefault();
        ctx.navigate("proposals", { state: new FormData(e.target).get("state") });
      },
    }, field("State", select("state", [["", "any"], ...STATES.map((s) => [s, s])], state)),
    h("button", { type: "submit" }, "Filter"));
    const r = await api("GET", "/v3/template-proposals", { query: { state, limit: 100 } });
    if (!r.ok) {
      mount(main, h("h1", "Proposals"), filter, errorBox(r));
      return;
    }
    const decide = async (p, verdict, note) => {
      const d = await api("POST", `/v3/template-proposals/${p.id}/${verdict}`, { body: note ? { note } : {} });
      if (d.ok) ctx.refresh();
      else mount(out, errorBox(d));
    };
    const rows = r.body.items.map((p) => {
      const note = h("input", { placeholder: "note" });
      const buttons = ctx.session.may("admin") && p.proposal_state === "PENDING_REVIEW"
        ? [h("button.primary", { type: "button", onclick: () => decide(p, "approve", note.value) }, "approve"),
          h("button.danger", { type: "button", onclick: () => decide(p, "reject", note.value) }, "reject"), note]
        : [];
      return h("tr",
        h("td.mono", p.template_key), h("td", p.name), h("td", stateBadge(p.proposal_state)),
        h("td", p.proposed_by), h("td", p.reviewed_by || "—"), h("td", when(p.created_at)),
        h("td", h("details", h("summary", `${(p.graph.nodes || []).length} nodes`), json(p.graph))),
        h("td", buttons));
    });
    mount(main, h("h1", "Template proposals"), filter, out,
      h("table.list",
        h("thead", h("tr", ["Template", "Name", "State", "Proposed by", "Reviewed by", "Created", "Graph", ""].map((t) => h("th", t)))),
        h("tbody", rows.length ? rows : h("tr", h("td.muted", { colspan: 8 }, "no proposals")))));
    if (ctx.session.may("operator")) main.append(proposeForm(ctx));
  },
};

function proposeForm(ctx) {
  const out = h("div.out");
  const key = h("input", { name: "template_key", required: true, placeholder: "team.payout" });
  const name = h("input", { name: "name", required: true, placeholder: "Payout" });
  const graph = h("textarea", {
    name: "graph", rows: 6, required: true,
    placeholder: '{"nodes": [{"key": "confirm", "kind": "manual", "action_type": "manual_confirm"}], "edges": []}',
  });
  return h("form.card.create", {
    onsubmit: async (e) => {
      e.preventDefault();
      let parsed;
      try {
        parsed = JSON.parse(graph.value);
      } catch (err) {
        mount(out, h("div.error", { role: "alert" }, `graph: not JSON (${err.message})`));
        return;
      }
      const r = await api("POST", "/v3/template-proposals", {
        body: { template_key: key.value, name: name.value, graph: parsed },
      });
      if (r.ok) ctx.refresh();
      else mount(out, errorBox(r));
    },
  }, h("h2", "Propose a template"), h("div.row", field("Key", key), field("Name", name)),
  field("Graph (JSON)", graph), h("button.primary", { type: "submit" }, "Propose"), out);
}
